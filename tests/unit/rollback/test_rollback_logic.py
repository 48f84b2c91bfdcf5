"""module_utils/operate/rollback: what an off/restore rollback writes, decided from the live object."""

from __future__ import annotations

import json

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_state
from ansible_collections.specpilot.core.plugins.module_utils.operate import rollback

NGRAM = '--speculative-config={"method":"ngram","num_speculative_tokens":3}'
DRAFT = '--speculative-config={"method":"draft_model","model":"/mnt/models/draft","num_speculative_tokens":4}'


def _isvc(args, annotations=None, storage=None, uris=None):
    model = {"modelFormat": {"name": "vLLM"}, "runtime": "svc-vllm", "args": list(args)}
    if storage:
        model["storageUri"] = storage
    predictor = {"model": model, "minReplicas": 1}
    if uris:
        predictor["storageUris"] = uris
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "svc",
            "namespace": "ns",
            "resourceVersion": "7",
            "uid": "u",
            "generation": 2,
            "managedFields": [{"manager": "specpilot", "operation": "Apply"}],
            "labels": {"app.kubernetes.io/managed-by": "specpilot"},
            "annotations": dict(
                {deploy_state.ANN_DIGEST: "a" * 64, "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                **(annotations or {}),
            ),
        },
        "spec": {"predictor": predictor},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_strip_keeps_everything_else_in_order():
    args = ["--model=/mnt/models/target", "--max-model-len=512", NGRAM, "--dtype=float32", "--enforce-eager"]
    assert rollback.strip_speculative(args) == [
        "--model=/mnt/models/target",
        "--max-model-len=512",
        "--dtype=float32",
        "--enforce-eager",
    ]


def test_strip_space_separated_and_v0_flags():
    args = [
        "--model=/m",
        "--speculative-config",
        '{"method":"ngram"}',
        "--speculative-model=[ngram]",
        "--num-speculative-tokens=3",
        "--ngram-prompt-lookup-max=4",
        "--use-v2-block-manager",
        "--dtype=half",
    ]
    assert rollback.strip_speculative(args) == ["--model=/m", "--dtype=half"]
    assert len(rollback.speculative_args(args)) == 5


def test_strip_inside_a_shell_command():
    cmd = 'vllm serve /mnt/models --port 8080 --speculative-config \'{"method": "ngram"}\' --dtype half'
    out = rollback.strip_speculative(["-c", cmd])
    assert (
        out[0] == "-c"
        and "speculative" not in out[1]
        and "--dtype half" in out[1]
        and "--port 8080" in out[1]
    )


def test_off_decision_records_the_live_revision_and_changes_the_digest():
    live = {"inferenceservice": _isvc(["--model=/mnt/models/target", NGRAM])}
    d = rollback.decide(live, "off", now=1000)
    assert d["needs_apply"] and d["after_args"] == ["--model=/mnt/models/target"]
    assert d["removed_args"] == [NGRAM]
    md = d["manifest"]["metadata"]
    assert set(md) == {"name", "namespace", "labels", "annotations"}
    assert "kubectl.kubernetes.io/last-applied-configuration" not in md["annotations"]
    record = json.loads(md["annotations"][deploy_state.ANN_PREVIOUS])
    assert record["predictor"] == live["inferenceservice"]["spec"]["predictor"]
    assert md["annotations"][deploy_state.ANN_DIGEST] != "a" * 64
    assert d["history"]["name"] == "svc-specpilot-history"
    assert "status" not in d["manifest"]


def test_off_on_a_service_already_off_is_a_noop():
    d = rollback.decide({"inferenceservice": _isvc(["--model=/m"])}, "off", now=1000)
    assert not d["needs_apply"] and d["history"] is None and d["removed_args"] == []


def test_gpu_memory_utilization_restored_from_a_recorded_revision_without_speculation():
    before = _isvc(["--model=/m", "--gpu-memory-utilization=0.9"])
    record = deploy_state.revision_snapshot(before, ready=True, now=1)
    live = _isvc(
        ["--model=/m", "--gpu-memory-utilization=0.8", DRAFT], {deploy_state.ANN_PREVIOUS: json.dumps(record)}
    )
    d = rollback.decide({"inferenceservice": live}, "off", now=1000)
    assert d["after_args"] == ["--model=/m", "--gpu-memory-utilization=0.9"]
    assert d["gmu"]["before"] == "0.8" and d["gmu"]["after"] == "0.9"
    keep = rollback.decide(
        {"inferenceservice": live}, "off", now=1000, options={"gpu_memory_utilization": "keep"}
    )
    assert keep["after_args"] == ["--model=/m", "--gpu-memory-utilization=0.8"]


def test_restore_applies_the_record_exactly_and_is_then_a_noop():
    on = _isvc(["--model=/m", NGRAM])
    off = rollback.decide({"inferenceservice": on}, "off", now=1000)
    live_off = _isvc(
        off["after_args"],
        {k: v for k, v in off["manifest"]["metadata"]["annotations"].items() if k != deploy_state.ANN_DIGEST},
    )
    live_off["metadata"]["annotations"] = off["manifest"]["metadata"]["annotations"]
    d = rollback.decide({"inferenceservice": live_off}, "restore", now=2000)
    assert d["needs_apply"] and d["manifest"]["spec"]["predictor"] == on["spec"]["predictor"]
    assert d["manifest"]["metadata"]["annotations"][deploy_state.ANN_DIGEST] == "a" * 64
    assert rollback.ANN_ROLLBACK not in d["manifest"]["metadata"]["annotations"]
    restored = _isvc(["--model=/m", NGRAM])
    restored["metadata"]["annotations"] = d["manifest"]["metadata"]["annotations"]
    again = rollback.decide({"inferenceservice": restored}, "restore", now=3000)
    assert not again["needs_apply"]


def test_restore_without_a_record_fails_clearly():
    d = rollback.decide({"inferenceservice": _isvc(["--model=/m"])}, "restore")
    assert not d["needs_apply"] and "no revision recorded" in d["error"]


def test_reclaim_option_a_drops_the_draft_storage_uri():
    uris = [
        {"uri": "hf://org/target", "mountPath": "/mnt/models/target"},
        {"uri": "hf://org/draft", "mountPath": "/mnt/models/draft"},
    ]
    live = {"inferenceservice": _isvc(["--model=/mnt/models/target", DRAFT], uris=uris)}
    d = rollback.decide(live, "off", now=1, options={"reclaim_draft": True})
    assert d["predictor"]["storageUris"] == uris[:1]
    assert d["reclaim"]["storage_uri_dropped"] == uris[1]
    assert rollback.decide(live, "off", now=1)["predictor"]["storageUris"] == uris  # opt-in only


def test_reclaim_option_c_finds_the_pvc_subdirectory_also_after_an_earlier_off():
    on = _isvc(["--model=/mnt/models/target", DRAFT], storage="pvc://models/lab")
    d = rollback.decide({"inferenceservice": on}, "off", now=1, options={"reclaim_draft": True})
    pvc = {k: d["reclaim"]["pvc"][k] for k in ("claim", "subpath", "protected")}
    assert pvc == {"claim": "models", "subpath": "lab/draft", "protected": ["lab/target"]}
    assert "refused" not in d["reclaim"]["pvc"] and d["reclaim"]["pvc"]["script"] == rollback.RECLAIM_SCRIPT
    off = _isvc(d["after_args"], storage="pvc://models/lab")
    off["metadata"]["annotations"] = d["manifest"]["metadata"]["annotations"]
    later = rollback.decide({"inferenceservice": off}, "off", now=2, options={"reclaim_draft": True})
    assert not later["needs_apply"] and later["reclaim"]["pvc"]["subpath"] == "lab/draft"
    assert "refused" not in later["reclaim"]["pvc"]


def test_verify_sees_leftover_flags_in_pods():
    on = _isvc(["--model=/m", NGRAM])
    d = rollback.decide({"inferenceservice": on}, "off", now=1)
    stored = _isvc(d["after_args"])
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "kserve-container", "args": ["--model=/m", NGRAM]}]},
    }
    v = rollback.verify({"inferenceservice": stored, "pods": [pod]}, d)
    assert not v["ok"] and not v["checks"]["pod_args_off"] and v["checks"]["stored_args_off"]
    pod["spec"]["containers"][0]["args"] = ["--model=/m"]
    assert rollback.verify({"inferenceservice": stored, "pods": [pod]}, d)["ok"]


SRC_DIGEST = "sha256:" + "a" * 64
NEW_DIGEST = "sha256:" + "b" * 64
SRC_URI = "oci://reg.example/models/chat@" + SRC_DIGEST
NEW_URI = "oci://reg.example/models/chat@" + NEW_DIGEST


def _reclaimed(source=SRC_DIGEST, reclaimed=True):
    """What specpilot.core.modelcar_reclaim returns (the keys the decision reads)."""
    out = {
        "changed": reclaimed,
        "reclaimed": reclaimed,
        "pushed": reclaimed,
        "digest": NEW_DIGEST if reclaimed else source,
        "storage_uri": NEW_URI if reclaimed else "oci://reg.example/models/chat@" + source,
        "source": {"digest": source, "storage_uri": "oci://reg.example/models/chat@" + source},
        "identified_by": "annotation",
        "bytes_uploaded": 1500,
        "msg": "pushed" if reclaimed else "no draft",
        "invocation": {"module_args": {"password": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}},
    }
    if reclaimed:
        out.update(tag="v1-nodraft", dropped_layer={"digest": "sha256:" + "d" * 64, "mount": "/models/draft"})
    return out


def test_reclaim_option_b_names_the_image_then_repoints_it_in_the_same_apply():
    live = {"inferenceservice": _isvc(["--model=/mnt/models/target", DRAFT], storage=SRC_URI)}
    opts = {"reclaim_draft": True, "modelcar_image": "reg.example/models/chat:v1"}
    first = rollback.decide(live, "off", now=1, options=opts)
    mc = first["reclaim"]["modelcar"]
    assert mc["image"] == "reg.example/models/chat:v1@" + SRC_DIGEST  # the spec's tag names the new tag
    assert (mc["draft_subdir"], mc["target_subdir"], mc["field"]) == (
        "draft",
        "target",
        "spec.predictor.model.storageUri",
    )
    assert mc["new_storage_uri"] is None and mc["error"] is None
    assert first["predictor"]["model"]["storageUri"] == SRC_URI  # no image yet: not repointed

    d = rollback.decide(live, "off", now=1, options=dict(opts, modelcar_reclaimed=_reclaimed()))
    model = d["manifest"]["spec"]["predictor"]["model"]
    # one apply: the args without the speculative config AND the storageUri of the image without the draft
    assert model["storageUri"] == NEW_URI and model["args"] == ["--model=/mnt/models/target"]
    assert d["needs_apply"] and d["reclaim"]["modelcar"]["new_digest"] == NEW_DIGEST
    assert d["reclaim"]["modelcar"]["digest"] == SRC_DIGEST
    assert "invocation" not in d["reclaim"]["modelcar"]["result"]  # nothing but the summary is kept
    assert d["digest"] != first["digest"]

    # verify: the stored storageUri and KServe's modelcar container follow the new digest
    stored = _isvc(d["after_args"], storage=NEW_URI)
    dep = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "kserve-container", "args": d["after_args"]},
                        {"name": "modelcar", "image": "reg.example/models/chat@" + NEW_DIGEST},
                    ]
                }
            }
        }
    }
    v = rollback.verify({"inferenceservice": stored, "deployment": dep}, d)
    assert v["ok"] and v["checks"]["storage_uri_repointed"] and v["checks"]["modelcar_image_repointed"]
    dep["spec"]["template"]["spec"]["containers"][1]["image"] = "reg.example/models/chat@" + SRC_DIGEST
    stale = rollback.verify(
        {"inferenceservice": _isvc(d["after_args"], storage=SRC_URI), "deployment": dep}, d
    )
    assert not stale["ok"] and not stale["checks"]["storage_uri_repointed"]
    assert not stale["checks"]["modelcar_image_repointed"]


def test_reclaim_option_b_after_an_earlier_off_and_when_there_is_nothing_left():
    on = _isvc(["--model=/mnt/models/target", DRAFT], storage=SRC_URI)
    off_decision = rollback.decide({"inferenceservice": on}, "off", now=1)  # off without reclaim
    off = _isvc(off_decision["after_args"], storage=SRC_URI)
    off["metadata"]["annotations"] = off_decision["manifest"]["metadata"]["annotations"]
    opts = {"reclaim_draft": True}
    plan = rollback.decide({"inferenceservice": off}, "off", now=2, options=opts)
    assert not plan["needs_apply"]  # the draft path comes from the recorded revision
    assert plan["reclaim"]["modelcar"]["draft_subdir"] == "draft"
    assert plan["reclaim"]["modelcar"]["image"] == "reg.example/models/chat@" + SRC_DIGEST  # no tag known
    later = rollback.decide(
        {"inferenceservice": off}, "off", now=2, options=dict(opts, modelcar_reclaimed=_reclaimed())
    )
    assert (
        later["needs_apply"]
        and later["removed_args"] == []
        and later["predictor"]["model"]["storageUri"] == NEW_URI
    )
    # the image has no draft layer (already reclaimed): nothing to apply
    none_left = rollback.decide(
        {"inferenceservice": off},
        "off",
        now=2,
        options=dict(opts, modelcar_reclaimed=_reclaimed(reclaimed=False)),
    )
    assert not none_left["needs_apply"] and none_left["reclaim"]["modelcar"]["new_storage_uri"] is None
    # a result for another image is refused, not applied
    other = rollback.decide(
        {"inferenceservice": off},
        "off",
        now=2,
        options=dict(opts, modelcar_reclaimed=_reclaimed("sha256:" + "c" * 64)),
    )
    assert not other["needs_apply"] and "not on the service's image" in other["reclaim"]["modelcar"]["error"]
    # not a Modelcar, or reclaim not asked for: no plan
    pvc = _isvc(["--model=/mnt/models/target", DRAFT], storage="pvc://models/lab")
    assert (
        rollback.decide({"inferenceservice": pvc}, "off", now=1, options=opts)["reclaim"]["modelcar"] is None
    )
    assert rollback.decide({"inferenceservice": on}, "off", now=1)["reclaim"] is None


def test_a_config_changed_since_it_was_judged_is_not_rolled_back():
    """The guard passes the digest it judged; a deploy in between changed the live digest."""
    on = _isvc(["--model=/m", NGRAM])
    judged = on["metadata"]["annotations"][deploy_state.ANN_DIGEST]
    d = rollback.decide({"inferenceservice": on}, "off", now=1, options={"expect_digest": judged})
    assert d["needs_apply"] and d["error"] is None
    stale = rollback.decide({"inferenceservice": on}, "off", now=1, options={"expect_digest": "b" * 64})
    assert not stale["needs_apply"] and "changed since it was judged" in stale["error"]
    assert "manifest" not in stale  # nothing to write


def test_deploy_state_decides_the_rollback_on_what_it_read():
    """Issue 40: the role's read (deploy_state, option rollback) makes the decision in the worker, the filter's
    decision on the same objects, rather than a set_fact passing them through Jinja; its own result keys (changed,
    requests) are not part of what it decides on, and a mode other than off/restore fails before anything."""
    from ansible.errors import AnsibleActionFail
    from ansible_collections.specpilot.core.plugins.action import deploy_state as action

    live = {"inferenceservice": _isvc(["--model=/mnt/models/target", NGRAM]), "pods": [], "history": None}
    got = action.rollback_decision(dict(live, changed=False, requests=0), {"mode": "off", "options": {}})
    want = rollback.decide(live, "off", now=1000, options={})
    assert got["needs_apply"] and got["removed_args"] == [NGRAM]
    assert got["manifest"]["spec"] == want["manifest"]["spec"] and got["after_args"] == want["after_args"]
    assert got["wait_plan"] == want["wait_plan"]
    with pytest.raises(AnsibleActionFail, match="off or restore"):
        action.rollback_decision(live, {"mode": "sideways"})
