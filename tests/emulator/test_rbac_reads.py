"""Two rules of the shipped Role (roles/specpilot_rbac/vars/main.yml) that the lab's RBAC test
(tests/lab/test_rbac_least_privilege_fake.py) leaves to this file (its NOT_HERE): the lab test's runs deploy one
healthy service on a ServingRuntime, so they never read Events (the diagnosis of a failed rollout) nor a
ClusterServingRuntime. Here, against the API emulator (which enforces RBAC as kube-apiserver does), after
playbooks/rbac.yml as the admin, a token of the shipped ServiceAccount runs what reads them: deploy's read of
the service with its ClusterServingRuntime (specpilot.core.deploy_state, as decide.yml runs it) and deploy's
diagnosis entry point (diagnose.yml, as the rollback role calls it). With the shipped rules both read; without
each rule the same run names the missing permission: deploy_state fails with the API server's 403, and the
diagnosis still fails the host with the rollout's failure, saying it could not read the Events and why.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_kubernetes_core import ROOT

sys.path.insert(0, str(ROOT / "tests" / "emulator" / "deploy"))
sys.path.insert(0, str(ROOT / "tests" / "lab"))
from automation import SA, apply_rbac, no_kubeconfig, token_kubeconfig, user  # noqa: E402
from deploy_helpers import VENV_BIN, ansible_env, create_namespace, write_inventory  # noqa: E402

pytestmark = pytest.mark.slow

NS = "rbac-reads"
RUNTIME = "lab-vllm-cluster"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
ROLE = f"{RBAC_API}/namespaces/{NS}/roles/{SA}"
CLUSTER_ROLE = f"{RBAC_API}/clusterroles/{SA}-{NS}-cluster-read"


def _playbook(tmp: Path, kubeconfig: Path) -> Path:
    connection = {"kubeconfig": str(kubeconfig)}
    play = {
        "name": "Read what deploy reads of a service on a ClusterServingRuntime, and diagnose a failed rollout",
        "hosts": "localhost",
        "gather_facts": False,
        "connection": "local",
        "module_defaults": {"group/specpilot.core.k8s": connection, "group/kubernetes.core.k8s": connection},
        "tasks": [
            {
                "name": "Read the service and its ClusterServingRuntime (deploy's decide.yml)",
                "specpilot.core.deploy_state": {
                    "name": "svc",
                    "namespace": NS,
                    "runtime": {"name": RUNTIME, "kind": "ClusterServingRuntime"},
                    "retries": 1,
                },
                "register": "state",
                "ignore_errors": True,
            },
            {
                "name": "Diagnose a rollout that timed out (deploy's diagnose.yml)",
                "block": [
                    {
                        "name": "Diagnose",
                        "ansible.builtin.include_role": {
                            "name": "specpilot_deploy",
                            "tasks_from": "diagnose.yml",
                        },
                        "vars": {
                            "specpilot_deploy_api_timeout": 60,
                            "specpilot_deploy_diagnose_plan": {"name": "svc", "namespace": NS},
                            "specpilot_deploy_diagnose_rollout": {
                                "done": False,
                                "timed_out": True,
                                "elapsed": 900,
                                "timeout": 900,
                                "status": {"message": "timed out after 900s: no pod is ready", "pods": []},
                                "inferenceservice": None,
                                "deployment": None,
                                "pods": [],
                            },
                            "specpilot_deploy_diagnose_result": {"name": "svc", "namespace": NS},
                        },
                    }
                ],
                "rescue": [
                    {
                        "name": "Keep the diagnosis",
                        "ansible.builtin.set_fact": {"diagnosis": "{{ ansible_failed_result.msg }}"},
                    }
                ],
            },
            {
                "name": "Save what was read",
                "ansible.builtin.copy": {
                    "content": "{{ {'state_failed': state.failed | default(false), 'state_msg': state.msg | default(''),"
                    " 'runtime': state.servingruntime | default(none), 'diagnosis': diagnosis} | to_json }}",
                    "dest": str(tmp / "out.json"),
                    "mode": "0644",
                },
            },
        ],
    }
    path = tmp / "reads.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def _read_as_the_service_account(emulator, tmp: Path, kubeconfig: Path) -> dict:
    """The playbook with only the ServiceAccount's kubeconfig (KUBECONFIG names no file); what it saved."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "hosts.yml").write_text("localhost:\n")
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(tmp / "hosts.yml"), str(_playbook(tmp, kubeconfig))]
    env = no_kubeconfig(ansible_env(emulator, tmp), tmp)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return json.loads((tmp / "out.json").read_text())


def _without(emulator, path: str, resource: str) -> dict:
    """Take the rule naming ``resource`` out of the (Cluster)Role at ``path``; returns the object before."""
    before = emulator.request("GET", path).json()
    after = copy.deepcopy(before)
    after["rules"] = [r for r in after["rules"] if resource not in r.get("resources", [])]
    assert len(after["rules"]) == len(before["rules"]) - 1, before["rules"]
    assert emulator.request("PUT", path, after).status == 200
    return before


def test_events_and_cluster_serving_runtimes_are_read_under_the_shipped_role_and_needed(emulator, tmp_path):
    create_namespace(emulator, NS)
    csr = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {"name": RUNTIME},
        "spec": {
            "supportedModelFormats": [{"name": "vllm", "autoSelect": True}],
            "containers": [{"name": "kserve-container", "image": "specpilot-lab/vllm-cpu:0.32.0"}],
        },
    }
    r = emulator.request("POST", "/apis/serving.kserve.io/v1alpha1/clusterservingruntimes", csr)
    assert r.status == 201, r
    inv = write_inventory(tmp_path / "inv", NS, {"svc": {}})
    apply_rbac(
        VENV_BIN / "ansible-playbook", inv / "hosts.yml", ansible_env(emulator, tmp_path), emulator.kubeconfig
    )
    kubeconfig = token_kubeconfig(emulator, tmp_path, NS)

    mark = emulator.control.mark()
    granted = _read_as_the_service_account(emulator, tmp_path / "granted", kubeconfig)
    assert not granted["state_failed"], granted
    assert granted["runtime"]["metadata"]["name"] == RUNTIME
    assert "is not ready: the rollout timed out" in granted["diagnosis"]
    assert "could not read" not in granted["diagnosis"], granted["diagnosis"]
    mine = [e for e in emulator.control.requests(since=mark) if e["user"] == user(NS)]
    reads = {(e["verb"], e["resource"]) for e in mine if 200 <= int(e["code"] or 0) < 300}
    assert {("get", "clusterservingruntimes"), ("list", "events")} <= reads, reads

    _without(emulator, ROLE, "events")
    _without(emulator, CLUSTER_ROLE, "clusterservingruntimes")
    refused = _read_as_the_service_account(emulator, tmp_path / "refused", kubeconfig)
    assert refused["state_failed"], refused
    state_msg = refused["state_msg"].replace('\\"', '"')  # the Status, JSON-quoted inside the task's error
    forbidden_csr = (
        'cannot get resource "clusterservingruntimes" in API group "serving.kserve.io" at the cluster scope'
    )
    assert f'User "{user(NS)}" {forbidden_csr}' in state_msg, state_msg
    diagnosis = refused["diagnosis"]
    assert "is not ready: the rollout timed out" in diagnosis  # the rollout's failure, still
    forbidden_events = f'cannot list resource "events" in API group "" in the namespace "{NS}"'
    assert (
        f'could not read the Events of namespace {NS}: 403 events is forbidden: User "{user(NS)}" {forbidden_events}'
        in diagnosis
    ), diagnosis
