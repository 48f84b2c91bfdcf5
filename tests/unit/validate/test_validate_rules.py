"""Rendering and KServe rules: what deploy applies, overrides that would produce a wrong
manifest, local model facts, the GPU budget, and the module entry point."""

from __future__ import annotations

import math

import json
import os
import stat
import subprocess
import sys

import pytest

from validate_helpers import MODELS, ROOT, base_spec, paths

from ansible_collections.specpilot.core.plugins.module_utils.service import compat
from ansible_collections.specpilot.core.plugins.module_utils.service.kserve_rules import common_parent
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate

MODULE = (
    ROOT
    / "collections"
    / "ansible_collections"
    / "specpilot"
    / "core"
    / "plugins"
    / "modules"
    / "spec_validate.py"
)


def plan_of(spec, **options):
    result = validate(spec, options)
    assert result["ok"], result["report"]
    return result["plan"]


# ------------------------------------------------------------------ the rendered objects


def test_servingruntime_is_plain_vllm_with_go_template_kept():
    runtime = plan_of(base_spec())["servingruntime"]
    container = runtime["spec"]["containers"][0]
    assert container["name"] == "kserve-container"
    assert container["command"] == ["vllm", "serve"]  # vLLM's documented entry point (render.ENTRYPOINT)
    # no args of its own: KServe appends the InferenceService's, and vllm serve needs the model first
    assert container["args"] == []
    plan = plan_of(base_spec())
    assert plan["args"][:3] == ["/mnt/models/target", "--port=8080", "--served-model-name={{.Name}}"]
    # with a runtime the user brings (its args come first): the model as --model=, which vllm serve
    # moves to the front itself
    existing = plan_of(base_spec(runtime={"create": False, "name": "their-vllm", "kind": "ServingRuntime"}))
    assert existing["servingruntime"] is None and existing["args"][0] == "--model=/mnt/models/target"
    assert container["ports"][0]["containerPort"] == 8080
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert runtime["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert runtime["spec"]["annotations"] == {
        "prometheus.kserve.io/port": "8080",
        "prometheus.kserve.io/path": "/metrics",
    }
    assert runtime["spec"]["supportedModelFormats"][0]["name"] == "vLLM"


def test_probes_are_sized_for_cold_starts_with_a_draft():
    with_draft = plan_of(base_spec())
    without = plan_of(
        base_spec(
            draft=None,
            delivery="storage_uri",
            speculative={"method": "ngram", "num_speculative_tokens": 3},
            acknowledged_warnings=["async-scheduling-disabled"],
        )
    )
    probe = lambda plan: plan["servingruntime"]["spec"]["containers"][0]["startupProbe"]  # noqa: E731
    assert probe(with_draft)["failureThreshold"] * probe(with_draft)["periodSeconds"] == 1800
    assert probe(without)["failureThreshold"] * probe(without)["periodSeconds"] == 900
    custom = plan_of(base_spec(startup_timeout_seconds=3600))
    assert probe(custom)["failureThreshold"] * probe(custom)["periodSeconds"] == 3600


def test_inferenceservice_option_a_storage_uris_at_predictor_level():
    isvc = plan_of(base_spec())["inferenceservice"]
    predictor = isvc["spec"]["predictor"]
    assert predictor["storageUris"] == [
        {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "mountPath": "/mnt/models/target"},
        {"uri": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "mountPath": "/mnt/models/draft"},
    ]
    model = predictor["model"]
    assert "storageUris" not in model and "storageUri" not in model
    assert model["modelFormat"] == {"name": "vLLM"}
    assert model["runtime"] == "svc-vllm"
    assert model["args"][0] == "/mnt/models/target"  # vllm serve's positional model
    assert model["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    assert "serving.knative.dev/progress-deadline" not in isvc["metadata"]["annotations"]
    assert predictor["deploymentStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }


def test_two_oci_sources_get_distinct_parents():
    plan = plan_of(
        base_spec(
            target=dict(base_spec()["target"], uri="oci://r.example/m/t@sha256:" + "a" * 64),
            draft=dict(base_spec()["draft"], uri="oci://r.example/m/d@sha256:" + "b" * 64),
        )
    )
    mounts = [e["mountPath"] for e in plan["inferenceservice"]["spec"]["predictor"]["storageUris"]]
    assert mounts == ["/mnt/target/model", "/mnt/draft/model"]
    assert plan["args"][0] == "/mnt/target/model"
    assert plan["speculative_config"]["model"] == "/mnt/draft/model"


def test_option_b_modelcar_by_digest_with_startup_guard(tmp_path):
    digest = "sha256:" + "c" * 64
    plan = plan_of(
        base_spec(
            delivery="modelcar", modelcar={"image": "r.example/m/llama-eagle3:v1", "image_digest": digest}
        )
    )
    model = plan["inferenceservice"]["spec"]["predictor"]["model"]
    assert model["storageUri"] == "oci://r.example/m/llama-eagle3@" + digest
    assert "storageUris" not in plan["inferenceservice"]["spec"]["predictor"]
    assert plan["staging"]["kind"] == "modelcar"
    command = plan["servingruntime"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"] and command[-1] == "--"
    assert "until [ -e /mnt/models/target/config.json ]" in command[2]
    # the guard keeps the args a list: run it with a stand-in vllm and a local model dir
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "vllm").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (fake / "vllm").chmod(stat.S_IRWXU)
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text("{}")
    script = command[2].replace("/mnt/models/target", str(tmp_path / "target"))
    args = model["args"]
    out = subprocess.run(
        ["/bin/sh", "-c", script, "--"] + args,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "%s:/usr/bin:/bin" % fake},
    )
    assert out.stdout.splitlines() == ["serve"] + args


def test_modelcar_digest_required_unless_allowed():
    spec = base_spec(delivery="modelcar", modelcar={"image": "r.example/m/x:v1"})
    assert "modelcar.image_digest" in paths(validate(spec)["errors"])
    pending = validate(spec, {"allow_missing_digest": True})
    assert pending["ok"] and "modelcar.image_digest" in paths(pending["warnings"])
    assert pending["plan"]["inferenceservice"]["spec"]["predictor"]["model"]["storageUri"].endswith(
        "@sha256:" + "0" * 64
    )


def test_option_c_pvc_root_and_sub_directories():
    plan = plan_of(
        base_spec(
            delivery="pvc",
            pvc={"name": "models", "path": "llama"},
            target=dict(base_spec()["target"], uri=None, subdir="llama-8b"),
            draft=dict(base_spec()["draft"], uri=None, subdir="eagle3"),
        )
    )
    model = plan["inferenceservice"]["spec"]["predictor"]["model"]
    assert model["storageUri"] == "pvc://models/llama/"
    assert model["args"][0] == "/mnt/models/llama-8b"
    assert plan["speculative_config"]["model"] == "/mnt/models/eagle3"
    assert plan["staging"] is None  # nothing to copy: already on the PVC


def test_knative_gets_progress_deadline_and_no_strategy():
    plan = plan_of(base_spec(deployment_mode="Knative", acknowledged_warnings=["knative-storageuris-flags"]))
    annotations = plan["inferenceservice"]["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "Knative"
    assert annotations["serving.knative.dev/progress-deadline"] == "2400s"
    assert "deploymentStrategy" not in plan["inferenceservice"]["spec"]["predictor"]


def test_rollout_strategy_choices():
    assert plan_of(base_spec(rollout="recreate"))["inferenceservice"]["spec"]["predictor"][
        "deploymentStrategy"
    ] == {"type": "Recreate"}
    assert (
        "deploymentStrategy"
        not in plan_of(base_spec(rollout="surge"))["inferenceservice"]["spec"]["predictor"]
    )
    cpu = plan_of(base_spec(gpu={"count": 0}))
    assert "deploymentStrategy" not in cpu["inferenceservice"]["spec"]["predictor"]
    assert "resources" not in cpu["inferenceservice"]["spec"]["predictor"]["model"]


def test_legacy_deployment_mode_names_before_kserve_0_16():
    plan = plan_of(base_spec(kserve_version="0.15", delivery="pvc", pvc={"name": "m"}))
    assert (
        plan["inferenceservice"]["metadata"]["annotations"]["serving.kserve.io/deploymentMode"]
        == "RawDeployment"
    )
    assert plan["deployment_mode"] == "Standard"


def test_existing_cluster_runtime_is_referenced_not_rendered():
    plan = plan_of(
        base_spec(runtime={"name": "vllm-openai", "kind": "ClusterServingRuntime", "create": False})
    )
    assert plan["servingruntime"] is None
    assert plan["inferenceservice"]["spec"]["predictor"]["model"]["runtime"] == "vllm-openai"


def test_baseline_args_drop_only_the_speculative_part():
    plan = plan_of(
        base_spec(
            vllm_args={
                "gpu_memory_utilization": 0.85,
                "max_model_len": 8192,
                "extra_args": ["--enable-prefix-caching"],
            }
        )
    )
    assert plan["args_without_speculative"] == [
        "/mnt/models/target",
        "--port=8080",
        "--served-model-name={{.Name}}",
        "--gpu-memory-utilization=0.85",
        "--max-model-len=8192",
        "--enable-prefix-caching",
    ]
    assert plan["args"] == plan["args_without_speculative"][:5] + plan["speculative_args"] + [
        "--enable-prefix-caching"
    ]


def test_spec_digest_is_stable_and_tracks_changes():
    first, again = plan_of(base_spec()), plan_of(base_spec())
    assert first["spec_digest"] == again["spec_digest"]
    assert len(first["spec_digest"]) == 64
    changed = plan_of(base_spec(speculative={"method": "eagle3", "num_speculative_tokens": 4}))
    assert changed["spec_digest"] != first["spec_digest"]
    for kind in ("inferenceservice", "servingruntime"):
        assert changed[kind]["metadata"]["annotations"]["specpilot.io/spec-digest"] == changed["spec_digest"]
    # what does not change the deployment does not change it (KServe copies the annotation to the pods)
    quiet = plan_of(
        base_spec(
            smoke={"min_acceptance_rate": 0.5},
            acknowledged_warnings=["draft-ratio"],
            target=dict(base_spec()["target"], tokenizer="meta-llama/Llama-3.1"),
        )
    )
    assert quiet["spec_digest"] == first["spec_digest"]
    staged = plan_of(base_spec(delivery="pvc", pvc={"name": "m"}))
    restaged = plan_of(
        base_spec(delivery="pvc", pvc={"name": "m"}, target=dict(base_spec()["target"], revision="v2"))
    )
    assert staged["spec_digest"] != restaged["spec_digest"]  # new staged content: new rollout


# ------------------------------------------------------------------ overrides and webhook rules


def test_override_cannot_put_storage_uris_under_model():
    spec = base_spec(
        overrides={
            "inferenceservice": {
                "spec": {
                    "predictor": {
                        "model": {"storageUris": [{"uri": "hf://x/y", "mountPath": "/mnt/models/draft"}]}
                    }
                }
            }
        }
    )
    result = validate(spec)
    error = next(e for e in result["errors"] if e["code"] == "storageuris-under-model")
    assert error["path"] == "overrides.inferenceservice.spec.predictor.model.storageUris"
    assert "spec.predictor.storageUris" in error["hint"]
    assert result["ok"] is False


def test_harmless_overrides_are_merged():
    plan = plan_of(
        base_spec(
            overrides={
                "inferenceservice": {
                    "spec": {
                        "predictor": {
                            "priorityClassName": "llm-high",
                            "model": {"env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]},
                        }
                    }
                }
            }
        )
    )
    predictor = plan["inferenceservice"]["spec"]["predictor"]
    assert predictor["priorityClassName"] == "llm-high"
    assert predictor["model"]["env"] == [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]
    assert predictor["model"]["args"] == plan["args"]


@pytest.mark.parametrize(
    "override,path",
    [
        ({"spec": {"predictor": {"deploymentStrategy": {"type": "Recreate"}}}}, None),
        (
            {"spec": {"predictor": {"canaryTrafficPercent": 10}}},
            "overrides.inferenceservice.spec.predictor.canaryTrafficPercent",
        ),
        (
            {"metadata": {"annotations": {"serving.kserve.io/deploymentMode": "Knative"}}},
            "overrides.inferenceservice.metadata.annotations",
        ),
        ({"metadata": {"name": "other"}}, "overrides.inferenceservice.metadata.name"),
    ],
)
def test_override_rules(override, path):
    result = validate(base_spec(overrides={"inferenceservice": override}))
    if path is None:
        assert result["ok"], result["report"]
    else:
        assert path in paths(result["errors"]), result["report"]


def test_common_parent():
    assert common_parent(["/mnt/models/target", "/mnt/models/draft"]) == "/mnt/models"
    assert common_parent(["/target", "/draft"]) == "/"
    assert common_parent(["/mnt/target/model", "/mnt/draft/model"]) == "/mnt"


# ------------------------------------------------------------------ local facts and compatibility


def test_local_facts_are_read():
    facts, problem = compat.read_local_facts(str(MODELS / "llama-target"))
    assert problem is None
    assert facts["architecture"] == "LlamaForCausalLM" and facts["hidden_size"] == 256
    assert facts["dtype"] == "bfloat16" and facts["weight_bytes"] == 2 * 1024**3
    assert facts["tokenizer"].startswith("sha256:")
    same, _ = compat.read_local_facts(str(MODELS / "llama-draft"))
    assert same["tokenizer"] == facts["tokenizer"]  # same vocabulary, other JSON formatting
    other, _ = compat.read_local_facts(str(MODELS / "other-tokenizer-draft"))
    assert other["tokenizer"] != facts["tokenizer"]


def _local_spec(draft_dir, method, **extra):
    return base_spec(
        target={"uri": "hf://x/target", "local_path": str(MODELS / "llama-target")},
        draft={"uri": "hf://x/draft", "local_path": str(MODELS / draft_dir)},
        speculative={"method": method, "num_speculative_tokens": 3},
        acknowledged_warnings=["draft-ratio", "async-scheduling-disabled"],
        **extra,
    )


def test_matching_eagle3_head_from_local_files():
    result = validate(_local_spec("llama-eagle3-head", "eagle3"))
    assert result["ok"], result["report"]
    assert result["plan"]["gpu_budget"]["target_weights_gib_per_gpu"] == 2.0


def test_mismatched_eagle3_head_from_local_files():
    result = validate(_local_spec("qwen-eagle3-head", "eagle3"))
    assert {"draft.hidden_size", "draft.architecture", "draft.vocab_size"} <= paths(result["errors"])


def test_draft_with_another_tokenizer_from_local_files():
    assert "draft.tokenizer" in paths(validate(_local_spec("other-tokenizer-draft", "draft_model"))["errors"])
    assert validate(_local_spec("llama-draft", "draft_model"))["ok"]


def test_missing_local_path_is_a_warning():
    spec = base_spec(target=dict(base_spec()["target"], local_path="/nonexistent/model"))
    result = validate(spec)
    assert "target.local_path" in paths(result["warnings"]) and not result["errors"]


def test_eagle_head_kind_must_match_the_method():
    spec = base_spec(speculative={"method": "eagle", "num_speculative_tokens": 3})
    assert "draft.architecture" in paths(validate(spec)["errors"])


# ------------------------------------------------------------------ GPU budget


def _budget_spec(gmu, memory=80, count=2, **vllm_args):
    return base_spec(
        target=dict(
            base_spec()["target"],
            params_b=70.6,
            quantization="fp8",
            hidden_size=8192,
            num_hidden_layers=80,
            num_attention_heads=64,
        ),
        draft={
            "uri": "hf://meta-llama/Llama-3.1-8B-Instruct",
            "params_b": 8.03,
            "model_type": "llama",
            "vocab_size": 128256,
        },
        speculative={"method": "draft_model", "num_speculative_tokens": 4},
        gpu={"count": count, "memory_gib": memory},
        vllm_args=dict(vllm_args, gpu_memory_utilization=gmu),
    )


def test_gpu_budget_counts_the_draft_inside_gpu_memory_utilization():
    """vLLM V1 (v1/worker/gpu_worker.py determine_available_memory): KV cache = gmu x memory - weights (target
    AND draft) - activations.  A draft never calls for a lower gpu_memory_utilization."""
    result = validate(_budget_spec(0.95))
    budget = result["plan"]["gpu_budget"]
    assert budget["engine"] == "v1" and budget["tensor_parallel_size"] == 2
    assert 32 < budget["target_weights_gib_per_gpu"] < 33.5
    assert 7 < budget["draft_weights_gib_per_gpu"] < 8
    # 0.95 x 80 = 76 GiB - 32.9 target - 7.5 draft - 1.0 activations
    assert 34 < budget["kv_cache_available_gib_per_gpu"] < 35
    assert not [f for f in result["errors"] + result["warnings"] if "gpu_memory_utilization" in f["path"]]


def test_a_kv_cache_shortfall_names_the_smallest_fix():
    # 0.5 x 80 = 40 GiB: 32.9 + 7.5 + 1.0 leave nothing for one 8192-token sequence (80 layers x 8 KV heads)
    short = validate(_budget_spec(0.5, max_model_len=8192))
    error = next(e for e in short["errors"] if e["code"] == "gpu-budget")
    assert error["path"].endswith("vllm_args.gpu_memory_utilization")
    assert "draft 7.5 GiB" in error["message"] and "KV cache" in error["message"]
    needed = (32.87 + 7.48 + 1.0 + short["plan"]["gpu_budget"]["kv_cache_min_gib_per_gpu"]) / 80
    assert error["hint"] == "raise gpu_memory_utilization to %.2f" % (math.ceil(needed * 100) / 100)
    # no gmu can help on a 48 GiB GPU: the longest max_model_len that fits instead
    tight = validate(_budget_spec(0.95, memory=48, max_model_len=131072))
    error = next(e for e in tight["errors"] if e["code"] == "gpu-budget")
    longest = tight["plan"]["gpu_budget"]["suggested_max_model_len"]
    assert 0 < longest < 131072 and error["hint"].startswith("lower max_model_len to %d" % longest)


def test_too_little_outside_the_budget_warns():
    result = validate(_budget_spec(0.99))
    warning = next(w for w in result["warnings"] if w["code"] == "budget-outside-tight")
    assert warning["hint"].startswith("lower gpu_memory_utilization to 0.98")
    eager = validate(_budget_spec(0.99, enforce_eager=True))  # no CUDA graphs: the context alone fits
    assert not [w for w in eager["warnings"] if w["code"] == "budget-outside-tight"]


def test_gpu_budget_skipped_without_facts():
    result = validate(base_spec(target={"uri": "hf://x/y"}, draft={"uri": "hf://x/z"}))
    assert result["plan"]["gpu_budget"] is None
    assert any(n["code"] == "budget-skipped" for n in result["notes"])


# ------------------------------------------------------------------ spec-level checks


def test_reserved_args_and_typos():
    result = validate(
        base_spec(
            vllm_args={
                "extra_args": ["--served-model-name=x", "--num-speculative-tokens=3", "--max-num-seqs 8"]
            }
        ),
        {"variable_names": ["specpilot_speculatve", "specpilot_validate_strict", "specpilot_name"]},
    )
    assert {"vllm_args.extra_args[0]", "vllm_args.extra_args[1]", "vllm_args.extra_args[2]"} <= paths(
        result["errors"]
    )
    assert "speculatve" in paths(result["errors"])


def test_every_misspelt_variable_is_an_error_with_the_name_it_is_close_to():
    """Issue 39: specpilot_workoad was only a warning and the run went on without the workload. With the
    names the roles use (the action plugin reads them), a role variable's typo is caught too; a name close
    to none is a warning; a name the roles use is fine."""
    known = ["specpilot_deploy_wait", "specpilot_rollback_mode", "specpilot_deploy_result"]
    result = validate(
        base_spec(),
        {
            "variable_names": [
                "specpilot_workoad",
                "specpilot_deploy_wiat",
                "specpilot_deploy_wait",
                "specpilot_deploy_result",
                "specpilot_zzz_mine",
                "specpilot_name",
            ],
            "known_variables": known,
        },
    )
    assert not result["ok"]
    typos = {e["path"]: e for e in result["errors"] if e["code"] == "unknown-variable"}
    assert set(typos) == {"workoad", "deploy_wiat"}
    assert typos["workoad"]["hint"] == "did you mean specpilot_workload?"
    assert typos["deploy_wiat"]["hint"] == "did you mean specpilot_deploy_wait?"
    assert [w["path"] for w in result["warnings"] if w["code"] == "unknown-variable"] == ["zzz_mine"]
    assert "specpilot validate: %s" % base_spec()["name"] in result["report"]


def test_the_report_names_the_service_when_a_nested_key_is_misspelt():
    """Issue 39: a misspelt nested key failed the schema and the header said ``specpilot validate: ?``."""
    result = validate(base_spec(name="chat", runtime={"imgae": "vllm/vllm-openai:v0.32.0"}))
    assert not result["ok"] and result["spec"] is None
    assert result["report"].startswith("specpilot validate: chat: FAILED")
    nameless = dict(base_spec())
    nameless.pop("name")
    result = validate(nameless, {"default_name": "host-a"})
    assert result["report"].startswith("specpilot validate: host-a: FAILED")


def test_report_lists_every_error_with_variable_names():
    result = validate(
        base_spec(name="Bad", speculative={"method": "eagle3", "num_speculative_tokens": 0, "x": 1})
    )
    assert "FAILED" in result["report"]
    for error in result["errors"]:
        assert "specpilot_" + error["path"] in result["report"]


# ------------------------------------------------------------------ the module entry point


def _run_module(tmp_path, args):
    file = tmp_path / "args.json"
    file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"))
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(file)], capture_output=True, text=True, env=env, timeout=60
    )
    return json.loads(proc.stdout)


def test_module_runs_standalone(tmp_path):
    out = _run_module(tmp_path, {"spec": base_spec(), "_ansible_check_mode": True})
    assert out["ok"] is True and out["changed"] is False and not out.get("failed")
    assert out["plan"]["inferenceservice"]["kind"] == "InferenceService"
    assert set(out["findings"]) == {"errors", "warnings", "notes"}


def test_module_fails_with_every_error_in_msg(tmp_path):
    spec = base_spec(speculative={"method": "eagle3", "num_speculative_tokens": 0, "acceptance_method": "x"})
    out = _run_module(tmp_path, {"spec": spec})
    assert out["failed"] is True
    assert "specpilot_speculative.num_speculative_tokens" in out["msg"]
    assert "specpilot_speculative.acceptance_method" in out["msg"]
    soft = _run_module(tmp_path, {"spec": spec, "fail_on_error": False})
    assert not soft.get("failed") and soft["ok"] is False and len(soft["errors"]) == 2


def test_the_v0_note_follows_the_engine_that_runs_speculative_decoding():
    """versions.speculative_engine is the one rule (monitoring's metric names use it too): V1 from 0.8.3."""
    from ansible_collections.specpilot.core.plugins.module_utils.service.versions import speculative_engine

    assert speculative_engine((0, 8, 2)) == "v0" and speculative_engine((0, 8, 3, 1)) == "v1"
    codes = [n["code"] for n in validate(_budget_spec(0.95))["notes"]]
    assert "budget-v0-unverified" not in codes
    old = _budget_spec(0.95)
    old["vllm_version"] = "0.8.2"
    assert "budget-v0-unverified" in [n["code"] for n in validate(old)["notes"]]


def test_an_h200_declared_by_its_sales_size_is_budgeted_as_vllm_counts_it():
    """vLLM's budget is gpu_memory_utilization x torch.cuda.mem_get_info()'s total (vllm/v1/worker/utils.py
    request_memory): 139.80 GiB measured on an H200 (benchmarks/gpu_flow.py), not the 141 it is sold by."""
    spec = _budget_spec(0.9, memory=141)
    spec["gpu"]["product"] = "NVIDIA H200"
    result = validate(spec)
    warning = next(w for w in result["warnings"] if w["code"] == "gpu-memory-nominal")
    assert warning["path"].endswith("gpu.memory_gib") and "139.80" in warning["hint"]
    assert result["plan"]["gpu_budget"]["gpu_memory_gib"] == 139.80
    measured = _budget_spec(0.9, memory=139.8)
    measured["gpu"]["node_selector"] = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    result = validate(measured)
    assert not [w for w in result["warnings"] if w["code"] == "gpu-memory-nominal"]
    unknown = _budget_spec(0.9, memory=141)
    unknown["gpu"]["product"] = "NVIDIA-H200-NVL"  # not measured: taken as declared
    assert validate(unknown)["plan"]["gpu_budget"]["gpu_memory_gib"] == 141


def test_an_h100_declared_as_80_gib_is_budgeted_as_the_79_18_vllm_counts():
    """Measured on an H100 80GB HBM3 (benchmarks/results/gpu_facts_h100_2026-11-27.json): torch's total is
    85017493504 bytes, 79.18 GiB; nvidia-smi says 81559 MiB. A spec that declares 80 is budgeted at 79.18."""
    spec = _budget_spec(0.9, memory=80)
    spec["gpu"]["node_selector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    result = validate(spec)
    warning = next(w for w in result["warnings"] if w["code"] == "gpu-memory-nominal")
    assert "79.18" in warning["hint"] and "81559 MiB" in warning["message"]
    assert result["plan"]["gpu_budget"]["gpu_memory_gib"] == 79.18
    spec["gpu"]["memory_gib"] = 79.18
    assert "gpu-memory-nominal" not in [w["code"] for w in validate(spec)["warnings"]]


# ------------------------------------------------------------------ runtime securityContext


def _runtime_container(result):
    return result["plan"]["servingruntime"]["spec"]["containers"][0]


def test_the_runtime_container_gets_the_restricted_context_a_root_image_can_meet():
    result = validate(base_spec())
    assert _runtime_container(result)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert not [f for f in result["errors"] + result["warnings"] if f["path"].startswith("runtime.security")]


def test_the_runtime_security_context_can_be_replaced_or_removed():
    own = {"runAsNonRoot": True, "runAsUser": 1001, "allowPrivilegeEscalation": False}
    result = validate(base_spec(runtime={"image": "quay.io/acme/vllm:0.32.0", "security_context": own}))
    assert result["ok"] and _runtime_container(result)["securityContext"] == own
    bare = validate(base_spec(runtime={"image": "vllm/vllm-openai:v0.32.0", "security_context": {}}))
    assert "securityContext" not in _runtime_container(bare)
    assert "runtime-security-context-none" in [w["code"] for w in bare["warnings"]]


def test_run_as_non_root_on_the_root_upstream_image_is_refused_before_any_write():
    sc = {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    result = validate(base_spec(runtime={"image": "vllm/vllm-openai:v0.32.0", "security_context": sc}))
    error = next(e for e in result["errors"] if e["code"] == "runtime-nonroot-root-image")
    assert error["path"].endswith("runtime.security_context.runAsNonRoot") and "runAsUser" in error["hint"]
    pinned = "docker.io/vllm/vllm-openai:v0.32.0@sha256:" + "a" * 64  # tag and digest: still the root image
    assert "runtime-nonroot-root-image" in [
        e["code"] for e in validate(base_spec(runtime={"image": pinned, "security_context": sc}))["errors"]
    ]
    ported = (
        "registry.local:5000/vllm/vllm-openai"  # a mirror's port is not a tag, and not the upstream image
    )
    assert "runtime-nonroot-root-image" not in [
        e["code"] for e in validate(base_spec(runtime={"image": ported, "security_context": sc}))["errors"]
    ]
    privileged = validate(
        base_spec(runtime={"image": "vllm/vllm-openai:v0.32.0", "security_context": {"privileged": True}})
    )
    assert "runtime-privileged" in [w["code"] for w in privileged["warnings"]]


def test_pipeline_stages_split_the_target_but_the_draft_sits_whole_on_the_last_stage():
    """V1 puts the entire drafter on the last PP rank (vllm/v1/worker/gpu_model_runner.py): two stages of one
    GPU hold half the target each, the last one the whole draft too."""
    tp2 = validate(_budget_spec(0.95, max_model_len=8192))["plan"]["gpu_budget"]
    pp2 = validate(_budget_spec(0.95, max_model_len=8192, pipeline_parallel_size=2))["plan"]["gpu_budget"]
    assert (pp2["tensor_parallel_size"], pp2["pipeline_parallel_size"]) == (1, 2)
    assert pp2["target_weights_gib_per_gpu"] == tp2["target_weights_gib_per_gpu"]
    assert (
        pp2["draft_weights_gib_per_gpu"] == 2 * tp2["draft_weights_gib_per_gpu"]
    )  # not split by TP any more
    # the target's KV cache: half the layers with every KV head, or every layer with half the heads
    assert pp2["kv_cache_min_gib_per_gpu"] == tp2["kv_cache_min_gib_per_gpu"] > 1


def test_more_parallel_gpus_than_the_pod_gets_is_refused_and_fewer_leave_some_idle():
    """vllm/config/parallel.py ParallelConfig.__post_init__: a world size above the node's GPUs does not start."""
    result = validate(_budget_spec(0.95, count=2, tensor_parallel_size=2, pipeline_parallel_size=2))
    error = next(e for e in result["errors"] if e["code"] == "gpu-world-size")
    assert error["path"].endswith("vllm_args.tensor_parallel_size") and error["hint"].startswith(
        "set gpu.count to 4"
    )
    idle = validate(_budget_spec(0.95, count=4, tensor_parallel_size=2))
    assert "gpu-idle" in [w["code"] for w in idle["warnings"]]
    fits = validate(_budget_spec(0.95, count=4, tensor_parallel_size=2, pipeline_parallel_size=2))
    assert not [f for f in fits["errors"] + fits["warnings"] if f["code"] in ("gpu-world-size", "gpu-idle")]
    multi = validate(
        _budget_spec(0.95, count=2, tensor_parallel_size=4, extra_args=["--distributed-executor-backend=ray"])
    )
    assert not [e for e in multi["errors"] if e["code"] == "gpu-world-size"]  # told it spans nodes
