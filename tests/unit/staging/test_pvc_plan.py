"""The PVC staging plan (module_utils/staging/pvc_staging.py): request digests, the skip decision from the
status ConfigMap, the Job and ConfigMap manifests (no secret values anywhere), status data; and
the Job-watching helpers (module_utils/k8s/job_watch.py)."""

from __future__ import annotations

import copy
import json
import re

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_retry, job_watch
from ansible_collections.specpilot.core.plugins.module_utils.operate import rollback
from ansible_collections.specpilot.core.plugins.module_utils.staging import pvc_staging, stager

ARTIFACTS = [
    {
        "role": "target",
        "uri": "https://models.example.com/llama/",
        "subdir": "target",
        "revision": None,
        "include": ["*.json", "*.safetensors"],
        "exclude": None,
        "secret_name": None,
    },
    {
        "role": "draft",
        "uri": "s3://bucket/llama-draft",
        "subdir": "draft",
        "revision": None,
        "include": None,
        "exclude": None,
        "secret_name": "s3-creds",
    },
]


def params(**kw):
    p = {
        "name": "chat-llama",
        "namespace": "ml",
        "pvc": {"name": "models", "path": "chat"},
        "pvc_object": {"metadata": {"uid": "uid-1"}},
        "artifacts": copy.deepcopy(ARTIFACTS),
        "speculative_method": "draft_model",
        "artifact_options": {},
        "status_data": None,
        "force": False,
        "recheck": False,
        "verify": "sha256",
        "layout_check": True,
        "progress_interval": 5.0,
        "image": "python:3.12-slim",
        "command": ["python3"],
        "backoff_limit": 2,
        "ttl_seconds_after_finished": 60,
    }
    p.update(kw)
    return p


def recorded(plan, **override):
    """Status ConfigMap data as a successful Job of this plan would leave it."""
    result = {
        "artifacts": [
            {
                "role": a["role"],
                "status": {
                    "format": stager.FORMAT,
                    "request_digest": a["request_digest"],
                    "files": 3,
                    "bytes": 10,
                    "staged_at": "t",
                },
            }
            for a in plan["request"]["artifacts"]
        ]
    }
    data = pvc_staging.status_data(plan, result)
    for key, value in override.items():
        for k in data:
            d = json.loads(data[k])
            d[key] = value
            data[k] = json.dumps(d)
    return data


def test_first_run_needs_a_job_and_a_matching_status_skips_it():
    plan = pvc_staging.build_plan(params())
    assert plan["needed"] and [a["up_to_date"] for a in plan["artifacts"]] == [False, False]
    assert all("no staging recorded" in a["reason"] for a in plan["artifacts"])
    again = pvc_staging.build_plan(params(status_data=recorded(plan)))
    assert not again["needed"] and "job" not in again["manifests"]
    assert [a["up_to_date"] for a in again["artifacts"]] == [True, True]
    assert again["request"]["artifacts"] == []


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"pvc_object": {"metadata": {"uid": "uid-2"}}}, "the PVC was recreated"),
        ({"force": True}, "force: true"),
        ({"recheck": True}, "recheck: true"),
    ],
)
def test_what_starts_a_job_again(change, reason):
    first = pvc_staging.build_plan(params())
    plan = pvc_staging.build_plan(params(status_data=recorded(first), **change))
    assert plan["needed"] and all(reason in a["reason"] for a in plan["artifacts"])


def test_request_changes_restage_only_that_artifact():
    first = pvc_staging.build_plan(params())
    arts = copy.deepcopy(ARTIFACTS)
    arts[1]["revision"] = "v2"
    plan = pvc_staging.build_plan(params(status_data=recorded(first), artifacts=arts))
    assert [a["up_to_date"] for a in plan["artifacts"]] == [True, False]
    assert "request changed" in plan["artifacts"][1]["reason"]
    assert [a["role"] for a in plan["request"]["artifacts"]] == ["draft"]
    stale = pvc_staging.build_plan(params(status_data=recorded(first, format=0)))
    assert stale["needed"] and "another staging format" in stale["artifacts"][0]["reason"]


def test_digests_are_stable_and_cover_what_matters():
    a = pvc_staging.build_plan(params())
    b = pvc_staging.build_plan(params())
    assert a["job_name"] == b["job_name"] and a["artifacts"] == b["artifacts"]
    digests = {x["role"]: x["request_digest"] for x in a["artifacts"]}
    for change in (
        {"include": ["*.safetensors"]},
        {"exclude": ["x"]},
        {"uri": "https://other/"},
        {"subdir": "t2"},
    ):
        arts = copy.deepcopy(ARTIFACTS)
        arts[0].update(change)
        c = pvc_staging.build_plan(params(artifacts=arts))
        assert c["artifacts"][0]["request_digest"] != digests["target"]
        assert c["artifacts"][1]["request_digest"] == digests["draft"]
    opts = pvc_staging.build_plan(
        params(artifact_options={"target": {"checksums": {"config.json": "a" * 64}}})
    )
    assert opts["artifacts"][0]["request_digest"] != digests["target"]
    moved = pvc_staging.build_plan(params(pvc={"name": "models", "path": "other"}))
    assert (
        moved["artifacts"][0]["dest"] == "other/target"
        and moved["artifacts"][0]["request_digest"] != digests["target"]
    )
    # the secret name is not part of the request: rotating a Secret does not re-stage
    arts = copy.deepcopy(ARTIFACTS)
    arts[1]["secret_name"] = "s3-creds-v2"
    assert (
        pvc_staging.build_plan(params(artifacts=arts))["artifacts"][1]["request_digest"] == digests["draft"]
    )


def test_job_manifest_reaches_secrets_only_through_env_from():
    plan = pvc_staging.build_plan(params())
    job = plan["manifests"]["job"]
    assert (
        re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", job["metadata"]["name"])
        and len(job["metadata"]["name"]) <= 63
    )
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == [
        "python3",
        "/specpilot/program/stager.py",
        "--request",
        "/specpilot/program/request.json",
    ]
    assert "args" not in c
    assert c["envFrom"] == [
        {"prefix": "SPECPILOT_SRC_DRAFT_", "secretRef": {"name": "s3-creds", "optional": False}}
    ]
    assert all("valueFrom" not in e for e in c["env"])
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [stager.EXIT_PERMANENT]
    assert {"name": "dest", "persistentVolumeClaim": {"claimName": "models"}} in pod["volumes"]
    cm = plan["manifests"]["configmap"]
    assert cm["metadata"]["name"] == job["metadata"]["name"]
    assert cm["data"]["stager.py"] == open(stager.__file__).read()
    # the retry policy the program imports beside itself when it runs as the Job's program
    assert cm["data"]["deploy_retry.py"] == open(deploy_retry.__file__).read()
    req = json.loads(cm["data"]["request.json"])
    assert [a["dest"] for a in req["artifacts"]] == ["chat/target", "chat/draft"]
    assert (
        req["artifacts"][1]["env_prefix"] == "SPECPILOT_SRC_DRAFT_"
        and "env_prefix" not in req["artifacts"][0]
    )
    assert req["artifacts"][1]["kind"] == "model"


def test_pvc_sources_mount_the_other_claim_read_only():
    arts = [
        dict(ARTIFACTS[0], uri="pvc://shared-cache/llama/8b"),
        dict(ARTIFACTS[1], uri="pvc://models/cache/draft"),
    ]
    plan = pvc_staging.build_plan(params(artifacts=arts))
    pod = plan["manifests"]["job"]["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/specpilot/src/shared-cache"]["readOnly"] is True
    assert any(
        v.get("persistentVolumeClaim", {}).get("claimName") == "shared-cache"
        and v["persistentVolumeClaim"]["readOnly"]
        for v in pod["volumes"]
    )
    req = json.loads(plan["manifests"]["configmap"]["data"]["request.json"])
    assert req["artifacts"][0]["src_root"] == "/specpilot/src/shared-cache"
    assert req["artifacts"][1]["src_root"] == "/specpilot/dest"  # same claim: through the dest mount
    with pytest.raises(pvc_staging.PlanError):
        pvc_staging.build_plan(params(artifacts=[dict(ARTIFACTS[0], uri="pvc://Bad_Name/x")]))


def test_draft_kind_follows_the_method_and_options_are_checked():
    plan = pvc_staging.build_plan(params(speculative_method="eagle3"))
    assert plan["request"]["artifacts"][1]["kind"] == "head"
    with pytest.raises(pvc_staging.PlanError, match="unknown key"):
        pvc_staging.build_plan(params(artifact_options={"target": {"sha": "x"}}))
    with pytest.raises(pvc_staging.PlanError, match="same directory"):
        pvc_staging.build_plan(params(artifacts=[dict(ARTIFACTS[0]), dict(ARTIFACTS[1], subdir="target")]))


def test_status_data_refuses_a_result_of_another_request():
    plan = pvc_staging.build_plan(params())
    data = recorded(plan)
    entry = json.loads(data["chat__target.json"])
    assert entry["pvc_uid"] == "uid-1" and entry["dest"] == "chat/target" and entry["job"] == plan["job_name"]
    bad = {"artifacts": [{"role": "target", "status": {"request_digest": "sha256:other"}}]}
    with pytest.raises(pvc_staging.PlanError):
        pvc_staging.status_data(plan, bad)


def test_pvc_manifest_defaults():
    m = pvc_staging.pvc_manifest(
        "svc",
        "ml",
        {"name": "models", "size": "20Gi", "storage_class": "fast", "access_modes": ["ReadWriteMany"]},
    )
    assert m["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "20Gi"}},
        "storageClassName": "fast",
    }


# ---------------------------------------------------------------- job_watch
def test_new_lines_of_successive_tails():
    assert job_watch.new_lines([], ["a", "b"]) == ["a", "b"]
    assert job_watch.new_lines(["a", "b", "c"], ["b", "c", "d", "e"]) == ["d", "e"]
    assert job_watch.new_lines(["x", "p", "p"], ["x", "p", "p", "p", "q"]) == ["p", "q"]
    assert job_watch.new_lines(["a"], ["z"]) == ["z"]  # nothing in common: everything is new


def test_parse_log_and_displayable_lines():
    log = "\n".join(
        [
            "specpilot-stage: target: listing https://x/",
            "specpilot-stage: progress target 10/100 bytes (10.0%) files 0/2 1 MiB/s",
            "specpilot-stage: progress target 50/100 bytes (50.0%) files 1/2 1 MiB/s",
            "noise from python",
            'SPECPILOT-RESULT {"ok": true, "artifacts": []}',
        ]
    )
    parsed = job_watch.parse_log(log)
    assert parsed["result"] == {"ok": True, "artifacts": []} and parsed["error"] is None
    assert parsed["progress"].endswith("files 1/2 1 MiB/s")
    shown = job_watch.displayable(log.splitlines())
    assert shown == [
        "specpilot-stage: target: listing https://x/",
        "specpilot-stage: progress target 50/100 bytes (50.0%) files 1/2 1 MiB/s",
    ]
    err = job_watch.parse_log(
        'SPECPILOT-ERROR {"message": "target: x is corrupt", "path": "x", "role": "target"}'
    )
    msg = job_watch.failure_message(
        "j",
        "ml",
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
        err["error"],
        ["l1", "l2"],
        {"exit_code": 2, "terminated_reason": "Error"},
    )
    assert (
        "BackoffLimitExceeded" in msg and "exit code 2" in msg and "file: x (target)" in msg and "  l2" in msg
    )


def test_job_and_pod_states():
    assert job_watch.job_state(None)[0] == "missing"
    assert job_watch.job_state({"status": {"active": 1}})[0] == "running"
    done = {
        "status": {"conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]}
    }
    assert job_watch.job_state(done) == ("complete", "CompletionsReached", None)
    failed = {
        "status": {
            "conditions": [
                {"type": "FailureTarget", "status": "True"},
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"},
            ]
        }
    }
    assert job_watch.job_state(failed)[:2] == ("failed", "DeadlineExceeded")
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "state": {
                        "waiting": {
                            "reason": "CreateContainerConfigError",
                            "message": 'secret "s3" not found',
                        }
                    }
                }
            ],
        },
    }
    s = job_watch.pod_summary(pod)
    assert s["waiting_reason"] in job_watch.FATAL_WAITING and not s["started"]
    pending = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}],
        },
    }
    assert job_watch.pod_summary(pending)["unschedulable"] == "0/3 nodes are available"
    older = {"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    newer = {"metadata": {"name": "b", "creationTimestamp": "2026-01-01T00:00:05Z"}}
    assert job_watch.newest_pod([newer, older])["metadata"]["name"] == "b"


def test_a_job_pod_is_stuck_only_after_its_own_grace():
    """job_watch.stuck_reason, what k8s_job_wait asks at each poll: a fatal waiting reason at once, an image
    that cannot be pulled after pull_timeout, an unschedulable pod after pending_timeout (each counted from
    when it began, reset when it ends), the overall timeout last."""
    params = {"pull_timeout": 30, "pending_timeout": 60, "timeout": 600}

    def summary(reason=None, unschedulable=None):
        return {
            "waiting_reason": reason,
            "waiting_message": "m" if reason else None,
            "unschedulable": unschedulable,
        }

    waits = {}
    assert job_watch.stuck_reason(summary("CreateContainerConfigError"), 1, 0, waits, params) == (
        "CreateContainerConfigError: m",
        False,
    )
    # pulling from t=10: fine at 40, stuck after 40 (30 s of grace)
    assert job_watch.stuck_reason(summary("ImagePullBackOff"), 10, 0, waits, params) is None
    assert job_watch.stuck_reason(summary("ImagePullBackOff"), 40, 0, waits, params) is None
    assert job_watch.stuck_reason(summary("ErrImagePull"), 41, 0, waits, params) == (
        "the image cannot be pulled (ErrImagePull): m",
        False,
    )
    # the pull that recovers resets the clock: a new pull failure gets its full grace again
    assert job_watch.stuck_reason(summary(), 42, 0, waits, params) is None and waits["pulling"] is None
    assert job_watch.stuck_reason(summary("ImagePullBackOff"), 50, 0, waits, params) is None
    assert job_watch.stuck_reason(summary("ImagePullBackOff"), 79, 0, waits, params) is None
    # unschedulable from t=100: stuck after 160
    waits = {}
    assert job_watch.stuck_reason(summary(unschedulable="0/3 nodes"), 100, 0, waits, params) is None
    assert job_watch.stuck_reason(summary(unschedulable="0/3 nodes"), 160, 0, waits, params) is None
    assert job_watch.stuck_reason(summary(unschedulable="0/3 nodes"), 161, 0, waits, params) == (
        "the pod cannot be scheduled: 0/3 nodes",
        False,
    )
    # a running pod only times out, and says the Job keeps running
    why, timed_out = job_watch.stuck_reason(summary(), 601, 0, {}, params)
    assert timed_out and why.startswith("still running after 600s; it keeps running")
    assert job_watch.stuck_reason(summary(), 600, 0, {}, params) is None


def _live(uri="pvc://models/chat", args=("--model=/mnt/models/target",)):
    return {"spec": {"predictor": {"model": {"storageUri": uri, "args": list(args)}}}}


DRAFT_ARG = '--speculative-config={"method": "draft_model", "model": "/mnt/models/draft"}'


@pytest.mark.parametrize(
    "live, why",
    [
        (_live(), "is the live engine's model /mnt/models/target"),
        # vllm serve's positional model, as specpilot renders it
        (_live(args=["/mnt/models/target", DRAFT_ARG]), "is the live engine's model /mnt/models/target"),
        (_live(args=[DRAFT_ARG]), "is the live engine's draft /mnt/models/draft"),
        (_live(args=["--model", "/mnt/models"]), "lies inside the live engine's model /mnt/models"),
        (_live(args=[]), "lies inside the live storageUri pvc://models/chat"),
        (_live(uri="pvc://models/chat/target", args=["--model=/mnt/models"]), "is the live engine's model"),
    ],
)
def test_force_never_overwrites_what_the_live_service_serves(live, why):
    with pytest.raises(
        pvc_staging.PlanError, match="force: true would overwrite the .* on PVC models while it " + why
    ):
        pvc_staging.build_plan(params(force=True, live_inferenceservice=live), served_of=rollback.pvc_served)
    assert pvc_staging.build_plan(params(live_inferenceservice=live), served_of=rollback.pvc_served)[
        "needed"
    ]  # without force: as before


@pytest.mark.parametrize(
    "live",
    [
        None,
        _live(uri="pvc://other-claim/chat"),
        _live(uri="pvc://models/chat-v2"),
        _live(uri="hf://org/model"),
    ],
)
def test_force_stages_where_the_live_service_does_not_serve(live):
    plan = pvc_staging.build_plan(
        params(force=True, live_inferenceservice=live), served_of=rollback.pvc_served
    )
    assert plan["needed"] and [a["role"] for a in plan["request"]["artifacts"]] == ["target", "draft"]
