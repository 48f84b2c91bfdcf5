"""vllm_logs on format variants we hold no real output of (synthetic samples in tests/data/vllm,
each naming the vLLM format it follows) and on robustness cases written inline."""

from __future__ import annotations

import io

import pytest
from vllm_samples import DATA, draft_weighted, printed_v0, printed_v1, spec_lines

from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import (
    LogParser,
    parse_log_file,
    parse_log_lines,
    parse_log_text,
    parse_metrics_body,
    parse_metrics_pairs,
)

APPROX = dict(abs=1e-6)
ESC = "\x1b"
L13_BODY = ("Mean acceptance length: 2.03, Accepted throughput: 22.80 tokens/s, Drafted throughput: 66.60 tokens/s, "
            "Accepted: 228 tokens, Drafted: 666 tokens, Per-position acceptance rate: 0.541, 0.333, 0.153, "
            "Avg Draft acceptance rate: 34.2%")


def spec(body, ts="06-16 20:48:20", prefix="(APIServer pid=7) ", src="[metrics.py:101]"):
    return f"{prefix}INFO {ts} {src} SpecDecoding metrics: {body}"


def engine_line(idx, ts="06-16 20:48:20", prefix="(APIServer pid=7) "):
    return (f"{prefix}INFO {ts} [loggers.py:271] Engine {idx:03d}: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 45.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
            "GPU KV cache usage: 16.9%, Prefix cache hit rate: 0.0%")


def parse(*lines, **kw):
    return parse_log_text("\n".join(lines) + "\n", **kw)


# ------------------------------------------------------------------------- synthetic formats

def test_v0_0_5_tokens_tokens_typo_and_old_header():
    path = DATA / "v0_0.5.3_tokens_typo.log"
    result = parse_log_file(path)
    lines = spec_lines(path, "Speculative metrics:")
    assert [w["line"] for w in result["windows"]] == [n for n, _ in lines]
    for w, (_, text) in zip(result["windows"], lines):
        for key, value in printed_v0(text).items():
            assert w[key] == value
    s = result["summary"]
    assert s["format"] == "v0" and s["windows"] == 2
    assert (s["accepted_tokens"], s["drafted_tokens"], s["emitted_tokens"]) == (2205, 4200, 2223)  # the last line
    assert s["draft_acceptance_rate"] == 0.525 and s["system_efficiency"] == 0.441
    assert s["mean_acceptance_length"] == pytest.approx(2223 / (4200 / 5), **APPROX)


def test_v0_0_6_3_startup_draft_model_repr():
    result = parse_log_file(DATA / "v0_0.6.3_startup_ngram.log")
    assert result["vllm_version"] == "0.6.3.post1"
    assert result["engine"] == "v0"  # "Initializing an LLM engine" with use_cached_outputs
    assert result["speculative_config"] == {
        "method": "ngram", "model": None, "num_spec_tokens": 5,
        "repr": "SpeculativeConfig(draft_model='[ngram]', num_spec_tokens=5)"}
    assert result["served_model_name"] == "facebook/opt-125m"
    assert result["ready"] is True
    assert result["summary"]["accepted_tokens"] == 205 and result["summary"]["draft_acceptance_rate"] == 0.41


def test_v0_0_8_2_deprecated_flags_and_fallback():
    result = parse_log_file(DATA / "v0_0.8.2_deprecated_flags.log")
    assert result["vllm_version"] == "0.8.2" and result["engine"] == "v0"
    # <= 0.8.2 repr of a draft model: the method is not printed (V0 derives it from the checkpoint)
    assert result["speculative_config"]["method"] is None
    assert result["speculative_config"]["model"] == "facebook/opt-125m"
    assert [(i["code"], i["line"]) for i in result["log_warnings"]] == [("DEPRECATED_SPEC_FLAGS", 3), ("V0_FALLBACK", 4)]
    assert result["log_warnings"][0]["message"].startswith(
        "Please use '--speculative-config' to set all configurations related to speculative decoding.")
    assert result["log_errors"] == []


def test_v1_0_8_3_format_and_nan_bug():
    result = parse_log_file(DATA / "v1_0.8.3_format.log")
    nan_window, w2, w3 = result["windows"]
    assert nan_window["draft_acceptance_rate"] is None  # "nan%" -> null
    assert (nan_window["accepted_tokens"], nan_window["drafted_tokens"]) == (0, 0)
    assert w2["draft_acceptance_rate"] == pytest.approx(0.625) and w2["mean_acceptance_length"] is None
    assert w2["per_position_acceptance"] is None
    s = result["summary"]
    assert (s["windows"], s["accepted_tokens"], s["drafted_tokens"]) == (3, 520, 1000)
    assert s["draft_acceptance_rate"] == pytest.approx(0.52) and s["mean_acceptance_length"] is None
    assert result["vllm_version"] == "0.8.3" and result["engine"] == "v1"


def test_v1_0_8_5_mean_length_without_bonus_token():
    path = DATA / "v1_0.8.5_eagle.log"
    result = parse_log_file(path)
    printed = [printed_v1(t) for _, t in spec_lines(path, "SpecDecoding metrics:")]
    assert [w["mean_acceptance_length"] for w in result["windows"]] == [1.80, 1.20]  # as printed
    expected = draft_weighted(printed)
    s = result["summary"]
    assert s["mean_acceptance_length"] == pytest.approx(expected["mean_acceptance_length"] + 1, **APPROX)
    assert any("0.8.5" in note for note in s["notes"])
    assert s["draft_acceptance_rate"] == pytest.approx(960 / 1800, **APPROX)
    assert result["speculative_config"]["method"] == "eagle"
    assert result["speculative_config"]["model"] == "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"


def test_v1_0_10_2_ansi_wrapped_prefix():
    path = DATA / "v1_0.10.2_ansi_prefix.log"
    assert ESC.encode() in path.read_bytes()
    result = parse_log_file(path)
    assert result["vllm_version"] == "0.10.2" and result["ready"] is True
    assert result["speculative_config"]["num_spec_tokens"] == 4
    w1, w2 = result["windows"]
    assert w1["process"] == "APIServer" and w1["engine"] == 0
    assert w1["per_position_acceptance"] == [0.700, 0.450, 0.250, 0.100]
    assert w1["draft_acceptance_rate"] == pytest.approx(0.375)
    assert w2["mean_acceptance_length"] == 3.00
    s = result["summary"]
    assert s["draft_acceptance_rate"] == pytest.approx(1400 / 3200, **APPROX)
    assert s["per_position_acceptance"] == pytest.approx([0.75, 0.525, 0.325, 0.15], **APPROX)


def test_v1_data_parallel_windows_per_engine_and_summary_over_all():
    result = parse_log_file(DATA / "v1_0.11_data_parallel.log")
    assert [w["engine"] for w in result["windows"]] == [0, 1, 0]
    assert result["engines"] == [0, 1]
    assert result["data_parallel_size"] == 2
    by = result["summary_by_engine"]
    assert by["0"]["accepted_tokens"] == 760 and by["0"]["drafted_tokens"] == 1000
    assert by["0"]["mean_acceptance_length"] == pytest.approx((2.6 * 600 + 2.4 * 400) / 1000, **APPROX)
    assert by["1"]["draft_acceptance_rate"] == pytest.approx(0.25)
    s = result["summary"]
    assert (s["accepted_tokens"], s["drafted_tokens"]) == (860, 1400)
    assert s["mean_acceptance_length"] == pytest.approx((2.6 * 600 + 1.5 * 400 + 2.4 * 400) / 1400, **APPROX)
    assert s["per_position_acceptance"] == pytest.approx(
        [(0.9 * 600 + 0.4 * 400 + 0.8 * 400) / 1400, (0.7 * 600 + 0.1 * 400 + 0.6 * 400) / 1400], **APPROX)


def test_engine_index_from_data_parallel_prefix():
    result = parse(
        engine_line(0, prefix="(EngineCore_DP1 pid=9) "),  # the prefix wins over the Engine line
        spec(L13_BODY, prefix="(EngineCore_DP1 pid=9) "),
        spec(L13_BODY, prefix="(EngineCore_DP0 pid=8) "),
    )
    assert [w["engine"] for w in result["windows"]] == [1, 0]
    assert result["engines"] == [0, 1]
    assert result["summary"]["drafted_tokens"] == 2 * 666


def test_engine_line_of_another_process_is_not_used():
    result = parse(engine_line(3, prefix="(APIServer_1 pid=2) "), spec(L13_BODY, prefix="(APIServer_0 pid=1) "),
                   engine_line(2, prefix="(APIServer_0 pid=1) "), engine_line(5, prefix="(APIServer_1 pid=2) "),
                   spec(L13_BODY, prefix="(APIServer_0 pid=1) "))
    assert [w["engine"] for w in result["windows"]] == [None, 2]


@pytest.mark.parametrize("name,errors,warnings", [
    ("v1_0.16_unknown_key.log", [("UNKNOWN_SPEC_KEY", 13)], []),
    ("v1_0.16_unsupported_method.log", [("UNSUPPORTED_METHOD", 5), ("UNKNOWN_SPEC_KEY", 8)], []),
    ("v1_0.13_suffix_missing_package.log",
     [("ENGINE_START_FAILED", 6), ("MISSING_PACKAGE", 10), ("ENGINE_START_FAILED", 12)],
     [("SUFFIX_DEFAULT_TOKENS", 4), ("ASYNC_SCHEDULING_DISABLED", 5)]),
    ("v1_0.12_draft_model_unsupported.log", [("DRAFT_MODEL_UNSUPPORTED", 6)], []),
    ("v1_0.13_cuda_oom.log", [("ENGINE_START_FAILED", 4), ("CUDA_OOM", 5)], []),
    ("v1_0.11_mtp_warnings.log", [],
     [("DEPRECATED_METHOD", 3), ("MTP_MULTI_STEP", 4), ("ASYNC_SCHEDULING_DISABLED", 5), ("SAMPLING_PARAM_IGNORED", 7)]),
])
def test_start_errors_and_warnings(name, errors, warnings):
    result = parse_log_file(DATA / name)
    assert [(i["code"], i["line"]) for i in result["log_errors"]] == errors
    assert [(i["code"], i["line"]) for i in result["log_warnings"]] == warnings
    for issue in result["log_errors"] + result["log_warnings"]:
        assert set(issue) >= {"code", "message", "line", "text", "count"}
        assert issue["message"] and issue["text"]


def test_error_details():
    unknown = parse_log_file(DATA / "v1_0.16_unknown_key.log")["log_errors"][0]
    assert unknown["key"] == "prompt_lookup_maxx"
    assert "Extra inputs are not permitted" in unknown["message"]
    assert unknown["text"].startswith("(APIServer pid=12) pydantic_core._pydantic_core.ValidationError")
    method, tp = parse_log_file(DATA / "v1_0.16_unsupported_method.log")["log_errors"]
    assert method["key"] == "method" and "input_value='pard'" in method["message"]
    assert tp["key"] == "tensor_parallel_size"
    missing = parse_log_file(DATA / "v1_0.13_suffix_missing_package.log")["log_errors"][1]
    assert missing["package"] == "arctic_inference"
    assert missing["message"] == "ModuleNotFoundError: No module named 'arctic_inference'"
    draft = parse_log_file(DATA / "v1_0.12_draft_model_unsupported.log")["log_errors"][0]
    assert draft["message"].startswith(
        "NotImplementedError: Speculative decoding with draft model is not supported yet.")


def test_more_start_errors_inline():
    result = parse(
        "TypeError: SpeculativeConfig.__init__() got an unexpected keyword argument 'speculative_draft_tensor_parallel_size'",
        "ValueError: num_speculative_tokens was provided but without speculative model.",
        "(APIServer pid=3) NotImplementedError: Unsupported speculative method: 'pard'",
        "ImportError: Arctic Inference is required for suffix decoding. Install via `pip install arctic-inference==0.1.1`.",
        "api_server.py: error: unrecognized arguments: --speculative-model [ngram]",
        "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored",
        "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:00 [core.py:700] RuntimeError: CUDA error: out of memory",
        "ValueError: Currently, speculative decoding is not supported with async scheduling.",
    )
    got = [(i["code"], i["line"]) for i in result["log_errors"]]
    assert got == [("UNKNOWN_SPEC_KEY", 1), ("CONFIG_VALIDATION_ERROR", 2), ("UNSUPPORTED_METHOD", 3),
                   ("MISSING_PACKAGE", 4), ("CLI_ARGUMENT_ERROR", 5), ("EXCEPTION", 6), ("CUDA_OOM", 7),
                   ("ASYNC_SCHEDULING_CONFLICT", 8)]
    errors = result["log_errors"]
    assert errors[0]["key"] == "speculative_draft_tensor_parallel_size"
    assert errors[3]["package"] == "arctic-inference"
    assert errors[5]["exception"] == "ValueError"


def test_more_warnings_inline_exact_texts():
    texts = {
        "ASYNC_SCHEDULING_DISABLED": "Async scheduling is disabled because the V1 model runner does not support it with ngram-based speculative decoding.",
        "SAMPLING_PARAM_IGNORED": "min_p, logit_bias, and min_tokens parameters won't currently work with speculative decoding enabled.",
        "MTP_MULTI_STEP": "All Deepseek MTP models only have one layer. Might need some code changes to support multiple layers.",
        "DEPRECATED_METHOD": "method `ernie_mtp` is deprecated and replaced with mtp.",
        "ASYNC_OUTPUT_DISABLED": "Async output processing is not supported with speculative decoding currently.",
        "DRAFT_TP_FORCED": "MLPSpeculator cannot currently be run with tp>1; setting speculative_draft_tensor_parallel_size=1",
    }
    lines = [f"WARNING 01-02 03:04:05 [config.py:{n}] {t}" for n, t in enumerate(texts.values(), 1)]
    result = parse(*lines)
    assert [(i["code"], i["message"]) for i in result["log_warnings"]] == list(texts.items())
    assert result["log_levels"]["WARNING"] == len(texts)


def test_spec_decoding_off_after_rollback():
    result = parse_log_file(DATA / "v1_0.32_spec_off.log")
    assert result["speculative_config"] is None
    assert result["speculative_config_found"] is True
    assert result["requested_speculative_config"] is None
    assert result["ready"] is True and result["windows"] == [] and result["summary"]["windows"] == 0
    assert result["summary"]["draft_acceptance_rate"] is None


def test_no_engine_init_line_means_unknown():
    result = parse(spec(L13_BODY))
    assert result["speculative_config"] is None and result["speculative_config_found"] is False


# ------------------------------------------------------------------------- robustness

def test_ansi_everywhere_and_colored_level():
    line = f"{ESC}[1;36m(APIServer pid=7){ESC}[0;0m {ESC}[32mINFO{ESC}[0m 06-16 20:48:20 [metrics.py:101] SpecDecoding metrics: {L13_BODY}"
    [w] = parse(line)["windows"]
    assert w["accepted_tokens"] == 228 and w["process"] == "APIServer"


@pytest.mark.parametrize("prefix", ["", "(APIServer pid=1) ", "(EngineCore_DP0 pid=2) ", "(VllmWorker rank=0 pid=3) ",
                                    "(Worker_TP1 pid=4) "])
def test_process_prefixes(prefix):
    result = parse(spec(L13_BODY, prefix=prefix))
    [w] = result["windows"]
    assert w["accepted_tokens"] == 228
    assert w["process"] == (prefix[1:].split(" pid=")[0] if prefix else None)


@pytest.mark.parametrize("src", ["[metrics.py:101]", "metrics.py:101]", "[v1/spec_decode/metrics.py:101]"])
def test_file_info_forms(src):
    [w] = parse(spec(L13_BODY, src=src))["windows"]
    assert w["drafted_tokens"] == 666


def test_timestamp_with_milliseconds():
    [w] = parse(spec(L13_BODY, ts="06-16 20:48:20.123"))["windows"]
    assert w["timestamp"] == "06-16 20:48:20.123"


def test_collapsed_records_on_one_physical_line():
    collapsed = (engine_line(1) + spec(L13_BODY) + "(APIServer pid=7) WARNING 06-16 20:48:21 [__init__.py:204] "
                 "min_p and logit_bias parameters won't work with speculative decoding.")
    access_then_spec = 'INFO:     127.0.0.1:1 - "GET /metrics HTTP/1.1" 200 OK' + spec(L13_BODY, prefix="")
    result = parse(collapsed, access_then_spec)
    w1, w2 = result["windows"]
    assert (w1["line"], w1["engine"], w1["accepted_tokens"]) == (1, 1, 228)
    assert w1["per_position_acceptance"] == [0.541, 0.333, 0.153]  # not swallowed by the next record
    assert w1["draft_acceptance_rate"] == pytest.approx(0.342)
    assert (w2["line"], w2["drafted_tokens"]) == (2, 666)
    assert [(i["code"], i["line"]) for i in result["log_warnings"]] == [("SAMPLING_PARAM_IGNORED", 1)]


def test_uvicorn_access_lines_blank_lines_and_crlf():
    text = ("\r\n".join([
        'INFO:     127.0.0.1:39576 - "GET /version HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:39576 - "GET /ValueError:%20x HTTP/1.1" 404 Not Found',
        "",
        "   ",
        spec(L13_BODY),
        "INFO:     Application startup complete.",
    ]) + "\r\n")
    result = parse_log_text(text)
    assert result["vllm_version"] is None
    assert result["log_errors"] == [] and result["log_warnings"] == []
    assert [w["line"] for w in result["windows"]] == [5]
    assert result["ready"] is True and result["lines"] == 6


def test_carriage_return_inside_a_line_is_not_a_line_break():
    text = "\rLoading safetensors checkpoint shards:   0% Completed\n" + spec(L13_BODY) + "\n"
    assert [w["line"] for w in parse_log_text(text)["windows"]] == [2]


def test_nan_values_become_null_and_carry_no_weight():
    nan_line = spec("Draft acceptance rate: nan%, Mean acceptance length: nan, Accepted: 0 tokens, Drafted: 0 tokens, "
                    "Per-position acceptance rate: nan, nan, nan")
    result = parse(nan_line, spec(L13_BODY))
    w0, w1 = result["windows"]
    assert w0["draft_acceptance_rate"] is None and w0["mean_acceptance_length"] is None
    assert w0["per_position_acceptance"] == [None, None, None]
    assert result["summary"]["mean_acceptance_length"] == pytest.approx(2.03, **APPROX)
    assert result["summary"]["per_position_acceptance"] == pytest.approx([0.541, 0.333, 0.153], **APPROX)


def test_unknown_keys_and_other_orders_are_read_by_key():
    fork = ("Mean acceptance length: 6.82, Current speculative depth: 7, Accepted throughput: 10.00 tokens/s, "
            "Drafted throughput: 12.00 tokens/s, Accepted: 100 tokens, Drafted: 120 tokens, "
            "Per-position acceptance rate: 0.900, 0.800, Avg Draft acceptance rate: 83.3%")
    pre_merge = ("Draft acceptance rate: 88.8%, Mean acceptance length: 3.66, Accepted throughput: 1.00 tokens/s, "
                 "Drafted throughput: 2.00 tokens/s, Accepted: 8 tokens, Drafted: 9 tokens, "
                 "Per-position acceptance rate: 1.000, 0.889, 0.778")
    reordered = ("Drafted: 40 tokens, Accepted: 10 tokens, Per-position acceptance rate: 0.500, 0.250, "
                 "Foo Bar: baz, Mean acceptance length: 1.75")
    w1, w2, w3 = parse(spec(fork), spec(pre_merge), spec(reordered))["windows"]
    assert w1["extra"] == {"Current speculative depth": "7"}
    assert (w1["mean_acceptance_length"], w1["accepted_tokens"], w1["drafted_tokens"]) == (6.82, 100, 120)
    assert w1["per_position_acceptance"] == [0.9, 0.8] and w1["draft_acceptance_rate"] == pytest.approx(0.833)
    assert w2["draft_acceptance_rate"] == pytest.approx(0.888) and w2["per_position_acceptance"] == [1.0, 0.889, 0.778]
    assert (w3["accepted_tokens"], w3["drafted_tokens"], w3["mean_acceptance_length"]) == (10, 40, 1.75)
    assert w3["per_position_acceptance"] == [0.5, 0.25] and w3["extra"] == {"Foo Bar": "baz"}
    assert w3["draft_acceptance_rate"] is None and w3["accepted_throughput"] is None


def test_pre_0_8_3_speculative_metrics_variant():
    line = "INFO 04-02 10:00:00 [metrics.py:40] Speculative metrics: Draft acceptance rate: 1.000, Number of accepted tokens: 66, Number of draft tokens: 66, "
    [w] = parse(line)["windows"]
    assert (w["format"], w["draft_acceptance_rate"], w["accepted_tokens"], w["drafted_tokens"]) == ("v0", 1.0, 66, 66)
    assert w["system_efficiency"] is None and w["emitted_tokens"] is None


def test_fast_path_equals_key_value_reading():
    for body in [L13_BODY, L13_BODY.replace("34.2%", "100.0%"),
                 "Mean acceptance length: 4.00, Accepted throughput: 66.30 tokens/s, Drafted throughput: 66.30 tokens/s, "
                 "Accepted: 663 tokens, Drafted: 663 tokens, Per-position acceptance rate: 1.000, Avg Draft acceptance rate: 100.0%"]:
        assert parse_metrics_body(body) == parse_metrics_pairs(body)
        assert parse(spec(body))["windows"] == parse(spec(body) + " ")["windows"]  # trailing space: generic path


def test_mixed_v0_and_v1_windows_summarise_v1():
    v0 = "INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598, Number of speculative tokens: 3, Number of accepted tokens: 8547, Number of draft tokens: 13311, Number of emitted tokens: 10616."
    result = parse(v0, spec(L13_BODY))
    assert [w["format"] for w in result["windows"]] == ["v0", "v1"]
    assert result["summary"]["format"] == "v1" and result["summary"]["accepted_tokens"] == 228
    assert any("V0" in n for n in result["summary"]["notes"])


# ------------------------------------------------------------------------- since / limits

def test_since_marker_last_occurrence_and_scope():
    lines = [
        "INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.20.0) with config: model='m', speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3), tokenizer='m'",
        "WARNING 01-01 00:00:01 [__init__.py:204] min_p and logit_bias parameters won't work with speculative decoding.",
        spec(L13_BODY),
        "--- smoke marker ---",
        spec(L13_BODY.replace("Accepted: 228", "Accepted: 1")),
        "--- smoke marker ---",
        spec(L13_BODY.replace("Accepted: 228", "Accepted: 2")),
        spec(L13_BODY.replace("Accepted: 228", "Accepted: 3")),
    ]
    result = parse(*lines, since="smoke marker")
    assert result["since_found"] is True and result["since_line"] == 6
    assert [w["accepted_tokens"] for w in result["windows"]] == [2, 3]
    assert result["summary"]["accepted_tokens"] == 5 and result["summary"]["windows"] == 2
    assert result["log_warnings"] == []  # before the marker
    assert result["speculative_config"]["method"] == "ngram"  # startup facts: whole log
    missing = parse(*lines, since="never printed")
    assert missing["since_found"] is False and missing["windows_total"] == 4
    assert len(missing["log_warnings"]) == 1


def test_max_windows_keeps_the_latest_and_summary_covers_all():
    lines = [spec(L13_BODY.replace("Accepted: 228", f"Accepted: {i}")) for i in range(1, 11)]
    result = parse(*lines, max_windows=3)
    assert [w["accepted_tokens"] for w in result["windows"]] == [8, 9, 10]
    assert result["windows_total"] == 10 and result["windows_dropped"] == 7
    assert result["summary"]["accepted_tokens"] == sum(range(1, 11))
    assert len(parse(*lines, max_windows=0)["windows"]) == 10


def test_max_issues_and_repeats_counted():
    lines = [f"ValueError: distinct failure {i}" for i in range(5)] + ["ValueError: distinct failure 0"] * 3
    result = parse(*lines, max_issues=3)
    assert [i["message"] for i in result["log_errors"]] == [f"ValueError: distinct failure {i}" for i in range(3)]
    assert result["log_errors"][0]["count"] == 4
    assert result["issues_dropped"] == 2


@pytest.mark.parametrize("chunk", [7, 64, 333, 4096])
@pytest.mark.parametrize("name", ["v1_0.11_data_parallel.log", "v1_0.16_unknown_key.log",
                                  "v1_0.10.2_ansi_prefix.log", "v1_0.13_suffix_missing_package.log"])
def test_chunk_boundaries_do_not_change_results(name, chunk):
    data = (DATA / name).read_bytes()
    expected = parse_log_lines(io.BytesIO(data))
    got = LogParser().feed_stream(io.BytesIO(data), chunk_size=chunk).result()
    assert got == expected


def test_str_and_bytes_lines_accepted():
    lines = [engine_line(0), spec(L13_BODY)]
    assert parse_log_lines(lines)["windows"] == parse_log_lines([x.encode() for x in lines])["windows"]


def test_debug_level_spec_line_is_a_window():
    """V1 logs the metrics with logger.debug when the engine is idle."""
    line = spec(L13_BODY).replace(" INFO ", " DEBUG ")
    [w] = parse(line)["windows"]
    assert (w["accepted_tokens"], w["drafted_tokens"]) == (228, 666)


def test_since_as_timestamp_prefix():
    lines = [engine_line(0, ts="06-16 20:48:10"), spec(L13_BODY, ts="06-16 20:48:10"),
             engine_line(0, ts="06-16 20:48:20"), spec(L13_BODY.replace("Accepted: 228", "Accepted: 7"),
                                                       ts="06-16 20:48:20")]
    result = parse(*lines, since="06-16 20:48:10")
    assert result["since_line"] == 2 and [w["accepted_tokens"] for w in result["windows"]] == [7]
    assert result["windows"][0]["engine"] == 0  # its Engine line is after the marker too
