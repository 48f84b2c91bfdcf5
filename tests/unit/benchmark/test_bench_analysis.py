"""The benchmark analysis and verdict (module_utils/benchmark/bench_analysis.py), on constructed results."""

from __future__ import annotations

import random

import numpy
import pytest
from bench_helpers import ACCEPT, metrics_page, requests_for, run

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_analysis as ba

# ------------------------------------------------------------------ statistics


def test_percentiles_match_numpy_linear_interpolation():
    rng = random.Random(3)
    for n in (1, 2, 5, 10, 101):
        data = [rng.uniform(0, 100) for _ in range(n)]
        for q in (0, 10, 50, 90, 99, 100):
            assert ba.percentile(data, q) == pytest.approx(float(numpy.percentile(data, q)))
    assert ba.percentile([], 50) is None
    assert ba.percentile([None, 3.0], 50) == 3.0


def test_stats_and_summary_of_requests():
    reqs = requests_for(ttft_ms=40, tpot_ms=10, n=20, tokens=101, failed=2)
    s = ba.summarise_requests(reqs, duration_s=4.0)
    assert (s["requests"], s["ok"], s["failed"]) == (20, 18, 2)
    assert s["error_rate"] == pytest.approx(0.1)
    assert s["errors"] == [{"error": "timeout", "count": 2}]
    m = s["metrics"]
    assert m["ttft_ms"]["p50"] == pytest.approx(40)
    assert m["tpot_ms"]["p50"] == pytest.approx(10)
    assert m["output_tokens"]["p50"] == 101
    assert m["itl_ms"]["count"] == 18 * 100
    # per-request tok/s = tokens / e2e
    assert m["request_tok_s"]["p50"] == pytest.approx(101 / (0.040 + 0.010 * 100))
    assert s["output_tokens_total"] == 18 * 101
    assert s["output_throughput"] == pytest.approx(18 * 101 / 4.0)
    assert s["request_throughput"] == pytest.approx(18 / 4.0)
    # per-prompt medians, prompts in first-seen order
    assert [p["prompt_id"] for p in s["per_prompt"]] == ["p0", "p1", "p2", "p3"]
    assert s["per_prompt"][1]["runs"] == 5
    assert s["gaps"]["tpot_ms"]["p50"] == pytest.approx(10)
    assert s["token_sources"] == {"usage": 18}


# ------------------------------------------------------------------ the verdict
# (the decision rules themselves: tests/unit/benchmark/test_bench_verdict.py)


def levels_low_good_high_bad():
    """Speculative decoding helps at 1 QPS and hurts at 16 QPS (the seed's failure mode)."""
    return [
        run("baseline", 1, ttft_ms=52, tpot_ms=20, jitter=0.05),
        run("speculative", 1, ttft_ms=48, tpot_ms=11, jitter=0.05, acceptance=ACCEPT),
        run("baseline", 16, ttft_ms=200, tpot_ms=22, jitter=0.05),
        run("speculative", 16, ttft_ms=420, tpot_ms=31, jitter=0.05, acceptance=ACCEPT),
    ]


def test_improves_at_low_qps_regresses_at_high_qps_rollback_at_high_target():
    res = ba.analyse(levels_low_good_high_bad(), target={"qps": 16})
    assert res["decision"] == "rollback" and res["verdict"]["decision"] == "rollback"
    assert res["per_level"] == {"qps=1": "keep", "qps=16": "rollback"}
    assert res["target"]["level"]["key"] == "qps=16" == res["verdict"]["level"]["key"]
    text = " ".join(res["reasons"])
    assert "at qps=16" in text and "TPOT is worse than baseline beyond the noise" in text
    assert "TTFT +110%, beyond the 10% allowance" in text
    assert "rollback" in res["action"]
    assert any("helps at qps=1 and hurts at qps=16" in n for n in res["notes"])


def test_improves_at_low_qps_keep_at_low_target():
    res = ba.analyse(levels_low_good_high_bad(), target={"qps": 1})
    assert res["decision"] == "keep"
    assert res["target"]["level"]["key"] == "qps=1"
    assert res["reasons"][0].startswith("at qps=1: TPOT 1.82x faster (95% CI")
    low = res["levels"][0]
    assert low["valid"] is True and low["invalid_reasons"] == []
    assert low["comparison"]["speedups"]["tpot"] == pytest.approx(20 / 11, rel=0.02)
    assert low["comparison"]["speedups"]["ttft"] == pytest.approx(52 / 48, rel=0.02)
    assert low["ratios"]["tpot"]["value"] == pytest.approx(20 / 11, rel=0.02)
    lo, hi = low["ratios"]["tpot"]["ci95"]
    assert 1.0 < lo <= 20 / 11 <= hi


def test_no_target_uses_the_highest_level_and_says_so():
    res = ba.analyse(levels_low_good_high_bad())
    assert res["decision"] == "rollback"
    assert any("no target level given" in n for n in res["notes"])


def test_unmeasured_target_uses_the_next_level_above():
    res = ba.analyse(levels_low_good_high_bad(), target={"qps": 4})
    assert res["target"]["level"]["key"] == "qps=16"
    assert any("target qps=4 was not measured; the verdict uses qps=16" in n for n in res["notes"])
    res = ba.analyse(levels_low_good_high_bad(), target={"qps": 0.5})
    assert res["target"]["level"]["key"] == "qps=1" and res["decision"] == "keep"
    res = ba.analyse(levels_low_good_high_bad(), target={"qps": 100})
    assert res["target"]["level"]["key"] == "qps=16"


def test_strict_policy_needs_all_three_ttft_tie_is_not_an_improvement():
    runs = [
        run("baseline", 2, ttft_ms=50, tpot_ms=20),
        run("speculative", 2, ttft_ms=50, tpot_ms=10, acceptance=ACCEPT),
    ]
    # the SLO policy (bound by TPOT): an unchanged TTFT is fine
    assert ba.analyse(runs, target={"qps": 2})["decision"] == "keep"
    res = ba.analyse(runs, target={"qps": 2}, policy={"policy": "strict"})
    assert res["decision"] == "rollback"
    assert any("TTFT 1.00x" in r and "does not improve" in r for r in res["reasons"])
    # a tolerance makes TTFT noise acceptable
    res = ba.analyse(
        runs, target={"qps": 2}, thresholds={"ttft_min_gain": -0.05}, policy={"policy": "strict"}
    )
    assert res["decision"] == "keep"


def test_min_gain_thresholds_are_applied():
    runs = [
        run("baseline", 2, ttft_ms=50, tpot_ms=20),
        run("speculative", 2, ttft_ms=45, tpot_ms=18, acceptance=ACCEPT),
    ]
    assert ba.analyse(runs, target={"qps": 2})["decision"] == "keep"  # 1.11x
    res = ba.analyse(
        runs,
        target={"qps": 2},
        thresholds={"tpot_min_gain": 0.2, "throughput_min_gain": 0.2},
        policy={"policy": "strict"},
    )
    assert res["decision"] == "rollback"
    assert any("TPOT 1.11x" in r and "needs > 1.20x" in r for r in res["reasons"])
    # the SLO policy's own min_gain (specpilot_benchmark.min_speedup - 1) on the bound figure
    res = ba.analyse(runs, target={"qps": 2}, policy={"min_gain": 0.2})
    assert res["decision"] == "rollback"
    assert any("TPOT 1.11x is below the required 1.20x" in r for r in res["reasons"])


def test_speculative_failures_mean_rollback_and_empty_side_is_invalid():
    runs = [
        run("baseline", 2, ttft_ms=50, tpot_ms=20),
        run("speculative", 2, ttft_ms=40, tpot_ms=10, failed=3, acceptance=ACCEPT),
    ]
    res = ba.analyse(runs, target={"qps": 2})
    assert res["decision"] == "rollback"
    assert any("speculative side failed 3 of 20 requests" in r for r in res["reasons"])
    assert ba.analyse(runs, target={"qps": 2}, thresholds={"max_error_rate": 0.2})["decision"] == "keep"

    runs = [run("baseline", 2, ttft_ms=50, tpot_ms=20)]
    res = ba.analyse(runs, target={"qps": 2})
    assert res["decision"] == "invalid"
    assert "speculative: no successful requests" in res["reasons"][0]
    assert "re-run" in res["action"] and "Nothing is rolled back" in res["action"]
    assert ba.analyse([])["decision"] == "inconclusive"


def test_headroom_converted_like_the_seed_example():
    """1.84x realised against a 2.54x ceiling is about 72% of the headroom converted."""
    base = run("baseline", 1, ttft_ms=50, tpot_ms=20.9, tokens=1000)
    spec = run("speculative", 1, ttft_ms=49, tpot_ms=20.9 / 1.84, tokens=1000, acceptance=ACCEPT)
    res = ba.analyse([base, spec], target={"qps": 1})
    hr = res["levels"][0]["comparison"]["headroom"]
    assert hr["ceiling"] == 2.54
    assert hr["realised"] == pytest.approx(1.84, rel=0.01)
    assert hr["converted"] == pytest.approx(0.72, abs=0.01)
    assert hr["acceptance_band"].startswith("0.5-0.65")


def test_system_throughput_metric_and_statistic_options_are_descriptive():
    runs = [
        run("baseline", 2, ttft_ms=50, tpot_ms=20, duration_s=10),
        run("speculative", 2, ttft_ms=40, tpot_ms=10, duration_s=10, acceptance=ACCEPT),
    ]
    # same tokens in the same wall time: system throughput is flat; the comparison shows it
    res = ba.analyse(runs, target={"qps": 2}, thresholds={"throughput_metric": "system"})
    check = res["levels"][0]["comparison"]["checks"][2]
    assert check["label"] == "throughput (system tok/s)" and check["improved"] is False
    assert res["decision"] == "keep"  # the decision is the SLO policy's, on per-request samples
    res = ba.analyse(runs, target={"qps": 2}, thresholds={"statistic": "p99"})
    assert res["levels"][0]["comparison"]["statistic"] == "p99"
    with pytest.raises(ValueError):
        ba.analyse(runs, thresholds={"statistic": "p42"})
    with pytest.raises(ValueError):
        ba.analyse(runs, thresholds={"ttft_gain": 0.1})
    with pytest.raises(ValueError):
        ba.analyse(runs, policy={"bound_by": "speed"})
    with pytest.raises(ValueError):
        ba.analyse([dict(runs[0], side="spec")])


def test_p99_guard_and_gap_widening_signal():
    base = run("baseline", 4, ttft_ms=50, tpot_ms=20, n=100, jitter=0.02)
    # p50 better, but the slowest 10% are 3x slower: the mixed-workload signal
    spec = run(
        "speculative", 4, ttft_ms=45, tpot_ms=12, n=100, jitter=0.02, tail=(0.1, 3.0), acceptance=ACCEPT
    )
    res = ba.analyse([base, spec], target={"qps": 4})
    assert res["decision"] == "keep"
    gaps = res["levels"][0]["comparison"]["gaps"]
    assert gaps["tpot_ms"]["widened"] is True
    assert any("P50-P99 gap widens" in n and n.startswith("at qps=4: TPOT") for n in res["notes"])
    res = ba.analyse([base, spec], target={"qps": 4}, thresholds={"p99_max_regression": 0.1})
    assert res["decision"] == "rollback"
    assert any("TPOT p99 regressed" in r for r in res["reasons"])
    # an absolute p99 limit of the SLO
    res = ba.analyse([base, spec], target={"qps": 4}, policy={"p99_ms": {"tpot": 30}})
    assert res["decision"] == "rollback"
    assert any("TPOT p99" in r and "30 ms limit: broken beyond the noise" in r for r in res["reasons"])


def test_per_position_collapse_and_missing_spec_metrics():
    acc = dict(
        ACCEPT,
        per_position_acceptance=[0.16, 0.02, 0.01],
        mean_acceptance_length=1.19,
        draft_acceptance_rate=0.06,
    )
    runs = [
        run("baseline", 1, ttft_ms=50, tpot_ms=20),
        run("speculative", 1, ttft_ms=51, tpot_ms=20.2, acceptance=acc),
    ]
    res = ba.analyse(runs, target={"qps": 1})
    assert res["decision"] == "rollback"
    assert any("collapses by position 2" in n for n in res["notes"])
    hr = res["levels"][0]["comparison"]["headroom"]
    assert hr["acceptance_band"].startswith("below 0.5")
    assert res["recommendation"]["num_speculative_tokens"] == 1
    runs[1]["acceptance"] = {"spec_decode_enabled": False}
    res = ba.analyse(runs, target={"qps": 1})
    assert res["decision"] == "invalid"
    assert any("did not speculate" in r for r in res["reasons"])
    assert any("no vllm:spec_decode_* metrics" in n for n in res["notes"])


def test_concurrency_levels_and_per_prompt_speedups():
    runs = [
        run("baseline", None, 50, 20, concurrency=4),
        run("speculative", None, 45, 10, concurrency=4, acceptance=ACCEPT),
        run("baseline", None, 60, 22, concurrency=1),
        run("speculative", None, 55, 11, concurrency=1, acceptance=ACCEPT),
    ]
    res = ba.analyse(runs, target={"concurrency": 4})
    assert [lv["level"]["key"] for lv in res["levels"]] == ["qps=inf,c=1", "qps=inf,c=4"]
    assert res["target"]["level"]["key"] == "qps=inf,c=4" and res["decision"] == "keep"
    pp = res["levels"][1]["comparison"]["per_prompt"]
    assert [p["prompt_id"] for p in pp] == ["p0", "p1", "p2", "p3"]
    assert pp[0]["tpot_speedup"] == pytest.approx(2.0)


# ------------------------------------------------------------------ acceptance from /metrics


def test_acceptance_from_two_scrapes_is_the_delta():
    before = metrics_page(10, 30, 20, [9, 7, 4], ttft=(1.0, 10))
    after = metrics_page(110, 330, 240, [89, 87, 64], ttft=(3.0, 30))
    acc = ba.acceptance_from_scrapes(before, after, model_name="tiny")
    assert acc["spec_decode_enabled"] is True
    assert (acc["num_drafts"], acc["num_draft_tokens"], acc["num_accepted_tokens"]) == (100, 300, 220)
    assert acc["draft_acceptance_rate"] == pytest.approx(220 / 300)
    assert acc["mean_acceptance_length"] == pytest.approx(1 + 220 / 100)
    assert acc["per_position_acceptance"] == pytest.approx([0.8, 0.8, 0.6])
    assert acc["server_latency_means"]["ttft_ms"] == pytest.approx(100.0)
    assert ba.acceptance_from_scrapes(None, after) is None


def test_the_acceptance_the_benchmark_records_is_the_production_temperatures_else_the_target_levels():
    """issue 38: what the benchmark records (the smoke role's entry point record, source benchmark) and recommends k
    from - the sweep's run at the production temperature, else the speculative side at the target level - with its
    temperature and where it was read."""
    at_target = ba.analyse(levels_low_good_high_bad(), target={"qps": 1})["measured_acceptance"]
    assert at_target == {
        "acceptance_rate": ACCEPT["draft_acceptance_rate"], "mean_acceptance_length": 2.54,
        "per_position_acceptance": [0.80, 0.50, 0.24], "num_drafts": 100, "num_draft_tokens": 300,
        "temperature": 0, "where": "the target level qps=1",
    }
    warm = dict(ACCEPT, per_position_acceptance=[0.6, 0.3, 0.1], draft_acceptance_rate=1 / 3)
    sweep = {"runs": [dict(run("speculative", 1, 48, 11, acceptance=warm), tag={"sweep": "temperature", "temperature": 0.7})]}
    res = ba.analyse(levels_low_good_high_bad(), target={"qps": 1}, sweep=sweep, production_temperature=0.7)
    assert res["measured_acceptance"]["per_position_acceptance"] == [0.6, 0.3, 0.1]
    assert res["measured_acceptance"]["temperature"] == 0.7
    assert res["measured_acceptance"]["where"] == "the sweep at the production temperature 0.7"
    assert res["recommendation"]["reason"].endswith("(curve: the sweep at the production temperature 0.7)")
    # no acceptance on the speculative side: nothing to record
    assert ba.measured_acceptance([], 0.7, {"qps=1": {"acceptance": None, "temperature": 0}}, {"key": "qps=1"}) is None
