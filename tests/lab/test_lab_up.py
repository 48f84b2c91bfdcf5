"""``make lab-up`` leaves a lab that ``inventories/lab`` can use as it is: the namespace, the
models PVC and the tiny models are there, a second ``up`` changes nothing, ``status`` says what
the inventory finds, and ``deploy.yml -i inventories/lab`` deploys every lab service on the first
try (on the stand-in engine: this test is about the lab's readiness, not the engine)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


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


@pytest.fixture
def lab_state(vllm_venv, tmp_path):
    state = tmp_path / "lab"
    yield state
    _lab(state, "down")


def test_lab_up_seeds_what_the_lab_inventory_needs_and_deploy_works_first_try(lab_state, tmp_path):
    up = _lab(lab_state, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    assert (
        "seeded: namespace specpilot-lab, PVC specpilot-lab/specpilot-lab-models, "
        "tiny models on specpilot-lab-models" in up.stdout
    ), up.stdout
    again = _lab(lab_state, "up")
    assert again.returncode == 0 and "already running" in again.stdout
    assert "seed: the lab inventory's namespace, PVC and models are there" in again.stdout
    status = _lab(lab_state, "status")
    assert "inventories/lab: PVC specpilot-lab/specpilot-lab-models Bound, models: draft, eagle3, target" in (
        status.stdout
    ), status.stdout

    env = dict(
        _env(lab_state),
        KUBECONFIG=str(lab_state / "kubeconfig"),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        SPECPILOT_REPORT_DIR=str(tmp_path / "reports"),
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    deploy = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "inventories/lab", "playbooks/deploy.yml"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    out = deploy.stdout + deploy.stderr
    assert deploy.returncode == 0, out[-6000:]
    recap = dict(re.findall(r"^(lab-\w+)\s+:\s+ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=(\d+)", out, re.M))
    assert recap == {"lab-ngram": "0", "lab-draft": "0", "lab-suffix": "0"}, out[-3000:]
