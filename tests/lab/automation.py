"""The shipped least privilege in a lab test (issue 19, item 2): ``playbooks/rbac.yml``, run once as the lab
admin, creates the automation's ServiceAccount and its Role in the namespace; a token of that ServiceAccount
from the TokenRequest API (the README's own command, kubectl create --raw) goes into a kubeconfig of its own. The
playbooks then get it only as ``specpilot_k8s_kubeconfig`` while KUBECONFIG names a file that does not exist,
so every call they make is the ServiceAccount's, and the lab's API server, which enforces RBAC as
kube-apiserver does, refuses what the shipped Role does not grant.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

from specpilot_lab.apiserver.auth import Attributes, User, rule_allows
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


def readme_token(emu, namespace: str) -> str:
    """A token of the shipped ServiceAccount, made by the README's own command ("Least privilege": a
    TokenRequest through ``kubectl create --raw``, which the project's kubectl 1.20 sends), run as written
    with ``<namespace>`` filled in, as the lab admin, with the project's kubectl first on PATH (issue 39)."""
    block = (ROOT / "README.md").read_text().split("# the token for AWX or CI", 1)[1].split("```", 1)[0]
    command = "\n".join(line for line in block.splitlines()[1:] if not line.startswith("#"))
    env = dict(os.environ, KUBECONFIG=str(emu.kubeconfig), PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}")
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command.replace("<namespace>", namespace)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==="))
    assert claims["exp"] - claims["iat"] == 86400, claims  # the 24 hours the README asks for
    return token


def token_kubeconfig(emu, root: Path, namespace: str) -> Path:
    """A kubeconfig holding only a token of the shipped ServiceAccount (the README's TokenRequest, 24 h)."""
    return write_kubeconfig(
        Path(root) / "automation.kubeconfig",
        emu.url.replace("http://", "https://"),
        namespace,
        token=readme_token(emu, namespace),
        user=SA,
        ca_file=emu.state_dir / "apiserver.crt",
    )


def refused(emu, mark, namespace: str) -> set[tuple[str, str]]:
    """(resource, subresource) of the ServiceAccount's requests since ``mark`` that were refused (401, 403);
    asserts it made some."""
    mine = [e for e in emu.control.requests(since=mark) if e["user"] == user(namespace)]
    assert mine, "no request came as the ServiceAccount"
    return {(e["resource"], e["subresource"]) for e in mine if e["code"] in (401, 403)}


RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


def label(rule: dict) -> str:
    """A rule as ``group/resources`` (``core`` for the core group), e.g. ``coordination.k8s.io/leases``."""
    return "%s/%s" % (
        ",".join(g or "core" for g in rule.get("apiGroups") or []),
        ",".join(rule.get("resources") or []),
    )


def shipped_rules(emu, namespace: str) -> list[tuple[bool, dict]]:
    """(namespaced, rule) of the shipped Role of ``namespace`` and its cluster-read ClusterRole."""
    role = emu.request("GET", f"{RBAC_API}/namespaces/{namespace}/roles/{SA}").json()
    cluster = emu.request("GET", f"{RBAC_API}/clusterroles/{SA}-{namespace}-cluster-read").json()
    return [(True, r) for r in role["rules"]] + [(False, r) for r in cluster["rules"]]


def rules_needed(emu, mark, namespace: str) -> set[str]:
    """The shipped rules without which some request the ServiceAccount made since ``mark`` (and was granted)
    would have been refused: the rules no other rule could stand in for, judged as the lab's authorizer
    judges (lab/specpilot_lab/apiserver/auth.py rule_allows)."""
    rules = shipped_rules(emu, namespace)
    sa = User(user(namespace))
    needed = set()
    for e in emu.control.requests(since=mark):
        if e["user"] != sa.name or not e["resource"] or not 200 <= int(e["code"] or 0) < 300:
            continue
        # a Namespace's own namespace is its name, as kube-apiserver's RequestInfo has it (the log leaves it out)
        ns = e["name"] if e["resource"] == "namespaces" else e["namespace"]
        attrs = Attributes(
            sa,
            e["verb"],
            True,
            api_group=e["group"],
            namespace=ns,
            resource=e["resource"],
            subresource=e["subresource"],
            name=e["name"],
        )
        allowing = [r for ns_rule, r in rules if (not ns_rule or ns == namespace) and rule_allows(attrs, r)]
        if len(allowing) == 1:
            needed.add(label(allowing[0]))
    return needed


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

    def rules_needed_since_start(self) -> set[str]:
        return rules_needed(self.emu, self.mark, self.namespace)
