"""module_utils/operate/canary_prometheus.py on Prometheus' answers (JSON as its HTTP API returns them):
a read recorded from a real Prometheus (tests/data/prometheus/canary_read.json, see
test_canary_prometheus_live.py) against the same window read from the pods' pages, and answers
written here for the window arithmetic (extensions re-query a longer range), the scrape interval,
the old metric names, an unread arm, an unreachable or refusing Prometheus and bad settings."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest
from test_canary_window import page

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import parse_metrics_text
from ansible_collections.specpilot.core.plugins.module_utils.operate import canary, canary_prometheus as cp
from fake_clock import Clock

RECORDED = Path(__file__).resolve().parents[2] / "data" / "prometheus" / "canary_read.json"
SPEC = (1000, 3000, 2400)  # drafts, draft tokens, accepted per 120 requests: acceptance 0.8
URL = "http://prom.monitoring:9090"
NS = "ml"
ARMS = {
    "baseline": [{"pod": "svc-predictor-b1", "url": "unused"}],
    "canary": [
        {"pod": "svc-s1-predictor-c1", "url": "unused"},
        {"pod": "svc-s1-predictor-c2", "url": "unused"},
    ],
}
_RANGE = re.compile(r"\[(\d+)ms\]")


def answer(vector, at=0.0):
    """A body as Prometheus' /api/v1/query answers an instant query."""
    result = [{"metric": metric, "value": [at, repr(float(value))]} for metric, value in vector]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def query_of(url):
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    return q["query"][0], float(q["time"][0])


# --------------------------------------------------------------------------- a recorded read


def test_a_read_recorded_from_prometheus_gives_the_pods_window_within_bucket_resolution():
    recorded = json.loads(RECORDED.read_text())
    bodies = {_RANGE.sub("[R]", query_of(url)[0]): body for url, body in recorded["answers"].items()}
    pods = recorded["pods"]

    def replay(url, headers, timeout, validate_certs):
        return bodies[_RANGE.sub("[R]", query_of(url)[0])].encode()

    def pod_page(name, after):
        arm, tpot, before_n, after_n = pods[name]
        n = after_n if after else before_n
        return page(0.03, tpot, n, spec=tuple(int(x * n / 120.0) for x in SPEC) if arm == "canary" else None)

    arms = dict(
        (arm, [{"pod": p, "url": "-"} for p, v in pods.items() if v[0] == arm and p != "elsewhere"])
        for arm in ("baseline", "canary")
    )
    source = cp.PrometheusArms(replay, URL, "ml")
    source.begin(arms)
    wins = source.read()
    for arm, members in arms.items():
        exact = canary.arm_window(
            [
                {"pod": p["pod"], "before": pod_page(p["pod"], False), "after": pod_page(p["pod"], True)}
                for p in members
            ]
        )
        w = wins[arm]
        # the pod of the same name in namespace "other" (600 requests) is not counted
        assert w["pods"] == sorted(p["pod"] for p in members) and w["unread"] is None
        assert exact["requests"] <= w["requests"] <= 1.5 * exact["requests"]
        for fig in ("ttft", "tpot", "e2e"):
            h, e = w["histograms"][fig], exact["histograms"][fig]
            assert h["metric"] == e["metric"] and [b[0] for b in h["buckets"]] == [b[0] for b in e["buckets"]]
            for q in (0.5, 0.99):
                a = canary.histogram_quantile(q, e["buckets"], e["count"])
                b = canary.histogram_quantile(q, h["buckets"], h["count"])
                assert b == pytest.approx(a, rel=0.05), (arm, fig, q)
    assert wins["baseline"]["acceptance"] is None
    assert wins["canary"]["acceptance"]["draft_acceptance_rate"] == pytest.approx(0.8, rel=0.02)
    assert canary.decide_step(wins["baseline"], wins["canary"])["decision"] == "promote-step"


def test_the_queries_select_the_arms_pods_and_use_the_pods_paths_metric_names():
    sel = cp.arm_selector(
        NS,
        ["svc-s1-predictor-c2", "svc-s1-predictor-c1"],
        {"pod": "kubernetes_pod_name"},
        {"cluster": "eu-1"},
    )
    assert (
        sel == 'cluster="eu-1",namespace="ml",kubernetes_pod_name=~"svc-s1-predictor-c1|svc-s1-predictor-c2"'
    )
    q = cp.arm_queries(sel, cp.range_text(612.3456), "kubernetes_pod_name")
    assert (
        q["requests"] == "sum by (finished_reason) (increase(vllm:request_success_total{%s}[612346ms]))" % sel
    )
    assert (
        q["hist:ttft"]
        == "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{%s}[612346ms]))" % sel
    )
    # the TPOT figure's names, new and old, as the /metrics path reads them
    assert {q[k].split("(")[3].split("{")[0] for k in ("hist:request_tpot", "hist:itl", "hist:tpot")} == {
        "vllm:request_time_per_output_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:time_per_output_token_seconds_bucket",
    }
    assert (
        q["spec:num_accepted_tokens"]
        == "sum(increase(vllm:spec_decode_num_accepted_tokens_total{%s}[612346ms]))" % sel
    )
    assert q["samples"].startswith(
        "max by (kubernetes_pod_name) (count_over_time(vllm:request_success_total{"
    )
    assert cp.arm_selector(NS, ["a.b"]) == 'namespace="ml",pod=~"a\\\\.b"'  # a dot is matched as a dot


# --------------------------------------------------------------------------- window arithmetic


class FakePrometheus:
    """Answers the canary's queries for ARMS whose pods serve ``per_s`` requests a second in all, scraped
    every ``interval`` seconds; the baseline's TPOT 40 ms, the canary's 18 ms with acceptance 0.8."""

    def __init__(self, per_s=6.0, interval=1.0):
        self.per_s, self.interval, self.ranges, self.queries = per_s, interval, [], []

    def fetch(self, url, headers, timeout, validate_certs):
        expr, at = query_of(url)
        self.queries.append(expr)
        if expr == "vector(1)":
            return answer([({}, 1)], at)
        seconds = int(_RANGE.search(expr).group(1)) / 1000.0
        arm = "canary" if "predictor-c" in expr else "baseline"
        sel = cp.arm_selector(NS, [p["pod"] for p in ARMS[arm]])
        key = next(k for k, e in cp.arm_queries(sel, cp.range_text(seconds)).items() if e == expr)
        if key == "samples":
            self.ranges.append(seconds)
        return answer(self.vector(arm, key, seconds), at)

    def vector(self, arm, key, seconds):
        samples = int(seconds / self.interval)
        if samples < 2:  # increase() of fewer than two samples is no series at all
            return [({"pod": p["pod"]}, samples) for p in ARMS[arm]] if key == "samples" and samples else []
        n = int(self.per_s * seconds)
        spec = tuple(int(x * n / 120.0) for x in SPEC) if arm == "canary" else None
        facts = parse_metrics_text(page(0.03, 0.018 if arm == "canary" else 0.04, n, spec=spec))
        if key == "samples":
            return [({"pod": p["pod"]}, samples) for p in ARMS[arm]]
        if key == "requests":
            return [({"finished_reason": r}, v) for r, v in facts["finished"].items()]
        if key == "spec:per_pos":  # the page has no per-position counters: no series
            return []
        if key.startswith("spec:"):
            return [({}, facts["counters"][key[5:]])] if spec else []
        lat = facts["latency"].get(key[5:])
        if not lat:
            return []
        if key.startswith("sum:"):
            return [({}, lat["sum"])]
        return [({"le": repr(le)}, v) for le, v in lat["buckets"]] + [({"le": "+Inf"}, lat["count"])]


def hold(fake, clock, window=10.0, min_requests=100, max_extensions=2):
    source = cp.PrometheusArms(fake.fetch, URL, NS, now=lambda: 1.8e9 + clock.now)
    return canary.run_step(
        None,
        ARMS,
        window,
        min_requests,
        max_extensions,
        clock=lambda: clock.now,
        sleep=clock.sleep,
        poll_s=5,
        source=source,
    )


def test_an_extension_re_queries_the_longer_window_ending_at_the_query():
    fake, clock = FakePrometheus(per_s=6.0), Clock()
    out = hold(fake, clock)
    # 60 requests at 10 s: extended; 120 at 20 s, the same start: decided
    assert out["extensions"] == 1 and out["window_s"] == 20.0
    assert out["decision"] == "promote-step", out["reasons"]
    assert fake.ranges == [0.001, 0.001, 5.0, 5.0, 10.0, 10.0, 10.0, 10.0, 15.0, 15.0, 20.0, 20.0]
    assert out["arms"]["canary"]["requests"] == 120 and out["source"] == "prometheus"
    assert out["prometheus"]["range"] == "20000ms" and out["prometheus"]["url"] == URL
    assert out["prometheus"]["evaluated_at"] == "2027-01-15T08:00:20Z"
    assert out["baseline_window"]["source"] == "prometheus"


def test_a_window_of_one_scrape_is_unread_and_says_why_then_stops_inconclusive():
    fake, clock = FakePrometheus(interval=30.0), Clock()  # the module refuses such a window (below)
    out = hold(fake, clock, window=40.0, max_extensions=0)
    assert out["decision"] == "inconclusive" and out["arms"]["canary"]["requests"] == 0
    assert out["reasons"][0].startswith("baseline arm: Prometheus %s has a single sample" % URL)
    assert "increase() needs two" in out["reasons"][0]
    assert not any("request(s) in the window" in r for r in out["reasons"])


def test_the_old_inter_token_name_carries_tpot_when_it_is_the_only_one():
    buckets = [({"le": "0.025"}, 3.0), ({"le": "0.05"}, 10.0), ({"le": "+Inf"}, 10.0)]
    old = cp.arm_window_from_answers({"samples": [({"pod": "p"}, 5)], "hist:tpot": buckets}, ["p"], 60, {})
    assert old["histograms"]["tpot"] == {
        "metric": "vllm:time_per_output_token_seconds",
        "count": 10.0,
        "buckets": [[0.025, 3.0], [0.05, 10.0]],
        "sum": None,  # no answer of its sum: the mean is unknown, never 0
    }
    with_sum = cp.arm_window_from_answers(
        {"samples": [({"pod": "p"}, 5)], "hist:tpot": buckets, "sum:tpot": [({}, 0.31)]}, ["p"], 60, {}
    )
    assert with_sum["histograms"]["tpot"]["sum"] == 0.31
    both = cp.arm_window_from_answers(
        {"samples": [({"pod": "p"}, 5)], "hist:tpot": buckets, "hist:itl": buckets}, ["p"], 60, {}
    )
    assert both["histograms"]["tpot"]["metric"] == "vllm:inter_token_latency_seconds"  # the new name first


def test_buckets_extrapolated_apart_are_made_monotonic_as_histogram_quantile_does():
    vector = [({"le": "0.1"}, 5.2), ({"le": "0.2"}, 5.0), ({"le": "0.4"}, 9.0), ({"le": "+Inf"}, 8.9)]
    win = cp.arm_window_from_answers({"samples": [({"pod": "p"}, 9)], "hist:e2e": vector}, ["p"], 60, {})
    assert win["histograms"]["e2e"]["buckets"] == [[0.1, 5.2], [0.2, 5.2], [0.4, 9.0]]
    assert win["histograms"]["e2e"]["count"] == 9.0


def test_a_pod_without_series_beside_others_is_noted_not_counted():
    win = cp.arm_window_from_answers(
        {
            "samples": [({"pod": "a"}, 12)],
            "requests": [({"finished_reason": "stop"}, 40.0), ({"finished_reason": "abort"}, 4.0)],
        },
        ["a", "b"],
        60,
        {},
    )
    assert win["pods"] == ["a"] and win["unread"] is None and win["series"]["missing"] == ["b"]
    assert win["requests"] == 44.0 and win["failed"] == 4.0
    assert win["notes"] == [
        "b: under two samples in Prometheus over the window (not scraped yet, or not labelled pod): "
        "not counted"
    ]


# --------------------------------------------------------------------------- failures and settings


def step_params(**kw):
    params = dict((k, v.get("default")) for k, v in fact_tasks.CANARY_STEP_ARGS.items())
    params.update(
        arms=ARMS,
        window=60.0,
        min_requests=10,
        max_extensions=0,
        policy={},
        prometheus_labels={},
        prometheus_selector={},
        prometheus_headers={},
        namespace=NS,
        poll=0.01,
    )
    return dict(params, **kw)


def test_an_unreachable_prometheus_fails_the_step_at_once_with_the_url_and_the_error():
    with pytest.raises(fact_tasks.TaskFailure) as failure:
        fact_tasks.canary_step(step_params(prometheus_url="http://admin:s3cret@127.0.0.1:9"))
    assert failure.value.msg.startswith(
        "prometheus_url: the arms could not be read: Prometheus query failed " "(http://127.0.0.1:9): "
    )
    assert "refused" in failure.value.msg.lower() and "s3cret" not in failure.value.msg
    assert failure.value.fields == {"url": "http://127.0.0.1:9"}


def test_a_refused_query_fails_naming_it():
    def refusing(url, headers, timeout, validate_certs):
        if query_of(url)[0] == "vector(1)":
            return answer([({}, 1)])
        return json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode()

    source = cp.PrometheusArms(refusing, URL, NS, now=iter([0.0, 60.0]).__next__)
    source.begin(ARMS)
    with pytest.raises(cp.prometheus_api.PrometheusError, match="refused the query .*parse error"):
        source.read()


@pytest.mark.parametrize(
    "url, window, interval, labels, selector, message",
    [
        ("prometheus:9090", 600, 30, {}, {}, "prometheus_url: 'prometheus:9090' is not the http(s) URL"),
        (
            URL,
            50,
            30,
            {},
            {},
            "window: a step window of 50 s spans fewer than 2 scrapes 30 s apart "
            "(prometheus_scrape_interval): increase() needs two samples of each series inside "
            "the window, so Prometheus would read nothing; hold each step at least 60 s",
        ),
        (URL, 600, 0, {}, {}, "prometheus_scrape_interval: 0 is not a number of seconds > 0"),
        (URL, 600, 30, {"pod": "pod-name"}, {}, "not a Prometheus label name: 'pod-name'"),
        (URL, 600, 30, {}, {"pod": "x"}, "prometheus_selector: sets pod, the label(s) each arm's pods"),
    ],
)
def test_settings_that_cannot_read_the_arms_are_refused_naming_the_field(
    url, window, interval, labels, selector, message
):
    assert message in cp.settings_problem(url, window, interval, labels, selector)
    assert cp.settings_problem(URL, 60, 30, {"pod": "kubernetes_pod_name"}, {"cluster": "eu"}) == ""


def test_the_step_refuses_a_window_prometheus_cannot_read_before_reading_anything():
    with pytest.raises(
        fact_tasks.TaskFailure, match="window: a step window of 20.0 s spans fewer than 2 scrapes"
    ):
        # port 9 refuses connections: a read would fail otherwise
        fact_tasks.canary_step(step_params(prometheus_url="http://127.0.0.1:9", window=20.0))
    with pytest.raises(fact_tasks.TaskFailure, match="namespace: the namespace of the arms' pods"):
        fact_tasks.canary_step(step_params(prometheus_url="http://127.0.0.1:9", namespace=None))
    assert fact_tasks.CANARY_STEP_ARGS["prometheus_headers"]["no_log"] is True


def test_the_report_says_where_the_figures_come_from():
    step = {
        "traffic_percent": 50,
        "decision": "promote-step",
        "reasons": ["r"],
        "window_s": 60,
        "extensions": 0,
        "source": "prometheus",
        "notes": ["b: under two samples"],
        "prometheus": {"url": URL, "range": "60000ms", "evaluated_at": "2027-01-15T08:00:20Z"},
    }
    report = _report(60, 10, "prometheus", [step, dict(step, source="pods")], prometheus_url=URL)
    md = canary.report_markdown(report)
    assert "Both arms are read from Prometheus %s (specpilot_canary_prometheus_url)." % URL in md
    assert (
        "figures from Prometheus %s (increase() over 60000ms, evaluated at 2027-01-15T08:00:20Z)" % URL in md
    )
    assert "figures from the arms' pods' /metrics" in md
    assert "- b: under two samples" in md


def test_the_roles_check_names_its_variables():
    from ansible.errors import AnsibleFilterError

    from ansible_collections.specpilot.core.plugins.filter.canary_prometheus import canary_prometheus_problem

    settings = {"url": URL, "window": "40", "scrape_interval": "30", "labels": {"pod": "pod"}, "selector": {}}
    assert canary_prometheus_problem(settings).startswith(
        "specpilot_canary_window: a step window of 40 s spans fewer than 2 scrapes 30 s apart "
        "(specpilot_canary_prometheus_scrape_interval)"
    )
    assert (
        canary_prometheus_problem(dict(settings, window="abc"))
        == "specpilot_canary_window: 'abc' is not a number of seconds"
    )
    assert canary_prometheus_problem(dict(settings, window=600)) == ""
    with pytest.raises(AnsibleFilterError, match="expects a mapping"):
        canary_prometheus_problem(URL)


def test_a_step_read_from_the_pods_says_so():
    from test_canary_step import ARMS as POD_ARMS, Live

    live = Live({"http://b/metrics": 30, "http://c/metrics": 30})
    out = canary.run_step(live.fetch, POD_ARMS, 600, 60, clock=live.clock, sleep=live.sleep, poll_s=5)
    assert out["source"] == "pods" and "prometheus" not in out
    assert "figures from the arms' pods' /metrics" in canary.report_markdown(
        _report(600, 60, "pods", [dict(out, traffic_percent=50)])
    )


def _report(window_s, min_requests, source, steps, **extra):
    """A promoted canary's report of these steps, for report_markdown."""
    return dict(
        namespace=NS,
        service="svc",
        outcome="promoted",
        summary="s",
        canary_name="s1",
        steps_planned=[50, 100],
        window_s=window_s,
        min_requests=min_requests,
        min_acceptance=0.5,
        source=source,
        steps=steps,
        **extra,
    )
