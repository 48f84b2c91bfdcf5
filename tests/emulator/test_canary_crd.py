"""spec.canary by KServe release, as the API server treats it: the v0.16 CRD has no such field, so
it is pruned (a warning) or refused (fieldValidation=Strict), as on a real cluster; the lab's and
the v0.20 CRDs keep it. On such a cluster playbooks/canary.yml stops at validation, naming the field
and suggesting the benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specpilot_lab.testing import LAB_CRDS, UPSTREAM_CRDS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "benchmark"))
from bench_helpers import BIN, ROOT, ansible_env  # noqa: E402

V016 = UPSTREAM_CRDS.parent / "v0.16.0"
PATH = "/apis/serving.kserve.io/v1beta1/namespaces/%s/inferenceservices"


def _isvc(name: str) -> dict:
    pred = {"model": {"modelFormat": {"name": "vLLM"}, "args": ["--x"]}}
    # the v0.20.0 CRD requires the canary's model name (not the stable one's)
    canary = {"model": {"modelFormat": {"name": "vLLM"}, "args": ["--y"], "name": "kserve-container"}}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
        "spec": {
            "predictor": pred,
            "canary": [{"trafficPercent": 10, "predictor": dict(canary, name="spec")}],
        },
    }


def _namespace(emu, ns: str) -> None:
    r = emu.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    assert r.status == 201, r


@pytest.fixture(scope="module")
def emulator_v016(emulator_factory):
    if not V016.is_dir():
        pytest.skip(f"upstream KServe v0.16.0 CRDs not found at {V016}")
    return emulator_factory([str(V016)], name="emulator-v016")


def test_a_v016_api_server_prunes_or_refuses_spec_canary(emulator_v016):
    emu = emulator_v016
    _namespace(emu, "old")
    r = emu.request("POST", PATH % "old", _isvc("pruned"))
    assert r.status == 201, r
    assert '299 - "unknown field \\"spec.canary\\""' in r.header_all("Warning")
    assert "canary" not in emu.request("GET", PATH % "old" + "/pruned").json()["spec"]
    r = emu.request("POST", PATH % "old" + "?fieldValidation=Strict", _isvc("strict"))
    assert r.status == 400
    assert r.json()["message"] == 'strict decoding error: unknown field "spec.canary"'


@pytest.mark.parametrize("crds", [LAB_CRDS, UPSTREAM_CRDS], ids=["lab", "upstream-v0.20.0"])
def test_the_lab_and_v020_crds_keep_spec_canary(emulator_factory, crds):
    if not Path(crds).is_dir():
        pytest.skip(f"no CRDs at {crds}")
    emu = emulator_factory([str(crds)], name="emulator-canary")
    _namespace(emu, "new")
    body = _isvc("kept")
    r = emu.request("POST", PATH % "new" + "?fieldValidation=Strict", body)
    assert r.status == 201, r.text
    assert r.json()["spec"]["canary"][0]["predictor"]["name"] == "spec"
    del body["spec"]["canary"][0]["predictor"]["model"]["name"]
    r = emu.request("POST", PATH % "new", dict(body, metadata=dict(body["metadata"], name="nameless")))
    assert (
        r.status == 422 and "spec.canary[0].predictor.model.name: Required value" in r.json()["message"]
    ), r.text


def test_canary_playbook_on_a_v016_cluster_names_the_field_and_suggests_the_benchmark(
    emulator_v016, tmp_path
):
    env = ansible_env(tmp_path)
    env["KUBECONFIG"] = str(emulator_v016.kubeconfig)
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "inventories/lab",
            "playbooks/canary.yml",
            "--limit",
            "lab-ngram",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout[-3000:]
    msg = next(line for line in proc.stdout.splitlines() if "spec.canary:" in line)
    assert "KServe 0.16.0 in Standard mode has no traffic split" in msg, json.dumps(msg)
    assert "playbooks/benchmark.yml" in proc.stdout
