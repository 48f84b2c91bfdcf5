"""The vLLM version profiles: agreement with the per-release facts, version selection, the
era rules (unknown keys, removed keys, method lists), rendering per era, and the exported
schemas/ files."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from validate_helpers import ROOT, base_spec, paths

from ansible_collections.specpilot.core.plugins.module_utils.service import speculative
from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import (
    VersionError,
    parse_version,
)

FACTS = ROOT.parent / "shared" / "reference" / "vllm-speculative-config-fields.json"


def profile(version):
    return vp.profile_for(parse_version(version))[0]


def ngram_spec(version, **cfg):
    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    config.update(cfg)
    return base_spec(
        vllm_version=version,
        draft=None,
        delivery="storage_uri",
        speculative=config,
        acknowledged_warnings=["async-scheduling-disabled"],
    )


# ------------------------------------------------------------------ facts cross-check


@pytest.fixture(scope="module")
def facts():
    if not FACTS.is_file():
        pytest.skip("per-release facts not found at %s" % FACTS)
    with open(FACTS) as handle:
        return json.load(handle)


def test_profiles_cover_every_examined_release(facts):
    examined = [v for v in facts if v != "_meta"]
    assert [label for label, _v in vp.EXAMINED] == examined


def test_json_keys_match_the_facts(facts):
    """User-settable keys of every JSON-era release (0.8.2+) are exactly the profile's."""
    for label, version in vp.EXAMINED:
        surface = facts[label]
        if version < (0, 8, 2):
            continue
        keys = {
            k
            for k, f in surface.items()
            if not k.startswith(("_", "--")) and not f.get("internal") and k != "tensor_parallel_size"
        }
        assert set(profile(label)["properties"]) == keys, label


def test_v0_flags_match_the_facts(facts):
    for label, version in vp.EXAMINED:
        if version >= (0, 8, 2):
            continue
        flags = {k for k in facts[label] if k.startswith("--")} - {
            "--use-v2-block-manager",
            "--num-lookahead-slots",
        }
        assert set(profile(label)["x-specpilot"]["v0_flags"].values()) == flags, label


def test_method_values_match_the_facts(facts):
    """From 0.9.1 (where vLLM checks the method) the allowed values are vLLM's own."""
    for label, version in vp.EXAMINED:
        allowed = facts[label].get("method", {}).get("allowed")
        if version < (0, 9, 1) or allowed is None:
            continue
        assert set(profile(label)["properties"]["method"]["enum"]) == set(allowed), label


def test_literal_values_and_bounds_match_the_facts(facts):
    for label, version in vp.EXAMINED:
        if version < (0, 8, 2):
            continue
        props = profile(label)["properties"]
        for key, field in facts[label].items():
            if key.startswith("_") or key not in props:
                continue
            if key in ("rejection_sample_method", "draft_sample_method", "draft_lm_head_quantization"):
                assert props[key]["enum"] == field["allowed"], (label, key)
            bounds = field.get("constraints") or {}
            if "ge" in bounds:
                assert props[key]["minimum"] == bounds["ge"], (label, key)
            if "gt" in bounds:
                assert props[key]["minimum"] == bounds["gt"] + 1, (label, key)


# ------------------------------------------------------------------ version selection


@pytest.mark.parametrize(
    "version,basis,code",
    [
        ("0.32.0", "0.32.0", None),
        ("0.19.0", "0.18.1", "vllm-unexamined"),
        ("0.15.1", "0.14.1", "vllm-unexamined"),
        ("0.31.5", "0.31.0", "vllm-profile-basis"),
        ("0.34.0", "0.33.0", "vllm-newer-than-profiles"),
        ("v0.10.1.1", "0.10.1.1", None),
        ("0.6.3.post1", "0.6.3.post1", None),
    ],
)
def test_profile_selection(version, basis, code):
    spec = base_spec(vllm_version=version, speculative=None, draft=None, delivery="storage_uri")
    result = validate(spec)
    assert result["plan"]["profile"]["basis"] == basis
    codes = {f["code"] for f in result["warnings"] + result["notes"]}
    assert code is None or code in codes
    assert (
        not {"vllm-unexamined", "vllm-profile-basis", "vllm-newer-than-profiles"} & codes
        if code is None
        else True
    )


def test_too_old_and_malformed_versions():
    assert "vllm_version" in paths(validate(base_spec(vllm_version="0.4.3", speculative=None))["errors"])
    with pytest.raises(VersionError):
        parse_version(0.2)  # YAML's reading of an unquoted 0.20
    result = validate(base_spec(kserve_version=0.2))
    assert any(e["code"] == "version-not-string" for e in result["errors"])


# ------------------------------------------------------------------ what the issue lists


@pytest.mark.parametrize(
    "method,first,last_without",
    [
        ("eagle3", "0.9.1", "0.8.4"),
        ("suffix", "0.11.2", "0.11.0"),
        ("ngram_gpu", "0.18.1", "0.17.1"),
        ("dflash", "0.20.2", "0.19.1"),
        ("mtp", "0.11.0", "0.10.2"),
        ("custom_class", "0.22.1", "0.21.0"),
    ],
)
def test_methods_arrive(method, first, last_without):
    assert method in profile(first)["properties"]["method"]["enum"]
    assert method not in profile(last_without)["properties"]["method"]["enum"]


@pytest.mark.parametrize("method", ["medusa", "mlp_speculator"])
def test_methods_removed_in_0_33(method):
    assert method in profile("0.32.0")["properties"]["method"]["enum"]
    assert method not in profile("0.33.0")["properties"]["method"]["enum"]


def test_eagle3_before_0_9_1_is_unlisted():
    """0.8.5-0.9.0 run eagle3 although it is not a method value yet: a warning."""
    spec = base_spec(vllm_version="0.8.5", kserve_version="0.17")
    result = validate(spec)
    assert "speculative.method" in paths(result["warnings"])
    assert any(w["code"] == "method-unlisted" for w in result["warnings"])


@pytest.mark.parametrize("version,severity", [("0.16.0", None), ("0.17.1", "error")])
def test_disable_by_batch_size_removed_after_0_16(version, severity):
    result = validate(ngram_spec(version, disable_by_batch_size=4))
    errors = paths(result["errors"])
    assert ("speculative.disable_by_batch_size" in errors) == (severity == "error")


@pytest.mark.parametrize(
    "version,severity",
    [
        ("0.9.2", None),
        ("0.10.0", "warning"),
        ("0.14.1", "warning"),
        ("0.16.0", "error"),
    ],
)
def test_typical_acceptance_keys_removed_after_0_9_2(version, severity):
    result = validate(ngram_spec(version, acceptance_method="typical_acceptance_sampler"))
    where = {"error": paths(result["errors"]), "warning": paths(result["warnings"])}
    for level, found in where.items():
        assert ("speculative.acceptance_method" in found) == (severity == level), (version, result["report"])


@pytest.mark.parametrize(
    "version,severity",
    [
        ("0.8.3", "error"),
        ("0.9.0", "error"),
        ("0.9.1", "warning"),
        ("0.14.1", "warning"),
        ("0.16.0", "error"),
        ("0.32.0", "error"),
    ],
)
def test_unknown_keys_per_era(version, severity):
    result = validate(ngram_spec(version, lookahead_window=2))
    level = (
        "error"
        if "speculative.lookahead_window" in paths(result["errors"])
        else ("warning" if "speculative.lookahead_window" in paths(result["warnings"]) else None)
    )
    assert level == severity


@pytest.mark.parametrize("version", ["0.8.3", "0.12.0", "0.20.2", "0.33.0"])
def test_tensor_parallel_size_in_config_is_an_error_everywhere(version):
    result = validate(ngram_spec(version, tensor_parallel_size=2))
    error = next(e for e in result["errors"] if e["path"] == "speculative.tensor_parallel_size")
    assert "draft_tensor_parallel_size" in error["hint"]


@pytest.mark.parametrize("key", ["temperature", "top_p", "target_model_config", "draft_parallel_config"])
def test_sampling_and_engine_internal_keys_are_errors(key):
    result = validate(ngram_spec("0.32.0", **{key: 1}))
    assert "speculative." + key in paths(result["errors"])


@pytest.mark.parametrize(
    "version,bad,good",
    [
        ("0.18.1", "synthetic", "probabilistic"),
        ("0.19.1", "standard", "synthetic"),
        ("0.21.0", "strict", "standard"),
        ("0.25.1", "fly", "block"),
        ("0.33.0", "strict", "fly"),
    ],
)
def test_rejection_sample_method_values(version, bad, good):
    assert "speculative.rejection_sample_method" in paths(
        validate(ngram_spec(version, rejection_sample_method=bad))["errors"]
    )
    extra = {"fly_window_size": 1} if good == "fly" else {}
    extra.update({"synthetic_acceptance_rate": 0.5} if (good == "synthetic" and version == "0.19.1") else {})
    spec = ngram_spec(version, rejection_sample_method=good, **extra)
    if good == "synthetic":
        assert paths(validate(spec)["errors"]) == {"speculative.rejection_sample_method"}  # a service
        spec["purpose"] = "benchmark"
    assert not validate(spec)["errors"]


@pytest.mark.parametrize(
    "version,ok", [("0.9.2", True), ("0.10.0", False), ("0.14.1", False), ("0.15.1", None), ("0.16.0", True)]
)
def test_draft_model_unsupported_from_0_10_to_0_14(version, ok):
    """The gap is exact on the examined releases (0.10.0 to 0.14.1).  0.15.x was never examined:
    0.14.1 refuses and 0.16.0 runs draft_model, so 0.15.1 gets a warning, not an error."""
    spec = base_spec(
        vllm_version=version,
        kserve_version="0.17",
        draft={"uri": "hf://meta-llama/Llama-3.2-1B", "params_b": 1.0},
        speculative={"method": "draft_model", "num_speculative_tokens": 3},
        acknowledged_warnings=["async-scheduling-disabled", "draft-ratio"],
    )
    result = validate(spec)
    if ok is None:
        assert "speculative.method" not in paths(result["errors"]), result["report"]
        assert any(
            w["path"] == "speculative.method" and w["code"] == "vllm-unexamined-disagrees"
            for w in result["warnings"]
        ), result["report"]
        return
    assert ("speculative.method" not in paths(result["errors"])) == ok, result["report"]


def test_ngram_brackets_method():
    assert "speculative.method" in paths(validate(ngram_spec("0.9.1", method="[ngram]"))["errors"])
    result = validate(ngram_spec("0.8.3", method="[ngram]"))
    assert not result["errors"] and "speculative.method" in paths(result["warnings"])


def test_model_requirement_and_token_requirement():
    no_tokens = validate(base_spec(speculative={"method": "eagle3"}))
    assert "speculative.num_speculative_tokens" in paths(no_tokens["errors"])
    suffix = validate(
        ngram_spec("0.32.0", method="suffix", num_speculative_tokens=None, prompt_lookup_max=None)
    )
    assert not suffix["errors"], suffix["report"]
    no_method = validate(base_spec(speculative={"num_speculative_tokens": 3}))
    assert any(e["code"] == "method-missing" for e in no_method["errors"])


def test_async_scheduling_caveats_follow_the_release():
    assert "vllm_args" in paths(
        validate(dict(ngram_spec("0.10.0"), vllm_args={"async_scheduling": True}))["errors"]
    )
    mid = validate(
        base_spec(vllm_version="0.12.0", kserve_version="0.17", vllm_args={"async_scheduling": True})
    )
    assert "vllm_args" in paths(mid["warnings"])
    plain_ngram = validate(dict(ngram_spec("0.32.0"), acknowledged_warnings=[]))
    assert any(w["code"] == "async-scheduling-disabled" for w in plain_ngram["warnings"])
    assert not validate(dict(ngram_spec("0.32.0", method="ngram_gpu"), acknowledged_warnings=[]))["warnings"]
    strict_033 = validate(dict(ngram_spec("0.33.0"), vllm_args={"async_scheduling": True}))
    assert any(e["code"] == "async-scheduling-conflict" for e in strict_033["errors"])


def test_acknowledged_warnings_become_notes():
    result = validate(ngram_spec("0.32.0"))
    assert not result["warnings"]
    assert any(n["code"] == "async-scheduling-disabled" for n in result["notes"])
    strict = validate(dict(ngram_spec("0.32.0"), acknowledged_warnings=[]), {"strict": True})
    assert strict["ok"] is False and not strict["errors"]


# ------------------------------------------------------------------ rendering per era


def test_v0_flags_for_0_8_1_and_older():
    result = validate(dict(ngram_spec("0.6.0", prompt_lookup_min=2), kserve_version="0.15"))
    assert result["plan"]["speculative_args"] == [
        "--speculative-model=[ngram]",
        "--num-speculative-tokens=3",
        "--ngram-prompt-lookup-max=4",
        "--ngram-prompt-lookup-min=2",
        "--use-v2-block-manager",
    ]
    later = validate(ngram_spec("0.8.1"))
    assert "--use-v2-block-manager" not in later["plan"]["args"]
    assert not any(a.startswith("--speculative-config") for a in later["plan"]["args"])
    draft = validate(
        base_spec(
            vllm_version="0.7.3",
            kserve_version="0.17",
            speculative={"method": "draft_model", "num_speculative_tokens": 4, "disable_mqa_scorer": True},
            draft={"uri": "hf://meta-llama/Llama-3.2-1B", "params_b": 1.0},
            acknowledged_warnings=["draft-ratio"],
        )
    )
    assert draft["plan"]["speculative_args"] == [
        "--speculative-model=/mnt/models/draft",
        "--num-speculative-tokens=4",
        "--speculative-disable-mqa-scorer",
    ]


def test_0_8_2_renders_literal_eval_safe_json():
    result = validate(ngram_spec("0.8.2"))
    raw = result["plan"]["speculative_args"][0].split("=", 1)[1]
    assert ast.literal_eval(raw) == json.loads(raw) == result["plan"]["speculative_config"]
    bad = validate(ngram_spec("0.8.2", disable_logprobs=False))
    assert any(e["code"] == "literal-eval" for e in bad["errors"])
    assert not validate(ngram_spec("0.8.3", disable_logprobs=False))["errors"]


def test_json_from_0_8_3_is_compact_and_ordered():
    cfg = validate(base_spec())["plan"]["speculative_config"]
    assert list(cfg) == ["method", "model", "num_speculative_tokens"]
    assert (
        speculative.compact_json(cfg)
        == '{"method":"eagle3","model":"/mnt/models/draft","num_speculative_tokens":3}'
    )


# ------------------------------------------------------------------ exported schemas


def test_exported_schemas_are_up_to_date():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "export_schemas.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_service_schema_property_is_described():
    with open(ROOT / "schemas" / "service.schema.json") as handle:
        schema = json.load(handle)
    missing = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, sub in (node.get("properties") or {}).items():
                if "description" not in sub:
                    missing.append(where + key)
                walk(sub, where + key + ".")
            for key in ("items", "anyOf", "oneOf"):
                if isinstance(node.get(key), dict):
                    walk(node[key], where)
                elif isinstance(node.get(key), list):
                    for sub in node[key]:
                        walk(sub, where)

    walk(schema, "")
    assert missing == []


def test_schema_dir_gives_the_same_verdicts(tmp_path):
    spec = base_spec(speculative={"method": "eagle3", "num_speculative_tokens": 0, "foo": 1})
    builtin = validate(spec)
    exported = validate(spec, {"schema_dir": str(ROOT / "schemas")})
    assert builtin["errors"] == exported["errors"]
    assert builtin["warnings"] == exported["warnings"]
    good = base_spec()
    assert (
        validate(good, {"schema_dir": str(ROOT / "schemas")})["plan"]["args"]
        == validate(good)["plan"]["args"]
    )


# Issue 15 item 4: a release that was never examined is judged on the safe side.


def test_unexamined_patch_release_does_not_refuse_a_method_of_the_next_examined_release():
    """0.11.1 was not examined: 0.11.0 has no suffix, 0.11.2 has it; the method may have arrived
    in 0.11.1, so the verdict is a warning naming the profile used, not an error."""
    result = validate(base_spec(vllm_version="0.11.1", speculative={"method": "suffix"}))
    assert result["ok"] is True, result["report"]
    codes = {w["code"]: w for w in result["warnings"]}
    assert "vllm-unexamined-disagrees" in codes
    text = codes["vllm-unexamined-disagrees"]["message"]
    assert "vllm-0.11.0" in text and "0.11.2" in text
    assert "vllm-0.11.0" in codes["vllm-unexamined"]["message"]


def test_unexamined_release_keeps_errors_both_neighbours_agree_on():
    """An unknown key is refused by 0.14.1 and 0.16.0 alike: still an error on 0.15.1."""
    spec = base_spec(
        vllm_version="0.15.1", speculative={"method": "ngram", "num_speculative_tokens": 3, "foo": 1}
    )
    result = validate(spec)
    # 0.14.x ignores unknown keys (a warning), 0.16.0 rejects them: they disagree, so a warning
    assert result["ok"] is True, result["report"]
    spec = base_spec(
        vllm_version="0.15.1",
        speculative={"method": "ngram", "num_speculative_tokens": 3, "temperature": 0.5},
    )
    result = validate(spec)
    assert "speculative.temperature" in {e["path"] for e in result["errors"]}, result["report"]


def test_next_profile_only_between_differing_examined_releases():
    assert vp.next_profile((0, 11, 2)) is None  # examined
    assert vp.next_profile((0, 34, 0)) is None  # beyond the newest
    profile, label = vp.next_profile((0, 15, 1))
    assert label == "0.16.0" and profile["x-specpilot"]["min"] == "0.16.0"
    assert vp.next_profile((0, 11, 1))[1] == "0.11.2"


def test_too_old_release_message_does_not_contradict_itself():
    result = validate(base_spec(vllm_version="0.5.3"))
    errors = [e for e in result["errors"] if e["code"] == "vllm-too-old"]
    assert errors, result["report"]
    text = errors[0]["message"] + " " + errors[0]["hint"]
    assert "0.5.5" in text and "0.6 " not in text and "0.6," not in text
    assert "0.33.0" in errors[0]["message"]
    assert validate(base_spec(vllm_version="0.5.5"))["ok"] is True or not [
        e for e in validate(base_spec(vllm_version="0.5.5"))["errors"] if e["code"] == "vllm-too-old"
    ]


def test_mlp_speculator_broken_on_v1_only_releases():
    for version, broken in (("0.9.2", False), ("0.10.0", True), ("0.32.0", True)):
        profile, _ = vp.profile_for(parse_version(version))
        rules = [
            r
            for r in profile["allOf"]
            if r["if"].get("properties", {}).get("method", {}).get("enum") == ["mlp_speculator"]
            and r["then"].get("not") == {}
        ]
        assert bool(rules) == broken, version
    profile, _ = vp.profile_for(parse_version("0.33.0"))
    assert "mlp_speculator" not in profile["properties"]["method"]["enum"]


# ------------------------------------------------------------------ pipeline parallelism (issue 15 item 6)

PP = "vllm_args.pipeline_parallel_size"


class _Collect:
    def __init__(self):
        self.found = []

    def add(self, severity, path, message, hint, code):
        self.found.append(
            {"severity": severity, "path": path, "message": message, "hint": hint, "code": code}
        )

    def error(self, *args):
        self.add("error", *args)

    def warning(self, *args):
        self.add("warning", *args)

    def note(self, *args):
        self.add("note", *args)


def pp_verdict(version, cfg, pp=2, extra_args=()):
    """(severity, text) of the pipeline-parallel finding for ``cfg`` on ``version``; (None, "") if none."""
    ctx = {
        "version": parse_version(version),
        "version_label": version,
        "profile": profile(version),
        "target_tp": 1,
        "target_pp": pp,
        "async_requested": False,
        "extra_args": list(extra_args),
        "target": {},
        "draft": {},
    }
    collect = _Collect()
    speculative.check(dict(cfg), ctx, collect)
    found = [f for f in collect.found if f["path"] == PP]
    assert len(found) <= 1, found
    return (found[0]["severity"], found[0]["message"] + " | " + found[0]["hint"]) if found else (None, "")


NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
EAGLE3 = {"method": "eagle3", "model": "/mnt/models/draft", "num_speculative_tokens": 3}
MEDUSA = {"method": "medusa", "model": "/mnt/models/draft", "num_speculative_tokens": 3}
DRAFT = {"method": "draft_model", "model": "/mnt/models/draft", "num_speculative_tokens": 3}


@pytest.mark.parametrize(
    "version,cfg,severity,quote",
    [
        # no check in the engine; vllm#10975 added the V0 worker's refusal in 0.6.5
        ("0.5.5", NGRAM, "warning", "no start-up check"),
        ("0.6.3.post1", dict(NGRAM, method="eagle", model="/d"), "error", "SupportsPP"),
        # V0 spec-decode worker (vllm/spec_decode/spec_decode_worker.py create_spec_worker)
        ("0.6.6.post1", NGRAM, "error", "Speculative decoding is currently incompatible with pipeline"),
        ("0.7.3", NGRAM, "error", "create_spec_worker"),
        # 0.8.x: EngineArgs._is_v1_supported_oracle sends PP to V0
        ("0.8.3", NGRAM, "error", "_is_v1_supported_oracle"),
        ("0.8.5.post1", EAGLE3, "error", "SupportsPP"),
        ("0.9.0", EAGLE3, "error", "V0"),
        # 0.9.1-0.9.2: the V1 methods run on V1, the others fall back to V0
        ("0.9.2", EAGLE3, "warning", "last pipeline stage"),
        ("0.9.2", NGRAM, "warning", "not verified"),
        ("0.9.2", DRAFT, "error", "create_spec_worker"),
        ("0.9.2", MEDUSA, "error", "SupportsPP"),
        # V1 only: the draft gets the target's PP size until 0.29.x
        ("0.10.0", MEDUSA, "error", "SupportsPP"),
        ("0.14.1", dict(NGRAM, method="suffix"), "warning", "last pipeline stage"),
        ("0.29.0", dict(EAGLE3, method="dspark"), "error", "DSpark does not support pipeline parallelism"),
        ("0.30.0", dict(EAGLE3, method="dspark"), "warning", "last pipeline stage"),
        ("0.32.0", EAGLE3, "warning", "last pipeline stage"),
        ("0.33.0", NGRAM, "warning", "vllm#44697"),
    ],
)
def test_pipeline_parallel_with_speculative_decoding_per_release(version, cfg, severity, quote):
    got, text = pp_verdict(version, cfg)
    assert got == severity, (version, cfg["method"], text)
    assert quote in text, text
    assert "%s=2" % PP in text and "'%s'" % cfg["method"] in text, text


@pytest.mark.parametrize("version,cfg", [("0.7.3", NGRAM), ("0.9.2", MEDUSA), ("0.32.0", EAGLE3)])
def test_one_pipeline_stage_gives_no_pipeline_finding(version, cfg):
    assert pp_verdict(version, cfg, pp=1) == (None, "")


def test_0_9_0_takes_the_v1_route_only_with_an_explicit_executor_backend():
    severity, text = pp_verdict("0.9.0", EAGLE3)
    assert severity == "error" and "--distributed-executor-backend=ray|mp|external_launcher" in text
    assert pp_verdict("0.9.0", EAGLE3, extra_args=["--distributed-executor-backend=mp"])[0] == "warning"
    assert pp_verdict("0.9.0", DRAFT, extra_args=["--distributed-executor-backend=mp"])[0] == "error"
    assert pp_verdict("0.9.0", MEDUSA, extra_args=["--distributed-executor-backend=ray"])[0] == "error"


def test_adaptive_verification_refuses_pipeline_parallelism():
    cfg = {"method": "dspark", "num_speculative_tokens": 3, "enable_adaptive_verification": True}
    severity, text = pp_verdict("0.33.0", cfg)
    assert severity == "error" and "Adaptive verification is not currently compatible" in text, text
    assert pp_verdict("0.33.0", dict(cfg, enable_adaptive_verification=False))[0] == "warning"


def _pp_spec(version, pp, **changes):
    spec = base_spec(
        vllm_version=version,
        kserve_version="0.17",
        gpu={"count": 4},
        vllm_args={"pipeline_parallel_size": pp} if pp is not None else {},
        acknowledged_warnings=["async-scheduling-disabled"],
    )
    spec.update(changes)
    return spec


def test_validate_refuses_pipeline_parallel_speculation_on_a_refusing_release():
    result = validate(_pp_spec("0.7.3", 2, draft=None, delivery="storage_uri", speculative=dict(NGRAM)))
    errors = [e for e in result["errors"] if e["path"] == PP]
    assert [e["code"] for e in errors] == ["pp-spec-refused"], result["report"]
    assert "%s=2" % PP in errors[0]["message"] and "0.7.3" in errors[0]["message"]
    assert PP in errors[0]["hint"]
    assert "specpilot_vllm_args.pipeline_parallel_size" in result["report"]


def test_validate_warns_on_a_release_that_starts_it_and_renders_the_stages():
    result = validate(_pp_spec("0.32.0", 2))
    assert PP not in paths(result["errors"]), result["report"]
    assert [w["code"] for w in result["warnings"] if w["path"] == PP] == ["pp-spec-unverified"]
    args = result["plan"]["args"]
    # 4 GPUs over 2 stages: tensor parallel 2 unless set
    assert "--pipeline-parallel-size=2" in args and "--tensor-parallel-size=2" in args, args
    acknowledged = _pp_spec(
        "0.32.0", 2, acknowledged_warnings=["async-scheduling-disabled", "pp-spec-unverified"]
    )
    assert PP not in paths(validate(acknowledged)["warnings"])


@pytest.mark.parametrize("pp", [1, None])
def test_validate_has_no_pipeline_finding_for_one_stage(pp):
    result = validate(_pp_spec("0.7.3", pp, draft=None, delivery="storage_uri", speculative=dict(NGRAM)))
    everything = result["errors"] + result["warnings"] + result["notes"]
    assert PP not in paths(everything), result["report"]
    assert not any(a.startswith("--pipeline-parallel-size") for a in result["plan"]["args"])
    assert "--tensor-parallel-size=4" in result["plan"]["args"]


def test_pipeline_parallel_size_belongs_to_vllm_args():
    bad = validate(
        _pp_spec("0.32.0", None, vllm_args={"extra_args": ["--pipeline-parallel-size=2", "-pp=2"]})
    )
    assert {"vllm_args.extra_args[0]", "vllm_args.extra_args[1]"} <= paths(bad["errors"]), bad["report"]
    zero = validate(_pp_spec("0.32.0", 0))
    assert PP in paths(zero["errors"]), zero["report"]
