"""deploy.yml and the cluster's KServe: version gates from its CRDs, strict CRD validation, the
server-side dry run, the upstream v0.20.0 CRDs for options A/B/C, several services at once, and
an API that fails 20% of the requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_kserve
from deploy_helpers import (
    DRAFT,
    GROUP_VARS,
    NGRAM,
    FakeKServe,
    create_namespace,
    get,
    hold_deploy_lock,
    run_deploy,
    write_inventory,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
LAB_CRDS = ROOT / "lab" / "crds"
UPSTREAM = ROOT.parent / "shared" / "reference" / "kserve-crds" / "v0.20.0"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DRAFT_MODEL = {"method": "draft_model", "num_speculative_tokens": 3}
OPTION_A = {
    "specpilot_delivery": "storage_uris",
    "specpilot_speculative": DRAFT_MODEL,
    "specpilot_target": dict(GROUP_VARS["specpilot_target"], uri="pvc://lab-target"),
    "specpilot_draft": dict(DRAFT, uri="pvc://lab-draft"),
    "specpilot_acknowledged_warnings": ["draft-ratio"],
}
OPTION_B = {
    "specpilot_delivery": "modelcar",
    "specpilot_speculative": DRAFT_MODEL,
    "specpilot_draft": DRAFT,
    "specpilot_modelcar": {"image": "registry.lab/models/tiny:v1", "image_digest": "sha256:" + "ab" * 32},
    "specpilot_acknowledged_warnings": ["draft-ratio"],
}
OPTION_C = {"specpilot_speculative": NGRAM}


def _isvc(emu, ns, name):
    return get(emu, "serving.kserve.io/v1beta1", "InferenceService", name, ns)


def test_options_a_b_c_against_the_upstream_020_crds(emulator_upstream, tmp_path):
    emu = emulator_upstream
    ns = "deploy-upstream"
    create_namespace(emu, ns)
    inv = write_inventory(
        tmp_path / "inv",
        ns,
        {"opt-a": OPTION_A, "opt-b": OPTION_B, "opt-c": OPTION_C},
        group={"specpilot_kserve_version": "0.20"},
    )
    with FakeKServe(emu, ns):
        run = run_deploy(emu, tmp_path, inv)
    assert run.rc == 0, run.out[-5000:]
    crd = yaml.load((UPSTREAM / "serving.kserve.io_inferenceservices.yaml").read_text(), Loader=_LOADER)
    schema = deploy_kserve.crd_version_schema(crd, "v1beta1")
    stored = {name: _isvc(emu, ns, name) for name in ("opt-a", "opt-b", "opt-c")}
    for name, isvc in stored.items():
        clean = {k: v for k, v in isvc.items() if k not in ("status",)}
        assert deploy_kserve.strict_errors(schema, clean) == [], name
    pred = stored["opt-a"]["spec"]["predictor"]
    assert pred["storageUris"] == [
        {"uri": "pvc://lab-target", "mountPath": "/mnt/models/target"},
        {"uri": "pvc://lab-draft", "mountPath": "/mnt/models/draft"},
    ]
    assert "storageUri" not in pred["model"]
    assert (
        stored["opt-b"]["spec"]["predictor"]["model"]["storageUri"]
        == "oci://registry.lab/models/tiny@sha256:" + "ab" * 32
    )
    # the Modelcar runtime waits for the model directory (symlink race) before starting vLLM
    runtime_b = get(emu, "serving.kserve.io/v1alpha1", "ServingRuntime", "opt-b-vllm", ns)
    assert "until [ -e /mnt/models/target/config.json ]" in " ".join(
        runtime_b["spec"]["containers"][0]["command"]
    )
    assert stored["opt-c"]["spec"]["predictor"]["model"]["storageUri"] == "pvc://specpilot-lab-models/"
    spec_args = {
        n: [a for a in i["spec"]["predictor"]["model"]["args"] if a.startswith("--speculative-config=")]
        for n, i in stored.items()
    }
    assert json.loads(spec_args["opt-a"][0].split("=", 1)[1])["model"] == "/mnt/models/draft"
    assert "does not match the cluster, whose CRDs say" not in run.out  # detected 0.20, as declared


def _trimmed_crds(tmp_path: Path) -> Path:
    """The lab CRDs with spec.canary, spec.predictor.storageUris and .name removed, and without the
    LLMInferenceService CRDs (KServe 0.16 brought them): an old KServe."""
    out = tmp_path / "old-crds"
    out.mkdir()
    for path in LAB_CRDS.glob("*.yaml"):
        doc = yaml.load(path.read_text(), Loader=_LOADER)
        if doc["metadata"]["name"].startswith("llminferenceservice"):
            continue
        if doc["metadata"]["name"] == deploy_kserve.ISVC_CRD:
            for version in doc["spec"]["versions"]:
                pred = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["predictor"]
                pred["properties"].pop("storageUris", None)
                pred["properties"].pop("name", None)
                version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("canary", None)
        (out / path.name).write_text(yaml.safe_dump(doc))
    return out


def test_a_kserve_that_cannot_do_the_spec_fails_before_anything_is_written(emulator, emulator_factory, tmp_path):
    emu = emulator_factory(crds=[_trimmed_crds(tmp_path)], name="old-kserve")
    ns = "deploy-old"
    create_namespace(emu, ns)
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {"opt-a": OPTION_A})
    # issue 40: a fleet across two clusters, the play's first service on a KServe 0.20 cluster (its own kubeconfig):
    # opt-a's cluster is still dated by its own CRDs, not by the first service's
    two = write_inventory(tmp_path / "inv-two", ns, {
        "a-new": {"specpilot_speculative": NGRAM, "specpilot_k8s_kubeconfig": str(emulator.kubeconfig)},
        "opt-a": OPTION_A})

    mark = emu.control.mark()
    with FakeKServe(emulator, ns):
        gate = run_deploy(emu, tmp_path, two)  # detection: no storageUris in opt-a's CRD -> old KServe
    assert gate.rc != 0
    assert "a-new: deployed, ready" in gate.out
    assert "specpilot_kserve_version 0.20 does not match the cluster" in gate.out
    assert "spec.predictor.storageUris needs KServe >= 0.16 (cluster: 0.15.2)" in gate.out

    # told it is 0.20: the strict check against the cluster's own CRD schema stops it
    strict = run_deploy(emu, tmp_path, inv, "-e", "specpilot_deploy_kserve_version=0.20")
    assert strict.rc != 0
    assert "do not validate against the cluster's own CRD schema" in strict.out
    assert "'storageUris' was unexpected" in strict.out

    # without that check, the server-side dry run shows the API server dropping the field
    pruned = run_deploy(
        emu,
        tmp_path,
        inv,
        "-e",
        "specpilot_deploy_kserve_version=0.20",
        "-e",
        "specpilot_deploy_validate_crd=false",
    )
    assert pruned.rc != 0
    assert "the API server drops InferenceService/opt-a: spec.predictor.storageUris" in pruned.out
    writes = [w for w in emu.control.writes(since=mark) if "coordination" not in w["path"]]
    assert writes == [], writes  # only the lock was ever written
    assert _isvc(emu, ns, "opt-a") is None


def test_one_failing_service_does_not_stop_the_others(emulator, tmp_path):
    ns = "deploy-many"
    create_namespace(emulator, ns)
    hold_deploy_lock(emulator, ns, "locked", "bob@laptop/pid/x1")
    services = {
        "good-1": OPTION_C,
        "good-2": dict(OPTION_C, specpilot_speculative=dict(NGRAM, num_speculative_tokens=2)),
        "invalid": dict(OPTION_C, specpilot_speculative=dict(NGRAM, num_speculative_tokens=0)),
        "locked": OPTION_C,
    }
    inv = write_inventory(tmp_path / "inv", ns, services)
    with FakeKServe(emulator, ns):
        run = run_deploy(emulator, tmp_path, inv)
    assert run.rc != 0
    recap = run.recap()
    assert recap["good-1"]["failed"] == 0 and recap["good-2"]["failed"] == 0
    assert recap["invalid"]["failed"] == 1 and recap["locked"]["failed"] == 1
    summary = run.out.split("TASK [Summary of every service]", 1)[1]
    assert "good-1: deployed, ready" in summary and "good-2: deployed, ready" in summary
    assert "invalid: FAILED" in summary and "num_speculative_tokens" in summary.split("locked:")[0]
    assert "locked: FAILED" in summary and "bob@laptop/pid/x1" in summary
    assert _isvc(emulator, ns, "good-1") and _isvc(emulator, ns, "good-2")
    assert _isvc(emulator, ns, "invalid") is None and _isvc(emulator, ns, "locked") is None


def _consistent(emu, ns, name):
    """The runtime and the InferenceService carry the same spec digest: no half-applied service."""
    isvc = _isvc(emu, ns, name)
    runtime = get(emu, "serving.kserve.io/v1alpha1", "ServingRuntime", f"{name}-vllm", ns)
    return (
        isvc["metadata"]["annotations"]["specpilot.io/spec-digest"],
        runtime["metadata"]["annotations"]["specpilot.io/spec-digest"],
    )


def test_the_runtime_is_put_back_when_the_inferenceservice_cannot_be_applied(emulator, tmp_path):
    ns = "deploy-half"
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {"svc": OPTION_C})
    with FakeKServe(emulator, ns):
        assert run_deploy(emulator, tmp_path, inv).rc == 0
    before = _consistent(emulator, ns, "svc")
    runtime_before = get(emulator, "serving.kserve.io/v1alpha1", "ServingRuntime", "svc-vllm", ns)["spec"]
    write_inventory(
        tmp_path / "inv",
        ns,
        {
            "svc": dict(
                OPTION_C, specpilot_runtime={"image": "specpilot-lab/vllm-cpu:0.32.9", "shm_size": "2Gi"}
            )
        },
    )
    emulator.control.add_fault(verb="patch", resource="inferenceservices", namespace=ns, code=500, rate=1.0)
    try:
        run = run_deploy(
            emulator,
            tmp_path,
            inv,
            "-e",
            "specpilot_deploy_dry_run=false",
            "-e",
            "specpilot_deploy_api_retries=2",
        )
    finally:
        emulator.control.clear_faults()
    assert run.rc != 0
    assert "Put the runtime back as it was" in run.out and "The service keeps its previous spec" in run.out
    assert _consistent(emulator, ns, "svc") == before
    assert (
        get(emulator, "serving.kserve.io/v1alpha1", "ServingRuntime", "svc-vllm", ns)["spec"]
        == runtime_before
    )
    assert get(emulator, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", ns) is None
