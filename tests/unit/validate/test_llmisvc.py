"""resource: LLMInferenceService (issue 35): validation by the cluster's KServe release, the rendering per
API version, speculative decoding in the decode workload only, the args as KServe's template's eval hands
them to vLLM, the draft as a second volume, parallelism through the shared checks, and the live view."""

from __future__ import annotations

import copy
import functools
import json
import shutil
import subprocess

import pytest
import yaml

from validate_helpers import CRD_ROOT, _strictify, base_spec
from jsonschema import Draft7Validator
from ansible_collections.specpilot.core.plugins.module_utils.service import live, llmisvc, spec_flags
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate

UPSTREAM_LLM = CRD_ROOT / "v0.20.0" / "llmisvc"
EAGLE_HEAD = "pvc://models/eagle3-llama3.1-8b"


def llm_spec(**changes):
    spec = base_spec(
        resource="LLMInferenceService",
        delivery=None,
        draft=dict(base_spec()["draft"], uri=EAGLE_HEAD),
    )
    spec.update(changes)
    return {k: v for k, v in spec.items() if v is not None}


def run(spec):
    return validate(spec, {"read_local_files": False, "model_facts": "off"})


def ok_plan(spec):
    result = run(spec)
    assert result["ok"], result["report"]
    return result["plan"]


def errors(spec):
    result = run(spec)
    assert not result["ok"]
    return {(e["path"], e["code"]): e for e in result["errors"]}


def main_container(template):
    return next(c for c in template["containers"] if c["name"] == "main")


@pytest.mark.parametrize("kserve,api", [("0.16", "v1alpha1"), ("0.17", "v1alpha2"), ("0.20", "v1alpha2")])
def test_rendered_per_kserve_release(kserve, api):
    plan = ok_plan(llm_spec(kserve_version=kserve))
    obj = plan["llminferenceservice"]
    assert plan["kind"] == "LLMInferenceService" and plan["api_version"] == "serving.kserve.io/" + api
    assert obj["apiVersion"] == "serving.kserve.io/" + api and plan["serving"] == obj
    assert plan["inferenceservice"] is None and plan["servingruntime"] is None
    assert obj["spec"]["model"] == {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "name": "svc"}
    assert obj["metadata"]["annotations"]["specpilot.io/spec-digest"] == plan["spec_digest"]
    main = main_container(obj["spec"]["template"])
    assert main["image"] == "vllm/vllm-openai:v0.32.0"
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # the draft: a second volume, read-only, where the speculative config names it
    assert obj["spec"]["template"]["volumes"] == [
        {"name": "specpilot-draft", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}
    ]
    assert main["volumeMounts"] == [
        {"name": "specpilot-draft", "mountPath": "/mnt/draft", "readOnly": True, "subPath": "eagle3-llama3.1-8b"}
    ]
    assert plan["speculative_config"]["model"] == "/mnt/draft"
    # the typed plan reads it back
    typed = service_plan.from_dict(plan)
    assert typed.kind == "LLMInferenceService" and typed.serving == obj


def test_an_inferenceservice_plan_keeps_its_keys():
    plan = ok_plan(base_spec())
    assert plan["kind"] == "InferenceService" and plan["api_version"] == "serving.kserve.io/v1beta1"
    assert "llminferenceservice" not in plan and "serving" not in plan


def test_kserve_before_016_has_no_llminferenceservice():
    found = errors(llm_spec(kserve_version="0.15"))
    err = found[("resource", "llmisvc-version")]
    assert "KServe >= 0.16" in err["message"] and "0.15.0" in err["message"]


def test_fields_are_checked_as_the_cluster_has_them():
    patch = {"spec": {"kvCacheOffloading": {"cpu": "10Gi"}, "model": {"confidential": {"enabled": False}}}}
    found = errors(llm_spec(kserve_version="0.17", overrides={"llminferenceservice": patch}))
    assert ("overrides.llminferenceservice.spec.kvCacheOffloading", "llmisvc-field-version") in found
    # model.confidential is v1alpha2's from 0.17 on; v1alpha1 (0.16) has model.criticality instead
    assert ("overrides.llminferenceservice.spec.model.confidential", "llmisvc-field-version") not in found
    found = errors(llm_spec(kserve_version="0.16", overrides={"llminferenceservice": patch}))
    assert ("overrides.llminferenceservice.spec.model.confidential", "llmisvc-field-version") in found
    plan = ok_plan(llm_spec(kserve_version="0.20", overrides={"llminferenceservice": patch}))
    assert plan["llminferenceservice"]["spec"]["kvCacheOffloading"] == {"cpu": "10Gi"}
    both = {"spec": {"scaling": {"minReplicas": 1}}}
    found = errors(llm_spec(overrides={"llminferenceservice": both}))
    assert ("overrides.llminferenceservice.spec.scaling", "llmisvc-replicas-scaling") in found


def test_prefill_gets_no_speculative_decoding():
    kv = '--kv-transfer-config={"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    va = {"gpu_memory_utilization": 0.85, "max_model_len": 8192, "extra_args": [kv]}
    plan = ok_plan(llm_spec(llm={"prefill": {"replicas": 2}, "replicas": 3}, vllm_args=va))
    assert kv in plan["args"] and kv in plan["args_without_speculative"]
    spec = plan["llminferenceservice"]["spec"]
    decode, prefill = main_container(spec["template"]), main_container(spec["prefill"]["template"])
    assert spec["replicas"] == 3 and spec["prefill"]["replicas"] == 2
    assert llmisvc.engine_words(decode["args"]) == plan["args"]
    assert llmisvc.engine_words(prefill["args"]) == plan["args_without_speculative"]
    assert spec_flags.speculative_args(plan["args"]) and not spec_flags.speculative_args(
        llmisvc.engine_words(prefill["args"])
    )
    assert "volumes" not in spec["prefill"]["template"]
    view = live.view(plan["llminferenceservice"])
    assert isinstance(view, live.LLMInferenceServiceView) and view.speculative
    assert view.prefill_args == plan["args_without_speculative"] and view.served_model_name == "svc"
    assert spec_flags.strip_speculative(view.args) == plan["args_without_speculative"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_vllm_gets_the_json_that_kserve_template_eval_parses():
    """The container args are the $@ of config-llm-template.yaml's eval "exec vllm serve ... $@": run that
    line with printf in place of vllm serve and read what the engine would get."""
    plan = ok_plan(llm_spec(speculative={"method": "eagle3", "num_speculative_tokens": 3}))
    args = main_container(plan["llminferenceservice"]["spec"]["template"])["args"]
    line = 'eval "exec printf \'%s\\n\' /mnt/models --port 8000 ${VLLM_ADDITIONAL_ARGS} $@"'
    out = subprocess.run(["bash", "-c", line, "--"] + args, capture_output=True, text=True, check=True).stdout
    words = out.splitlines()[3:]
    assert words == plan["args"]
    config = [w for w in words if w.startswith("--speculative-config=")][0]
    assert json.loads(config.split("=", 1)[1]) == plan["speculative_config"]
    # unquoted, the shell would have eaten the JSON's quotes
    raw = subprocess.run(["bash", "-c", line, "--"] + plan["args"], capture_output=True, text=True).stdout
    assert config not in raw.splitlines()


def test_a_draft_not_on_a_pvc_is_refused_with_the_fix():
    found = errors(llm_spec(draft=base_spec()["draft"]))
    err = found[("draft.uri", "llmisvc-draft-source")]
    assert "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in err["message"] and "pvc://" in err["hint"]
    found = errors(llm_spec(delivery="storage_uris"))
    assert ("delivery", "llmisvc-delivery") in found
    found = errors(llm_spec(target=dict(base_spec()["target"], uri="gs://bucket/llama")))
    assert "gs://bucket/llama" in found[("target.uri", "llmisvc-model-scheme")]["message"]
    found = errors(llm_spec(deployment_mode="Knative"))
    assert ("deployment_mode", "llmisvc-mode") in found


def test_delivery_pvc_mounts_both_from_the_claim():
    plan = ok_plan(llm_spec(delivery="pvc", pvc={"name": "models", "path": "llama"}, draft=dict(base_spec()["draft"], uri=None)))
    obj = plan["llminferenceservice"]
    assert obj["spec"]["model"]["uri"] == "pvc://models/llama/target"
    assert main_container(obj["spec"]["template"])["volumeMounts"][0]["subPath"] == "llama/draft"


def test_parallelism_feeds_the_gpu_budget_and_the_draft_tp_check():
    par = {"parallelism": {"tensor": 2, "expert": True}}
    found = errors(llm_spec(llm=par))
    gpu = found[("gpu.count", "llmisvc-gpu-count")]
    assert "gpu.count=1" in gpu["message"] and "specpilot_gpu.count: 2" in gpu["hint"]
    plan = ok_plan(llm_spec(llm=par, gpu={"count": 2, "memory_gib": 80}))
    assert plan["llminferenceservice"]["spec"]["parallelism"] == {"tensor": 2, "expert": True}
    assert plan["tensor_parallel_size"] == 2
    # KServe's template renders --tensor-parallel-size from spec.parallelism: not in the args
    assert not any(a.startswith("--tensor-parallel-size") for a in plan["args"])
    spec = llm_spec(llm=par, gpu={"count": 2, "memory_gib": 80},
                    speculative={"method": "eagle3", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 3})
    err = errors(spec)[("speculative.draft_tensor_parallel_size", "draft-tp")]
    assert "must be 1 or the target's tensor_parallel_size (2)" in err["message"]
    # a GPU count alone is the tensor size, as for an InferenceService
    plan = ok_plan(llm_spec(gpu={"count": 2, "memory_gib": 80}))
    assert plan["llminferenceservice"]["spec"]["parallelism"] == {"tensor": 2}
    found = errors(llm_spec(llm=par, gpu={"count": 2, "memory_gib": 80},
                            vllm_args={"tensor_parallel_size": 1, "max_model_len": 8192}))
    assert ("vllm_args.tensor_parallel_size", "llmisvc-parallelism") in found


@functools.lru_cache(maxsize=1)
def _upstream_crd():
    path = UPSTREAM_LLM / "serving.kserve.io_llminferenceservices.yaml"
    if not path.is_file():
        return None
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _upstream_validator(version):
    crd = _upstream_crd()
    if crd is None:
        pytest.skip("upstream LLMInferenceService CRD not found under ../shared/reference/kserve-crds/v0.20.0")
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    return Draft7Validator(_strictify(copy.deepcopy(schema)))


@pytest.mark.parametrize("kserve,version", [("0.16", "v1alpha1"), ("0.20", "v1alpha2")])
def test_rendered_objects_validate_strictly_against_the_upstream_020_crd(kserve, version):
    validator = _upstream_validator(version)
    for llm in ({}, {"prefill": {"replicas": 1, "parallelism": {"tensor": 1}}, "base_refs": ["my-config"],
                     "router": {"route": {}, "gateway": {}, "scheduler": {}}}):
        obj = ok_plan(llm_spec(kserve_version=kserve, llm=llm))["llminferenceservice"]
        problems = ["%s: %s" % ("/".join(map(str, e.absolute_path)), e.message) for e in validator.iter_errors(obj)]
        assert problems == []
