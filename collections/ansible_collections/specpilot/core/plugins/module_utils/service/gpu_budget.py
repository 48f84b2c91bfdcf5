# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""GPU memory budget of one replica, as vLLM's V1 engine counts it.

vLLM V1 (``vllm/v1/worker/gpu_worker.py``, ``Worker.determine_available_memory``; 0.32.0 read)
sizes the KV cache as

    requested_memory - non_kv_cache_memory - cudagraph_memory_estimate_applied

where ``requested_memory`` is ``gpu_memory_utilization`` x total GPU memory
(``vllm/v1/worker/utils.py``, ``request_memory``) and ``non_kv_cache_memory`` is what the profile
run measured: the weights (``GPUModelRunner.load_model`` loads the drafter - EAGLE head, draft
model, MTP layers - inside the same memory profiler as the target, so ``model_memory_usage``
holds both), the activation peak and non-torch memory.  CUDA-graph memory is outside the budget
unless ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is set.  The engine then refuses to start when
the KV cache cannot hold one ``max_model_len`` sequence (``vllm/v1/core/kv_cache_utils.py``,
``check_enough_kv_cache_memory``).  So a draft takes its weights (and its own KV layers) out of
the KV cache: adding a draft calls for a HIGHER gpu_memory_utilization, never a lower one.

Weights are split over tensor parallel ranks.  All figures are per GPU, in GiB; activations and
CUDA graphs are estimates (the profile run measures them on the real GPU).
"""

from __future__ import annotations

import math

from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import (
    VersionError,
    parse_version,
    speculative_engine,
)

__all__ = ["bytes_per_param", "check_budget"]

GIB = float(1 << 30)
DEFAULT_GMU = 0.9
ACTIVATION_RESERVE_GIB = 1.0  # activations and sampler buffers inside the budget
# CUDA context and allocator slack outside the budget: torch's CUDA context alone took 526 MiB on an
# H200 and on an H100 (torch 2.11 / CUDA 13.0, driver 580; benchmarks/gpu_flow.py, 2026-11-27)
CONTEXT_MARGIN_GIB = 0.6
CUDAGRAPH_GIB = 1.0  # captured CUDA graphs, outside the budget (none with enforce_eager)
KV_FALLBACK_GIB = 1.0  # minimal KV cache when the architecture facts are unknown
TARGET_SHARE_WARN = 0.70
DRAFT_SHARE_WARN = 0.15

# What vLLM takes as a GPU's total memory: torch.cuda.mem_get_info()[1], read by MemorySnapshot in
# vllm/utils/mem_utils.py and scaled by gpu_memory_utilization in vllm/v1/worker/utils.py request_memory.
# It is less than nvidia-smi's memory.total and less than the size the card is sold by. Measured only:
# product label (GPU feature discovery's nvidia.com/gpu.product, spaces as dashes) -> (GiB, evidence).
VLLM_TOTAL_GIB = {
    "NVIDIA-H100-80GB-HBM3": (
        79.18,
        "torch.cuda.mem_get_info total 85017493504 bytes; nvidia-smi memory.total 81559 MiB "
        "(benchmarks/gpu_flow.py gpu_facts on an H100 80GB HBM3, driver 580.159.04, 2026-11-27)",
    ),
    "NVIDIA-H200": (
        139.80,
        "torch.cuda.mem_get_info total 150109880320 bytes; nvidia-smi memory.total 143771 MiB "
        "(benchmarks/gpu_flow.py on an H200, driver 580.159.04, 2026-11-27)",
    ),
}

_QUANT_BYTES = {
    "fp8": 1.0,
    "int8": 1.0,
    "w8a8": 1.0,
    "bitsandbytes": 0.5,
    "awq": 0.5,
    "gptq": 0.5,
    "int4": 0.5,
    "nvfp4": 0.5,
    "mxfp4": 0.5,
    "modelopt_fp4": 0.5,
    "gguf": 0.5,
    "fbgemm_fp8": 1.0,
    "modelopt": 1.0,
}
_DTYPE_BYTES = {
    "float32": 4.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "auto": 2.0,
}


def bytes_per_param(facts):
    quant = (facts.get("quantization") or "").lower()
    if quant in _QUANT_BYTES:
        return _QUANT_BYTES[quant]
    return _DTYPE_BYTES.get(facts.get("dtype") or "bfloat16", 2.0)


def _weights_gib(facts):
    if facts.get("weight_bytes"):
        return facts["weight_bytes"] / GIB
    if facts.get("params_b"):
        return float(facts["params_b"]) * 1e9 * bytes_per_param(facts) / GIB
    return None


def _kv_min_gib(facts, tokens, tp, kv_dtype):
    layers = facts.get("num_hidden_layers")
    heads = facts.get("num_attention_heads")
    kv_heads = facts.get("num_key_value_heads") or heads
    head_dim = facts.get("head_dim") or (
        facts.get("hidden_size") // heads if facts.get("hidden_size") and heads else None
    )
    if not (layers and kv_heads and head_dim and tokens):
        return None
    kv_bytes = 1.0 if (kv_dtype or "").startswith("fp8") else 2.0
    per_token = 2.0 * layers * kv_heads * head_dim * kv_bytes / max(1, min(tp, kv_heads))
    return per_token * tokens / GIB


def _round_up(value, step=0.01):
    return math.ceil(value / step - 1e-9) * step


def _engine_note(spec, findings):
    try:
        engine = speculative_engine(parse_version(spec.get("vllm_version")))
    except VersionError:
        return  # the validator reports the version itself
    if engine == "v0":
        findings.note(
            "vllm_version",
            "the GPU memory budget follows the V1 engine's accounting (draft inside gpu_memory_utilization); "
            "vLLM %s runs speculative decoding on the V0 engine, whose accounting specpilot has not checked"
            % spec["vllm_version"],
            "treat the GPU figures as an estimate",
            "budget-v0-unverified",
        )


def _draft_figures(draft, draft_tp, tp, tokens, kv_dtype, findings):
    """(draft weights, draft KV for `tokens`) per GPU; zeros without a draft or its facts."""
    if not draft:
        return 0.0, 0.0
    draft_w = _weights_gib(draft)
    if draft_w is None:
        findings.note(
            "draft",
            "the draft's size is unknown, so its memory is left out of the budget",
            "give draft.params_b (or draft.local_path with weights)",
            "budget-draft-unknown",
        )
        return 0.0, 0.0
    dtp = max(1, draft_tp or tp)
    return draft_w / dtp, _kv_min_gib(draft, tokens, dtp, kv_dtype) or 0.0


def _figures(spec, memory, target_w, target, draft, draft_tp, findings):
    """Per GPU of the last pipeline stage: the target's layers are split over tensor_parallel_size x
    pipeline_parallel_size GPUs (its KV cache too), while V1 puts the whole drafter on the last stage
    (vllm/v1/worker/gpu_model_runner.py, GPUModelRunner.__init__: "currently we put the entire draft
    model on the last PP rank"), split only over its own tensor parallel size."""
    va = spec["vllm_args"]
    tp, pp = render.tensor_parallel_size(spec), render.pipeline_parallel_size(spec)
    shards = tp * pp
    gmu = va.get("gpu_memory_utilization") or DEFAULT_GMU
    tokens = va.get("max_model_len") or target.get("max_position_embeddings")
    kv_target = _kv_min_gib(target, tokens, shards, va.get("kv_cache_dtype"))
    draft_w, kv_draft = _draft_figures(draft, draft_tp, tp, tokens, va.get("kv_cache_dtype"), findings)
    kv_min = (kv_target if kv_target is not None else KV_FALLBACK_GIB) + kv_draft
    budget = gmu * memory
    fixed = target_w / shards + draft_w + ACTIVATION_RESERVE_GIB
    return {
        "engine": "v1",
        "source": "vllm/v1/worker/gpu_worker.py Worker.determine_available_memory",
        "gpu_memory_gib": memory,
        "gpu_memory_utilization": gmu,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "max_model_len": tokens,
        "target_weights_gib_per_gpu": round(target_w / shards, 2),
        "draft_weights_gib_per_gpu": round(draft_w, 2),
        "activation_gib_per_gpu": ACTIVATION_RESERVE_GIB,
        "kv_cache_min_gib_per_gpu": round(kv_min, 2),
        "kv_cache_estimated": kv_target is not None,
        "budget_gib": round(budget, 2),
        "kv_cache_available_gib_per_gpu": round(budget - fixed, 2),
        "outside_budget_gib": round(memory - budget, 2),
        "outside_needed_gib": CONTEXT_MARGIN_GIB + (0.0 if va.get("enforce_eager") else CUDAGRAPH_GIB),
        "_fixed": fixed,
        "_kv_min": kv_min,
    }


def _weights_do_not_fit(f, findings):
    if f["_fixed"] + f["outside_needed_gib"] <= f["gpu_memory_gib"]:
        return False
    findings.error(
        "gpu.memory_gib",
        "weights do not fit: target %.1f GiB%s + %.1f GiB activations + %.1f GiB CUDA context and graphs exceed "
        "the %.0f GiB of one GPU (tensor_parallel_size=%d, pipeline_parallel_size=%d), before any KV cache"
        % (
            f["target_weights_gib_per_gpu"],
            (" + draft %.1f GiB" % f["draft_weights_gib_per_gpu"]) if f["draft_weights_gib_per_gpu"] else "",
            ACTIVATION_RESERVE_GIB,
            f["outside_needed_gib"],
            f["gpu_memory_gib"],
            f["tensor_parallel_size"],
            f["pipeline_parallel_size"],
        ),
        "use more GPUs (gpu.count / tensor_parallel_size), a quantized target, or a smaller draft",
        "gpu-oom",
    )
    return True


def _tokens_text(f):
    return ("one %d-token sequence" % f["max_model_len"]) if f["max_model_len"] else "an assumed minimum"


def _smallest_fix(f):
    """The smallest change that gives the KV cache what one max_model_len sequence needs."""
    memory, outside = f["gpu_memory_gib"], f["outside_needed_gib"]
    gmu = _round_up((f["_fixed"] + f["_kv_min"]) / memory)
    if gmu * memory + outside <= memory:
        f["suggested_gpu_memory_utilization"] = round(gmu, 2)
        return "raise gpu_memory_utilization to %.2f" % gmu
    # no gpu_memory_utilization holds it: the longest sequence the GPU can hold at the highest one
    highest = math.floor((memory - outside) / memory * 100) / 100
    room = highest * memory - f["_fixed"]
    if room > 0 and f["max_model_len"] and f["_kv_min"] > 0:
        longest = int(f["max_model_len"] * room / f["_kv_min"]) // 16 * 16
        if longest >= 16:
            f["suggested_gpu_memory_utilization"] = highest
            f["suggested_max_model_len"] = longest
            return (
                "lower max_model_len to %d with gpu_memory_utilization %.2f, or use a quantized draft or more GPUs"
                % (
                    longest,
                    highest,
                )
            )
    return "use a quantized or smaller draft, a quantized target, or more GPUs"


def _kv_shortfall(f, findings):
    if f["_fixed"] + f["_kv_min"] <= f["budget_gib"]:
        return
    findings.error(
        "vllm_args.gpu_memory_utilization",
        "no room for the KV cache: the budget %.2f x %.0f GiB = %.1f GiB holds target %.1f GiB + draft %.1f GiB + "
        "%.1f GiB activations (vLLM V1 counts the draft inside gpu_memory_utilization), which leaves %.1f GiB "
        "for the KV cache; %s needs %.1f GiB - vLLM would refuse to start"
        % (
            f["gpu_memory_utilization"],
            f["gpu_memory_gib"],
            f["budget_gib"],
            f["target_weights_gib_per_gpu"],
            f["draft_weights_gib_per_gpu"],
            ACTIVATION_RESERVE_GIB,
            max(0.0, f["kv_cache_available_gib_per_gpu"]),
            _tokens_text(f),
            f["_kv_min"],
        ),
        _smallest_fix(f),
        "gpu-budget",
    )


def _outside_budget(f, findings):
    if f["outside_budget_gib"] >= f["outside_needed_gib"]:
        return
    findings.warning(
        "vllm_args.gpu_memory_utilization",
        "gpu_memory_utilization %.2f leaves %.1f GiB of the GPU outside its budget, less than the about %.1f GiB "
        "the CUDA context and the captured CUDA graphs take there: the engine can run out of memory while "
        "capturing graphs" % (f["gpu_memory_utilization"], f["outside_budget_gib"], f["outside_needed_gib"]),
        "lower gpu_memory_utilization to %.2f, or set enforce_eager (no CUDA graphs, slower decoding)"
        % (math.floor((f["gpu_memory_gib"] - f["outside_needed_gib"]) / f["gpu_memory_gib"] * 100) / 100),
        "budget-outside-tight",
    )


def _share_warnings(f, findings):
    memory = f["gpu_memory_gib"]
    target, draft = f["target_weights_gib_per_gpu"], f["draft_weights_gib_per_gpu"]
    if target / memory > TARGET_SHARE_WARN:
        findings.warning(
            path_join("target", "params_b"),
            "the target's weights take %.0f%% of each GPU (%.1f of %.0f GiB), leaving little KV cache "
            "for concurrent requests" % (100 * target / memory, target, memory),
            "add GPUs or quantize the target",
            "target-memory-share",
        )
    if draft / memory > DRAFT_SHARE_WARN:
        findings.warning(
            path_join("draft", "params_b"),
            "the draft takes %.0f%% of each GPU (%.1f of %.0f GiB), memory the KV cache no longer has"
            % (100 * draft / memory, draft, memory),
            "use a smaller draft (EAGLE heads and MTP cost far less)",
            "draft-memory-share",
        )


def _product(gpu):
    label = gpu.get("product") or (gpu.get("node_selector") or {}).get("nvidia.com/gpu.product") or ""
    return str(label).strip().upper().replace(" ", "-")


def _memory_as_vllm_counts(gpu, findings):
    """gpu.memory_gib, or the total vLLM measured on this product when the declared figure is larger
    (a card's sales size, or nvidia-smi's total): the budget is a share of what vLLM sees."""
    memory = gpu.get("memory_gib")
    known = VLLM_TOTAL_GIB.get(_product(gpu))
    if not memory or not known or memory <= known[0] + 0.005:
        return memory
    findings.warning(
        "gpu.memory_gib",
        "gpu.memory_gib %g is more than the %.2f GiB vLLM counts on an %s (%s): the budget check uses %.2f"
        % (memory, known[0], _product(gpu), known[1], known[0]),
        "set specpilot_gpu.memory_gib to %.2f, the total torch.cuda.mem_get_info() reports in the runtime image"
        % known[0],
        "gpu-memory-nominal",
    )
    return known[0]


MULTI_NODE_FLAGS = ("--distributed-executor-backend", "--nnodes")


def _check_world_size(spec, findings):
    """tensor x pipeline parallel GPUs against the GPUs of the predictor's one pod. vLLM refuses a world
    size larger than the node's devices unless told it spans nodes (vllm/config/parallel.py,
    ParallelConfig.__post_init__, 0.24.0 read: "World size (N) is larger than the number of available
    GPUs (M) in this node")."""
    count = spec["gpu"]["count"]
    tp, pp = render.tensor_parallel_size(spec), render.pipeline_parallel_size(spec)
    extra = spec["vllm_args"].get("extra_args")
    if count == 0 or any(render.extra_arg(extra, flag) is not None for flag in MULTI_NODE_FLAGS):
        return
    world = tp * pp
    if world > count:
        findings.error(
            "vllm_args.tensor_parallel_size",
            "tensor_parallel_size %d x pipeline_parallel_size %d = %d GPUs, but the predictor's pod gets %d "
            "(gpu.count): vLLM refuses to start ('World size (%d) is larger than the number of available GPUs')"
            % (tp, pp, world, count, world),
            "set gpu.count to %d, or lower tensor_parallel_size / pipeline_parallel_size" % world,
            "gpu-world-size",
        )
    elif world < count:
        findings.warning(
            "gpu.count",
            "gpu.count %d but vLLM uses tensor_parallel_size %d x pipeline_parallel_size %d = %d: %d GPU(s) idle"
            % (count, tp, pp, world, count - world),
            "set gpu.count to %d, or raise tensor_parallel_size" % world,
            "gpu-idle",
        )


def check_budget(spec, target, draft, draft_tp, findings):
    """Returns the budget figures (dict) or None when it cannot be computed."""
    if spec["gpu"]["count"] == 0:
        return None
    _check_world_size(spec, findings)
    memory = _memory_as_vllm_counts(spec["gpu"], findings)
    target_w = _weights_gib(target)
    if not memory or target_w is None:
        findings.note(
            "gpu",
            "GPU memory budget not checked: it needs gpu.memory_gib and the target's size "
            "(target.params_b, or weights under target.local_path)",
            "add them to catch out-of-memory starts before deploying",
            "budget-skipped",
        )
        return None
    _engine_note(spec, findings)
    f = _figures(spec, memory, target_w, target, draft, draft_tp, findings)
    if not _weights_do_not_fit(f, findings):
        _kv_shortfall(f, findings)
        _outside_budget(f, findings)
        _share_warnings(f, findings)
    return {k: v for k, v in f.items() if not k.startswith("_")}
