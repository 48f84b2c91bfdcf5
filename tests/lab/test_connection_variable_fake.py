"""One connection for every role (issue 18, item 3): playbooks/stage.yml, deploy.yml, smoke.yml and
rollback.yml through the lab with the lab's kubeconfig given only as a variable (``-e
specpilot_k8s_kubeconfig=...``), while KUBECONFIG names a file that does not exist, there is no
~/.kube/config and no K8S_AUTH_* variable. Every Kubernetes task of every role - the staging Job and its
wait, the lock, the rollout wait, the smoke check, the rollback's record, its rollout wait and its smoke
check, the staging that deploy runs - must take the connection from the playbooks' module_defaults
(group/kubernetes.core.k8s and group/specpilot.core.k8s); one that fell back to KUBECONFIG would fail. The
deprecated specpilot_deploy_kubeconfig / specpilot_rollback_kubeconfig still work.

The lab: the emulator and the controller (staging Jobs under bubblewrap, predictor pods), with the smoke
tests' stand-in engine (lab/specpilot_lab/fake_engine.py), which refuses a model directory without
config.json: the service becomes Ready only on what staging copied onto the PVC.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from smoke_lab import NAMESPACE, ROOT, VENV_BIN, SmokeLab, fake_env

import staging_support as ss
from specpilot_lab import engine
from specpilot_lab.controller.jobs import bwrap_available

pytestmark = [
    pytest.mark.lab,
    pytest.mark.slow,
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run lab Jobs here"),
]

SERVICE = "lab-ngram"
LAB_INVENTORY = ROOT / "inventories" / "lab"


def _inventory(root: Path, target_uri: str) -> Path:
    """inventories/lab with lab-ngram only, its target staged from ``target_uri`` onto the models PVC."""
    inv = root / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    group = yaml.safe_load((LAB_INVENTORY / "group_vars" / "specpilot_services.yml").read_text())
    group["specpilot_target"] = dict(group["specpilot_target"], uri=target_uri)
    group.update(ss.lab_staging_vars())
    group.update(fake_env(FAKE_ACCEPTANCE="0.95,0.9,0.85"))
    (inv / "group_vars" / "specpilot_services.yml").write_text("---\n" + yaml.safe_dump(group))
    host = (LAB_INVENTORY / "host_vars" / f"{SERVICE}.yml").read_text()
    (inv / "host_vars" / f"{SERVICE}.yml").write_text(host)
    (inv / "hosts.yml").write_text("---\n" + yaml.safe_dump({"specpilot_services": {"hosts": {SERVICE: {}}}}))
    return inv


def _env(lab: SmokeLab, root: Path) -> dict[str, str]:
    env = lab.env()
    env["KUBECONFIG"] = str(root / "no-such-kubeconfig")
    for key in [k for k in env if k.startswith("K8S_AUTH_")]:
        del env[key]
    return env


def _run(env, inv: Path, playbook: str, extra: dict, timeout: float = 300, flags=()) -> tuple[int, str]:
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inv), str(ROOT / "playbooks" / playbook), *flags]
    cmd += ["-e", json.dumps(extra)]
    proc = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def _words(out: str) -> str:
    """The output with its line breaks (the YAML callback folds long messages) as plain spaces."""
    return " ".join(out.split())


def _changed(out: str) -> int:
    return ss.recap(out)[SERVICE]["changed"]


def test_stage_deploy_smoke_rollback_with_the_kubeconfig_only_as_a_variable(tmp_path):
    started = time.monotonic()
    lab = SmokeLab(tmp_path, engine.fake_engine_python(tmp_path))
    try:
        lab.models_pvc(None)  # the namespace and the empty models PVC: staging fills it
        ss.make_model(tmp_path / "src" / "target", hidden=128, weight_bytes=256 * 1024)
        ss.sha256sums(tmp_path / "src" / "target")
        with ss.ModelHTTPServer(tmp_path / "src") as srv:
            inv = _inventory(tmp_path, srv.files_url("target/"))
            env = _env(lab, tmp_path)
            assert not os.path.exists(env["KUBECONFIG"])
            assert not (Path(env["HOME"]) / ".kube" / "config").exists()
            reports = {"specpilot_report_dir": str(tmp_path / "reports")}
            conn = dict(reports, specpilot_k8s_kubeconfig=str(lab.emu.kubeconfig))

            # the control: without the variable nothing reaches the cluster
            rc, out = _run(env, inv, "stage.yml", reports)
            assert rc != 0 and "Invalid kube-config file" in out, out[-3000:]

            rc, out = _run(env, inv, "stage.yml", conn)
            assert rc == 0, out[-6000:]
            assert "specpilot-stage: progress" in out  # k8s_job_wait followed the Job
            assert (lab.pvc_dir / "target" / "config.json").is_file()
            assert lab.get("v1", "ConfigMap", "specpilot-stage-specpilot-lab-models", NAMESPACE)

            rc, out = _run(env, inv, "deploy.yml", conn)
            assert rc == 0, out[-6000:]
            assert f"{SERVICE}: deployed, ready" in out
            assert "Stage | Fill the PVC" in out and "up to date" in out  # staging again, from deploy

            rc, out = _run(env, inv, "smoke.yml", conn)
            assert rc == 0, out[-6000:]
            smoke = json.loads((tmp_path / "reports" / "smoke" / SERVICE / "smoke.json").read_text())
            assert smoke["verdict"] == "pass" and smoke["expect"] == "on"

            # the deploy role's deprecated name still reaches every task (staging's included), with a warning
            old = dict(reports, specpilot_deploy_kubeconfig=str(lab.emu.kubeconfig))
            rc, out = _run(env, inv, "deploy.yml", old)
            assert rc == 0, out[-6000:]
            assert f"{SERVICE}: unchanged, ready" in out and _changed(out) == 0
            assert (
                "DEPRECATED: specpilot_deploy_kubeconfig and specpilot_deploy_context are removed"
                in _words(out)
            )

            rc, out = _run(env, inv, "rollback.yml", conn)
            assert rc == 0, out[-6000:]
            args = lab.isvc(SERVICE)["spec"]["predictor"]["model"]["args"]
            assert not [a for a in args if a.startswith("--speculative-config")]
            rollback = json.loads((tmp_path / "reports" / "rollback" / f"{SERVICE}.json").read_text())
            assert rollback["changed"] and rollback["verification"]["ok"], rollback
            assert rollback["smoke"]["verdict"] == "pass"  # the rollback's own smoke check, expect off

            old = dict(reports, specpilot_rollback_kubeconfig=str(lab.emu.kubeconfig))
            rc, out = _run(env, inv, "rollback.yml", old)
            assert rc == 0, out[-6000:]
            assert _changed(out) == 0
            assert (
                "DEPRECATED: specpilot_rollback_kubeconfig and specpilot_rollback_context are removed"
                in _words(out)
            )
    finally:
        lab.close()
    print(
        f"\n[connection] stage, deploy, smoke, rollback and the old names: {time.monotonic() - started:.0f}s"
    )
