"""The one retry helper (module_utils/k8s/deploy_retry.py) and its callers: the Kubernetes reads
(plugin_utils/k8s_reader.py), the Lease writes (plugin_utils/lease_client.py) and the OCI registry
client (module_utils/staging/oci_registry.py).  A fake clock: nothing here sleeps."""

from __future__ import annotations

import threading
import urllib.error

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.staging import oci_registry
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import (
    Backoff,
    explained,
    likely_cause,
    retry_after_of,
    retry_after_seconds,
    retryable,
)
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_reader, lease_client

NOW = 1_800_000_000.0  # a fixed "now" for HTTP-dates


class Clock(object):
    def __init__(self):
        self.slept = []

    def sleep(self, seconds):
        self.slept.append(seconds)


def backoff(clock, attempts=5, rand=lambda: 1.0, **kw):
    return Backoff(attempts, base=0.5, cap=4.0, sleep=clock.sleep, rand=rand, clock=lambda: NOW, **kw)


def test_full_jitter_is_exponential_and_capped():
    clock = Clock()
    top = backoff(clock)
    assert [top.delay(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff(clock, rand=lambda: 0.25).delay(2) == 0.5  # a random share of the ceiling
    assert backoff(clock, rand=lambda: 0.0).delay(3) == 0.0
    assert top.delay(10_000) == 4.0  # no overflow far out


def test_retry_after_seconds_and_http_date():
    assert retry_after_seconds("7", NOW) == 7.0
    date = "Fri, 15 Jan 2027 08:00:10 GMT"  # 10 s after a "now" of 08:00:00
    assert retry_after_seconds(date, _epoch("Fri, 15 Jan 2027 08:00:00 GMT")) == 10.0
    assert retry_after_seconds("Mon, 01 Jan 2001 00:00:00 GMT", NOW) == 0.0  # in the past
    assert retry_after_seconds("soon", NOW) is None
    assert retry_after_seconds(None, NOW) is None
    assert retry_after_seconds("-3", NOW) is None


def _epoch(date):
    import email.utils

    return email.utils.parsedate_to_datetime(date).timestamp()


def test_retry_after_overrides_the_backoff_capped():
    clock = Clock()
    b = backoff(clock, max_retry_after=30.0)
    assert b.delay(0, "3") == 3.0
    assert b.delay(0, "600") == 30.0
    assert b.delay(0, "Mon, 01 Jan 2001 00:00:00 GMT") == 0.0


def test_retry_after_only_on_429_and_503():
    headers = {"Retry-After": "5"}
    assert retry_after_of(429, headers) == "5"
    assert retry_after_of(503, headers) == "5"
    assert retry_after_of(500, headers) is None
    assert retry_after_of(429, None) is None


def test_run_retries_until_final_and_returns_the_last_outcome():
    clock = Clock()
    answers = iter([503, 429, 200])
    out = backoff(clock).run(
        lambda: next(answers), lambda code, exc: (code != 200, "2" if code == 429 else None)
    )
    assert out == 200
    assert clock.slept == [0.5, 2.0]  # backoff after the 503, Retry-After after the 429


def test_run_stops_at_the_attempts_and_raises_the_last_error():
    clock = Clock()
    calls = []

    def call():
        calls.append(1)
        raise ConnectionError("reset %d" % len(calls))

    with pytest.raises(ConnectionError, match="reset 3"):
        backoff(clock, attempts=3).run(call, lambda out, exc: (exc is not None, None))
    assert len(calls) == 3 and clock.slept == [0.5, 1.0]


def test_run_gives_up_when_the_next_attempt_would_start_past_the_total():
    """``total`` bounds the time a retried call takes: the first wait that would end past it is not slept."""
    slept, now = [], [NOW]

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    def call():
        now[0] += 1.0  # each attempt takes a second
        return 503

    limited = Backoff(9, base=0.5, cap=4.0, sleep=sleep, rand=lambda: 1.0, clock=lambda: now[0], total=10.0)
    assert limited.run(call, lambda code, exc: (True, None)) == 503
    # attempts at 0, 1.5, 3.5, 6.5; the next wait (4 s) would start one at 11.5 > 10: the last outcome returned
    assert slept == [0.5, 1.0, 2.0] and now[0] - NOW == 7.5
    # a Retry-After longer than what is left is not waited for either
    slept.clear()
    assert limited.run(call, lambda code, exc: (True, "30")) == 503 and slept == []


def test_run_does_not_retry_a_final_error():
    clock = Clock()
    with pytest.raises(ValueError):
        backoff(clock).run(lambda: int("x"), lambda out, exc: (isinstance(exc, ConnectionError), None))
    assert clock.slept == []


def test_conflict_is_retryable_only_where_the_caller_says():
    conflict = {"failed": True, "msg": '{"code":409}'}
    assert retryable(conflict)
    assert not retryable(conflict, conflict=False)
    assert retryable({"failed": True, "msg": '{"code":429}'}, conflict=False)
    assert retryable({"failed": True, "msg": "connection refused"}, conflict=False)
    assert not retryable({"failed": True, "msg": '{"code":422}'})


# ------------------------------------------------------------------ the Kubernetes reads
class ApiError(Exception):
    def __init__(self, status, headers=None):
        super().__init__("HTTP %s" % status)
        self.status = status
        self.headers = headers or {}


class FakeLookup(object):
    def __init__(self, answers):
        self.answers = list(answers)

    def run(self, terms, variables, **kwargs):
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            return answer()
        return answer


def reader(monkeypatch, answers, **kw):
    lookup = FakeLookup(answers)

    class Loader(object):
        def get(self, name, **kwargs):
            return lookup

    monkeypatch.setattr(k8s_reader, "lookup_loader", Loader())
    clock = Clock()
    return k8s_reader.K8sReader(None, None, {}, sleep=clock.sleep, rand=lambda: 1.0, **kw), clock


def test_reader_retries_429_after_retry_after_and_5xx_with_backoff(monkeypatch):
    obj = {"metadata": {"name": "svc"}}
    r, clock = reader(monkeypatch, [ApiError(429, {"Retry-After": "4"}), ApiError(502), [obj]])
    assert r.get("Lease", "coordination.k8s.io/v1", name="svc", namespace="ns") == obj
    assert clock.slept == [4.0, 1.0] and r.requests == 3


def test_reader_does_not_retry_a_conflict_or_a_refusal(monkeypatch):
    for status in (409, 403):
        r, clock = reader(monkeypatch, [ApiError(status), []])
        with pytest.raises(k8s_reader.ReadError, match="HTTP %d" % status):
            r.get("Pod", "v1", namespace="ns")
        assert clock.slept == []


def test_reader_bounds_each_request_and_retries_a_stalled_one(monkeypatch):
    stalled = threading.Event()
    r, clock = reader(monkeypatch, [lambda: stalled.wait(5) and [], [{"kind": "Pod"}]], request_timeout=0.05)
    assert r.get("Pod", "v1", namespace="ns") == [{"kind": "Pod"}]
    assert len(clock.slept) == 1
    stalled.set()


def test_reader_gives_up_on_a_stalled_api_with_a_clear_message(monkeypatch):
    stalled = threading.Event()
    r, clock = reader(monkeypatch, [lambda: stalled.wait(5)] * 2, attempts=2, request_timeout=0.05)
    with pytest.raises(k8s_reader.ReadError, match=r"no answer from the API server in 0.05 s"):
        r.get("Pod", "v1", name="p", namespace="ns")
    stalled.set()


def test_a_failed_read_says_the_likely_cause_and_the_next_command_first(monkeypatch):
    """Issue 39: deploy with the lab down printed a cut-off connection error. The cause and what to run
    come first, the client's words after them."""
    refused = ConnectionError(
        "HTTPSConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /version (Caused by "
        "NewConnectionError('Failed to establish a new connection: [Errno 111] Connection refused'))"
    )
    r, _clock = reader(monkeypatch, [refused] * 2, attempts=2)
    with pytest.raises(k8s_reader.ReadError) as caught:
        r.get("CustomResourceDefinition", "apiextensions.k8s.io/v1", name="x")
    assert str(caught.value).startswith(
        "reading CustomResourceDefinition x failed: the cluster's API server did not answer - is the cluster "
        "reachable? "
    )
    assert "`make lab-up`" in str(caught.value) and "Details: HTTPSConnectionPool" in str(caught.value)
    no_config = RuntimeError("Could not create API client: Invalid kube-config file. No configuration found.")
    r, _clock = reader(monkeypatch, [no_config])
    with pytest.raises(k8s_reader.ReadError, match="failed: no usable kubeconfig - set KUBECONFIG"):
        r.get("Pod", "v1", namespace="ns")
    assert explained("HTTP 403 forbidden") == "HTTP 403 forbidden"  # no cause guessed
    assert likely_cause('{"code":401,"reason":"Unauthorized"}')[0].startswith("the API server refused")


# ------------------------------------------------------------------ the Lease writes
def lease(results, **params):
    clock = Clock()
    calls = []

    def write(*args):
        calls.append(args)
        return results.pop(0)

    p = dict(name="svc", namespace="ns", retries=5, **params)
    return lease_client.LeaseClient(None, None, p, sleep=clock.sleep, rand=lambda: 1.0), write, calls, clock


def test_lease_write_retries_throttling_but_a_conditional_conflict_is_the_answer():
    client, write, calls, clock = lease([{"failed": True, "msg": '{"code":429}'}, {"changed": True}])
    assert client._write(True, write, "lease") == {"changed": True}
    assert clock.slept == [0.5] and calls == [("lease",), ("lease",)]
    client, write, calls, clock = lease([{"failed": True, "status": 409}, {"changed": True}])
    assert client._write(True, write)["failed"]
    assert len(calls) == 1 and clock.slept == []
    client, write, calls, clock = lease([{"failed": True, "status": 409}, {"changed": True}])
    assert client._write(False, write) == {"changed": True}  # a plain create that raced


def test_the_writer_answers_as_a_module_would():
    """k8s_api.Writer: the kubernetes client's answer (or its exception) as a module's result, which
    deploy_retry classifies: a 409 is a conflict, a 429 or no answer transient."""
    from kubernetes.dynamic.exceptions import ConflictError

    from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api

    class Reply(object):
        def __init__(self, status, reason, body):
            self.status, self.reason, self.data, self.headers = status, reason, body, {}

        def getheaders(self):
            return self.headers

    class Resource(object):
        def __init__(self, outcome):
            self.outcome, self.calls = outcome, []

        def patch(self, **kwargs):
            self.calls.append(kwargs)
            if isinstance(self.outcome, BaseException):
                raise self.outcome
            return self.outcome

    def writer(outcome):
        resource = Resource(outcome)
        fake = type("Client", (), {"resources": type("R", (), {"get": lambda self, **kw: resource})()})()
        return k8s_api.Writer({}, 7, make_client=lambda auth: fake), resource

    w, resource = writer({"metadata": {"resourceVersion": "2"}})
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"}]
    assert w.json_patch("coordination.k8s.io/v1", "Lease", "l", "ns", ops) == {
        "changed": True,
        "result": {"metadata": {"resourceVersion": "2"}},
    }
    assert resource.calls == [
        {
            "_request_timeout": 7,
            "name": "l",
            "namespace": "ns",
            "body": ops,
            "content_type": "application/json-patch+json",
        }
    ]
    from kubernetes.client.rest import ApiException

    conflict = ConflictError(ApiException(http_resp=Reply(409, "Conflict", b'{"code":409}')))
    w, _unused = writer(conflict)
    out = w.json_patch("coordination.k8s.io/v1", "Lease", "l", "ns", ops)
    assert out["failed"] and out["status"] == 409 and not retryable(out, conflict=False)
    w, _unused = writer(ConnectionRefusedError("Connection refused"))
    out = w.json_patch("coordination.k8s.io/v1", "Lease", "l", "ns", ops)
    assert out["failed"] and "status" not in out and retryable(out, conflict=False)


# ------------------------------------------------------------------ the OCI registry
class Headers(dict):
    pass


def registry(replies, **kw):
    clock = Clock()
    reg = oci_registry.Registry("registry.example", backoff=backoff(clock, attempts=4), **kw)
    seen = []

    def once(method, url, headers, data, limit):
        seen.append(url)
        reply = replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        code, hdrs = reply
        return oci_registry.Reply(code, Headers(hdrs), b"{}", url)

    reg._exchange = once
    return reg, clock, seen


def test_registry_retries_429_after_retry_after_and_503_and_connection_errors():
    reg, clock, seen = registry(
        [(429, {"Retry-After": "3"}), urllib.error.URLError(ConnectionRefusedError()), (503, {}), (200, {})]
    )
    assert reg.request("GET", "/v2/m/manifests/t").code == 200
    assert clock.slept == [3.0, 1.0, 2.0] and len(seen) == 4


def test_registry_does_not_retry_a_refusal_or_a_tls_failure():
    reg, clock, seen = registry([(404, {}), (200, {})])
    assert reg.request("GET", "/v2/m/manifests/t").code == 404 and clock.slept == []
    import ssl

    reg, clock, seen = registry([urllib.error.URLError(ssl.SSLCertVerificationError("bad cert")), (200, {})])
    with pytest.raises(oci_registry.RegistryError, match="bad cert"):
        reg.request("GET", "/v2/m/manifests/t")
    assert clock.slept == []


def test_registry_without_tls_verify_falls_back_to_http_at_once():
    reg, clock, seen = registry(
        [urllib.error.URLError(ConnectionRefusedError()), (200, {})], tls_verify=False
    )
    assert reg.request("GET", "/v2/m/manifests/t").code == 200
    assert clock.slept == [] and seen[1].startswith("http://registry.example/")


def test_reads_writes_and_the_registry_classify_a_status_alike(monkeypatch):
    """One rule (transient_status): 429 and every 5xx are retried, a 4xx is not - by the reads
    (k8s_reader.is_transient), the writes (retryable) and the OCI client alike."""
    from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import transient_status

    for code in (429, 500, 502, 503, 504, 507, 599):
        assert transient_status(code), code
        assert retryable({"failed": True, "msg": '{"code":%d}' % code}, conflict=False), code
        assert k8s_reader.is_transient(ApiError(code)), code
    for code in (400, 401, 403, 404, 409, 410, 422):
        assert not transient_status(code), code
        assert not k8s_reader.is_transient(ApiError(code)), code
    assert not transient_status(None)


class FailingReader(object):
    def get(self, *args, **kwargs):
        raise k8s_reader.ReadError("reading Lease ns/specpilot-deploy-svc failed: HTTP 409")


def test_a_release_never_fails_and_says_when_the_lock_is_left():
    """A release whose delete conflicts and whose read again fails (the emulator's fault matrix, CI of
    fc7ac0d): released=false, left=true, the read's error in the message; no exception out of the
    always: section that releases it."""
    client, write, calls, clock = lease([])
    client._reader = FailingReader()
    client._delete = lambda version: {"failed": True, "status": 409, "msg": "conflict"}
    out = client.release("me", "41")
    assert out["released"] is False and out["left"] is True
    assert "could not be read" in out["message"] and "HTTP 409" in out["message"]
    client._delete = lambda version: {"failed": True, "status": 500, "msg": "internal error"}
    out = client.release("me", "41")
    assert out == {"released": False, "left": True, "message": "not released: internal error"}
