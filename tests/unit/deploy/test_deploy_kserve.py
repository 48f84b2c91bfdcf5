"""KServe release detection from CRD schemas, strict CRD validation, pruned fields."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_kserve as dk

ROOT = Path(__file__).resolve().parents[3]
LAB_CRDS = ROOT / "lab" / "crds"
UPSTREAM = ROOT.parent / "shared" / "reference" / "kserve-crds"


def _load(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.fixture(scope="module")
def upstream_020():
    path = UPSTREAM / "v0.20.0" / "serving.kserve.io_inferenceservices.yaml"
    if not path.is_file():
        pytest.skip("upstream KServe CRDs not found beside the checkout (they are in CI)")
    return _load(path)


def _isvc_crd(predictor: dict, spec_extra: dict | None = None, status: dict | None = None) -> dict:
    """A minimal InferenceService CRD with the given predictor properties."""
    spec = {"type": "object", "properties": {"predictor": {"type": "object", "properties": predictor}}}
    spec["properties"].update(spec_extra or {})
    schema = {
        "type": "object",
        "properties": {"spec": spec, "status": {"type": "object", "properties": status or {}}},
    }
    return {
        "metadata": {"name": dk.ISVC_CRD},
        "spec": {
            "versions": [
                {"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
            ]
        },
    }


OBJ = {"type": "object"}
MODEL_017 = {"type": "object", "properties": {"restartPolicyRules": {"type": "array"}}}


@pytest.mark.parametrize(
    "predictor, spec_extra, status, expected_range, minimum",
    [
        ({}, None, None, "KServe <= 0.13", "0.13.0"),
        ({"workerSpec": OBJ}, None, None, "KServe 0.14", "0.14.0"),
        (
            {"workerSpec": OBJ, "autoScaling": OBJ},
            None,
            {"deploymentMode": {"type": "string"}},
            "KServe 0.15.2",
            "0.15.2",
        ),
        ({"workerSpec": OBJ, "storageUris": {"type": "array"}}, None, None, "KServe 0.16", "0.16.0"),
        (
            {"storageUris": {"type": "array"}, "hostnameOverride": {"type": "string"}, "model": MODEL_017},
            None,
            None,
            "KServe 0.17 to 0.19",
            "0.17.0",
        ),
        (
            {"storageUris": {"type": "array"}, "name": {"type": "string"}},
            {"canary": {"type": "array"}},
            None,
            "KServe >= 0.20",
            "0.20.0",
        ),
    ],
)
def test_detect_reads_the_release_markers(predictor, spec_extra, status, expected_range, minimum):
    found = dk.detect({dk.ISVC_CRD: _isvc_crd(predictor, spec_extra, status)})
    assert found["range"] == expected_range
    assert found["min"] == minimum


def test_llminferenceservice_tells_017_018_019_apart():
    isvc = _isvc_crd({"storageUris": {"type": "array"}, "hostnameOverride": {"type": "string"}})

    def llm(section_name: bool, lora: bool) -> dict:
        props = {
            "router": {
                "type": "object",
                "properties": {
                    "gateway": {
                        "type": "object",
                        "properties": {
                            "refs": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": (
                                        {"sectionName": {"type": "string"}}
                                        if section_name
                                        else {"name": {"type": "string"}}
                                    ),
                                },
                            }
                        },
                    }
                },
            }
        }
        if lora:
            props["model"] = {
                "type": "object",
                "properties": {
                    "lora": {"type": "object", "properties": {"maxAdapters": {"type": "integer"}}}
                },
            }
        schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}
        return {
            "metadata": {"name": dk.LLMISVC_CRD},
            "spec": {
                "versions": [
                    {
                        "name": "v1alpha1",
                        "served": True,
                        "storage": False,
                        "schema": {"openAPIV3Schema": schema},
                    },
                    {
                        "name": "v1alpha2",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": schema},
                    },
                ]
            },
        }

    assert dk.detect({dk.ISVC_CRD: isvc, dk.LLMISVC_CRD: llm(False, False)})["range"] == "KServe 0.17"
    assert dk.detect({dk.ISVC_CRD: isvc, dk.LLMISVC_CRD: llm(True, False)})["range"] == "KServe 0.18"
    found = dk.detect({dk.ISVC_CRD: isvc, dk.LLMISVC_CRD: llm(True, True)})
    assert (found["range"], found["exact"]) == ("KServe 0.19", True)


def test_upstream_020_and_the_lab_crds(upstream_020):
    assert dk.detect({dk.ISVC_CRD: upstream_020})["min"] == "0.20.0"
    # the lab's own CRD is trimmed (no workerSpec, no canary) but declares predictor.name: 0.20
    lab = _load(LAB_CRDS / "serving.kserve.io_inferenceservices.yaml")
    assert dk.detect({dk.ISVC_CRD: lab})["range"] == "KServe >= 0.20"


def test_upstream_016():
    path = UPSTREAM / "v0.16.0" / "serving.kserve.io_inferenceservices.yaml"
    if not path.is_file():
        pytest.skip("upstream KServe CRDs not found beside the checkout")
    found = dk.detect({dk.ISVC_CRD: _load(path)})
    assert (found["range"], found["exact"]) == ("KServe 0.16", True)


def test_no_kserve_is_an_error():
    with pytest.raises(dk.DetectError, match="KServe is not installed"):
        dk.detect({dk.ISVC_CRD: None})


def test_effective_version_prefers_a_consistent_declaration():
    ranged = {"min": "0.17.0", "max": "0.20.0", "range": "KServe 0.17 to 0.19"}
    assert dk.effective_version(ranged, "0.19") == {"version": "0.19.0", "source": "declared", "note": None}
    out = dk.effective_version(ranged, "0.20")
    assert (out["version"], out["source"]) == ("0.17.0", "detected")
    assert "does not match the cluster" in out["note"]
    assert dk.effective_version(ranged, None)["version"] == "0.17.0"
    assert dk.effective_version(ranged, "0.19", given="0.18")["version"] == "0.18.0"
    assert dk.effective_version(None, "0.20")["source"] == "declared"
    assert dk.effective_version(None, None)["version"] is None
    assert dk.effective_version({"min": "0.20.0", "max": None, "range": ""}, "0.21")["version"] == "0.21.0"


def test_strict_errors_name_unknown_and_invalid_fields(upstream_020):
    schema = dk.crd_version_schema(upstream_020, "v1beta1")
    good = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "x"},
        "spec": {
            "predictor": {
                "storageUris": [{"uri": "s3://a", "mountPath": "/mnt/models/t"}],
                "model": {"modelFormat": {"name": "vLLM"}, "args": ["--x"]},
            }
        },
    }
    assert dk.strict_errors(schema, good) == []
    bad = copy.deepcopy(good)
    bad["spec"]["predictor"]["model"]["storageUris"] = [{"uri": "s3://a"}]
    bad["spec"]["predictor"]["storageUris"][0]["mountPath"] = "relative"
    errors = dk.strict_errors(schema, bad)
    paths = {e["path"] for e in errors}
    assert "spec.predictor.model" in paths and "spec.predictor.storageUris[0].mountPath" in paths
    assert any("storageUris" in e["message"] and "unexpected" in e["message"] for e in errors)


def test_pruned_paths():
    desired = {"spec": {"predictor": {"storageUris": [{"uri": "a"}], "model": {"args": ["x"]}}}}
    stored = {"spec": {"predictor": {"model": {"args": ["x"], "extra": 1}}}}
    assert dk.pruned_paths(desired, stored) == ["spec.predictor.storageUris"]
    assert dk.pruned_paths(desired, desired) == []
    assert dk.pruned_paths({"a": [{"b": 1}, {"c": 2}]}, {"a": [{"b": 1}]}) == ["a[1]"]
