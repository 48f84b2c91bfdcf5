"""What runs an LLMInferenceService after deploy reads it through the plan and the live view (issue 35): the
benchmark's twin (a second LLMInferenceService), the guard's reading, the monitoring's scrape config, the canary's
refusal, and rollback's decision (off and restore, idempotent) on the live object."""

from __future__ import annotations

import copy
import json

import pytest
from ansible.errors import AnsibleFilterError

from validate_helpers import base_spec
from ansible_collections.specpilot.core.plugins.filter.canary import canary_kind_problem
from ansible_collections.specpilot.core.plugins.filter.guard import serving_api_version, serving_pod_labels
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_plan
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_state
from ansible_collections.specpilot.core.plugins.module_utils.operate import acceptance_guard, monitoring, rollback
from ansible_collections.specpilot.core.plugins.module_utils.service import live, llmisvc, spec_flags
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate


@pytest.fixture(scope="module")
def plan():
    spec = base_spec(resource="LLMInferenceService", delivery=None,
                     draft=dict(base_spec()["draft"], uri="pvc://models/eagle3"), llm={"prefill": {}})
    result = validate(spec, {"read_local_files": False, "model_facts": "off"})
    assert result["ok"], result["report"]
    return result["plan"]


def decode_args(obj):
    return next(c for c in obj["spec"]["template"]["containers"] if c["name"] == "main")["args"]


def test_the_benchmark_twin_is_a_second_llminferenceservice_without_speculative_decoding(plan):
    twin = bench_plan.render_twin(plan, "-baseline")
    manifest = twin["manifest"]
    assert manifest["kind"] == "LLMInferenceService" and manifest["metadata"]["name"] == "svc-baseline"
    assert twin["args"] == plan["args_without_speculative"]
    assert llmisvc.engine_words(decode_args(manifest)) == plan["args_without_speculative"]
    assert manifest["spec"]["prefill"] == plan["llminferenceservice"]["spec"]["prefill"]
    assert manifest["metadata"]["labels"]["specpilot.io/benchmark-twin-of"] == "svc"
    # a tuning candidate (its own validated plan) runs as a twin with its speculative args in the decode workload
    variant = validate(dict(base_spec(resource="LLMInferenceService", delivery=None, llm={"prefill": {}},
                                      draft=dict(base_spec()["draft"], uri="pvc://models/eagle3")),
                            speculative={"method": "eagle3", "num_speculative_tokens": 5}),
                       {"read_local_files": False, "model_facts": "off"})["plan"]
    candidate = bench_plan.render_twin(plan, "-c1", variant)
    assert llmisvc.engine_words(decode_args(candidate["manifest"])) == variant["args"]
    assert '"num_speculative_tokens":5' in variant["args"][-1]
    # the service itself is measured against its plan through the live view
    live_obj = dict(copy.deepcopy(plan["llminferenceservice"]), status={"conditions": [{"type": "Ready", "status": "True"}]})
    assert bench_plan.target_problem([live_obj], plan["args"]) == ""
    assert "differ" in bench_plan.target_problem([live_obj], plan["args_without_speculative"])


def test_the_guard_reads_its_speculative_config_and_the_roles_find_its_pods(plan):
    state = acceptance_guard.isvc_speculative(plan["llminferenceservice"])
    assert state["on"] and state["config"] == plan["speculative_config"]
    assert serving_api_version("LLMInferenceService", "0.16") == "serving.kserve.io/v1alpha1"
    assert serving_api_version("LLMInferenceService", "0.20.1") == "serving.kserve.io/v1alpha2"
    assert serving_api_version("LLMInferenceService", "") == "serving.kserve.io/v1alpha2"
    assert serving_api_version("", "0.20") == "serving.kserve.io/v1beta1"
    with pytest.raises(AnsibleFilterError):
        serving_api_version("LLMInferenceService", "new")
    assert serving_pod_labels("LLMInferenceService", "svc") == plan["workload"]["pod_labels"]
    assert serving_pod_labels("InferenceService", "svc") == ["serving.kserve.io/inferenceservice=svc"]


def test_monitoring_scrapes_the_decode_pods(plan):
    out = monitoring.render("svc", "ml", "0.32.0", plan["speculative_config"], kind="LLMInferenceService",
                            model_name="llama")
    assert out["pod_monitor"]["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "svc", "app.kubernetes.io/component": "llminferenceservice-workload"}
    assert out["pod_monitor"]["spec"]["podMetricsEndpoints"][0]["targetPort"] == 8000
    assert out["selector"] == {"namespace": "ml", "model_name": "llama"}
    assert out["service_monitor"] is None
    assert [o["kind"] for o in monitoring.to_apply(out)["objects"]] == ["PrometheusRule", "PodMonitor"]
    with pytest.raises(monitoring.MonitoringError, match="no predictor Service"):
        monitoring.to_apply(out, "servicemonitor")


def test_the_canary_refuses_it_and_says_why():
    why = canary_kind_problem("LLMInferenceService")
    assert "no traffic-split field" in why and "nothing was changed" in why and "benchmark.yml" in why
    assert canary_kind_problem("InferenceService") == ""


def live_state(obj, ready=True):
    obj = copy.deepcopy(obj)
    obj["metadata"]["managedFields"] = [{"manager": "specpilot"}]
    obj["status"] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}], "url": "http://x"}
    name = obj["metadata"]["name"]
    deployment = {"metadata": {"name": name + "-kserve", "generation": 2},
                  "spec": {"template": {"spec": {"containers": [{"name": "main", "args": decode_args(obj)}]}}},
                  "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}}
    return {"inferenceservice": obj, "deployment": deployment, "pods": [], "history": None}


def test_rollback_off_removes_it_from_the_decode_workload_then_changes_nothing(plan):
    decision = rollback.decide(live_state(plan["llminferenceservice"]), "off", now=1000.0)
    assert decision["error"] is None and decision["needs_apply"]
    manifest = decision["manifest"]
    assert manifest["kind"] == "LLMInferenceService" and manifest["apiVersion"] == plan["api_version"]
    view = live.view(manifest)
    assert not view.speculative and view.args == plan["args_without_speculative"]
    assert manifest["spec"]["prefill"] == plan["llminferenceservice"]["spec"]["prefill"]
    assert decision["speculative_before"] and not decision["speculative_after"]
    assert decision["wait_plan"]["kind"] == "LLMInferenceService"
    record = json.loads(manifest["metadata"]["annotations"][deploy_state.ANN_PREVIOUS])
    assert record["kind"] == "LLMInferenceService" and record["spec"] == plan["llminferenceservice"]["spec"]
    # applied: a second off finds nothing to do
    again = rollback.decide(live_state(manifest), "off", now=1001.0)
    assert again["error"] is None and not again["needs_apply"]
    # verify: the stored spec is the decided one, the decode Deployment runs without the flags
    assert rollback.verify(live_state(manifest), decision)["ok"]
    stale = live_state(manifest)
    stale["deployment"]["spec"]["template"]["spec"]["containers"][0]["args"] = decode_args(plan["llminferenceservice"])
    check = rollback.verify(stale, decision)
    assert not check["ok"] and "decode Deployment" in check["problems"][0]
    # restore: the recorded spec back, then nothing more
    restore = rollback.decide(live_state(manifest), "restore", now=1002.0)
    assert restore["needs_apply"] and restore["manifest"]["spec"] == plan["llminferenceservice"]["spec"]
    assert spec_flags.speculative_args(restore["after_args"])
    again = rollback.decide(live_state(restore["manifest"]), "restore", now=1003.0)
    assert not again["needs_apply"]


def test_restore_without_a_record_says_so(plan):
    decision = rollback.decide(live_state(plan["llminferenceservice"]), "restore", now=1.0)
    assert not decision["needs_apply"] and "nothing to restore" in decision["error"]
