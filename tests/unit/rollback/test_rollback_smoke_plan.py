"""A restore's smoke check judges the engine against the restored revision: the speculative config the
restored args give (service/spec_flags.speculative_config), through Plan.for_revision and
operate/rollback.smoke_plan, compared by the smoke verdict's own checks."""

from __future__ import annotations

import json

import pytest

from ansible_collections.specpilot.core.plugins.filter.rollback import rollback_smoke_plan
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_state
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_log_config import (
    parse_speculative_repr,
)
from ansible_collections.specpilot.core.plugins.module_utils.operate import rollback
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service import spec_flags
from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke

K3 = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
K2 = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}


def _arg(cfg):
    return "--speculative-config=" + json.dumps(cfg, separators=(",", ":"))


@pytest.mark.parametrize(
    "args, expected",
    [
        # the JSON form: one item, two items, vLLM's underscore spelling, the short flag; the last one wins
        (["/mnt/models", _arg(K3), "--seed=0"], K3),
        (["/mnt/models", "--speculative_config", json.dumps(K2)], K2),
        (["-sc", json.dumps(K2), "--max-model-len=512"], K2),
        ([_arg(K2), _arg(K3)], K3),
        # 0.8.2 parsed the value with ast.literal_eval: a Python dict
        (["--speculative-config={'method': 'ngram', 'num_speculative_tokens': 3}"],
         {"method": "ngram", "num_speculative_tokens": 3}),
        # the dotted form: values read as JSON, strings kept; it replaces a JSON value
        (["--speculative-config.method=ngram", "--speculative-config.num_speculative_tokens", "3"],
         {"method": "ngram", "num_speculative_tokens": 3}),
        ([_arg(K2), "--speculative-config.method=eagle", "--speculative-config.model=/mnt/models/draft"],
         {"method": "eagle", "model": "/mnt/models/draft"}),
        # V0 flags (<= 0.8.1): their spec keys; [ngram] as the model is the n-gram method
        (["--speculative-model=[ngram]", "--num-speculative-tokens=5", "--ngram-prompt-lookup-max", "4",
          "--use-v2-block-manager"],
         {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}),
        (["--speculative-model", "/mnt/models/draft", "--num-speculative-tokens=4",
          "--speculative-disable-mqa-scorer"],
         {"model": "/mnt/models/draft", "num_speculative_tokens": 4, "disable_mqa_scorer": True}),
        # a shell command line kept in one argument
        (["sh", "-c", "vllm serve /mnt/models --speculative-config '%s'" % json.dumps(K3)], K3),
        # no speculative decoding, or a value that is no config
        (["/mnt/models", "--max-model-len=512", "--use-v2-block-manager"], None),
        (["--speculative-config=not-json"], None),
    ],
)
def test_speculative_config_of_args(args, expected):
    assert spec_flags.speculative_config(args) == expected


def _isvc(args, annotations=None, digest="b" * 64):
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "svc",
            "namespace": "ns",
            "annotations": dict({deploy_state.ANN_DIGEST: digest}, **(annotations or {})),
        },
        "spec": {"predictor": {"model": {"modelFormat": {"name": "vLLM"}, "args": list(args)}}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _plan(cfg):
    """The current spec's plan (what validate gives): k=2."""
    args = ["/mnt/models", "--max-model-len=512", _arg(cfg)]
    return service_plan.build(
        {
            "name": "svc",
            "namespace": "ns",
            "spec_digest": "b" * 64,
            "args": args,
            "args_without_speculative": args[:2],
            "speculative_args": [_arg(cfg)],
            "speculative_config": cfg,
            "vllm_version": "0.11.0",
        }
    ).as_dict()


def _restore_decision(spelling):
    """The live service runs k=2; the revision it replaced (recorded by deploy) ran k=3, written
    ``spelling``."""
    old = _isvc(["/mnt/models", "--max-model-len=512"] + spelling, digest="a" * 64)
    record = deploy_state.record_for("b" * 64, old, None, True, 1000)["annotation"]
    live = _isvc(["/mnt/models", "--max-model-len=512", _arg(K2)], {deploy_state.ANN_PREVIOUS: record})
    decision = rollback.decide({"inferenceservice": live}, "restore", now=2000)
    assert decision["error"] is None and decision["needs_apply"]
    return decision


def _engine(cfg):
    """What the smoke role reads of an engine running ``cfg`` (the engine-init line, the requested
    dict)."""
    body = "method='%s', model=None, num_spec_tokens=%d" % (cfg["method"], cfg["num_speculative_tokens"])
    return {
        "speculative_config_found": True,
        "speculative_config": parse_speculative_repr(body),
        "requested_speculative_config": cfg,
        "ready": True,
    }


def _checks(plan, args, cfg):
    container = {"name": "kserve-container", "args": args}
    pod = {"metadata": {"name": "svc-pod"}, "spec": {"containers": [container]}}
    result = smoke.evaluate(
        {"expect": "on", "plan": plan, "inferenceservice": _isvc(args), "pod": pod, "log_facts": _engine(cfg)}
    )
    return {c["id"]: c for c in result["checks"]}


@pytest.mark.parametrize(
    "spelling",
    [
        [_arg(K3)],
        ["--speculative-config", json.dumps(K3)],
        ["--speculative-config.method=ngram", "--speculative-config.num_speculative_tokens=3",
         "--speculative-config.prompt_lookup_max=4"],
    ],
    ids=["json", "json-two-items", "dotted"],
)
def test_a_restore_is_judged_against_the_restored_revision(spelling):
    plan = _plan(K2)
    decision = _restore_decision(spelling)
    judged = rollback.smoke_plan(plan, decision)
    assert judged["speculative_config"] == K3
    assert judged["spec_digest"] == "a" * 64 and judged["revision_of"] == "b" * 64
    assert judged["args"] == decision["after_args"] and judged["vllm_version"] == "0.11.0"
    assert (judged["name"], judged["namespace"]) == ("svc", "ns")
    # the engine runs the restored k=3: judged by the restored revision, every config check passes ...
    checks = _checks(judged, decision["after_args"], K3)
    for check in ("engine_config", "engine_requested_config", "isvc_args", "pod_args"):
        assert checks[check]["status"] in ("pass", "warn"), checks[check]
    # ... and the spec's plan (k=2) fails it, which was the bug
    before = _checks(plan, decision["after_args"], K3)
    assert before["engine_config"]["status"] == "fail" and "num_spec_tokens 3 (planned 2)" in before[
        "engine_config"]["message"]
    assert before["engine_requested_config"]["status"] == "fail"
    # an engine that did not come back at k=3 still fails the restored plan
    assert _checks(judged, decision["after_args"], K2)["engine_config"]["status"] == "fail"


def test_v0_flags_restored():
    spelling = ["--speculative-model=[ngram]", "--num-speculative-tokens=3", "--use-v2-block-manager"]
    judged = rollback.smoke_plan(_plan(K2), _restore_decision(spelling))
    assert judged["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert judged["speculative_args"] == spelling[:2]


def test_off_mode_and_another_object_keep_the_plan():
    plan = _plan(K2)
    live = _isvc(["/mnt/models", _arg(K2)])
    off = rollback.decide({"inferenceservice": live}, "off", now=1000)
    assert rollback.smoke_plan(plan, off) == plan
    other = dict(_restore_decision([_arg(K3)]), name="other")
    assert rollback.smoke_plan(plan, other) == plan
    assert rollback_smoke_plan({}, other) == {}
