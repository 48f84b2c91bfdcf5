"""playbooks/guard.yml with only the shipped Role (roles/specpilot_rbac; issue 19, item 2): the emulator
enforces RBAC; playbooks/rbac.yml, run as the lab admin, creates the ServiceAccount and its Role; the guard
then reads the InferenceService, judges the engine's /metrics and records its history ConfigMap with a
token of that ServiceAccount, and the API server refuses none of its requests. (The guard's rollback runs
the rollback role, proven with the same Role in tests/lab/test_rbac_least_privilege_fake.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import guard_support as gs
import vllm_pages as vp
from specpilot_lab.apiserver.server import write_kubeconfig

pytestmark = [pytest.mark.slow]

NS = "guard-rbac"
SA = "specpilot-automation"


def _token_kubeconfig(emu, path):
    r = emu.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/{SA}/token", {"spec": {}})
    assert r.status == 201, r
    url = emu.url.replace("http://", "https://")
    ca = emu.state_dir / "apiserver.crt"
    return write_kubeconfig(path, url, NS, token=r.json()["status"]["token"], user=SA, ca_file=ca)


def test_the_guard_judges_and_records_with_only_the_shipped_role(emulator, tmp_path):
    gs.create_namespace(emulator, NS)
    metrics = gs.MetricsServer()
    try:
        gs.create_isvc(emulator, NS, "low", metrics.add("low", vp.LOW))
        inv = gs.write_inventory(tmp_path / "inv.yml", NS, ["low"])
        env = dict(emulator.env, ANSIBLE_CONFIG=str(gs.ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        playbook = [str(os.path.join(os.path.dirname(sys.executable), "ansible-playbook")), "-i", str(inv)]
        rbac = subprocess.run(
            playbook + [str(gs.ROOT / "playbooks" / "rbac.yml")],
            cwd=gs.ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert rbac.returncode == 0, rbac.stdout[-4000:] + rbac.stderr[-2000:]
        kubeconfig = _token_kubeconfig(emulator, tmp_path / "automation.kubeconfig")

        mark = emulator.control.mark()
        run = gs.run_guard(emulator, tmp_path, inv, extra={"specpilot_k8s_kubeconfig": str(kubeconfig)})
        assert run.rc == 0, run.out[-6000:]
        assert run.service("low")["status"] == "low" and gs.guard_history(emulator, NS, "low")
        mine = [
            e
            for e in emulator.control.requests(since=mark)
            if e["user"] == f"system:serviceaccount:{NS}:{SA}"
        ]
        assert mine and not [e for e in mine if e["code"] in (401, 403)], mine
        assert {e["resource"] for e in mine if e["verb"] in ("create", "patch")} == {"configmaps"}
    finally:
        metrics.close()
