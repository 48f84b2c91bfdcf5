"""Run-time overrides of the speculative method and num_speculative_tokens (specpilot_override_method,
specpilot_override_num_speculative_tokens): applied by spec_validate before any check, so that validate,
deploy and smoke see the same effective spec; keys of the old method only are dropped (from the vLLM
profile's tables); the result says what was overridden; bad overrides are errors naming the variable."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from ansible_collections.specpilot.core.plugins.module_utils.service import spec_override
from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.report.findings import Findings
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import (
    CONTROL_VARS,
    OVERRIDE_VARS,
    assemble_from_vars,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.speculative import method_in_scope
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import module_result, validate
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version

from validate_helpers import ROOT, base_spec, run_playbook

METHOD_VAR = "specpilot_override_method"
NST_VAR = "specpilot_override_num_speculative_tokens"


def ngram_spec(**speculative):
    cfg = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    cfg.update(speculative)
    return base_spec(draft=None, delivery="storage_uri", speculative=cfg)


def run(spec, method=None, nst=None, **options):
    return validate(spec, dict(options, override_method=method, override_num_speculative_tokens=nst))


def codes(findings):
    return {f["code"] for f in findings}


def profile(version):
    return vp.profile_for(parse_version(version)[:3])[0]


# ------------------------------------------------------------------ the variables


def test_the_variables_are_control_variables_not_spec_keys():
    assert set(OVERRIDE_VARS.values()) == {METHOD_VAR, NST_VAR}
    assert set(OVERRIDE_VARS.values()) <= set(CONTROL_VARS)
    spec, unknown = assemble_from_vars({METHOD_VAR: "suffix", NST_VAR: 3, "specpilot_name": "x"})
    assert spec == {"name": "x"} and unknown == []
    result = validate(ngram_spec(), {"variable_names": [METHOD_VAR, NST_VAR]})
    assert "unknown-variable" not in codes(result["warnings"])


# ------------------------------------------------------------------ method


def test_method_change_drops_the_old_methods_keys_and_changes_the_digest():
    spec = ngram_spec()
    before = validate(spec)
    after = run(spec, "suffix")
    assert before["ok"] and after["ok"], after["report"]
    assert after["plan"]["speculative_config"] == {"method": "suffix", "num_speculative_tokens": 4}
    assert after["spec"]["speculative"] == {"method": "suffix", "num_speculative_tokens": 4}
    assert after["speculative_overrides"] == {
        "applied": True,
        "method": {"variable": METHOD_VAR, "value": "suffix", "spec": "ngram"},
        "num_speculative_tokens": None,
        "dropped_keys": ["prompt_lookup_max", "prompt_lookup_min"],
        "dropped_draft": False,
    }
    assert after["plan"]["spec_digest"] != before["plan"]["spec_digest"]
    annotations = after["plan"]["inferenceservice"]["metadata"]["annotations"]
    assert after["plan"]["spec_digest"] in annotations.values()
    assert '"method":"suffix"' in " ".join(after["plan"]["args"])
    # the caller's spec is not changed
    assert spec["speculative"]["method"] == "ngram" and "prompt_lookup_max" in spec["speculative"]


def test_the_result_notes_the_override():
    after = run(ngram_spec(), "suffix")
    (note,) = [n for n in after["notes"] if n["code"] == "spec-override"]
    assert note["path"] == "override_method"
    assert "specpilot_override_method=suffix replaces the spec's method (ngram)" in note["message"]
    assert "prompt_lookup_max, prompt_lookup_min" in note["message"]
    assert "specpilot_override_method: speculative config overridden for this run" in after["report"]


def test_suffix_keys_are_dropped_for_ngram():
    spec = base_spec(
        draft=None,
        delivery="storage_uri",
        speculative={"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": 16},
    )
    result = run(spec, "ngram")
    assert result["ok"], result["report"]
    assert result["speculative_overrides"]["dropped_keys"] == ["suffix_decoding_max_tree_depth"]
    assert result["plan"]["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 8}


def test_common_keys_stay_and_the_old_methods_draft_goes():
    """eagle3 -> mtp: the EAGLE-only key and the draft's model go, keys of every method stay; the EAGLE head
    is neither loaded as MTP weights nor delivered."""
    spec = base_spec(
        speculative={
            "method": "eagle3",
            "num_speculative_tokens": 3,
            "model": "/mnt/models/draft",
            "disable_padded_drafter_batch": False,
            "enforce_eager": True,
            "draft_tensor_parallel_size": 1,
        }
    )
    assert validate(spec)["ok"]
    result = run(spec, "mtp", 1)
    assert result["ok"], result["report"]
    assert result["speculative_overrides"]["dropped_keys"] == ["disable_padded_drafter_batch", "model"]
    cfg = result["plan"]["speculative_config"]
    assert cfg["method"] == "mtp" and cfg["num_speculative_tokens"] == 1
    assert cfg["enforce_eager"] is True and cfg["draft_tensor_parallel_size"] == 1
    assert "disable_padded_drafter_batch" not in cfg
    assert "model" not in cfg  # MTP uses the target's own layers
    assert result["speculative_overrides"]["dropped_draft"] is True
    assert result["spec"]["draft"] is None
    assert "draft-unused" not in codes(result["warnings"])
    assert "is not used and not delivered" in result["report"]
    assert result["plan"]["mount_paths"]["draft"] is None
    assert [e["uri"] for e in result["plan"]["delivery"]["storage_uris"]] == [spec["target"]["uri"]]


def test_rule_scoped_keys_come_from_the_profile():
    """parallel_drafting has no x-methods; the profile's rule allows it with draft_model/eagle/eagle3 only."""
    scopes = spec_override.method_scopes(profile("0.32.0"))
    assert scopes["parallel_drafting"] == {"draft_model", "eagle", "eagle3"}
    assert scopes["use_heterogeneous_vocab"] == {"draft_model"}
    assert scopes["prompt_lookup_max"] == {"ngram", "ngram_gpu"}
    assert "num_speculative_tokens" not in scopes and "enforce_eager" not in scopes
    spec = base_spec(speculative={"method": "eagle3", "num_speculative_tokens": 3, "parallel_drafting": True})
    kept = run(spec, "eagle")
    assert kept["speculative_overrides"]["dropped_keys"] == []
    assert kept["spec"]["speculative"]["parallel_drafting"] is True
    dropped = run(spec, "mtp")
    assert dropped["speculative_overrides"]["dropped_keys"] == ["parallel_drafting"]


def test_a_method_that_needs_a_draft_keeps_the_specs_draft():
    spec = base_spec()  # eagle3 with its EAGLE-3 head
    result = run(spec, "eagle")
    assert result["speculative_overrides"]["dropped_draft"] is False
    assert result["plan"]["mount_paths"]["draft"] == "/mnt/models/draft"
    assert result["plan"]["speculative_config"]["model"] == "/mnt/models/draft"
    # the head is an EAGLE-3 head: the compatibility check says so, naming the override
    assert not result["ok"]
    assert any(
        e["path"].startswith("draft.") and e["message"].endswith("specpilot_override_method=eagle]")
        for e in result["errors"]
    ), result["report"]


@pytest.mark.parametrize("prof", vp.all_profiles(), ids=lambda p: p["x-specpilot"]["profile"])
def test_every_method_scoped_key_of_every_profile_is_known(prof):
    scopes = spec_override.method_scopes(prof)
    props = prof["properties"]
    assert set(scopes) <= set(props)
    assert {k for k, s in props.items() if s.get("x-methods")} <= set(scopes)
    assert "method" not in scopes


@pytest.mark.parametrize("prof", vp.all_profiles(), ids=lambda p: p["x-specpilot"]["profile"])
def test_a_switch_leaves_no_key_of_the_old_method(prof):
    """Whatever the two methods, the overridden config holds no key scoped to other methods."""
    scopes = spec_override.method_scopes(prof)
    methods = sorted(prof["x-specpilot"]["methods"])
    cfg = dict({key: 1 for key in scopes}, num_speculative_tokens=2)
    for old in methods:
        for new in (m for m in methods if m != old):
            raw = {"name": "x", "draft": {"uri": "hf://d"}, "speculative": dict(cfg, method=old)}
            findings = Findings()
            record = spec_override.apply(raw, new, None, prof, findings, prof["x-specpilot"]["min"])
            assert not findings.errors, (old, new, findings.errors)
            left = [k for k in raw["speculative"] if k in scopes]
            assert all(method_in_scope(new, scopes[k]) for k in left), (old, new, left)
            assert set(record["dropped_keys"]) | set(raw["speculative"]) == set(cfg) | {"method"}


# ------------------------------------------------------------------ num_speculative_tokens


def test_num_speculative_tokens_override_keeps_the_method_and_its_keys():
    spec = ngram_spec()
    before = validate(spec)
    after = run(spec, None, 7)
    assert after["ok"], after["report"]
    assert after["plan"]["speculative_config"] == {
        "method": "ngram",
        "num_speculative_tokens": 7,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    assert after["speculative_overrides"]["num_speculative_tokens"] == {
        "variable": NST_VAR,
        "value": 7,
        "spec": 4,
    }
    assert after["speculative_overrides"]["method"] is None
    assert after["plan"]["spec_digest"] != before["plan"]["spec_digest"]


def test_a_string_number_from_the_command_line_is_a_number():
    assert run(ngram_spec(), "suffix", "6")["plan"]["speculative_config"]["num_speculative_tokens"] == 6


@pytest.mark.parametrize(
    "method,nst",
    [(None, None), ("", 0), ("spec", 0), ("Spec", "0"), (" spec ", ""), ("ngram", 4), ("ngram", None)],
)
def test_keep_values_leave_the_spec_as_it_is(method, nst):
    spec = ngram_spec()
    before = validate(spec)
    after = run(spec, method, nst)
    assert after["ok"]
    assert after["speculative_overrides"]["applied"] is False
    assert after["plan"] == before["plan"]
    assert after["spec"] == before["spec"]
    assert "spec-override" not in codes(after["notes"])


# ------------------------------------------------------------------ errors name the variable


def test_draft_method_without_a_draft_names_the_variable_and_the_fix():
    result = run(ngram_spec(), "draft_model")
    assert not result["ok"]
    (error,) = result["errors"]
    assert error["path"] == "override_method" and error["code"] == "override-needs-draft"
    assert error["message"].startswith("specpilot_override_method=draft_model needs specpilot_draft")
    assert "specpilot_draft" in error["hint"]
    assert "specpilot_override_method: specpilot_override_method=draft_model needs specpilot_draft" in (
        result["report"]
    )


def test_unknown_method_names_the_variable_and_suggests():
    result = run(ngram_spec(), "eagle4")
    (error,) = result["errors"]
    assert error["path"] == "override_method" and error["code"] == "override-method-unknown"
    assert "specpilot_override_method='eagle4' is not a speculative method of vLLM 0.32.0" in error["message"]
    assert "did you mean eagle" in error["hint"] and "spec to keep" in error["hint"]


def test_method_not_in_the_runtimes_release():
    spec = base_spec(
        vllm_version="0.10.0",
        runtime={"image": "vllm/vllm-openai:v0.10.0"},
        draft=None,
        delivery="storage_uri",
        speculative={"method": "ngram", "num_speculative_tokens": 4},
    )
    result = run(spec, "suffix")
    assert "override-method-unknown" in codes(result["errors"])
    assert "vLLM 0.10.0" in result["errors"][0]["message"]


@pytest.mark.parametrize("value", ["many", -1, True, 2.5, [3]])
def test_bad_num_speculative_tokens_names_the_variable(value):
    result = run(ngram_spec(), None, value)
    assert not result["ok"]
    (error,) = result["errors"]
    assert error["path"] == "override_num_speculative_tokens" and error["code"] == "override-value"
    assert error["message"].startswith("specpilot_override_num_speculative_tokens=%r" % (value,))


def test_method_needing_num_speculative_tokens_the_spec_lacks():
    spec = base_spec(draft=None, delivery="storage_uri", speculative={"method": "suffix"})
    assert validate(spec)["ok"]
    result = run(spec, "ngram")
    (error,) = result["errors"]
    assert error["code"] == "override-needs-num-speculative-tokens"
    assert error["message"].startswith("specpilot_override_method=ngram needs num_speculative_tokens")
    assert NST_VAR in error["hint"]
    fixed = run(spec, "ngram", 3)
    assert fixed["ok"], fixed["report"]
    assert fixed["plan"]["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}


@pytest.mark.parametrize("method,nst", [("ngram", None), (None, 4)])
def test_no_override_of_a_spec_without_speculative_decoding(method, nst):
    result = run(base_spec(draft=None, delivery="storage_uri", speculative=None), method, nst)
    (error,) = result["errors"]
    assert error["code"] == "override-speculative-off"
    assert error["message"].startswith("%s=" % (METHOD_VAR if method else NST_VAR))
    assert result["plan"] is None or result["plan"]["speculative_config"] is None


def test_profile_errors_on_the_overridden_config_name_the_override():
    """draft_model raises NotImplementedError in vLLM 0.12: the error says which override made it."""
    spec = base_spec(
        vllm_version="0.12.0",
        runtime={"image": "vllm/vllm-openai:v0.12.0"},
        draft={"uri": "hf://meta-llama/Llama-3.2-1B-Instruct", "params_b": 1.2},
        speculative={"method": "eagle3", "num_speculative_tokens": 3},
    )
    result = run(spec, "draft_model")
    assert not result["ok"]
    method_errors = [e for e in result["errors"] if e["path"] == "speculative.method"]
    assert method_errors, result["report"]
    assert all(
        e["message"].endswith("[speculative config with specpilot_override_method=draft_model]")
        for e in method_errors
    )


def test_fly_bound_on_an_overridden_num_speculative_tokens():
    spec = base_spec(
        vllm_version="0.33.0",
        runtime={"image": "vllm/vllm-openai:v0.33.0"},
        speculative={"method": "eagle3", "num_speculative_tokens": 3, "rejection_sample_method": "fly"},
    )
    assert validate(spec)["ok"], validate(spec)["report"]
    result = run(spec, None, 1)
    errors = [e for e in result["errors"] if e["path"] == "speculative.num_speculative_tokens"]
    assert errors and errors[0]["message"].endswith(
        "[speculative config with specpilot_override_num_speculative_tokens=1]"
    )


# ------------------------------------------------------------------ module result


def module_params(spec, **options):
    params = {
        "spec": spec,
        "strict": False,
        "fail_on_error": False,
        "display_warnings": False,
        "allow_missing_digest": False,
        "read_local_files": True,
        "var_prefix": "specpilot_",
        "variable_names": [],
        "render_dir": None,
    }
    params.update(options)
    return params


def test_module_result_reports_the_override_and_always_warns():
    out, failed = module_result(module_params(ngram_spec(), override_method="suffix"))
    assert not failed
    assert out["speculative_overrides"]["applied"] is True
    assert out["spec"]["speculative"]["method"] == "suffix"
    (line,) = out["warnings"]  # display_warnings is false: only the override line
    assert line.startswith(
        "svc: speculative config overridden for this run: specpilot_override_method=suffix"
    )
    plain, _ = module_result(module_params(ngram_spec()))
    assert plain["speculative_overrides"]["applied"] is False and "warnings" not in plain


def test_a_failing_override_fails_the_task_with_the_variable_in_msg():
    out, failed = module_result(module_params(ngram_spec(), override_method="eagle3", fail_on_error=True))
    assert failed and "specpilot_override_method=eagle3 needs specpilot_draft" in out["msg"]


# ------------------------------------------------------------------ one spec, every role


SERVICE = {
    "specpilot_name": "override-views",
    "specpilot_namespace": "ml",
    "specpilot_kserve_version": "0.20",
    "specpilot_vllm_version": "0.32.0",
    "specpilot_runtime": {"image": "vllm/vllm-openai:v0.32.0"},
    "specpilot_target": {
        "uri": "hf://meta-llama/Llama-3.1-8B-Instruct",
        "params_b": 8.03,
        "dtype": "bfloat16",
        "model_type": "llama",
        "hidden_size": 4096,
        "vocab_size": 128256,
    },
    "specpilot_gpu": {"count": 1, "memory_gib": 80},
    "specpilot_vllm_args": {"gpu_memory_utilization": 0.85, "max_model_len": 8192},
    "specpilot_speculative": {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    },
}


def views(tmp_path, *extra):
    spec_file = tmp_path / "service.yml"
    spec_file.write_text("---\n" + yaml.safe_dump(SERVICE))
    out = tmp_path / "out"
    out.mkdir()
    proc = run_playbook(
        tmp_path,
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        json.dumps(
            {"spec_file": str(spec_file), "out_dir": str(out), "ansible_python_interpreter": sys.executable}
        ),
        *extra,
        str(ROOT / "tests" / "unit" / "validate" / "playbooks" / "override_views.yml"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((out / "views.json").read_text()), proc.stdout + proc.stderr


@pytest.mark.slow
def test_validate_deploy_and_smoke_see_the_same_overridden_spec(tmp_path):
    """The override as extra variables (strings, as -e gives them): the validate role, the deploy role's
    validation and re-validation, and the smoke role's plan hold one and the same effective spec and plan."""
    seen, output = views(tmp_path, "-e", "%s=suffix" % METHOD_VAR, "-e", "%s=6" % NST_VAR)
    spec, _unknown = assemble_from_vars(SERVICE)
    expected = validate(
        spec, {"kserve_version": "0.20", "override_method": "suffix", "override_num_speculative_tokens": 6}
    )
    assert expected["ok"], expected["report"]
    assert expected["plan"]["speculative_config"] == {"method": "suffix", "num_speculative_tokens": 6}
    for role, view in seen.items():
        assert view["plan"] == expected["plan"], role
        assert view["spec"]["speculative"] == expected["spec"]["speculative"], role
        assert view["overrides"]["applied"] is True, role
        assert view["overrides"]["dropped_keys"] == ["prompt_lookup_max", "prompt_lookup_min"], role
    assert "speculative config overridden for this run" in output
    plain = validate(spec, {"kserve_version": "0.20"})
    assert seen["deploy"]["plan"]["spec_digest"] != plain["plan"]["spec_digest"]


@pytest.mark.slow
def test_without_the_override_every_role_sees_the_inventory_spec(tmp_path):
    seen, output = views(tmp_path, "-e", "%s=spec" % METHOD_VAR, "-e", "%s=0" % NST_VAR)
    spec, _unknown = assemble_from_vars(SERVICE)
    expected = validate(spec, {"kserve_version": "0.20"})
    for role, view in seen.items():
        assert view["plan"] == expected["plan"], role
        assert view["overrides"]["applied"] is False, role
    assert "speculative config overridden" not in output
