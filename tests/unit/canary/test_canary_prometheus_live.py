"""The canary's arms read from a real Prometheus (Debian's binary, scraping every second): two arms'
vLLM pages labelled with their pod and namespace, as a PodMonitor labels them, read over a step's
window with increase() (module_utils/operate/canary_prometheus.py), against the same window read
from the pods' pages (canary.arm_window). And an arm Prometheus has no series of.

SPECPILOT_RECORD_PROMETHEUS=<file> writes the answers of the read to that file (that is how
tests/data/prometheus/canary_read.json was recorded)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_canary_window import page

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary, canary_prometheus

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monitoring"))
import guard_support as gs  # noqa: E402

pytestmark = pytest.mark.skipif(not gs.Prometheus.BINARY.exists(), reason="prometheus missing: run `make`")

NS = "ml"
SPEC = (1000, 3000, 2400)  # drafts, draft tokens, accepted per 120 requests: acceptance 0.8
# pod -> (its arm, TPOT s, requests before, requests after); "elsewhere" has a canary pod's name in another
# namespace: never counted
PODS = {
    "svc-predictor-7f9c": ("baseline", 0.04, 30, 150),
    "svc-s1a2b3c4-predictor-0a1b": ("canary", 0.018, 20, 140),
    "svc-s1a2b3c4-predictor-2c3d": ("canary", 0.018, 10, 130),
    "elsewhere": ("canary", 0.018, 0, 600),
}
LABELS = {name: {"pod": name} for name in PODS}
LABELS["elsewhere"] = {"pod": "svc-s1a2b3c4-predictor-0a1b", "namespace": "other"}
ARMS = {
    arm: [{"pod": p, "url": "unused"} for p, (a, *_rest) in PODS.items() if a == arm and p != "elsewhere"]
    for arm in ("baseline", "canary")
}


def pod_page(name: str, after: bool) -> str:
    arm, tpot, before_n, after_n = PODS[name]
    n = after_n if after else before_n
    spec = tuple(int(x * n / 120.0) for x in SPEC) if arm == "canary" else None
    return page(0.03, tpot, n, spec=spec)


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(
            sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)
        ):  # Prometheus stopped mid-scrape
            super().handle_error(request, client_address)


class ArmServer:
    """/svc/<name>/metrics: each pod's page as it was before the window's traffic, until switch()."""

    def __init__(self):
        self.after = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                name = self.path.strip("/").split("/")[1]
                gs.send_metrics_page(self, pod_page(name, server.after))

            def log_message(self, *args):
                pass

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    server = ArmServer()
    prometheus = gs.Prometheus(tmp_path_factory.mktemp("prometheus"), server, NS, list(PODS), LABELS)
    try:
        yield server, prometheus
    finally:
        prometheus.close()
        server.close()


def wait(condition, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout * float(os.environ.get("SPECPILOT_TEST_WAIT_SCALE", "3"))
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


def get(url, headers=None, timeout=10, validate_certs=True):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def latest(prometheus, expr: str) -> dict:
    return {r["metric"].get("pod"): float(r["value"][1]) for r in prometheus.query(expr)}


def same_bucket(a: float, b: float, bounds: list[float]) -> bool:
    """Whether a and b lie in the same histogram bucket (the resolution of a quantile from buckets)."""
    return next(i for i, le in enumerate(bounds + [float("inf")]) if a <= le) == next(
        i for i, le in enumerate(bounds + [float("inf")]) if b <= le
    )


def test_a_steps_figures_from_prometheus_match_the_pods_within_bucket_resolution(prom):
    server, prometheus = prom
    recorded = {}

    def recording_get(url, *args):
        body = get(url, *args)
        recorded[url] = body.decode()
        return body

    in_window = 'max by (pod) (count_over_time(vllm:request_success_total{namespace="%s"}[%%dms]))' % NS
    # every pod scraped steadily before the step begins, as a live service's pods are
    wait(
        lambda: min(latest(prometheus, in_window % 10000).values() or [0]) >= 2,
        what="two scrapes of each pod",
    )
    source = canary_prometheus.PrometheusArms(recording_get, prometheus.url, NS)
    source.begin(ARMS)
    start = time.time()
    wait(
        lambda: len(latest(prometheus, in_window % (1000 * (time.time() - start) + 1))) == 3,
        what="a sample in the window",
    )
    server.after = True
    after = 'sum by (pod) (vllm:request_success_total{namespace="%s"})' % NS
    wait(
        lambda: all(latest(prometheus, after).get(p) == PODS[p][3] for p in PODS if p != "elsewhere"),
        what="the traffic scraped",
    )
    seen = time.time()
    wait(lambda: time.time() >= max(seen + 2.5, start + 6), what="two more scrapes, a 6 s window")
    wins = source.read()

    pods = {
        arm: canary.arm_window(
            [
                {"pod": p["pod"], "before": pod_page(p["pod"], False), "after": pod_page(p["pod"], True)}
                for p in ARMS[arm]
            ]
        )
        for arm in ARMS
    }
    for arm in ARMS:
        w, exact = wins[arm], pods[arm]
        assert (
            w["source"] == "prometheus"
            and w["unread"] is None
            and w["pods"] == sorted(p["pod"] for p in ARMS[arm])
        )
        # increase() extrapolates to the window's edges: about a scrape interval (1 s) on each side of a 6 s window
        assert exact["requests"] <= w["requests"] <= 1.5 * exact["requests"], (
            arm,
            w["requests"],
            exact["requests"],
        )
        for fig in ("ttft", "tpot", "e2e"):
            assert w["histograms"][fig]["metric"] == exact["histograms"][fig]["metric"]
            bounds = [le for le, _n in exact["histograms"][fig]["buckets"]]
            assert [le for le, _n in w["histograms"][fig]["buckets"]] == bounds
            for q in (0.5, 0.99):
                a = canary.histogram_quantile(
                    q, exact["histograms"][fig]["buckets"], exact["histograms"][fig]["count"]
                )
                b = canary.histogram_quantile(
                    q, w["histograms"][fig]["buckets"], w["histograms"][fig]["count"]
                )
                assert same_bucket(a, b, bounds) and b == pytest.approx(a, rel=0.05), (arm, fig, q, a, b)
    assert wins["baseline"]["acceptance"] is None
    assert wins["canary"]["acceptance"]["draft_acceptance_rate"] == pytest.approx(
        pods["canary"]["acceptance"]["draft_acceptance_rate"], rel=0.02
    )
    assert wins["canary"]["acceptance"]["mean_acceptance_length"] == pytest.approx(
        pods["canary"]["acceptance"]["mean_acceptance_length"], rel=0.02
    )
    # the same decision from either source
    from_prom = canary.decide_step(wins["baseline"], wins["canary"])
    from_pods = canary.decide_step(pods["baseline"], pods["canary"])
    assert from_prom["decision"] == from_pods["decision"] == "promote-step", from_prom["reasons"]
    assert source.details()["prometheus"]["selectors"]["canary"].startswith('namespace="ml",pod=~')
    if os.environ.get("SPECPILOT_RECORD_PROMETHEUS"):
        Path(os.environ["SPECPILOT_RECORD_PROMETHEUS"]).write_text(
            json.dumps({"pods": {p: list(v) for p, v in PODS.items()}, "answers": recorded}, indent=1) + "\n"
        )


def test_an_arm_prometheus_has_no_series_of_is_said_never_read_as_zero_requests(prom):
    _server, prometheus = prom
    in_window = 'max by (pod) (count_over_time(vllm:request_success_total{namespace="%s"}[10s]))' % NS
    wait(lambda: min(latest(prometheus, in_window).values() or [0]) >= 2, what="two scrapes of each pod")
    # the canary's pods are not scraped (no PodMonitor on them): the baseline is read, the canary is not
    unscraped = {"baseline": ARMS["baseline"], "canary": [{"pod": "svc-s9f8e7d6-predictor-0a1b", "url": "-"}]}
    source = canary_prometheus.PrometheusArms(get, prometheus.url, NS)
    source.begin(unscraped)
    source.start -= 10  # a 10 s window, scraped ten times
    wins = source.read()
    assert wins["baseline"]["unread"] is None and wins["baseline"]["pods"] == ["svc-predictor-7f9c"]
    assert wins["canary"]["pods"] == [] and wins["canary"]["requests"] == 0
    assert wins["canary"]["unread"].startswith(
        'Prometheus %s has no series of vllm:request_success_total{namespace="ml",pod=~"svc-s9f8e7d6-predictor-0a1b"}'
        " in the last 10 s: the arm is not scraped" % prometheus.url
    )
    out = canary.decide_step(wins["baseline"], wins["canary"], extensions_left=1)
    assert out["decision"] == "extend" and out["reasons"][0].startswith("canary arm: Prometheus")
    assert not any("canary arm: 0 request(s)" in r for r in out["reasons"])

    # the pods are scraped, but their series carry no kubernetes_pod_name label (the wrong label name)
    source = canary_prometheus.PrometheusArms(get, prometheus.url, NS, labels={"pod": "kubernetes_pod_name"})
    source.begin(ARMS)
    source.start -= 10
    wins = source.read()
    for arm in ARMS:
        assert wins[arm]["pods"] == [] and wins[arm]["requests"] == 0
        assert "has no series of vllm:request_success_total" in wins[arm]["unread"]
        assert 'kubernetes_pod_name=~"' in wins[arm]["unread"]
    out = canary.decide_step(wins["baseline"], wins["canary"], extensions_left=0)
    assert out["decision"] == "inconclusive"
    assert out["reasons"][0].startswith("baseline arm: Prometheus %s has no series" % prometheus.url)
    assert out["reasons"][1].startswith("canary arm: Prometheus")
    assert not any("request(s) in the window" in r for r in out["reasons"])
