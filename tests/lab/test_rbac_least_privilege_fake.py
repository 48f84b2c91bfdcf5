"""Least privilege, shipped and proven (issue 19, item 2), and one connection for every role (issue 18, item
3): playbooks/rbac.yml (roles/specpilot_rbac), run once as the lab admin, creates the automation's
ServiceAccount, Role, RoleBinding and cluster reads; a token of that ServiceAccount from the TokenRequest API
(what ``kubectl create token`` asks for) then runs stage, validate, deploy (its staging Job included, as the
token-less ``specpilot-jobs``), smoke and rollback in the lab, whose API emulator enforces RBAC as
kube-apiserver does. Then a few representative rules, one at a time, are taken out of the shipped Role or
ClusterRole: the playbook that needs the rule fails, with the API server's message naming the verb, the
resource and the namespace. (Not every rule: each failing run costs an ansible-playbook;
tests/emulator/test_auth.py covers the matching itself.) The benchmark, guard and canary playbooks run as the
same ServiceAccount only in their own lab tests (tests/lab/automation.py): test_benchmark_playbook.py,
test_guard_lab_fake.py, test_canary_playbook.py.

Every run has the kubeconfig only as a variable (``-e specpilot_k8s_kubeconfig=...``), while KUBECONFIG
names a file that does not exist, there is no ~/.kube/config and no K8S_AUTH_* variable: every Kubernetes
task of every role - the staging Job and its wait, the lock, the rollout wait, the smoke check, the
rollback's record, its rollout wait and its smoke check, the staging that deploy runs - must take the
connection from the playbooks' module_defaults (group/kubernetes.core.k8s and group/specpilot.core.k8s); one
that fell back to KUBECONFIG would fail. The deprecated specpilot_deploy_kubeconfig /
specpilot_rollback_kubeconfig still work. (This was tests/lab/test_connection_variable_fake.py, which ran
the same playbooks as the lab admin; merged here, its assertions kept, to start one lab less.)

The lab: the emulator and the controller (KServe's stand-in, with the admin's kubeconfig), the stand-in
engine (lab/specpilot_lab/fake_engine.py), which refuses a model directory without config.json: the service
becomes Ready only on what staging copied onto the PVC over HTTP.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from automation import SA, label, rules_needed, shipped_rules, token_kubeconfig, user
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


USER = user(NAMESPACE)
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
ROLE = f"{RBAC_API}/namespaces/{NAMESPACE}/roles/{SA}"
CLUSTER_ROLE = f"{RBAC_API}/clusterroles/{SA}-{NAMESPACE}-cluster-read"

# (the role object, a resource its rule names, the playbook that needs it, what the 403 says)
WITHOUT = [
    (
        ROLE,
        "leases",
        "deploy.yml",
        f'User "{USER}" cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "{NAMESPACE}"',
    ),
    (
        ROLE,
        "inferenceservices",
        "smoke.yml",
        f'User "{USER}" cannot get resource "inferenceservices" in API group "serving.kserve.io" in the namespace '
        f'"{NAMESPACE}"',
    ),
    (
        ROLE,
        "pods/log",
        "smoke.yml",
        f'User "{USER}" cannot get resource "pods/log" in API group "" in the namespace "{NAMESPACE}"',
    ),
    (
        CLUSTER_ROLE,
        "customresourcedefinitions",
        "deploy.yml",
        f'User "{USER}" cannot get resource "customresourcedefinitions" in API group "apiextensions.k8s.io" '
        "at the cluster scope",
    ),
]


# shipped rules these runs (validate, deploy, smoke, rollback of one healthy service) do not need, and who does
NOT_HERE = {
    "core/nodes": "the benchmark reads its predictor's Node (test_benchmark_playbook.py asserts it needs the rule)",
    # both proven under the shipped Role against the emulator: tests/emulator/test_rbac_reads.py (read, and named
    # when the rule is taken out)
    "core/events": "deploy's diagnosis of a failed rollout (tests/emulator/test_rbac_reads.py)",
    "serving.kserve.io/clusterservingruntimes": "deploy of a service on a ClusterServingRuntime "
    "(tests/emulator/test_rbac_reads.py)",
    # issue 39: proven under the shipped Role against the emulator (its CRD reads by name, the applies)
    "monitoring.coreos.com/prometheusrules,podmonitors,servicemonitors": "monitoring.yml with "
    "specpilot_monitoring_apply (tests/unit/monitoring/test_monitoring_rules.py test_playbook_applies_rule_and_dashboard)",
}


PLANTED = "hf_PlantedNeverPrinted0123456789abcd"


def _plant_secret(lab: SmokeLab) -> None:
    """A Secret the service's env names (valueFrom): the engine gets it, the playbooks never read it."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf-token"},
        "stringData": {"token": PLANTED},
    }
    assert lab.emu.request("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets", body).status == 201


def _kubeconfig_token(path: Path) -> str:
    token = yaml.safe_load(path.read_text())["users"][0]["user"]["token"]
    assert len(token) > 20
    return token


def _assert_no_secret(lab: SmokeLab, reports: Path, out: str, token: str) -> None:
    """Issue 19, item 5: at -vvv, neither the planted Secret's value nor the automation's token shows in the
    output, the reports, or what the runs left in the cluster (manifests, annotations, history ConfigMaps)."""
    assert "ESTABLISH LOCAL CONNECTION" in out, out[:2000]  # the runs were at -vvv
    objects = [
        lab.emu.request("GET", f"{api}/namespaces/{NAMESPACE}/{kind}").body.decode()
        for api, kind in (
            ("/apis/serving.kserve.io/v1beta1", "inferenceservices"),
            ("/apis/serving.kserve.io/v1alpha1", "servingruntimes"),
            ("/api/v1", "configmaps"),
            ("/apis/batch/v1", "jobs"),
        )
    ]
    written = [
        p.read_text(errors="replace") for p in reports.rglob("*") if p.is_file() and p.suffix != ".png"
    ]
    assert written and "HF_TOKEN" in objects[0]  # the reference is there, by name
    for secret in (PLANTED, token):
        assert secret not in out
        assert not [w for w in written if secret in w]
        assert not [o for o in objects if secret in o]


def _staged_deployed_and_smoked(lab: SmokeLab, reports: Path, outs: dict) -> None:
    """stage.yml filled the PVC (k8s_job_wait followed the Job), deploy staged again (up to date) and
    deployed, smoke passed with speculative decoding on."""
    assert "specpilot-stage: progress" in outs["stage.yml"]
    assert (lab.pvc_dir / "target" / "config.json").is_file()
    assert lab.get("v1", "ConfigMap", "specpilot-stage-specpilot-lab-models", NAMESPACE)
    deploy = _words(outs["deploy.yml"])
    assert f"{SERVICE}: deployed, ready" in deploy
    assert "Stage | Fill the PVC" in deploy and "up to date" in deploy
    smoke = json.loads((reports / "smoke" / SERVICE / "smoke.json").read_text())
    assert smoke["verdict"] == "pass" and smoke["expect"] == "on"


def _without_rule(lab: SmokeLab, path: str, resource: str) -> dict:
    """Take the rule naming ``resource`` out of the (Cluster)Role at ``path``; returns the object before."""
    before = lab.emu.request("GET", path).json()
    after = copy.deepcopy(before)
    after["rules"] = [r for r in after["rules"] if resource not in r.get("resources", [])]
    assert len(after["rules"]) == len(before["rules"]) - 1, before["rules"]
    assert lab.emu.request("PUT", path, after).status == 200
    return before


def _put_back(lab: SmokeLab, path: str, before: dict) -> None:
    current = lab.emu.request("GET", path).json()
    body = dict(
        before, metadata=dict(before["metadata"], resourceVersion=current["metadata"]["resourceVersion"])
    )
    assert lab.emu.request("PUT", path, body).status == 200


def test_playbooks_run_with_only_the_shipped_role_and_each_rule_is_needed(tmp_path):
    started = time.monotonic()
    lab = SmokeLab(tmp_path, engine.fake_engine_python(tmp_path))
    try:
        lab.models_pvc(None)
        ss.make_model(tmp_path / "src" / "target", hidden=128, weight_bytes=256 * 1024)
        ss.sha256sums(tmp_path / "src" / "target")
        with ss.ModelHTTPServer(tmp_path / "src") as srv:
            inv = _inventory(tmp_path, srv.files_url("target/"))
            env = _env(lab, tmp_path)
            assert not os.path.exists(env["KUBECONFIG"])
            assert not (Path(env["HOME"]) / ".kube" / "config").exists()
            reports = {"specpilot_report_dir": str(tmp_path / "reports")}
            # the control: without the variable nothing reaches the cluster
            rc, out = _run(env, inv, "stage.yml", reports)
            assert rc != 0 and "Invalid kube-config file" in out, out[-3000:]

            admin = dict(reports, specpilot_k8s_kubeconfig=str(lab.emu.kubeconfig))
            rc, out = _run(env, inv, "rbac.yml", admin)
            assert rc == 0, out[-6000:]
            jobs_sa = lab.get("v1", "ServiceAccount", "specpilot-jobs", NAMESPACE)
            assert jobs_sa["automountServiceAccountToken"] is False

            _plant_secret(lab)
            mark = lab.emu.control.mark()
            kubeconfig = token_kubeconfig(lab.emu, tmp_path, NAMESPACE)
            automation = dict(
                reports,
                specpilot_k8s_kubeconfig=str(kubeconfig),
                specpilot_stage_pvc_service_account="specpilot-jobs",
                specpilot_rollback_reclaim_service_account="specpilot-jobs",
                specpilot_env=[
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
                ],
            )
            outs = {}
            for playbook in ("stage.yml", "validate.yml", "deploy.yml", "smoke.yml"):
                rc, outs[playbook] = _run(env, inv, playbook, automation, flags=("-vvv",))
                assert rc == 0, f"{playbook}:\n{outs[playbook][-6000:]}"
            _staged_deployed_and_smoked(lab, tmp_path / "reports", outs)
            # the deploy role's deprecated name still reaches every task (staging's included), with a warning
            old = dict(automation, specpilot_deploy_kubeconfig=automation["specpilot_k8s_kubeconfig"])
            del old["specpilot_k8s_kubeconfig"]
            rc, out = _run(env, inv, "deploy.yml", old)
            assert rc == 0 and f"{SERVICE}: unchanged, ready" in out and _changed(out) == 0, out[-6000:]
            assert (
                "DEPRECATED: specpilot_deploy_kubeconfig and specpilot_deploy_context are removed"
                in _words(out)
            )

            rc, outs["rollback.yml"] = _run(env, inv, "rollback.yml", automation, flags=("-vvv",))
            assert rc == 0, outs["rollback.yml"][-6000:]
            assert not [
                a for a in lab.isvc(SERVICE)["spec"]["predictor"]["model"]["args"] if "speculative" in a
            ]
            rollback = json.loads((tmp_path / "reports" / "rollback" / f"{SERVICE}.json").read_text())
            assert rollback["changed"] and rollback["verification"]["ok"], rollback
            assert rollback["smoke"]["verdict"] == "pass"  # the rollback's own smoke check, expect off
            old = dict(automation, specpilot_rollback_kubeconfig=automation["specpilot_k8s_kubeconfig"])
            del old["specpilot_k8s_kubeconfig"]
            rc, out = _run(env, inv, "rollback.yml", old)
            assert rc == 0 and _changed(out) == 0, out[-6000:]
            assert (
                "DEPRECATED: specpilot_rollback_kubeconfig and specpilot_rollback_context are removed"
                in _words(out)
            )
            _assert_no_secret(
                lab, tmp_path / "reports", "\n".join(outs.values()), _kubeconfig_token(kubeconfig)
            )
            job = lab.emu.request("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs").json()["items"][0]
            pod = job["spec"]["template"]["spec"]
            assert (
                pod["serviceAccountName"] == "specpilot-jobs" and pod["automountServiceAccountToken"] is False
            )
            assert pod["securityContext"]["runAsNonRoot"] and pod["containers"][0]["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            }
            # everything the playbooks asked for went as the ServiceAccount, and nothing was refused but
            # the smoke role's look inside the pod (pods/exec, which the shipped Role leaves out): the
            # report says that check was skipped, and why
            mine = [e for e in lab.emu.control.requests(since=mark) if e["user"] == USER]
            refused = [(e["resource"], e["subresource"]) for e in mine if e["code"] in (401, 403)]
            assert mine and refused and set(refused) == {("pods", "exec")}, refused
            smoke = json.loads((tmp_path / "reports" / "smoke" / SERVICE / "smoke.json").read_text())
            view = {c["id"]: c for c in smoke["checks"]}["pod_view"]
            assert view["status"] == "skip" and "(exec needs create on pods/exec)" in view["message"], view
            assert not [e for e in mine if e["resource"] == "secrets"]
            # every shipped rule is the only one that granted some request of these runs, but for NOT_HERE
            every = {label(r) for _ns, r in shipped_rules(lab.emu, NAMESPACE)}
            assert every - rules_needed(lab.emu, mark, NAMESPACE) == set(NOT_HERE), NOT_HERE

            for path, resource, playbook, message in WITHOUT:
                before = _without_rule(lab, path, resource)
                try:
                    rc, out = _run(env, inv, playbook, automation)
                finally:
                    _put_back(lab, path, before)
                assert rc != 0, f"{playbook} passed without the rule for {resource}:\n{out[-4000:]}"
                # the Status message, JSON-quoted inside the task's error
                assert message in _words(out.replace('\\"', '"')), f"without {resource}:\n{out[-6000:]}"
    finally:
        lab.close()
    print(
        f"\n[rbac] rbac.yml, stage, validate, deploy, smoke, rollback (and the old names) as the ServiceAccount, "
        f"{len(WITHOUT)} rules out: "
        f"{time.monotonic() - started:.0f}s"
    )


def test_anonymous_requests_are_refused_with_401(emulator):
    """Must show (issue 19): in the lab, an anonymous request to the API server is refused with 401."""
    for path in ("/api/v1/secrets", "/api/v1/namespaces/default/secrets", "/apis", "/version"):
        r = emulator.request("GET", path, token=None)
        assert r.status == 401, (path, r)
        assert json.loads(r.body)["reason"] == "Unauthorized"
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "stringData": {"k": "v"}}
    assert emulator.request("POST", "/api/v1/namespaces/default/secrets", body, token=None).status == 401
    assert (
        emulator.request("GET", "/api/v1/namespaces/default/secrets/x").status == 404
    )  # nothing was written
