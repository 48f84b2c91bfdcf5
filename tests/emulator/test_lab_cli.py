"""``python -m specpilot_lab up|down|status`` and the apiserver command line."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from specpilot_lab.apiserver.auth import ADMIN_TOKEN

ROOT = Path(__file__).resolve().parents[2]


def lab(tmp_path: Path, *args: str, crds: str | None = None) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        SPECPILOT_LAB_DIR=str(tmp_path / "lab"),
        PYTHONPATH=str(ROOT / "lab") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    if crds is not None:
        env["SPECPILOT_LAB_CRDS"] = crds
    return subprocess.run(
        [sys.executable, "-m", "specpilot_lab", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.fixture
def lab_dir(tmp_path):
    yield tmp_path
    lab(tmp_path, "down")


def test_up_status_down_are_idempotent(lab_dir, tmp_path):
    crd = tmp_path / "crd.yaml"
    from emulator_helpers import WIDGET_CRD

    crd.write_text(yaml.safe_dump(WIDGET_CRD))
    down = lab(lab_dir, "down")
    assert down.returncode == 0 and "not running" in down.stdout
    up = lab(lab_dir, "up", "--no-seed", crds=str(crd))
    assert up.returncode == 0, up.stderr
    kubeconfig = lab_dir / "lab" / "kubeconfig"
    assert f"export KUBECONFIG={kubeconfig}" in up.stdout
    again = lab(lab_dir, "up", "--no-seed", crds=str(crd))
    assert again.returncode == 0 and "already running" in again.stdout
    status = lab(lab_dir, "status")
    assert status.returncode == 0 and "apiserver: running" in status.stdout
    assert f"export KUBECONFIG={kubeconfig}" in status.stdout
    cfg = yaml.safe_load(kubeconfig.read_text())
    assert cfg["current-context"] == "specpilot-lab"
    ctx = cfg["contexts"][0]["context"]
    assert ctx["namespace"] == "default" and cfg["users"][0]["user"]["token"]
    server = cfg["clusters"][0]["cluster"]["server"]
    assert server.startswith("https://127.0.0.1:")  # kubectl sends the token only over TLS
    ca = base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
    req = urllib.request.Request(
        server + "/apis/lab.specpilot.dev/v1", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    with urllib.request.urlopen(req, context=ssl.create_default_context(cadata=ca)) as resp:  # lab CRDs
        assert json.loads(resp.read())["resources"][0]["name"] == "widgets"
    pid = int((lab_dir / "lab" / "run" / "apiserver.pid").read_text())
    down = lab(lab_dir, "down")
    assert down.returncode == 0 and "stopped" in down.stdout
    assert (
        not Path(f"/proc/{pid}").exists() or "specpilot_lab" not in Path(f"/proc/{pid}/cmdline").read_text()
    )
    status = lab(lab_dir, "status")
    assert "apiserver: stopped" in status.stdout
    assert lab(lab_dir, "down").returncode == 0


def test_stale_pid_file_is_ignored(lab_dir):
    run = lab_dir / "lab" / "run"
    run.mkdir(parents=True)
    (run / "apiserver.pid").write_text(f"{os.getpid()}\n")  # alive, but not the lab's process
    status = lab(lab_dir, "status")
    assert "apiserver: stopped" in status.stdout
    assert not (run / "apiserver.pid").exists()


def test_apiserver_cli_writes_kubeconfig_ready_file_and_log(tmp_path):
    state = tmp_path / "state"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lab"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specpilot_lab.apiserver",
            "--state-dir",
            str(state),
            "--port",
            "0",
            "--no-crds",
            "--kubeconfig",
            str(tmp_path / "kc"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("apiserver: serving http://127.0.0.1:")
        info = json.loads((state / "apiserver.ready").read_text())
        assert info["pid"] == proc.pid and info["url"] == line.split()[2]
        assert (
            yaml.safe_load((tmp_path / "kc").read_text())["clusters"][0]["cluster"]["server"]
            == info["https_url"]
        )
        req = urllib.request.Request(
            info["url"] + "/api/v1/namespaces", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        with urllib.request.urlopen(req) as resp:
            assert resp.status == 200
        from emulator_helpers import wait_for

        wait_for(lambda: "GET /api/v1/namespaces 200" in (state / "apiserver.log").read_text())
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    assert not (state / "apiserver.ready").exists()


def test_missing_crd_path_fails_fast(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lab"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specpilot_lab.apiserver",
            "--state-dir",
            str(tmp_path),
            "--crd",
            str(tmp_path / "nope.yaml"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_state_dir_and_only_options(tmp_path):
    state = tmp_path / "elsewhere"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lab"))
    env.pop("SPECPILOT_LAB_DIR", None)

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "specpilot_lab", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )

    try:
        up = run("up", "--state-dir", str(state), "--only", "apiserver")
        assert up.returncode == 0, up.stderr
        assert (state / "kubeconfig").exists() and (state / "run" / "apiserver.pid").exists()
        assert "apiserver: running" in run("status", "--state-dir", str(state)).stdout
        bad = run("up", "--state-dir", str(state), "--only", "nope")
        assert bad.returncode != 0 and "unknown lab process" in bad.stderr
    finally:
        down = run("down", "--state-dir", str(state), "--only", "apiserver")
    assert down.returncode == 0 and "stopped" in down.stdout
