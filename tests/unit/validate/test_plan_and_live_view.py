"""The typed plan (module_utils/service/plan.py), the one view of a live service (service/live.py) and the one
list of speculative flags (service/spec_flags.py), as the validator, rollback, smoke, the guard, the canary and
the benchmark use them (issue 34)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from validate_helpers import base_spec
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_plan
from ansible_collections.specpilot.core.plugins.module_utils.operate import acceptance_guard, canary, rollback
from ansible_collections.specpilot.core.plugins.module_utils.service import live, spec_flags
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service import speculative
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate
from ansible_collections.specpilot.core.plugins.module_utils.service.vllm_profiles import V0_FLAGS
from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke

# the plan's keys before issue 34: roles, reports and tests read them by name
KEYS_BEFORE = {
    "name", "namespace", "kserve_version", "deployment_mode", "vllm_version", "profile", "delivery", "mount_paths",
    "speculative", "speculative_method", "speculative_config", "speculative_args", "args",
    "args_without_speculative", "tensor_parallel_size", "runtime", "startup_timeout_seconds",
    "progress_deadline_seconds", "rollout_strategy", "gpu_budget", "spec_digest", "labels", "staging",
    "servingruntime", "inferenceservice",
}


def plan_of(**changes):
    result = validate(base_spec(**changes), {"read_local_files": False, "model_facts": "off"})
    assert result["ok"], result["report"]
    return result["plan"]


@pytest.mark.parametrize("given,mode,annotation", [
    ("RawDeployment", "Standard", "Standard"),
    ("Serverless", "Knative", "Knative"),
    ("Standard", "Standard", "Standard"),
])
def test_the_plan_normalises_the_mode_once_and_keeps_its_keys(given, mode, annotation):
    plan = plan_of(deployment_mode=given, startup_timeout_seconds=1234)
    assert KEYS_BEFORE <= set(plan) and {"wait_plan", "benchmark_twin"} <= set(plan)
    assert plan["deployment_mode"] == mode
    assert plan["inferenceservice"]["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == annotation
    # the wait plan: the spec's startup timeout (not the 900 s rollback used to assume), the normalised mode
    assert plan["wait_plan"] == {
        "name": "svc", "namespace": "ml", "spec_digest": plan["spec_digest"], "args": plan["args"],
        "deployment_mode": mode, "startup_timeout_seconds": 1234,
    }
    # the dict is JSON (what Ansible passes between tasks) and reads back to the same typed plan
    again = service_plan.from_dict(json.loads(json.dumps(plan)))
    assert again == service_plan.build(plan) and again.as_dict() == plan
    # the validator's key order is kept (the rendered plan.yaml reads as before), the new keys last
    assert list(plan)[:3] == ["name", "namespace", "kserve_version"] and list(plan)[-2:] == ["wait_plan", "benchmark_twin"]
    assert list(again.as_dict()) == list(plan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        again.name = "other"


def test_the_benchmark_twin_is_the_plan_without_speculation():
    plan = plan_of()
    twin = plan["benchmark_twin"]
    assert twin["args"] == plan["args_without_speculative"] and twin["method"] == "off"
    assert not spec_flags.speculative_args(twin["args"]) and spec_flags.speculative_args(plan["args"])
    rendered = bench_plan.render_twin(plan, "-baseline")
    assert rendered["args"] == twin["args"] and rendered["digest"] == twin["digest"]
    assert rendered["manifest"]["spec"]["predictor"]["model"]["args"] == twin["args"]
    assert rendered["manifest"]["metadata"]["annotations"]["specpilot.io/spec-digest"] == twin["digest"]


def isvc(args=None, mode=None, containers=None, command=None, kind=None):
    model = {"modelFormat": {"name": "vLLM"}}
    if args is not None:
        model["args"] = args
    if command:
        model["command"] = command
    predictor = {"model": model} if (args is not None or command) else {}
    if containers:
        predictor["containers"] = containers
    obj = {"metadata": {"name": "svc", "namespace": "ml", "annotations": {}}, "spec": {"predictor": predictor}}
    if mode:
        obj["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] = mode
    if kind:
        obj["kind"] = kind
    return obj


CONFIG = '--speculative-config={"method":"ngram","num_speculative_tokens":3}'


@pytest.mark.parametrize("mode,normalised", [
    (None, "Standard"), ("RawDeployment", "Standard"), ("Serverless", "Knative"), ("Knative", "Knative"),
])
def test_the_live_view_reads_args_flags_and_mode(mode, normalised):
    view = live.view(isvc(["--model=/mnt/models", CONFIG], mode))
    assert isinstance(view, live.InferenceServiceView) and view.kind == "InferenceService"
    assert view.deployment_mode == normalised and view.args == ["--model=/mnt/models", CONFIG]
    assert view.speculative and view.speculative_flags == [CONFIG]


def test_the_live_view_reads_the_engine_container_and_shell_lines():
    shell = "exec vllm serve /m --speculative_config '{\"method\": \"ngram\"}' --port 8080"
    containers = [{"name": "sidecar", "args": ["--x"]}, {"name": "kserve-container", "command": ["sh", "-c"],
                                                         "args": [shell]}]
    view = live.view(isvc(containers=containers))
    assert view.args == [shell] and view.command_line == ["sh", "-c", shell]
    assert view.speculative and view.speculative_flags == [shell]
    off = live.view(isvc(["--model=/m", "--use-v2-block-manager"]))
    assert not off.speculative and off.speculative_flags == ["--use-v2-block-manager"]
    with pytest.raises(ValueError, match="no live view of kind Route"):
        live.view(isvc([], kind="Route"))


def test_the_speculative_flags_are_defined_once_from_the_profiles():
    assert set(V0_FLAGS.values()) <= spec_flags.FLAGS
    assert speculative.RENDERED_FLAGS == tuple(sorted(spec_flags.FLAGS | spec_flags.COMPANIONS))
    for name in ("SPEC_FLAGS", "SPEC_SWITCHES"):
        assert not hasattr(rollback, name) and not hasattr(smoke, name)
    assert not hasattr(acceptance_guard, "_V0_FLAGS")
    # vLLM reads --speculative_config as --speculative-config (FlexibleArgumentParser), dotted keys too
    assert spec_flags.flag_name("--speculative_config.num_speculative_tokens=3") == (
        "--speculative-config.num_speculative_tokens"
    )
    for arg in ("--speculative_config={}", "--speculative-config.method=ngram", "-sc", "--num_speculative_tokens=3"):
        assert spec_flags.is_speculative(arg) and smoke.is_spec_flag(arg.split("=")[0])
    # a flag that merely contains -sc is not one
    assert not spec_flags.is_speculative("--max-num-scheduled-tokens=8")
    assert spec_flags.strip_speculative(["vllm serve /m --max-num-scheduled-tokens 8 -sc '{}'"]) == [
        "vllm serve /m --max-num-scheduled-tokens 8"
    ]


@pytest.mark.parametrize("args", [
    ["--model=/m", "--speculative-model=/d", "--num_speculative_tokens=3", "--use-v2-block-manager"],
    ["--model=/m", "-sc", '{"method":"ngram"}'],
    ["--model=/m", CONFIG],
])
def test_every_reader_agrees_on_what_is_speculative(args):
    obj = isvc(args)
    view = live.view(obj)
    assert rollback.strip_speculative(args) == ["--model=/m"]
    assert rollback.speculative_args(args) == view.speculative_flags
    assert acceptance_guard.isvc_speculative(obj)["on"] is view.speculative is True
    assert smoke.isvc_args(obj) == view.command_line
    assert smoke.spec_args(args) and all(smoke.is_spec_flag(a.split("=")[0]) for a in smoke.spec_args(args))
    assert canary.todo(obj, {"args": args, "spec_digest": "x"}, None) == "promoted"
    ready = dict(obj, status={"conditions": [{"type": "Ready", "status": "True"}]})
    assert bench_plan.target_problem([ready], args) == ""


def test_rollback_waits_with_the_plans_startup_timeout_and_mode():
    plan = plan_of(deployment_mode="RawDeployment", startup_timeout_seconds=1500)
    live_isvc = dict(plan["inferenceservice"], status={})
    live_objects = {"inferenceservice": live_isvc, "deployment": None, "pods": [], "history": None}
    decision = rollback.decide(live_objects, "off", options={"plan": plan})
    assert decision["needs_apply"] and decision["wait_plan"]["startup_timeout_seconds"] == 1500
    assert decision["wait_plan"]["deployment_mode"] == "Standard"
    assert decision["wait_plan"]["args"] == decision["after_args"] == plan["args_without_speculative"]
    # a service deployed by hand (no plan), in the legacy Serverless mode: the live object's mode, the default budget
    live_isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] = "Serverless"
    by_hand = rollback.decide(live_objects, "off")
    assert by_hand["wait_plan"]["deployment_mode"] == "Knative"
    assert by_hand["wait_plan"]["startup_timeout_seconds"] == service_plan.DEFAULT_STARTUP_TIMEOUT
