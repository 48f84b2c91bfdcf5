"""The smoke verdict on an LLMInferenceService (issue 35): the object's and the decode pod's args are read as
KServe's template hands them to vLLM (the container main's args are the $@ of an eval, quoted), so a pod that
runs the plan passes and one whose args lost the speculative config fails."""

from __future__ import annotations

import copy

import pytest
import smoke_samples as s

from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke

# the command of config-llm-template.yaml's container main, cut to what matters here
TEMPLATE_COMMAND = ["/bin/bash", "-c", 'eval "exec vllm serve /mnt/models --port 8000 ${VLLM_ADDITIONAL_ARGS} $@"', "--"]


@pytest.fixture(scope="module")
def plan():
    plan = s.plan_for("lab-ngram", resource="LLMInferenceService")
    assert plan["kind"] == "LLMInferenceService" and plan["workload"]["container"] == "main"
    return plan


def llm_data(plan, args=None):
    obj = copy.deepcopy(plan["llminferenceservice"])
    obj["status"] = {"url": "http://127.0.0.1:40000", "conditions": [{"type": "Ready", "status": "True"}]}
    pod = s.pod_for(plan, name="lab-ngram-kserve-abc")
    container = pod["spec"]["containers"][0]
    container.update(name="main", command=TEMPLATE_COMMAND,
                     args=llmisvc.container_args(plan["args"] if args is None else args))
    pod["status"]["containerStatuses"][0]["name"] = "main"
    return s.data_for(plan, inferenceservice=obj, pod=pod, container="main")


def by_id(result):
    return {c["id"]: c for c in result["checks"]}


def test_a_decode_pod_that_runs_the_plan_passes(plan):
    result = smoke.evaluate(llm_data(plan))
    checks = by_id(result)
    assert result["verdict"] == "pass", result["message"]
    for cid in ("inferenceservice", "isvc_args", "pod", "pod_args"):
        assert checks[cid]["status"] == "pass", checks[cid]


def test_a_decode_pod_without_the_speculative_config_fails(plan):
    result = smoke.evaluate(llm_data(plan, args=plan["args_without_speculative"]))
    assert by_id(result)["pod_args"]["status"] == "fail"
    assert result["verdict"] == "fail"
