"""The whole walk a user takes through the lab, as one test (issue 14, items 1 and 6): ``make lab-up``
leaves a lab that ``inventories/lab`` can use as it is: everything its services need is seeded
(namespace, the PVCs with the tiny models, the Modelcar base image and runtime), a second ``up``
changes nothing, ``status`` says what the inventory finds, every service validates, ``stage.yml``
pushes the Modelcar image, and ``deploy.yml -i inventories/lab`` deploys every lab service (options
A, B and C; ngram, draft_model, suffix, eagle3) at once on the first try. Then ``smoke.yml`` passes
for every service, ``benchmark.yml`` measures one, ``rollback.yml`` turns speculative decoding off
everywhere and a second rollback changes nothing, the checkout stays clean (every report under the
ignored ``.reports/``), and ``lab down`` stops it all.

One lab for the whole walk, on the stand-in engine: this test is about the lab's readiness and the
playbooks' wiring, not the engine (the real-engine lab tests and molecule scenarios prove that)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
SERVICES = {"lab-ngram", "lab-draft", "lab-suffix", "lab-eagle3", "lab-storage-uris", "lab-modelcar"}
# short runs on the stand-in engine, TTFT judged loosely (the point is the walk, not the figures)
SHORT_BENCHMARK = {
    "specpilot_benchmark_qps_levels": [2],
    "specpilot_benchmark_target_qps": 2,
    "specpilot_benchmark_runs_per_prompt": 2,
    "specpilot_benchmark_warmup_requests": 2,
    "specpilot_benchmark_max_tokens": 24,
    "specpilot_benchmark_wait_timeout": 180,
    "specpilot_benchmark_slo": {"ttft_max_regression": 10},
}
RECAP = re.compile(r"^(lab-[\w-]+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=(\d+)", re.M)


def _env(state: Path) -> dict[str, str]:
    return dict(
        os.environ,
        SPECPILOT_LAB_DIR=str(state),
        SPECPILOT_LAB_ENGINE="fake",
        PYTHONPATH=os.pathsep.join([str(ROOT / "lab"), str(ROOT / "collections")]),
        TMPDIR="/tmp",  # the engines' ZeroMQ socket paths must stay short
    )


def _lab(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specpilot_lab", *args],
        env=_env(state),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def _playbook(env: dict[str, str], playbook: str, *args: str) -> tuple[str, dict[str, tuple[int, int]]]:
    """Run a playbook on inventories/lab as a user types it; (output, {host: (changed, failed)})."""
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "inventories/lab", f"playbooks/{playbook}", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{playbook}:\n{out[-6000:]}"
    return out, {h: (int(c), int(f)) for h, c, f in RECAP.findall(out)}


@pytest.fixture
def lab_state(vllm_venv, tmp_path):
    state = tmp_path / "lab"
    yield state
    _lab(state, "down")


@pytest.mark.skipif(not shutil.which("skopeo"), reason="skopeo builds the Modelcar image (make installs it)")
def test_lab_up_seeds_what_the_lab_inventory_needs_and_every_service_deploys_first_try(lab_state, tmp_path):
    up = _lab(lab_state, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    seeded = up.stdout.split("seeded: ", 1)[-1].splitlines()[0].split(", ")
    for item in (
        "namespace specpilot-lab",
        "tiny models",
        "PVC specpilot-lab/specpilot-lab-models",
        "PVC specpilot-lab/specpilot-lab-target",
        "PVC specpilot-lab/specpilot-lab-draft",
        "Modelcar base image",
        "ClusterServingRuntime specpilot-lab-vllm",
    ):
        assert item in seeded, up.stdout
    again = _lab(lab_state, "up")
    assert again.returncode == 0 and "already running" in again.stdout
    assert "seed: what the lab inventory needs is there" in again.stdout, again.stdout
    status = _lab(lab_state, "status").stdout
    for line in (
        "inventories/lab: PVC specpilot-lab/specpilot-lab-models Bound, models: draft, eagle3, target",
        "inventories/lab: PVC specpilot-lab/specpilot-lab-target Bound, models: target",
        "inventories/lab: PVC specpilot-lab/specpilot-lab-draft Bound, models: draft",
        f"inventories/lab: Modelcar base image {lab_state / 'modelcar-base'}: there",
        "inventories/lab: ClusterServingRuntime specpilot-lab-vllm: there",
        "inventories/lab: registry holds no image yet (stage.yml pushes lab-modelcar)",
    ):
        assert line in status, status
    # option A's PVCs hold their model at the root (KServe 0.20 mounts the whole claim)
    assert (lab_state / "pvcs" / "specpilot-lab" / "specpilot-lab-target" / "config.json").is_file()

    env = dict(
        _env(lab_state),
        KUBECONFIG=str(lab_state / "kubeconfig"),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        SPECPILOT_REPORT_DIR=str(tmp_path / "reports"),
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    # every service validates, warnings failing too (the Modelcar digest is pending until stage.yml:
    # an acknowledged warning, a note)
    out, recap = _playbook(env, "validate.yml", "-e", "specpilot_strict=true")
    assert recap == {h: (0, 0) for h in SERVICES}, out[-3000:]

    out, recap = _playbook(env, "stage.yml")
    assert recap["lab-modelcar"] == (1, 0) and set(recap) == SERVICES, out[-3000:]
    pushed = re.search(r"pushed: (127\.0\.0\.1:\d+/specpilot/lab-modelcar)@(sha256:[0-9a-f]{64})", out)
    assert pushed, out[-3000:]
    assert "inventories/lab: registry holds specpilot/lab-modelcar" in _lab(lab_state, "status").stdout

    out, recap = _playbook(env, "deploy.yml")
    assert {h: f for h, (_, f) in recap.items()} == {h: 0 for h in SERVICES}, out[-3000:]

    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(str(lab_state / "kubeconfig")))

    def predictor(name: str) -> dict:
        isvc = api.get_namespaced_custom_object(
            "serving.kserve.io", "v1beta1", "specpilot-lab", "inferenceservices", name
        )
        assert {c["type"]: c["status"] for c in isvc["status"]["conditions"]}.get("Ready") == "True", isvc[
            "status"
        ]
        return isvc["spec"]["predictor"]

    for name in SERVICES - {"lab-storage-uris", "lab-modelcar"}:
        assert predictor(name)["model"]["storageUri"] == "pvc://specpilot-lab-models/", name
    # option B: the image stage.yml pushed, by its digest; option A: one PVC entry per artifact
    assert predictor("lab-modelcar")["model"]["storageUri"] == f"oci://{pushed[1]}@{pushed[2]}"
    assert predictor("lab-storage-uris")["storageUris"] == [
        {"uri": "pvc://specpilot-lab-target", "mountPath": "/mnt/models/target"},
        {"uri": "pvc://specpilot-lab-draft", "mountPath": "/mnt/models/draft"},
    ]
    assert '"method":"eagle3","model":"/mnt/models/eagle3"' in " ".join(
        predictor("lab-eagle3")["model"]["args"]
    )
    _walk_on(env, lab_state, predictor)


def _git_status() -> set[str]:
    out = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    return set(out.stdout.splitlines()) if out.returncode == 0 else set()


def _report(kind: str, *parts: str) -> dict:
    return json.loads((ROOT / ".reports" / kind / Path(*parts)).read_text())


def _walk_on(env: dict[str, str], lab_state: Path, predictor) -> None:
    """After the deploy: smoke everywhere, one benchmark, rollback twice, a clean checkout, lab down.
    The reports go where a user's would, under the project's `.reports/` (git ignores it)."""
    before = _git_status()
    out, recap = _playbook(env, "smoke.yml")
    assert set(recap) == SERVICES and all(f == 0 for _, f in recap.values()), out[-3000:]
    for name in SERVICES:
        smoke = _report("smoke", name, "smoke.json")
        assert smoke["verdict"] == "pass" and smoke["expect"] == "on", (name, smoke.get("reasons"))

    # one service measured against its baseline twin, with short runs (the stand-in engine's figures
    # say nothing about vLLM; what counts here is that the walk measures and cleans up after itself)
    out, recap = _playbook(env, "benchmark.yml", "--limit", "lab-ngram", "-e", json.dumps(SHORT_BENCHMARK))
    assert recap == {"lab-ngram": recap["lab-ngram"]} and recap["lab-ngram"][1] == 0, out[-3000:]
    bench = _report("benchmark", "lab-ngram", "report.json")
    assert bench["decision"] in {"keep", "rollback", "inconclusive", "invalid"} and bench["levels"], bench
    assert all(lv["baseline"]["ok"] and lv["speculative"]["ok"] for lv in bench["levels"])
    assert "--speculative-config" in " ".join(predictor("lab-ngram")["model"]["args"])  # not acted on

    out, recap = _playbook(env, "rollback.yml")
    assert recap == {h: recap[h] for h in SERVICES} and all(c > 0 and f == 0 for c, f in recap.values()), out[-3000:]
    for name in SERVICES:
        args = " ".join(predictor(name)["model"]["args"])
        assert "--speculative-config" not in args, (name, args)
        assert _report("rollback", f"{name}.json")["verification"]["ok"], name
    out, recap = _playbook(env, "rollback.yml")
    assert recap == {h: (0, 0) for h in SERVICES}, out[-3000:]  # a second rollback changes nothing

    assert _git_status() == before, "the walk left files in the checkout"
    down = _lab(lab_state, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    status = _lab(lab_state, "status").stdout
    assert ": running" not in status and "the lab is not (fully) running" in status, status
