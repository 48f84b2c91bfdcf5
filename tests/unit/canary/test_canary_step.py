"""module_utils/operate/canary.py around the decision: holding a step (scrapes, early end, extensions, the
100% step against the previous baseline window), the arms' pod URLs, the traffic-split support
check, and the Markdown report."""

from __future__ import annotations

from test_canary_window import page

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary
from markdown_cells import unpadded

ARMS = {
    "baseline": [{"pod": "stable-1", "url": "http://b/metrics"}],
    "canary": [{"pod": "canary-1", "url": "http://c/metrics"}],
}
SPEC = (1000, 3000, 2400)


class Live:
    """Pages per URL that grow with each scrape (n requests more per scrape and URL), and a clock
    that sleep() advances: a step held on live traffic without waiting. By default every figure's p50 falls in
    different buckets on the two arms (the buckets resolve them; none is judged on its mean)."""

    def __init__(self, per_scrape, tpot=None, ttft=None):
        self.per_scrape, self.tpot = per_scrape, tpot or {"http://b/metrics": 0.04, "http://c/metrics": 0.018}
        self.ttft = ttft or {"http://b/metrics": 0.03, "http://c/metrics": 0.015}
        self.n = {}
        self.now = 0.0
        self.scrapes = []

    def fetch(self, url):
        self.scrapes.append(url)
        n = self.n[url] = self.n.get(url, 0) + self.per_scrape.get(url, 0)
        spec = tuple(int(x * n / 120.0) for x in SPEC) if url.startswith("http://c") else None
        return page(self.ttft[url], self.tpot[url], n, spec=spec)

    def clock(self):
        return self.now

    def sleep(self, s):
        self.now += s


def test_a_step_ends_as_soon_as_both_arms_have_enough_requests():
    live = Live({"http://b/metrics": 30, "http://c/metrics": 30})
    out = canary.run_step(live.fetch, ARMS, 600, 60, clock=live.clock, sleep=live.sleep, poll_s=5)
    # first scrape 30 each (before), then 60, 90: 60 more requests per arm after two polls
    assert out["decision"] == "promote-step", out["reasons"]
    assert out["arms"]["canary"]["requests"] == 60 and out["window_s"] == 5.0
    assert out["baseline_window"]["requests"] == 60


def test_too_few_requests_extend_the_window_then_stop_inconclusive():
    live = Live({"http://b/metrics": 1, "http://c/metrics": 1})
    out = canary.run_step(
        live.fetch, ARMS, 10, 100, max_extensions=2, clock=live.clock, sleep=live.sleep, poll_s=5
    )
    assert out["decision"] == "inconclusive" and out["extensions"] == 2
    assert out["window_s"] == 30.0  # three windows of 10 s, the same start


def test_an_extension_for_noise_waits_for_more_requests_not_the_same_window_again(monkeypatch):
    """Both arms had min_requests, but the figures were within the noise (decide_step: extend): the extension holds
    the step until each arm has min_requests more (or another window), and decides on the larger window."""
    live, seen = Live({"http://b/metrics": 30, "http://c/metrics": 30}), []
    decide = canary.decide_step

    def noisy_twice(baseline, canary_win, *args):
        seen.append((baseline["requests"], canary_win["requests"], live.now))
        out = decide(baseline, canary_win, *args)
        return dict(out, decision="extend") if len(seen) < 3 and args[-2] > 0 else out

    monkeypatch.setattr(canary, "decide_step", noisy_twice)
    out = canary.run_step(live.fetch, ARMS, 600, 60, max_extensions=2, clock=live.clock, sleep=live.sleep, poll_s=5)
    assert [(b, c) for b, c, _ in seen] == [(60, 60), (120, 120), (180, 180)]
    assert [t for _, _, t in seen] == [5.0, 10.0, 15.0]  # each extension held for its own requests
    assert out["extensions"] == 2 and out["arms"]["canary"]["requests"] == 180


def test_the_lock_is_kept_at_every_scrape_of_a_held_step_and_a_lost_one_stops_it():
    """keep(now) (the action's lock renewal) runs at each scrape while the step is held, with the step's
    clock; a message from it stops the step (the lock is another run's now)."""
    live, seen = Live({"http://b/metrics": 1, "http://c/metrics": 1}), []
    out = canary.run_step(
        live.fetch, ARMS, 20, 100, clock=live.clock, sleep=live.sleep, poll_s=5, keep=seen.append
    )
    assert out["decision"] == "inconclusive" and seen == [0.0, 5.0, 10.0, 15.0]
    live = Live({"http://b/metrics": 1, "http://c/metrics": 1})
    lost = iter([None, "svc: the lock could not be renewed - it is no longer this run's"])
    try:
        canary.run_step(
            live.fetch, ARMS, 20, 100, clock=live.clock, sleep=live.sleep, keep=lambda now: next(lost)
        )
    except canary.StepStopped as exc:
        assert "no longer this run's" in str(exc) and live.now == 2.0  # stopped at the second scrape
    else:
        raise AssertionError("a lost lock did not stop the step")


def test_the_100_percent_step_compares_with_the_previous_baseline_window():
    live = Live({"http://b/metrics": 30, "http://c/metrics": 30})
    first = canary.run_step(live.fetch, ARMS, 600, 60, clock=live.clock, sleep=live.sleep, poll_s=5)
    live.scrapes.clear()
    out = canary.run_step(
        live.fetch,
        ARMS,
        600,
        60,
        reference=first["baseline_window"],
        clock=live.clock,
        sleep=live.sleep,
        poll_s=5,
    )
    assert not any(u.startswith("http://b") for u in live.scrapes)  # the stable pods are not read
    assert out["decision"] == "promote-step" and out["arms"]["baseline"]["requests"] == 60
    assert "previous step" in out["reasons"][-1]


def test_arm_pods_read_ready_pods_at_their_ip_or_where_the_lab_publishes_them():
    ready = {"conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.5"}
    pods = [
        {"metadata": {"name": "b"}, "status": ready},
        {
            "metadata": {"name": "a", "annotations": {"specpilot.io/lab-url": "http://127.0.0.1:4242"}},
            "status": ready,
        },
        {
            "metadata": {"name": "c"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}], "podIP": "x"},
        },
        {"metadata": {"name": "d", "deletionTimestamp": "now"}, "status": ready},
    ]
    assert canary.arm_pods(pods, 8080) == [
        {"pod": "a", "url": "http://127.0.0.1:4242/metrics"},
        {"pod": "b", "url": "http://10.0.0.5:8080/metrics"},
    ]


def test_no_traffic_split_before_kserve_0_20_names_the_field_and_suggests_the_benchmark():
    msg = canary.support_problem((0, 16, 0), "Standard")
    assert "KServe 0.16.0 in Standard mode has no traffic split: spec.canary" in msg
    assert "playbooks/benchmark.yml" in msg
    assert canary.support_problem((0, 20, 0), "Standard") == ""
    assert canary.support_problem((0, 20, 0), "Knative") == ""  # canaryTrafficPercent (issue 20)
    assert "unknown" in canary.support_problem(None, "Standard")


def test_the_report_has_both_arms_figures_per_step():
    live = Live({"http://b/metrics": 30, "http://c/metrics": 30})
    step = canary.run_step(live.fetch, ARMS, 600, 60, clock=live.clock, sleep=live.sleep, poll_s=5)
    step["traffic_percent"] = 50
    md = canary.report_markdown(
        {
            "service": "lab-ngram",
            "namespace": "ns",
            "outcome": "aborted",
            "summary": "s",
            "canary_name": "s1234",
            "speculative_config": {"method": "ngram"},
            "steps_planned": [50, 100],
            "window_s": 600,
            "min_requests": 60,
            "min_acceptance": 0.5,
            "steps": [step],
        }
    )
    assert "## Step 50% - promote-step" in md
    base = next(line for line in unpadded(md).splitlines() if line.startswith("| baseline |"))
    can = next(line for line in unpadded(md).splitlines() if line.startswith("| canary |"))
    assert base.split("|")[2].strip() == "60" and can.split("|")[-2].strip() == "0.80"
    assert "TPOT p50" in md and "95% CI" in md
    assert "Resumed" not in md


def test_the_report_of_a_resumed_canary_says_where_it_was_taken_up():
    report = {
        "service": "lab-ngram",
        "namespace": "ns",
        "outcome": "promoted",
        "summary": "s",
        "canary_name": "s1234",
        "speculative_config": {"method": "ngram"},
        "steps_planned": [25, 50, 100],
        "window_s": 60,
        "min_requests": 60,
        "min_acceptance": 0.5,
        "steps": [],
        "resumed_at": 50,
    }
    assert (
        "Resumed at 50%: this canary, left in place by a run killed mid-step, was taken up again"
        in canary.report_markdown(report)
    )


def test_quantiles_from_buckets_say_their_resolution():
    """Issue 39: the canary showed `0.96x (95% CI 0.96-0.96)` and bucket edges as p99 values. A quantile is
    known to its bucket; a ratio to the range both buckets allow; a p99 past the last bucket is a bound."""
    buckets = [[0.05, 10], [0.1, 90], [0.5, 98]]  # cumulative, 100 observations: two past 0.5 s
    assert canary.quantile_bucket(0.5, buckets, 100) == [0.05, 0.1]
    assert canary.quantile_bucket(0.99, buckets, 100) == [0.5, None]
    assert canary.quantile_bucket(0.5, buckets, 0) is None
    base = {"p50_bucket_ms": [50.0, 100.0], "p99_bucket_ms": [500.0, None]}
    can = {"p50_bucket_ms": [50.0, 100.0], "p99_bucket_ms": [100.0, 500.0]}
    assert canary.bucket_resolution(base, can) == "0.50-2.00x"
    assert canary.bucket_resolution(base, can, "p99_ms") == ">= 1.00x"
    assert canary.bucket_resolution({}, can) is None
    live = Live({"http://b/metrics": 30, "http://c/metrics": 30})
    step = canary.run_step(live.fetch, ARMS, 600, 60, clock=live.clock, sleep=live.sleep, poll_s=5)
    step["traffic_percent"] = 50
    tpot = step["arms"]["canary"]["figures"]["tpot"]
    assert tpot["p50_bucket_ms"][0] <= tpot["p50_ms"] <= tpot["p50_bucket_ms"][1]
    md = canary.report_markdown({
        "service": "s", "namespace": "ns", "outcome": "promoted", "summary": "s", "canary_name": "c",
        "speculative_config": None, "steps_planned": [50], "window_s": 60, "min_requests": 60,
        "min_acceptance": 0.5, "steps": [step]})
    assert "; the buckets allow " in md and "a quantile is known to its bucket" in md


def test_the_canarys_first_requests_warm_it_up_outside_the_window():
    """A new canary's first requests pay one-time costs (on the real engine the n-gram proposer compiles: TTFT
    p99 4.5 s over the first 20): the window starts once the canary served warmup_requests, read again from there."""
    live = Live({"http://b/metrics": 30, "http://c/metrics": 2})
    out = canary.run_step(
        live.fetch, ARMS, 600, 10, clock=live.clock, sleep=live.sleep, poll_s=5, warmup_requests=5
    )
    # before: the canary's page at 2; the warm-up reads 2, 4, then 6 requests more (at 10 s), then both arms are read
    # again: the window counts from there
    assert out["warmup"] == {"requests": 6, "seconds": 10.0, "asked": 5}
    assert out["arms"]["canary"]["requests"] == 10 and live.now == 30.0  # 20 s of 2 more per 5 s poll after it
    out["traffic_percent"] = 50
    md = canary.report_markdown({
        "service": "s", "namespace": "ns", "outcome": "promoted", "summary": "s", "canary_name": "c",
        "speculative_config": {"method": "ngram"}, "steps_planned": [50, 100], "window_s": 600, "min_requests": 10,
        "min_acceptance": 0.5, "steps": [out]})
    assert "after a warm-up of 6 canary request(s) in 10.0 s, left out of the figures" in md
    cold = canary.run_step(Live({"http://b/metrics": 30, "http://c/metrics": 2}).fetch, ARMS, 600, 10,
                           clock=live.clock, sleep=live.sleep, poll_s=5)
    assert cold["warmup"] is None
