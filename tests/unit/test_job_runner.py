"""plugin_utils/job_runner.py: the one Job runner (issue 34) - what it writes, when it waits, what it deletes.

The kubernetes.core.k8s runs and the reads are recorded by stand-ins of the action and the reader; the
whole cycle against an API server is run by the lab tests of the staging, reclaim, probe and
vllm bench Jobs (tests/lab/test_staging_lab.py, tests/lab/rollback/test_rollback_lab_fake.py,
tests/lab/deploy/test_probe_lab_fake.py, tests/emulator/benchmark/test_vllm_bench_job.py)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.specpilot.core.plugins.plugin_utils.job_runner import JobRunner

NS = "ml"
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "stage", "namespace": NS}, "spec": {}}
CM = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "stage", "namespace": NS},
    "data": {"a": "b"},
}


def job(state=None, uid="u-1"):
    conditions = [{"type": state, "status": "True"}] if state else []
    return {"metadata": {"name": "stage", "namespace": NS, "uid": uid}, "status": {"conditions": conditions}}


POD = {
    "metadata": {"name": "stage-x", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
}


class Cluster(object):
    """The action (kubernetes.core module runs) and the reader: the Job reads follow ``jobs`` (the last one
    repeats); a write that creates the Job makes it run once, then end in ``ends`` (Complete, Failed)."""

    def __init__(self, jobs, ends="Complete", pods=None, fail=None, uid="u-1"):
        self.jobs, self.ends, self.pods, self.fail, self.uid = list(jobs), ends, pods, fail or {}, uid
        self.calls = []

    def _execute_module(self, module_name, module_args, task_vars):
        self.calls.append((module_name, module_args))
        state = module_args.get("state")
        if state in self.fail:
            return {"failed": True, "msg": self.fail[state]}
        if state == "present" and any(d["kind"] == "Job" for d in module_args["definition"]):
            self.jobs = [job(uid=self.uid), job(self.ends, uid=self.uid)]
        if state == "absent":
            self.jobs = [None]
        return {"changed": True}

    def get(self, kind, api_version, name=None, namespace=None, label_selector=None):
        if kind == "Job":
            return self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0]
        return self.pods or []

    def states(self):
        return [(args["state"], [d["kind"] for d in args["definition"]]) for _name, args in self.calls]


def runner(cluster, shown=None):
    out = JobRunner(cluster, {}, {"kubeconfig": "/k"}, cluster, (shown if shown is not None else []).append, sleep=lambda s: None)
    out.log = lambda pod, ns, container=None, tail_lines=None: [
        "specpilot-stage: copied",
        'SPECPILOT-RESULT {"ok": 1}',
    ]
    return out


def test_a_new_job_is_created_waited_for_and_deleted_with_its_objects():
    cluster = Cluster([None], pods=[POD])
    out = runner(cluster).run([CM, JOB], {"poll_interval": 0}, full_log=True)
    assert cluster.states() == [("present", ["ConfigMap", "Job"]), ("absent", ["ConfigMap", "Job"])]
    assert out["created"] and out["deleted"] and out["succeeded"] and out["result"] == {"ok": 1}
    assert out["log"].endswith('SPECPILOT-RESULT {"ok": 1}')
    assert all(args["kubeconfig"] == "/k" for _name, args in cluster.calls)
    assert cluster.calls[-1][1]["delete_options"] == {"propagationPolicy": "Background"}


@pytest.mark.parametrize(
    "replace, earlier, states, created",
    [
        # an earlier finished Job is removed (until gone) and a new one made
        ("finished", "Complete", [("absent", ["Job"]), ("present", ["ConfigMap", "Job"])], True),
        ("finished", "Failed", [("absent", ["Job"]), ("present", ["ConfigMap", "Job"])], True),
        # a running one is waited for; its ConfigMap is written again, no second Job
        ("finished", None, [("present", ["ConfigMap"])], False),
        # never: whatever state it is in, it is the Job
        ("never", "Failed", [("present", ["ConfigMap"])], False),
        # always: removed first, even one that runs
        ("always", None, [("absent", ["Job"]), ("present", ["ConfigMap", "Job"])], True),
    ],
)
def test_an_earlier_job_of_the_same_name(replace, earlier, states, created):
    cluster = Cluster([job(earlier), job("Complete")])
    r = runner(cluster)
    assert r.would_create("stage", NS, replace) is created
    cluster = Cluster([job(earlier), job("Complete")])
    out = runner(cluster).run([CM, JOB], {"poll_interval": 0}, replace=replace, delete="never")
    assert cluster.states() == states and out["created"] is created and not out["deleted"]
    if created and replace != "always":
        assert cluster.calls[0][1]["wait"] is True


def test_owned_objects_name_the_job_as_their_owner():
    cluster = Cluster([None], uid="u-42")
    runner(cluster).run([CM, JOB], {"poll_interval": 0}, delete="never", owned=True)
    patched = [args for _name, args in cluster.calls if args["state"] == "patched"]
    assert len(patched) == 1 and patched[0]["definition"]["kind"] == "ConfigMap"
    assert patched[0]["definition"]["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "stage", "uid": "u-42"}
    ]


def test_delete_success_keeps_a_failed_job_and_always_deletes_after_an_error():
    cluster = Cluster([None], ends="Failed", pods=[POD])
    out = runner(cluster).run([JOB], {"poll_interval": 0}, delete="success")
    assert out["failed"] and not out["deleted"] and "Job ml/stage failed" in out["msg"]
    assert [s for s, _k in cluster.states()] == ["present"]
    cluster = Cluster([None], fail={"present": "forbidden"})
    with pytest.raises(AnsibleActionFail, match="creating the Job ml/stage failed: forbidden"):
        runner(cluster).run([CM, JOB], {"poll_interval": 0}, delete="always")
    assert cluster.states()[-1] == ("absent", ["ConfigMap", "Job"])


def test_the_wait_stops_on_a_pod_that_cannot_pull_and_on_a_lost_lock():
    pulling = {
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no"}}}]
        },
    }
    cluster = Cluster([job()], pods=[pulling])
    out = runner(cluster).wait("stage", NS, {"pull_timeout": -1, "poll_interval": 0})
    assert out["failed"] and "the image cannot be pulled (ImagePullBackOff): no" in out["msg"]
    cluster = Cluster([job()], pods=[])
    out = runner(cluster).wait("stage", NS, {"poll_interval": 0}, keep=lambda now: "taken by another run")
    assert out["failed"] and out["msg"] == "Job ml/stage: stopped waiting, the lock: taken by another run"


def test_progress_lines_are_shown_once():
    shown = []
    cluster = Cluster([job(), job(), job("Complete")], pods=[POD])
    runner(cluster, shown).wait("stage", NS, {"poll_interval": 0})
    assert shown == ["specpilot-stage: copied"]
