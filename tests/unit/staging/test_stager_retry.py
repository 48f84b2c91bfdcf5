"""The staging program's HTTP retries (module_utils/staging/stager.py ``Http``) follow the collection's one
retry policy (module_utils/k8s/deploy_retry.py ``Backoff``): what is retried and what is an answer is as it
was; the waits are jittered, a 429's or 503's Retry-After is honoured, and the time is bounded. A local server,
a recorded sleep: nothing here waits."""

from __future__ import annotations

import http.server
import threading

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.staging import stager


class Script(object):
    """A server answering each request with the next (status, headers) of a script (200 "ok" after it)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.seen = 0
        script = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                script.seen += 1
                status, headers = script.answers.pop(0) if script.answers else (200, {})
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                body = b"ok" if status == 200 else b"no"
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/f" % self.server.server_address[1]
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve():
    started = []

    def start(*answers):
        started.append(Script(answers))
        return started[-1]

    yield start
    for s in started:
        s.close()


def client(**kw):
    """An Http whose sleep is recorded and moves its clock on (so the total time bound can be seen)."""
    http_ = stager.Http(timeout=5, **kw)
    http_.slept, now = [], [1_800_000_000.0]

    def sleep(seconds):
        http_.slept.append(seconds)
        now[0] += seconds

    http_.sleep, http_.clock = sleep, lambda: now[0]
    return http_


def test_transient_statuses_are_retried_with_jittered_exponential_waits(serve):
    srv = serve((500, {}), (502, {}), (504, {}), (408, {}))
    h = client()
    assert h.text(srv.url) == "ok" and srv.seen == 5
    # full jitter under the old schedule's waits (1, 2, 4, 8 s): each wait at most what it was
    assert len(h.slept) == 4 and all(0 <= w <= cap for w, cap in zip(h.slept, (1, 2, 4, 8)))


def test_a_retry_after_is_honoured_and_capped(serve):
    srv = serve((503, {"Retry-After": "7"}), (429, {"Retry-After": "600"}))
    h = client(max_retry_after=60.0)
    assert h.text(srv.url) == "ok" and srv.seen == 3
    assert h.slept == [7.0, 60.0]


def test_answers_a_retry_cannot_change_are_not_retried(serve):
    srv = serve((404, {}))
    with pytest.raises(stager.StageError, match="HTTP 404"):
        client().text(srv.url)
    srv2 = serve((400, {}))  # not a transient status: a transient error at once, as before
    with pytest.raises(stager.TransientError, match="HTTP 400"):
        client().text(srv2.url)
    assert srv.seen == 1 and srv2.seen == 1


def test_the_retries_are_bounded_by_count_and_by_total_time(serve):
    srv = serve(*[(503, {})] * 9)
    h = client(retries=2)
    with pytest.raises(stager.TransientError, match="HTTP 503"):
        h.text(srv.url)
    assert srv.seen == 3 and len(h.slept) == 2
    srv2 = serve(*[(503, {"Retry-After": "40"})] * 9)
    h2 = client(retries=8, total=100.0)
    with pytest.raises(stager.TransientError, match="HTTP 503"):
        h2.text(srv2.url)
    # 40 + 40 s waited; a third wait would start an attempt past 100 s: given up with the last answer
    assert h2.slept == [40.0, 40.0] and srv2.seen == 3


def test_a_connection_refused_is_retried_then_a_transient_error(serve):
    srv = serve()
    url = srv.url
    srv.close()
    h = client(retries=1)
    with pytest.raises(stager.TransientError, match="refused|Errno"):
        h.text(url)
    assert len(h.slept) == 1
