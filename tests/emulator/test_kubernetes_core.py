"""kubernetes.core against the emulator: what the project's roles rely on.

Each test runs real playbooks with ansible-playbook and kubernetes.core 6.x; the
emulator's request log shows which writes reached the store.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.specpilot.core.plugins.action.k8s_retry import readable_diff
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import status_code

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
RECAP = re.compile(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")


def playbook_proc(
    emulator, tmp_path: Path, name: str, extra: dict, check: bool = False, timeout: float = 300, diff: bool = False
):
    """ansible-playbook of tests/emulator/playbooks/``name`` on localhost against the emulator (its
    CompletedProcess)."""
    env = dict(os.environ)
    env.update(
        K8S_AUTH_KUBECONFIG=str(emulator.kubeconfig),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=f"{ROOT / 'collections'}:{ROOT / '.venv' / 'collections'}",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        TMPDIR=str(tmp_path),  # kubernetes.core caches discovery under TMPDIR
        ANSIBLE_NOCOLOR="1",
    )
    cmd = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i", "localhost,", "-c", "local",
        "-e", f"ansible_python_interpreter={sys.executable}",
        "-e", json.dumps(extra),
        str(PLAYBOOKS / name),
    ]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def run_playbook(emulator, tmp_path: Path, name: str, extra: dict, check: bool = False) -> dict:
    proc = playbook_proc(emulator, tmp_path, name, extra, check)
    match = RECAP.search(proc.stdout)
    assert proc.returncode == 0 and match, f"ansible-playbook failed:\n{proc.stdout}\n{proc.stderr}"
    ok, changed, _, failed = map(int, match.groups())
    return {"ok": ok, "changed": changed, "failed": failed, "stdout": proc.stdout}


def get(emulator, path: str) -> dict:
    resp = emulator.request("GET", path, timeout=10)
    assert resp.status == 200, resp
    return resp.json()


def resource_versions(emulator, ns: str) -> dict:
    paths = [f"/api/v1/namespaces/{ns}", f"/api/v1/namespaces/{ns}/configmaps/settings",
             f"/api/v1/namespaces/{ns}/services/engine",
             f"/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices/tiny"]
    return {p: get(emulator, p)["metadata"]["resourceVersion"] for p in paths}


def writes(emulator) -> list[dict]:
    return [r for r in emulator.control.requests() if r["method"] in ("POST", "PUT", "PATCH", "DELETE")]


def test_create_then_rerun_is_unchanged(emulator, tmp_path):
    first = run_playbook(emulator, tmp_path, "objects.yml", {"ns": "rerun"})
    assert first["changed"] == 4
    before = resource_versions(emulator, "rerun")
    second = run_playbook(emulator, tmp_path, "objects.yml", {"ns": "rerun"})
    assert second["changed"] == 0
    # kubernetes.core patches and compares; the no-op patch must not touch the stored objects
    assert resource_versions(emulator, "rerun") == before


def test_apply_rerun_is_unchanged(emulator, tmp_path):
    run_playbook(emulator, tmp_path, "objects.yml", {"ns": "applyrerun", "apply": True})
    rv_before = get(emulator, "/api/v1/namespaces/applyrerun/configmaps/settings")["metadata"]["resourceVersion"]
    again = run_playbook(emulator, tmp_path, "objects.yml", {"ns": "applyrerun", "apply": True})
    assert again["changed"] == 0
    rv_after = get(emulator, "/api/v1/namespaces/applyrerun/configmaps/settings")["metadata"]["resourceVersion"]
    assert rv_after == rv_before


def test_check_mode_writes_nothing(emulator, tmp_path):
    # As on a real cluster, a dry-run create inside a namespace that does not exist is a 404,
    # so the namespace exists first; everything in it is new.
    from kubernetes import client, config

    client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig))).create_namespace(
        {"metadata": {"name": "checkmode"}})
    emulator.control.clear_requests()
    result = run_playbook(emulator, tmp_path, "objects.yml", {"ns": "checkmode"}, check=True)
    assert result["changed"] == 3  # ConfigMap, Service, InferenceService would be created
    all_writes = writes(emulator)
    assert len(all_writes) >= 3 and all(w["dry_run"] for w in all_writes), all_writes
    assert get(emulator, "/api/v1/namespaces/checkmode/configmaps")["items"] == []
    assert get(emulator, "/apis/serving.kserve.io/v1beta1/namespaces/checkmode/inferenceservices")["items"] == []


def test_apply_true_removes_dropped_list_items(emulator, tmp_path):
    two_ports = [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]
    args3 = ["--model=/mnt/models", "--speculative-config={}", "--max-model-len=512"]
    run_playbook(emulator, tmp_path, "objects.yml", {"ns": "dropitems", "apply": True, "ports": two_ports, "args": args3})
    svc = get(emulator, "/api/v1/namespaces/dropitems/services/engine")
    assert sorted(p["port"] for p in svc["spec"]["ports"]) == [8080, 9090]

    result = run_playbook(
        emulator, tmp_path, "objects.yml",
        {"ns": "dropitems", "apply": True, "ports": two_ports[:1], "args": [args3[0], args3[2]]},
    )
    assert result["changed"] == 2
    svc = get(emulator, "/api/v1/namespaces/dropitems/services/engine")
    assert [p["port"] for p in svc["spec"]["ports"]] == [8080]
    isvc = get(emulator, "/apis/serving.kserve.io/v1beta1/namespaces/dropitems/inferenceservices/tiny")
    assert isvc["spec"]["predictor"]["model"]["args"] == [args3[0], args3[2]]
    assert isvc["metadata"]["generation"] == 2


def _make_configmaps(emulator, ns: str) -> None:
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig)))
    core.create_namespace({"metadata": {"name": ns}})
    for name, labels in [
        ("a", {"tier": "spec", "method": "ngram"}),
        ("b", {"tier": "spec", "method": "eagle3"}),
        ("c", {"tier": "base"}),
    ]:
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})


def test_k8s_info_lists_with_selectors(emulator, tmp_path):
    _make_configmaps(emulator, "selectors")
    out = tmp_path / "names.json"
    cases = [
        ({"labels": ["tier=spec"]}, ["a", "b"]),
        ({"labels": ["tier=spec", "method!=ngram"]}, ["b"]),
        ({"labels": ["method in (ngram,eagle3)"]}, ["a", "b"]),
        ({"labels": ["!method"]}, ["c"]),
        ({"fields": ["metadata.name=c"]}, ["c"]),
        ({"labels": ["tier"], "fields": ["metadata.name!=a"]}, ["b", "c"]),
    ]
    # one ansible-playbook run, one k8s_info call a case
    extra = {"ns": "selectors", "out": str(out), "cases": [selectors for selectors, _ in cases]}
    run_playbook(emulator, tmp_path, "info.yml", extra)
    found = json.loads(out.read_text())
    assert len(found) == len(cases)
    for (selectors, expected), names in zip(cases, found):
        assert names == expected, selectors


def test_state_absent_with_label_selectors(emulator, tmp_path):
    _make_configmaps(emulator, "absent")
    result = run_playbook(emulator, tmp_path, "absent_by_label.yml", {"ns": "absent", "selector": "tier=spec"})
    assert result["changed"] == 1
    names = sorted(i["metadata"]["name"] for i in get(emulator, "/api/v1/namespaces/absent/configmaps")["items"])
    assert names == ["c"]
    again = run_playbook(emulator, tmp_path, "absent_by_label.yml", {"ns": "absent", "selector": "tier=spec"})
    assert again["changed"] == 0


# ------------------------------------------------------------------ the in-worker server-side apply
VOLATILE = {"resourceVersion", "uid", "creationTimestamp", "time", "generation"}


def _same_shape(value, names=("by-module", "in-worker")):
    """value with the object's name made one and what differs between two objects by nature (uid,
    resourceVersion, timestamps) left out, so the module's answer and the worker's compare."""
    if isinstance(value, dict):
        return {k: _same_shape(v, names) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_same_shape(v, names) for v in value]
    return "OBJECT" if value in names else value


def _answer(result):
    """What the roles read of a kubernetes.core.k8s result (and what --diff prints). k8s_retry shows the
    module's diff without the fields the API server manages (``readable_diff``)."""
    keys = ("changed", "failed", "method", "result", "diff")
    out = {k: result[k] for k in keys if k in result}
    if "diff" in out:
        out["diff"] = readable_diff(out["diff"])
    return _same_shape(out)


def test_the_in_worker_server_side_apply_answers_as_kubernetes_core_does(emulator, tmp_path):
    """specpilot.core.k8s_retry makes a server-side apply in the worker (plugin_utils/k8s_api.py
    Writer.apply) instead of running kubernetes.core.k8s. Step by step, with --diff, the same arguments
    given to the module (one ConfigMap) and to the worker (another): a create, the same again, a change in
    check mode, a change that drops a field the manager no longer sets, another manager's conflicting
    write refused without force and taken with it. Each pair of answers is the same, and so is what each
    write left on the API server."""
    mine = {"manager": "specpilot", "force": False, "check": False}
    steps = [
        dict(mine, data={"a": "1"}, annotations={"x": "1"}),
        dict(mine, data={"a": "1"}, annotations={"x": "1"}),
        dict(mine, data={"a": "2"}, annotations={"x": "1"}, check=True),
        dict(mine, data={"a": "2", "b": "3"}, annotations={}),
        dict(mine, data={"a": "9"}, annotations={}, manager="someone-else"),
        dict(mine, data={"a": "9"}, annotations={}, manager="someone-else", force=True),
    ]
    out = tmp_path / "pairs.json"
    mark = emulator.control.mark()
    proc = playbook_proc(emulator, tmp_path, "ssa_twins.yml", {"ns": "ssa", "out": str(out), "steps": steps},
                         diff=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    requests = emulator.control.requests(mark)
    pairs = json.loads(out.read_text())
    assert len(pairs) == len(steps)
    for step, pair in zip(steps, pairs):
        module, worker = pair["module"], pair["worker"]
        if step["manager"] == "someone-else" and not step["force"]:
            assert module.get("failed") and worker.get("failed"), pair
            assert status_code(module) == status_code(worker) == 409, pair
            assert worker["msg"].startswith("Failed to apply object: "), worker["msg"]
            continue
        assert _answer(worker) == _answer(module), step
    changed = [p["worker"].get("changed") for p in pairs]
    assert changed == [True, False, True, True, False, True]
    assert pairs[3]["worker"]["diff"]["before"]["metadata"]["annotations"] == {"x": "1"}
    # issue 39: the module's diff carries what the server manages; k8s_retry's shows only the change
    assert "managedFields" in pairs[2]["module"]["diff"]["after"]["metadata"], pairs[2]["module"]["diff"]
    assert pairs[2]["worker"]["diff"] == {"before": {"data": {"a": "1"}}, "after": {"data": {"a": "2"}}}
    assert "managedFields" not in json.dumps([p["worker"].get("diff") for p in pairs])

    by_module = get(emulator, "/api/v1/namespaces/ssa/configmaps/by-module")
    in_worker = get(emulator, "/api/v1/namespaces/ssa/configmaps/in-worker")
    assert _same_shape(in_worker) == _same_shape(by_module)
    assert in_worker["data"] == {"a": "9", "b": "3"}
    # every write of the worker was a server-side apply, its check-mode one a dry run; each was read once
    # before it (the module reads twice: perform_action's retrieve, then k8s_apply's apply_object)
    patches = [r for r in requests if r["name"] == "in-worker" and r["verb"] == "patch"]
    reads = [r for r in requests if r["verb"] == "get" and r["name"] in ("in-worker", "by-module")]
    assert [r["name"] for r in reads].count("in-worker") == len(steps)
    assert [r["name"] for r in reads].count("by-module") == 2 * len(steps)
    assert [r["content_type"] for r in patches] == ["application/apply-patch+yaml"] * 6
    assert [r["dry_run"] for r in patches] == [False, False, True, False, False, False]
    assert [r["field_manager"] for r in patches] == ["specpilot"] * 4 + ["someone-else"] * 2
