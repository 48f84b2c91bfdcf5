"""The spec corpus: every invalid spec is rejected at the expected field paths, every valid
one renders manifests that pass the upstream KServe CRD schema strictly, and the rendered
speculative arguments round-trip to the validated config."""

from __future__ import annotations

import ast
import json

import pytest

from validate_helpers import (
    crd_dir_for,
    crd_errors,
    crd_validator,
    load_spec_file,
    paths,
    spec_files,
    validate_file,
)

from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version

VALID = spec_files("valid")
INVALID = spec_files("invalid")
ALL = VALID + INVALID


def test_corpus_is_broad():
    """Versions 0.6 to 0.33, KServe 0.15 to 0.20, all four deliveries, valid and invalid."""
    specs = [load_spec_file(p)[0] for p in ALL]
    vllm = {parse_version(s["vllm_version"])[:2] for s in specs if isinstance(s.get("vllm_version"), str)}
    assert min(vllm) <= (0, 6) and max(vllm) >= (0, 33)
    assert len(vllm) >= 15
    kserve = {s.get("kserve_version") for s in specs}
    assert {"0.15", "0.16", "0.17", "0.18", "0.19", "0.20"} <= kserve
    deliveries = {s.get("delivery", "storage_uri") for s in specs}
    assert {"storage_uri", "storage_uris", "modelcar", "pvc"} <= deliveries
    assert len(VALID) >= 20 and len(INVALID) >= 40


@pytest.mark.parametrize("path", ALL, ids=lambda p: "%s/%s" % (p.parent.name, p.stem))
def test_corpus_expectations(path):
    spec, expect = load_spec_file(path)
    result = validate_file(path)
    assert paths(result["errors"]) == set(expect.get("errors") or []), result["report"]
    assert paths(result["warnings"]) == set(expect.get("warnings") or []), result["report"]
    if path.parent.name == "invalid":
        assert expect["errors"], "an invalid spec must name its expected error paths"
        assert result["ok"] is False
        assert result["errors"]
    else:
        assert result["ok"] is True
        assert result["plan"]["inferenceservice"]
    for finding in result["errors"] + result["warnings"] + result["notes"]:
        assert set(finding) == {"path", "message", "hint", "code"}
        assert finding["message"] and finding["hint"] and finding["code"]
    # every error is in the readable block, under the variable name users write
    for error in result["errors"]:
        shown = (
            error["path"]
            if error["path"].startswith(("inferenceservice.", "servingruntime."))
            else "specpilot_" + error["path"]
        )
        assert shown in result["report"]


@pytest.mark.parametrize("path", [p for p in INVALID], ids=lambda p: p.stem)
def test_speculative_errors_name_the_vllm_version(path):
    spec, _expect = load_spec_file(path)
    result = validate_file(path)
    for error in result["errors"]:
        if error["path"].startswith("speculative") and error["code"] not in ("draft-tp",):
            assert spec["vllm_version"] in error["message"] or "0.8.2" in error["message"], error


@pytest.mark.upstream_crds
@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_specs_render_strictly_valid_manifests(path):
    result = validate_file(path)
    plan = result["plan"]
    kserve_dir = crd_dir_for(plan["kserve_version"])
    isvc_validator = crd_validator(kserve_dir, "InferenceService")
    if isvc_validator is None:
        pytest.skip("upstream KServe CRDs not found under ../shared/reference/kserve-crds/%s" % kserve_dir)
    assert crd_errors(isvc_validator, plan["inferenceservice"]) == []
    runtime = plan["servingruntime"]
    if runtime is not None:
        assert crd_errors(crd_validator(kserve_dir, runtime["kind"]), runtime) == []
    predictor = plan["inferenceservice"]["spec"]["predictor"]
    assert "storageUris" not in predictor["model"]
    annotations = plan["inferenceservice"]["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] in (
        "Standard",
        "Knative",
        "RawDeployment",
        "Serverless",
    )
    assert annotations["specpilot.io/spec-digest"] == plan["spec_digest"]
    assert plan["inferenceservice"]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specpilot"


@pytest.mark.upstream_crds
def test_strict_crd_validation_catches_what_the_api_server_would_prune():
    validator = crd_validator("v0.20.0", "InferenceService")
    if validator is None:
        pytest.skip("upstream KServe CRDs not found under ../shared/reference/kserve-crds/v0.20.0")
    result = validate_file(VALID[0])
    isvc = json.loads(json.dumps(result["plan"]["inferenceservice"]))
    isvc["spec"]["predictor"]["model"]["storageUris"] = [
        {"uri": "hf://x/y", "mountPath": "/mnt/models/draft"}
    ]
    isvc["spec"]["predictor"]["storageUris"] = [{"uri": "hf://x/y", "path": "/mnt/models/draft"}]
    errors = crd_errors(validator, isvc)
    assert any("storageUris" in e and "unexpected" in e for e in errors), errors
    assert any("'path' was unexpected" in e for e in errors), errors


def _v0_flags_to_config(args, profile):
    flags = {flag: key for key, flag in profile["x-specpilot"]["v0_flags"].items()}
    types = {key: profile["properties"][key].get("type") for key in flags.values()}
    cfg = {}
    for arg in args:
        if arg == "--use-v2-block-manager":
            continue
        name, _, value = arg.partition("=")
        key = flags[name]
        if not _:
            cfg[key] = True
        elif types[key] == "integer":
            cfg[key] = int(value)
        elif types[key] == "number":
            cfg[key] = float(value)
        elif types[key] == "boolean":
            cfg[key] = value == "true"
        else:
            cfg[key] = value
    return cfg


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_rendered_speculative_args_round_trip(path):
    result = validate_file(path)
    plan = result["plan"]
    cfg = plan["speculative_config"]
    if cfg is None:
        assert plan["speculative_args"] == []
        assert not any("speculative" in a for a in plan["args"])
        return
    profile, _info = vp.profile_for(parse_version(plan["vllm_version"])[:3])
    args = plan["args"]
    for arg in plan["speculative_args"]:
        assert arg in args
    assert [a for a in plan["args_without_speculative"]] == [
        a for a in args if a not in plan["speculative_args"]
    ]
    if profile["x-specpilot"]["render"] == "v0-flags":
        assert not any(a.startswith("--speculative-config") for a in args)
        expected = {k: v for k, v in cfg.items() if k != "method"}
        if cfg["method"] == "ngram":
            assert "--speculative-model=[ngram]" in args
        parsed = _v0_flags_to_config(plan["speculative_args"], profile)
        parsed.pop("model", None) if cfg["method"] == "ngram" else None
        assert parsed == {
            k: v for k, v in expected.items() if not (k == "model" and cfg["method"] == "ngram")
        }
        return
    spec_args = [a for a in args if a.startswith("--speculative-config=")]
    assert len(spec_args) == 1
    raw = spec_args[0][len("--speculative-config=") :]
    assert json.loads(raw) == cfg
    assert list(json.loads(raw)) == list(cfg)  # key order kept
    assert raw == json.dumps(cfg, separators=(",", ":"))  # compact, never a Python repr
    assert "'" not in raw and ": " not in raw and ", " not in raw
    if profile["x-specpilot"]["render"] == "literal-eval-json":
        assert ast.literal_eval(raw) == cfg  # what vLLM 0.8.2 does with it
