"""playbooks/deploy.yml against the API emulator, with the test playing KServe (FakeKServe).

What is checked: the objects stored are the plan's (server-side apply by field manager specpilot,
digest and revision record annotations); a re-run writes nothing and reports changed=0 for every
task; a change waits for the new generation and ignores a stale Ready; the revision record and the
history hold the previous spec; check mode writes nothing; the lock makes a second deploy fail fast.
"""

from __future__ import annotations

import datetime
import json
import time

import pytest
from deploy_helpers import (
    NGRAM,
    FakeKServe,
    Run,
    create_namespace,
    get,
    run_deploy,
    wait_for,
    write_inventory,
)

pytestmark = pytest.mark.slow

ISVC_API = "serving.kserve.io/v1beta1"


def _deploy_ok(run: Run) -> None:
    assert run.rc == 0, run.out[-6000:]


def _isvc(emu, ns, name="svc"):
    return get(emu, ISVC_API, "InferenceService", name, ns)


def test_first_deploy_then_a_rerun_writes_nothing(emulator, tmp_path):
    ns = "deploy-first"
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {"svc": {"specpilot_speculative": NGRAM},
                                                 "svc-b": {"specpilot_speculative": NGRAM}})
    with FakeKServe(emulator, ns):
        first = run_deploy(emulator, tmp_path, inv)
    _deploy_ok(first)
    assert "svc: deployed, ready" in first.out
    isvc = _isvc(emulator, ns)
    args = isvc["spec"]["predictor"]["model"]["args"]
    spec_arg = [a for a in args if a.startswith("--speculative-config=")][0]
    assert json.loads(spec_arg.split("=", 1)[1]) == NGRAM
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == "pvc://specpilot-lab-models/"
    anns = isvc["metadata"]["annotations"]
    assert anns["serving.kserve.io/deploymentMode"] == "Standard"
    assert len(anns["specpilot.io/spec-digest"]) == 64
    assert "specpilot.io/previous-revision" not in anns  # first deploy: nothing to record
    assert any(
        m["manager"] == "specpilot" and m["operation"] == "Apply" for m in isvc["metadata"]["managedFields"]
    )
    runtime = get(emulator, "serving.kserve.io/v1alpha1", "ServingRuntime", "svc-vllm", ns)
    # vllm serve with no args of its own; the InferenceService's start with the model and keep KServe's
    # {{.Name}} literal (render.ENTRYPOINT)
    assert runtime["spec"]["containers"][0]["command"] == ["vllm", "serve"]
    assert runtime["spec"]["containers"][0]["args"] == []
    assert args[1:3] == ["--port=8080", "--served-model-name={{.Name}}"] and args[0].startswith("/mnt/models")
    assert get(emulator, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", ns) is None  # released

    # the same again: nothing to write, nothing changed, no lock taken
    mark = emulator.control.mark()
    again = run_deploy(emulator, tmp_path, inv)
    _deploy_ok(again)
    assert again.recap()["svc"]["changed"] == 0, again.changed_tasks()
    assert emulator.control.writes(since=mark) == []
    assert "svc: unchanged, ready" in again.out

    # issue 40: the same no-op as AWX job slices (the hosts by name, slice n takes every 2nd from the n-th; here
    # --limit): decide.yml's one read covers the slice's services, and each slice decides what the whole run did
    assert again.recap()["svc-b"]["changed"] == 0 and "svc-b: unchanged, ready" in again.out
    for part in (["svc"], ["svc-b"]):
        sliced = run_deploy(emulator, tmp_path, inv, "--limit", ",".join(part))
        _deploy_ok(sliced)
        assert set(sliced.recap()) == set(part) and sliced.recap()[part[0]]["changed"] == 0, sliced.changed_tasks()
        assert "%s: unchanged, ready" % part[0] in sliced.out
    assert emulator.control.writes(since=mark) == []

    # check mode of a change writes nothing and shows the diff (a test of its own once, with a deploy of its own)
    write_inventory(tmp_path / "inv", ns, {"svc": {"specpilot_speculative": dict(NGRAM, prompt_lookup_max=6)},
                                           "svc-b": {"specpilot_speculative": NGRAM}})
    mark = emulator.control.mark()
    run = run_deploy(emulator, tmp_path, inv, "--check", "--diff", "--limit", "svc")
    _deploy_ok(run)
    assert emulator.control.writes(since=mark) == []  # dry-run requests are not writes
    assert emulator.control.writes(since=mark, include_dry_run=True)  # ... but they were made
    assert '"prompt_lookup_max":6' in run.out  # the diff shows the new argument
    assert "The serving object with the revision record, InferenceService/svc" in run.out


def test_services_on_two_clusters_are_each_read_on_their_own_cluster(emulator, fresh_emulator, tmp_path):
    """Issue 40: decide.yml's one read runs once, on the first service's connection; it covers the services of
    that cluster only. A service of another cluster (its own specpilot_k8s_kubeconfig) is read there, not looked
    up in the first cluster, where its namespace does not exist (which would fail it at once). So which service
    comes first in a slice changes nothing."""
    create_namespace(emulator, "two-a")
    create_namespace(fresh_emulator, "two-b")
    inv = write_inventory(tmp_path / "inv", "two-a", {
        "svc": {"specpilot_speculative": NGRAM},
        "svc-b": {"specpilot_speculative": NGRAM, "specpilot_namespace": "two-b",
                  "specpilot_k8s_kubeconfig": str(fresh_emulator.kubeconfig)}})
    with FakeKServe(emulator, "two-a"), FakeKServe(fresh_emulator, "two-b"):
        run = run_deploy(emulator, tmp_path, inv)
    _deploy_ok(run)
    assert "svc: deployed, ready" in run.out and "svc-b: deployed, ready" in run.out
    assert _isvc(emulator, "two-a") and _isvc(fresh_emulator, "two-b", "svc-b")
    assert get(emulator, ISVC_API, "InferenceService", "svc-b", "two-b") is None


def test_a_change_waits_for_the_new_rollout_not_a_stale_ready(emulator, tmp_path):
    ns = "deploy-change"
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {"svc": {"specpilot_speculative": NGRAM}})
    state = {"action": "ready"}
    with FakeKServe(emulator, ns, policy=lambda name, isvc: state["action"]) as kserve:
        _deploy_ok(run_deploy(emulator, tmp_path, inv))
        before = _isvc(emulator, ns)
        old_digest = before["metadata"]["annotations"]["specpilot.io/spec-digest"]
        assert kserve.rollouts["svc"] == 1

        # KServe "is slow": the Deployment keeps the old template and the InferenceService stays Ready=True
        state["action"] = "hold"
        changed = dict(NGRAM, num_speculative_tokens=5)
        write_inventory(
            tmp_path / "inv",
            ns,
            {
                "svc": {
                    "specpilot_speculative": changed,
                    "specpilot_vllm_args": {"max_model_len": 512, "max_num_seqs": 4, "dtype": "float32"},
                }
            },
        )
        run = Run(emulator, tmp_path, inv)
        wait_for(
            lambda: _isvc(emulator, ns)["metadata"]["annotations"]["specpilot.io/spec-digest"] != old_digest,
            120,
            what="the new spec applied",
        )
        time.sleep(4)  # several polls with a stale Ready=True
        assert run.running(), run.wait().out[-3000:]
        conds = {c["type"]: c["status"] for c in _isvc(emulator, ns)["status"]["conditions"]}
        assert conds["Ready"] == "True"  # stale, and the wait did not take it

        # the new generation rolls out: template updated, observed, available
        state["action"] = "progress"
        time.sleep(2)
        assert run.running()
        state["action"] = "ready"
        run.wait(300)
    _deploy_ok(run)
    assert kserve.rollouts["svc"] == 2
    assert "waiting" in run.out or "progressing" in run.out  # progress lines while waiting
    isvc = _isvc(emulator, ns)
    args = isvc["spec"]["predictor"]["model"]["args"]
    assert '"num_speculative_tokens":5' in [a for a in args if a.startswith("--speculative-config=")][0]
    assert "--enforce-eager" not in args  # removed from the plan -> removed from the cluster (SSA)
    record = json.loads(isvc["metadata"]["annotations"]["specpilot.io/previous-revision"])
    assert record["digest"] == old_digest
    assert record["predictor"] == before["spec"]["predictor"]
    assert record["ready"] is True
    history = get(emulator, "v1", "ConfigMap", "svc-specpilot-history", ns)
    revisions = json.loads(history["data"]["revisions.json"])
    assert [r["digest"] for r in revisions] == [old_digest]
    assert revisions[0]["replaced_by"] == isvc["metadata"]["annotations"]["specpilot.io/spec-digest"]


def test_check_mode_first_deploy_into_a_new_namespace_creates_nothing_and_names_what_it_would(
    emulator, tmp_path
):
    """--check --diff of a first deploy whose namespace this run would create: the API server cannot dry-run
    objects into a namespace that does not exist (404), so the role shows them as it would create them."""
    ns = "deploy-check-new"
    inv = write_inventory(tmp_path / "inv", ns, {"svc": {"specpilot_speculative": NGRAM}})
    mark = emulator.control.mark()
    run = run_deploy(emulator, tmp_path, inv, "--check", "--diff", "-e", "specpilot_deploy_create_namespace=true")
    _deploy_ok(run)
    assert emulator.control.writes(since=mark) == []
    assert get(emulator, "v1", "Namespace", ns) is None
    assert "would create Namespace/deploy-check-new, ServingRuntime/" in run.out
    assert "InferenceService/svc" in run.out
    assert '"prompt_lookup_max":4' in run.out.replace(" ", "")  # --diff shows the InferenceService it would create
    assert "attempts" not in run.out
    assert "svc: would deploy (check mode" in run.out  # the summary: nothing deployed


def test_a_failed_runtime_apply_is_blamed_on_the_runtime(emulator, tmp_path):
    """The rescue names the object whose apply failed (it blamed the InferenceService whatever failed)."""
    ns = "deploy-runtime-fails"
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {"svc": {"specpilot_speculative": NGRAM}})
    emulator.control.add_fault("patch", "servingruntimes", namespace=ns, code=500, message="runtime webhook down")
    run = run_deploy(
        emulator, tmp_path, inv, "-e", '{"specpilot_deploy_dry_run": false, "specpilot_deploy_api_retries": 2}'
    )
    assert run.rc != 0
    assert "svc: the ServingRuntime svc-vllm could not be applied: " in run.out, run.out[-4000:]
    assert "runtime webhook down" in run.out
    assert "the InferenceService could not be applied" not in run.out
    assert _isvc(emulator, ns) is None


def _lease(ns, holder, renew: datetime.datetime, duration=600):
    stamp = renew.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "specpilot-deploy-svc", "namespace": ns},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }


def test_a_second_deploy_fails_fast_naming_the_lock_holder(emulator, tmp_path):
    ns = "deploy-lock"
    create_namespace(emulator, ns)
    leases = emulator.dynamic_client().resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    now = datetime.datetime.now(datetime.timezone.utc)
    leases.create(namespace=ns, body=_lease(ns, "alice@ci/awx-job-42", now))
    inv = write_inventory(tmp_path / "inv", ns, {"svc": {"specpilot_speculative": NGRAM}})
    mark = emulator.control.mark()
    run = run_deploy(emulator, tmp_path, inv)
    assert run.rc != 0
    assert "alice@ci/awx-job-42" in run.out
    assert "another deploy of this service is running" in run.out
    assert [w for w in emulator.control.writes(since=mark) if "inferenceservices" in w["path"]] == []
    assert _isvc(emulator, ns) is None

    # the holder died: its lease expired, the next deploy takes it over and releases it
    leases.delete(name="specpilot-deploy-svc", namespace=ns)
    leases.create(namespace=ns, body=_lease(ns, "alice@ci/awx-job-42", now - datetime.timedelta(hours=1), 60))
    with FakeKServe(emulator, ns):
        run = run_deploy(emulator, tmp_path, inv)
    _deploy_ok(run)
    assert get(emulator, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", ns) is None
