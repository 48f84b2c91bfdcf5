"""The LLMInferenceService specpilot renders (issue 35) is accepted by KServe's upstream v0.20.0 CRD: a
server-side apply, dry run, strict field validation, against the lab's API server with only that CRD loaded
(../shared/reference/kserve-crds/v0.20.0/llmisvc; never committed).  For each API version a KServe release
stores (v1alpha1 on 0.16, v1alpha2 from 0.17), with and without prefill/decode disaggregation: nothing is
pruned and nothing is stored; a field the CRD does not have is refused, so the check can fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_CRD = (
    ROOT.parent / "shared" / "reference" / "kserve-crds" / "v0.20.0" / "llmisvc"
    / "serving.kserve.io_llminferenceservices.yaml"
)
NS = "llm-dry"

SPEC = {
    "name": "chat",
    "namespace": NS,
    "resource": "LLMInferenceService",
    "vllm_version": "0.32.0",
    "runtime": {"image": "vllm/vllm-openai:v0.32.0"},
    "target": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "params_b": 8.03, "dtype": "bfloat16",
               "hidden_size": 4096, "vocab_size": 128256, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8},
    "draft": {"uri": "pvc://models/eagle3", "params_b": 0.85, "architecture": "LlamaForCausalLMEagle3",
              "hidden_size": 4096, "vocab_size": 128256},
    "speculative": {"method": "eagle3", "num_speculative_tokens": 3},
    "vllm_args": {"gpu_memory_utilization": 0.85, "max_model_len": 8192},
    "gpu": {"count": 1, "memory_gib": 80},
    "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
}


@pytest.fixture(scope="module")
def upstream(emulator_factory):
    if not UPSTREAM_CRD.is_file():
        pytest.skip("upstream LLMInferenceService CRD not found at %s" % UPSTREAM_CRD)
    emu = emulator_factory(crds=[str(UPSTREAM_CRD)], name="llmisvc-upstream")
    emu.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return emu


def rendered(kserve, llm):
    result = validate(dict(SPEC, kserve_version=kserve, llm=llm), {"read_local_files": False, "model_facts": "off"})
    assert result["ok"], result["report"]
    return result["plan"]["llminferenceservice"]


def dry_apply(emu, obj):
    version = obj["apiVersion"].split("/")[1]
    path = "/apis/serving.kserve.io/%s/namespaces/%s/llminferenceservices/%s" % (version, NS, obj["metadata"]["name"])
    return emu.request(
        "PATCH",
        path + "?fieldManager=specpilot&dryRun=All&fieldValidation=Strict",
        yaml.safe_dump(obj),
        content_type="application/apply-patch+yaml",
    ), path


@pytest.mark.parametrize("kserve", ["0.16", "0.20"])
def test_the_rendered_object_passes_a_server_side_dry_run_against_the_upstream_crd(upstream, kserve):
    for llm in ({}, {"prefill": {"replicas": 1}, "router": {"route": {}, "gateway": {}, "scheduler": {}}}):
        obj = rendered(kserve, llm)
        resp, path = dry_apply(upstream, obj)
        assert resp.status in (200, 201), resp.text()
        answered = resp.json()
        # nothing pruned: the spec comes back as sent (the API server adds defaults only where the CRD has them)
        assert answered["spec"]["template"] == obj["spec"]["template"]
        assert answered["spec"]["model"] == obj["spec"]["model"]
        assert answered["spec"].get("prefill") == obj["spec"].get("prefill")
        assert upstream.request("GET", path).status == 404  # a dry run stores nothing


def test_a_field_the_crd_does_not_have_is_refused(upstream):
    obj = json.loads(json.dumps(rendered("0.20", {})))
    obj["spec"]["template"]["containers"][0]["argz"] = ["--x"]
    resp, _path = dry_apply(upstream, obj)
    # kube-apiserver: 400 BadRequest, "strict decoding error: unknown field ..."
    assert resp.status == 400
    assert 'unknown field "spec.template.containers[0].argz"' in resp.json()["message"]
