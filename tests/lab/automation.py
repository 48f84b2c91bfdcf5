"""The shipped least privilege in a lab test (issue 19, item 2): ``playbooks/rbac.yml``, run once as the lab
admin, creates the automation's ServiceAccount and its Role in the namespace; a token of that ServiceAccount
from the TokenRequest API (what ``kubectl create token`` asks for) goes into a kubeconfig of its own. The
playbooks then get it only as ``specpilot_k8s_kubeconfig`` while KUBECONFIG names a file that does not exist,
so every call they make is the ServiceAccount's, and the lab's API server, which enforces RBAC as
kube-apiserver does, refuses what the shipped Role does not grant.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from specpilot_lab.apiserver.server import write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
SA = "specpilot-automation"


def user(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{SA}"


def no_kubeconfig(env: dict, root: Path) -> dict:
    """``env`` without a way to the cluster but the playbooks' variables: KUBECONFIG names no file, no
    K8S_AUTH_* variable."""
    env = {k: v for k, v in env.items() if not k.startswith("K8S_AUTH_")}
    env["KUBECONFIG"] = str(Path(root) / "no-such-kubeconfig")
    return env


def apply_rbac(ansible_playbook: Path, inventory: Path, env: dict, admin_kubeconfig: Path) -> str:
    """playbooks/rbac.yml as the lab admin, for the namespaces of ``inventory``'s services; its output."""
    cmd = [str(ansible_playbook), "-i", str(inventory), str(ROOT / "playbooks" / "rbac.yml")]
    cmd += ["-e", json.dumps({"specpilot_k8s_kubeconfig": str(admin_kubeconfig)})]
    proc = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc.stdout


def token_kubeconfig(emu, root: Path, namespace: str) -> Path:
    """A kubeconfig holding only a token of the shipped ServiceAccount (TokenRequest, one hour)."""
    r = emu.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{SA}/token", {"spec": {}})
    assert r.status == 201, r
    return write_kubeconfig(
        Path(root) / "automation.kubeconfig",
        emu.url.replace("http://", "https://"),
        namespace,
        token=r.json()["status"]["token"],
        user=SA,
        ca_file=emu.state_dir / "apiserver.crt",
    )


def refused(emu, mark, namespace: str) -> set[tuple[str, str]]:
    """(resource, subresource) of the ServiceAccount's requests since ``mark`` that were refused (401, 403);
    asserts it made some."""
    mine = [e for e in emu.control.requests(since=mark) if e["user"] == user(namespace)]
    assert mine, "no request came as the ServiceAccount"
    return {(e["resource"], e["subresource"]) for e in mine if e["code"] in (401, 403)}


class Automation:
    """The ServiceAccount's kubeconfig for the lab of ``emu``, after rbac.yml; ``env(base)`` is an
    ansible-playbook environment with no other way to the cluster, ``extra`` the variable that gives it."""

    def __init__(self, emu, root: Path, ansible_playbook: Path, inventory: Path, env: dict, namespace: str):
        self.emu, self.root, self.namespace = emu, Path(root), namespace
        apply_rbac(ansible_playbook, inventory, env, emu.kubeconfig)
        self.kubeconfig = token_kubeconfig(emu, self.root, namespace)
        self.extra = {"specpilot_k8s_kubeconfig": str(self.kubeconfig)}
        self.mark = emu.control.mark()

    def env(self, base: dict) -> dict:
        assert not os.path.exists(self.root / "no-such-kubeconfig")
        return no_kubeconfig(base, self.root)

    def refused_since_start(self) -> set[tuple[str, str]]:
        return refused(self.emu, self.mark, self.namespace)
