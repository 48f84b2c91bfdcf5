"""The lab's own LLMInferenceService and LLMInferenceServiceConfig CRDs (lab/crds, llmisvc_crds.py):
generated, structural, documented and typed as KServe v0.20.0 types them; and the API emulator's
server-side dry run of an LLMInferenceService against the upstream v0.20.0 CRD loaded into it,
rejecting what a real API server rejects (issue 35)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import yaml

from specpilot_lab.testing import Emulator

from test_lab_crds import _compare, _walk

ROOT = Path(__file__).resolve().parents[2]
LAB_CRDS = ROOT / "lab" / "crds"
UPSTREAM = ROOT.parent / "shared" / "reference" / "kserve-crds" / "v0.20.0" / "llmisvc"
FILES = {
    "LLMInferenceService": "serving.kserve.io_llminferenceservices.yaml",
    "LLMInferenceServiceConfig": "serving.kserve.io_llminferenceserviceconfigs.yaml",
}


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=yaml.CSafeLoader)


def _upstream(kind: str) -> dict:
    path = UPSTREAM / FILES[kind]
    if not path.exists():
        pytest.skip(f"upstream KServe CRDs not found at {UPSTREAM} (they sit beside the checkout in CI)")
    return _load(path)


def _version(crd: dict, name: str) -> dict:
    return next(v for v in crd["spec"]["versions"] if v["name"] == name)


@pytest.mark.parametrize("kind", list(FILES))
def test_versions_names_and_structure(kind):
    crd = _load(LAB_CRDS / FILES[kind])
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.serving.kserve.io"
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [
        ("v1alpha1", True, False),
        ("v1alpha2", True, True),
    ]
    assert all(v["subresources"] == {"status": {}} for v in spec["versions"])
    for v in spec["versions"]:
        for path, node in _walk(v["schema"]["openAPIV3Schema"], "<root>"):
            for name, sub in (node.get("properties") or {}).items():
                assert sub.get("description"), f"{path}.{name} has no description"
            assert node.get("type") or node.get("x-kubernetes-preserve-unknown-fields") or node.get(
                "x-kubernetes-int-or-string"
            ), f"{path} has no type"


@pytest.mark.upstream_crds
@pytest.mark.parametrize("version", ["v1alpha1", "v1alpha2"])
@pytest.mark.parametrize("kind", list(FILES))
def test_field_types_agree_with_upstream(kind, version):
    theirs = _upstream(kind)
    ours = _load(LAB_CRDS / FILES[kind])
    assert ours["spec"]["names"] == theirs["spec"]["names"]
    assert _version(ours, version)["additionalPrinterColumns"] == _version(theirs, version)["additionalPrinterColumns"]
    problems: list[str] = []
    checked = _compare(
        _version(ours, version)["schema"]["openAPIV3Schema"],
        _version(theirs, version)["schema"]["openAPIV3Schema"],
        "",
        problems,
    )
    assert problems == []
    assert checked > 400  # the comparison really walked the schema


# ============================================================================ the upstream CRD in the lab
def _llmisvc(**spec) -> dict:
    """An LLMInferenceService as specpilot renders one for the lab: the model from the PVC, the
    speculative config in the decode workload's main container, prefill without it."""
    ngram = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
    body = {
        "model": {"uri": "pvc://models/target", "name": "tiny"},
        "replicas": 1,
        "parallelism": {"tensor": 1},
        "template": {
            "containers": [
                {
                    "name": "main",
                    "args": ["--max-model-len=512", f"--speculative-config={ngram}"],
                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1"}},
                }
            ]
        },
        "prefill": {"replicas": 1, "template": {"containers": [{"name": "main", "args": ["--max-model-len=512"]}]}},
        "router": {"route": {}, "gateway": {}},
    }
    body.update(spec)
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "lab-llm", "namespace": "default"},
        "spec": body,
    }


def _dry_run_apply(emu: Emulator, obj: dict, version: str = "v1alpha2"):
    path = (
        f"/apis/serving.kserve.io/{version}/namespaces/default/llminferenceservices/{obj['metadata']['name']}"
        "?dryRun=All&fieldManager=specpilot&fieldValidation=Strict&force=true"
    )
    return emu.request("PATCH", path, body=json.dumps(obj), content_type="application/apply-patch+yaml")


@pytest.mark.upstream_crds
def test_dry_run_against_upstream_crd_loaded_into_the_lab(tmp_path):
    """The lab API server boots with the lab's CRDs; the upstream v0.20.0 CRD then replaces its own
    (as `kubectl replace -f` would; a server-side apply of the 2 MB CRD costs 4 s more), and a server-side dry run validates an
    object against the upstream openAPIV3Schema: accepted as rendered (nothing stored), rejected with
    the API server's own messages where the schema says no (types, minimum, required, unknown fields
    under fieldValidation=Strict)."""
    upstream = _upstream("LLMInferenceService")
    emu = Emulator(tmp_path / "emu", [str(LAB_CRDS)]).start(timeout=120)
    try:
        _dry_runs(emu, upstream)
    finally:
        emu.stop()


def _dry_runs(emu: Emulator, upstream: dict) -> None:
    """The upstream CRD replaces the lab's; dry runs accepted and rejected as a real API server does."""
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/llminferenceservices.serving.kserve.io"
    lab_rv = emu.request("GET", crd_path).json()["metadata"]["resourceVersion"]
    replacement = dict(upstream, metadata=dict(upstream["metadata"], resourceVersion=lab_rv))
    r = emu.request("PUT", crd_path, body=json.dumps(replacement), timeout=120)
    assert r.status == 200, r.text[:500]
    loaded = r.json()
    assert loaded["metadata"]["resourceVersion"] != lab_rv
    assert _version(loaded, "v1alpha2")["schema"] == _version(upstream, "v1alpha2")["schema"]

    for version in ("v1alpha1", "v1alpha2"):
        obj = _llmisvc()
        obj["apiVersion"] = f"serving.kserve.io/{version}"
        r = _dry_run_apply(emu, obj, version)
        assert r.status == 201, (version, r.text[:800])
        assert r.json()["spec"]["template"]["containers"][0]["args"] == obj["spec"]["template"]["containers"][0]["args"]
    listed = emu.request("GET", "/apis/serving.kserve.io/v1alpha2/namespaces/default/llminferenceservices")
    assert listed.json()["items"] == []  # a dry run stores nothing

    bad = _llmisvc(replicas=-1, parallelism={"tensor": "two"})
    bad["spec"]["model"].pop("uri")
    r = _dry_run_apply(emu, bad)
    assert r.status == 422, r.text[:800]
    causes = {c["field"]: c["message"] for c in r.json()["details"]["causes"]}
    assert causes == {
        "spec.model.uri": "Required value",
        "spec.replicas": "Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        "spec.parallelism.tensor": 'Invalid value: "string": spec.parallelism.tensor in body must be of type '
        'integer: "string"',
    }

    typo = _llmisvc()
    typo["spec"]["template"]["containers"][0]["argz"] = ["--oops"]
    r = _dry_run_apply(emu, typo)
    assert r.status == 400, r.text[:800]
    assert r.json()["message"] == 'strict decoding error: unknown field "spec.template.containers[0].argz"'
