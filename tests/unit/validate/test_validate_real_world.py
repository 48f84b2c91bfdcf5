"""Held-out real-world cases (issue 38): each file under tests/data/specs/real_world is a config from a
public vLLM issue or pull request, with its URL (expect.source) and what vLLM did with it
(expect.vllm_did) beside it. The validator must name the fields vLLM failed on, and only those, with
the rule's code; where vLLM accepted the config, it must pass (warnings are listed too)."""

from __future__ import annotations

import pytest

from validate_helpers import SPECS, load_spec_file, paths, run_playbook, validate_file

CASES = sorted((SPECS / "real_world").glob("*.yml"))


def test_every_rule_of_issue_38_has_a_real_world_case():
    codes = set()
    for path in CASES:
        _spec, expect = load_spec_file(path)
        codes.update(expect.get("codes") or [])
    assert {
        "draft-tp",
        "draft-tp-ignored",
        "synthetic-in-service",
        "heterogeneous-vocab-sampling",
        "structured-output-spec",
        "structured-output-spec-reported",
        "lora-spec",
        "lora-spec-partial",
    } <= codes


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_real_world_case(path):
    spec, expect = load_spec_file(path)
    release = ".".join(spec["vllm_version"].split(".")[:3])  # 0.6.6.post1 is reported as 0.6.6
    assert expect["source"].startswith("https://github.com/vllm-project/vllm/"), expect
    assert expect["vllm_did"]
    result = validate_file(path)
    assert paths(result["errors"]) == set(expect.get("errors") or []), result["report"]
    assert paths(result["warnings"]) == set(expect.get("warnings") or []), result["report"]
    assert result["ok"] is not bool(expect.get("errors"))
    found = {f["code"] for f in result["errors"] + result["warnings"]}
    assert set(expect.get("codes") or []) <= found, result["report"]
    for error in result["errors"]:
        # the field users write, the release that makes it wrong, and a fix
        assert "specpilot_" + error["path"] in result["report"]
        assert release in error["message"] and error["hint"], error


def test_validate_playbook_refuses_the_draft_tp_of_vllm_10483(tmp_path):
    """validate.yml on vllm#10483's config on vLLM 0.6.4 with chunked prefill (issue 38's must-show): draft TP 4
    with target TP 4 fails, naming the variable, the value, the release and the fix.  0.6.4's source
    refuses it only with --enable-chunked-prefill (vllm/config.py SpeculativeConfig.maybe_create_spec_config);
    without it 0.6.4 accepts TP 4 (draft_tp_4_target_tp_4_0.6.4.yml) and 0.6.3 refuses it (..._0.6.3.yml)."""
    case = SPECS / "real_world" / "draft_tp_4_target_tp_4_chunked_prefill_0.6.4.yml"
    proc = run_playbook(tmp_path, "playbooks/validate.yml", "-e", "specpilot_spec_file=%s" % case)
    assert proc.returncode != 0, proc.stdout
    out = proc.stdout
    assert "specpilot_speculative.draft_tensor_parallel_size" in out, out
    assert "draft_tensor_parallel_size=4" in out and "vLLM 0.6.4" in out, out
    assert "set draft_tensor_parallel_size to 1" in out and "--enable-chunked-prefill" in out, out
    assert "[draft-tp]" in out, out
