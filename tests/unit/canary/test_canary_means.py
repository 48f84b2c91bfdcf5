"""module_utils/operate/canary_means.py through canary.run_step (issues 38 and 39): a figure both arms' histograms hold
in one bucket (the lab's real engine: TPOT of a few ms, all in vLLM's 0-10 ms bucket) is judged on its exact mean from
_sum/_count, with an interval from the batch means of the step's scrape intervals; too few batches leave it undecided,
and the step's report names the method of each figure."""

from __future__ import annotations

import random
import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary, canary_means
from fake_clock import Clock

ARMS = {
    "baseline": [{"pod": "stable-1", "url": "http://b/metrics"}],
    "canary": [{"pod": "canary-1", "url": "http://c/metrics"}],
}
# vLLM 0.32's buckets (vllm/v1/metrics/loggers.py): TPOT's first bound is 10 ms
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0]
TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0]
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0]
TOKENS = 64


class Engine:
    """One arm's engine as its /metrics shows it: at each scrape 1 to 3 more requests (seeded), each with a TPOT drawn
    around ``tpot_s`` (relative noise ``cv``), TTFT 15 ms (+-20%), E2E = TTFT + 63 TPOT; spec-decode counters on a
    speculative arm (acceptance 0.8)."""

    def __init__(self, tpot_s, seed, cv=0.1, speculative=False):
        self.rng = random.Random(seed)
        self.tpot_s, self.cv, self.speculative = tpot_s, cv, speculative
        self.reg = reg = CollectorRegistry()
        lbl = ["model_name", "engine"]
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "", lbl, registry=reg, buckets=TTFT_BUCKETS)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds", "", lbl, registry=reg, buckets=TPOT_BUCKETS)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "", lbl, registry=reg, buckets=E2E_BUCKETS)
        self.ok = Counter("vllm:request_success", "", lbl + ["finished_reason"], registry=reg)
        self.spec = [
            Counter("vllm:spec_decode_" + name, "", lbl, registry=reg)
            for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
        ] if speculative else []

    def page(self, _url=None):
        for _ in range(self.rng.randint(1, 3)):
            tpot = max(1e-4, self.rng.gauss(self.tpot_s, self.cv * self.tpot_s))
            ttft = 0.015 * self.rng.uniform(0.8, 1.2)
            self.ttft.labels("m", "0").observe(ttft)
            self.tpot.labels("m", "0").observe(tpot)
            self.e2e.labels("m", "0").observe(ttft + (TOKENS - 1) * tpot)
            self.ok.labels("m", "0", "length").inc()
            for counter, value in zip(self.spec, (16, 48, 38)):
                counter.labels("m", "0").inc(value)
        return "".join(line for line in generate_latest(self.reg).decode().splitlines(True) if "_created" not in line)


def step(base_tpot, canary_tpot, cv=0.1, window_s=60, max_extensions=0, policy=None, seed=1, min_requests=20,
         min_acceptance=0.5):
    """A step held on two engines scraped every 2 s (min_requests 20, as the lab's canary)."""
    engines = {"http://b/metrics": Engine(base_tpot, seed, cv), "http://c/metrics": Engine(canary_tpot, seed + 1, cv, True)}
    clock = Clock()
    return canary.run_step(
        lambda url: engines[url].page(), ARMS, window_s, min_requests, max_extensions, policy or {"bound_by": "tpot"},
        min_acceptance, poll_s=2, clock=clock, sleep=clock.sleep,
    )


def test_both_arms_in_the_first_bucket_with_clearly_different_means_decide_by_the_slo():
    """6 ms against 5 ms, both inside vLLM's 0-10 ms TPOT bucket: the buckets' even spread gives an interval too wide
    to decide (the histogram method: about 0.98-1.47x); the batch means of the exact sums decide it."""
    faster = step(0.006, 0.005)
    assert faster["decision"] == "promote-step", faster["reasons"]
    assert faster["unresolved"]["tpot"] == [0.0, 10.0]
    tpot = faster["ratios"]["tpot"]
    assert tpot["method"] == "batch-means" and tpot["value"] == pytest.approx(1.2, rel=0.05)
    assert 1.0 < tpot["ci95"][0] < tpot["value"] < tpot["ci95"][1] < 1.4
    assert min(tpot["batches"]) >= canary_means.MIN_BATCHES
    said = faster["methods"]["tpot"]
    assert re.search(r"^TPOT: mean 5\.9\d ms stable vs 4\.9\d ms canary from vLLM's _sum/_count, 1\.\d\dx, 95% CI "
                     r"1\.\d\d-1\.\d\dx over 1\d / 1\d batches of about 2 s \(batch means, delta-method t interval, \d+ df\); "
                     r"the histogram's 0-10 ms bucket holds both arms' p50 and cannot resolve it$", said), said
    # the reasons say what decided, and that TPOT is a mean, without the method's sentence (the methods hold it)
    assert re.match(r"TPOT 1\.\d\dx faster \(95% CI 1\.\d\d-1\.\d\dx\)$", faster["reasons"][0]), faster["reasons"]
    assert "TPOT is compared by its mean (batch means), not its p50: both arms' p50 fall in the 0-10 ms bucket" in (
        "\n".join(faster["reasons"]))
    assert not any("delta-method" in r for r in faster["reasons"]), faster["reasons"]
    # the same means the other way round: slower beyond the noise, aborted by the SLO (TPOT-bound)
    slower = step(0.005, 0.006)
    assert slower["decision"] == "abort", slower["reasons"]
    assert slower["ratios"]["tpot"]["ci95"][1] < 1.0
    assert any("TPOT is worse than baseline beyond the noise" in r for r in slower["reasons"])


def test_equal_means_with_noisy_batches_are_held_then_inconclusive():
    out = step(0.006, 0.006, cv=0.4, max_extensions=1)
    assert out["decision"] == "inconclusive" and out["extensions"] == 1, out["reasons"]
    tpot = out["ratios"]["tpot"]
    assert tpot["method"] == "batch-means" and tpot["ci95"][0] < 1.0 < tpot["ci95"][1]
    assert tpot["ci95"][1] - tpot["ci95"][0] > 0.05  # an interval, not a point
    assert "the gain is within the noise" in out["reasons"][0]


def test_too_few_batches_leave_the_figure_undecided_and_say_so():
    """A 10 s window scraped every 2 s has 6 batches an arm (the first read's and five of 2 s): fewer than a batch-means interval needs. TPOT is not
    judged (never on a guess), so the step is undecided although TTFT and E2E look fine."""
    out = step(0.006, 0.005, window_s=10, min_requests=8)
    assert out["decision"] == "inconclusive", out["reasons"]
    assert out["ratios"]["tpot"]["value"] is None and out["ratios"]["tpot"]["batches"] == [6, 6]
    assert out["reasons"][0] == "E2E, TPOT and TTFT not judged yet: too few batches for an interval of the mean (held for more)"
    assert "TPOT: stable arm 6 and canary arm 6 non-empty batch(es)" in out["methods"]["tpot"]
    assert "fewer than the 10" in out["methods"]["tpot"] and "not judged" in out["methods"]["tpot"]
    assert not any("non-empty batch(es)" in r for r in out["reasons"]), out["reasons"]


def test_the_step_is_held_for_enough_batches_before_it_ends_early():
    """Both arms have their 20 requests after about 7 scrapes; a figure judged on its mean needs 10 batches an arm,
    so the step is held that long (not ended at 20 requests and judged undecided)."""
    out = step(0.006, 0.005, window_s=600)
    # the first read, at once after the step's first scrape, is a batch too (this engine answers at every scrape)
    assert min(out["ratios"]["tpot"]["batches"]) == canary_means.MIN_BATCHES + 1
    assert out["window_s"] == 20.0 and out["decision"] == "promote-step"


def test_what_needs_no_mean_acts_without_waiting_for_the_batches():
    """An abort that needs no mean (the canary's acceptance under the floor) is taken as soon as both arms have their
    8 requests, not held for the 10 batches (18 s here) a mean would need."""
    out = step(0.006, 0.005, window_s=600, min_acceptance=0.9, min_requests=8)
    assert out["decision"] == "abort" and "below the floor 0.90" in out["reasons"][0]
    assert out["window_s"] < 18.0


def promoted_report():
    """A 50% step whose canary is twice as fast per token (6 vs 3 ms), and the Markdown report of a canary promoted by it."""
    out = step(0.006, 0.003)
    out["traffic_percent"] = 50
    md = canary.report_markdown({
        "service": "s", "namespace": "ns", "outcome": "promoted", "summary": "s", "canary_name": "c",
        "speculative_config": {"method": "ngram"}, "steps_planned": [50], "window_s": 60, "min_requests": 20,
        "min_acceptance": 0.5, "steps": [out]})
    return out, md


def test_the_report_names_the_method_of_each_figure():
    out, md = promoted_report()
    section = md.split("How each figure was judged:")[1].split("Reasons:")[0]
    assert re.search(r"^- TPOT: mean 5\.9\d ms stable vs 2\.9\d ms canary", section, re.M), section
    assert "batches of about 2 s (batch means, delta-method t interval" in section
    # E2E 0.3-0.5 s against 0-0.3 s: the buckets resolve it
    assert re.search(r"^- E2E: p50 from the histograms, \d\.\d\dx \(the buckets resolve it", section, re.M), section


def test_the_report_states_each_method_once_in_its_methods_and_the_reasons_say_the_decision():
    """Issue 39: the batch-means sentence was printed twice, under "How each figure was judged:" and again among the
    step's reasons. It is in the methods only; the reasons keep the decision and point to the method."""
    out, md = promoted_report()
    sentence = out["methods"]["tpot"]
    assert "batch means, delta-method t interval" in sentence
    # every figure's method once (TTFT is judged on its batch means too: 10-20 ms on both arms)
    assert all(md.count(out["methods"][f]) == 1 for f in ("ttft", "tpot", "e2e")), md
    assert md.count("delta-method t interval") == sum("delta-method" in m for m in out["methods"].values()) == 2, md
    methods = md.split("How each figure was judged:")[1].split("Reasons:")[0]
    reasons = md.split("Reasons:")[1]
    assert sentence in methods
    assert re.search(r"^- TPOT 2\.\d\dx faster \(95% CI \d\.\d\d-\d\.\d\dx\)$", reasons, re.M), reasons
    assert re.search(r"^- TPOT is compared by its mean \(batch means\), not its p50: both arms' p50 fall in the 0-10 ms "
                     r"bucket \(the method: see the report's \"How each figure was judged\"\)$", reasons, re.M), reasons


def test_a_window_without_batches_is_judged_on_the_histogram_method_and_says_so():
    """Prometheus gives a window's increase() only (no scrape intervals): the exact mean, its interval from the
    buckets' spread, and the step says which."""
    eng = {"b": Engine(0.006, 1), "c": Engine(0.005, 2, speculative=True)}
    wins = {}
    for name, e in eng.items():
        for _ in range(20):
            e.page()
        wins[name] = dict(canary.arm_window([{"pod": name, "before": None, "after": e.page()}]), source="prometheus")
    out = canary.decide_step(wins["b"], wins["c"], {"bound_by": "tpot"})
    assert out["ratios"]["tpot"]["method"] == "histogram-means"
    assert "the histogram method: no batches of the window (prometheus)" in out["methods"]["tpot"]


def test_the_batch_means_interval_is_the_delta_method_t_interval():
    """Two arms of 10 batches, by hand: the ratio estimator's variance, Welch's degrees of freedom, Student's t."""
    base = {"batches": [{"figures": {"tpot": [0.012 + 0.001 * (i % 3), 2]}} for i in range(10)]}
    can = {"batches": [{"figures": {"tpot": [0.010 + 0.001 * (i % 2), 2]}} for i in range(10)] + [
        {"figures": {"tpot": [0.0, 0]}}]}  # an interval without a request drops out
    out = canary_means.batch_ratio(base, can, "tpot")
    mb, mc = sum(0.012 + 0.001 * (i % 3) for i in range(10)) / 20, 0.0105 / 2
    assert out["value"] == pytest.approx(mb / mc) and out["batches"] == [10, 10]
    vb = 10 / 9 * sum((0.012 + 0.001 * (i % 3) - 2 * mb) ** 2 for i in range(10)) / 400
    vc = 10 / 9 * sum((0.010 + 0.001 * (i % 2) - 2 * mc) ** 2 for i in range(10)) / 400
    rb, rc = vb / mb ** 2, vc / mc ** 2
    df = (rb + rc) ** 2 / (rb ** 2 / 9 + rc ** 2 / 9)
    assert out["df"] == pytest.approx(df)
    assert canary_means.t_quantile(0.975, 9) == pytest.approx(2.2622, abs=5e-4)
    half = canary_means.t_quantile(0.975, df) * (rb + rc) ** 0.5
    assert out["ci95"][0] == pytest.approx(mb / mc * 2.718281828 ** -half)
    flat = {"batches": [{"figures": {"tpot": [0.01, 2]}}] * 10}
    assert "do not vary at all" in canary_means.batch_ratio(flat, flat, "tpot")["problem"]
