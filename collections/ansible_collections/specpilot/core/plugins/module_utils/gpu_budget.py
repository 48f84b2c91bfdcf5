# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see galaxy.yml)
"""GPU memory budget of one replica: target and draft weights, minimal KV cache.

vLLM sizes its KV cache inside ``gpu_memory_utilization`` x GPU memory; a draft artifact
(EAGLE head, draft model, ...) is loaded outside that budget.  Weights are split over
tensor parallel ranks.  All figures are per GPU, in GiB.
"""

from __future__ import annotations

import math

from ansible_collections.specpilot.core.plugins.module_utils.findings import path_join

__all__ = ["bytes_per_param", "check_budget"]

GIB = float(1 << 30)
DEFAULT_GMU = 0.9
ACTIVATION_RESERVE_GIB = 1.0  # activations and sampler buffers inside the budget
CONTEXT_MARGIN_GIB = 0.5  # CUDA context and allocator slack outside the budget
KV_FALLBACK_GIB = 1.0  # minimal KV cache when the architecture facts are unknown
TARGET_SHARE_WARN = 0.70
DRAFT_SHARE_WARN = 0.15

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


def _round_down(value, step=0.05):
    return math.floor(value / step + 1e-9) * step


def check_budget(spec, target, draft, draft_tp, findings):
    """Returns the budget figures (dict) or None when it cannot be computed."""
    gpu = spec["gpu"]
    if gpu["count"] == 0:
        return None
    memory = gpu.get("memory_gib")
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
    va = spec["vllm_args"]
    tp = va.get("tensor_parallel_size") or max(1, gpu["count"])
    gmu = va.get("gpu_memory_utilization") or DEFAULT_GMU
    target_per_gpu = target_w / tp
    tokens = va.get("max_model_len") or target.get("max_position_embeddings")
    kv_min = _kv_min_gib(target, tokens, tp, va.get("kv_cache_dtype"))
    kv_known = kv_min is not None
    if kv_min is None:
        kv_min = KV_FALLBACK_GIB
    draft_per_gpu = 0.0
    if draft:
        draft_w = _weights_gib(draft)
        if draft_w is None:
            findings.note(
                "draft",
                "the draft's size is unknown, so its memory is left out of the budget",
                "give draft.params_b (or draft.local_path with weights)",
                "budget-draft-unknown",
            )
        else:
            draft_per_gpu = draft_w / max(1, draft_tp or tp)
    budget = gmu * memory
    need = target_per_gpu + kv_min + ACTIVATION_RESERVE_GIB
    figures = {
        "gpu_memory_gib": memory,
        "gpu_memory_utilization": gmu,
        "tensor_parallel_size": tp,
        "target_weights_gib_per_gpu": round(target_per_gpu, 2),
        "draft_weights_gib_per_gpu": round(draft_per_gpu, 2),
        "kv_cache_min_gib_per_gpu": round(kv_min, 2),
        "kv_cache_estimated": kv_known,
        "budget_gib": round(budget, 2),
        "outside_budget_gib": round(memory - budget, 2),
    }
    gmu_path = "vllm_args.gpu_memory_utilization"
    tokens_text = ("%d tokens" % tokens) if tokens else "an assumed minimum"
    if target_per_gpu + draft_per_gpu + kv_min + ACTIVATION_RESERVE_GIB + CONTEXT_MARGIN_GIB > memory:
        findings.error(
            "gpu.memory_gib",
            "weights do not fit: target %.1f GiB%s + minimal KV cache %.1f GiB (%s) + %.1f GiB working "
            "memory exceed the %.0f GiB of one GPU (tensor_parallel_size=%d)"
            % (
                target_per_gpu,
                (" + draft %.1f GiB" % draft_per_gpu) if draft_per_gpu else "",
                kv_min,
                tokens_text,
                ACTIVATION_RESERVE_GIB + CONTEXT_MARGIN_GIB,
                memory,
                tp,
            ),
            "use more GPUs (gpu.count / tensor_parallel_size), a quantized target, a smaller draft, or a "
            "lower max_model_len",
            "gpu-oom",
        )
        return figures
    if need > budget:
        findings.error(
            gmu_path,
            "target weights %.1f GiB + minimal KV cache %.1f GiB (%s) + %.1f GiB activations exceed the "
            "gpu_memory_utilization budget %.2f x %.0f GiB = %.1f GiB"
            % (target_per_gpu, kv_min, tokens_text, ACTIVATION_RESERVE_GIB, gmu, memory, budget),
            "raise gpu_memory_utilization (if the draft leaves room), lower max_model_len, or add GPUs",
            "gpu-budget",
        )
    if draft_per_gpu and draft_per_gpu + CONTEXT_MARGIN_GIB > memory - budget:
        suggested = _round_down((memory - draft_per_gpu - CONTEXT_MARGIN_GIB) / memory)
        figures["suggested_gpu_memory_utilization"] = round(suggested, 2)
        if suggested * memory >= need:
            findings.warning(
                gmu_path,
                "the draft (%.1f GiB per GPU) is loaded outside the gpu_memory_utilization budget, which "
                "leaves only %.1f GiB: it can run out of memory at startup"
                % (draft_per_gpu, memory - budget),
                "lower gpu_memory_utilization to %.2f" % suggested,
                "draft-outside-budget",
            )
        else:
            findings.error(
                gmu_path,
                "the draft (%.1f GiB per GPU) needs gpu_memory_utilization <= %.2f, which leaves too little "
                "for the target (%.1f GiB needed)" % (draft_per_gpu, suggested, need),
                "use a smaller or quantized draft, or more GPUs",
                "draft-budget",
            )
    if target_per_gpu / memory > TARGET_SHARE_WARN:
        findings.warning(
            path_join("target", "params_b"),
            "the target's weights take %.0f%% of each GPU (%.1f of %.0f GiB), leaving little KV cache "
            "for concurrent requests" % (100 * target_per_gpu / memory, target_per_gpu, memory),
            "add GPUs or quantize the target",
            "target-memory-share",
        )
    if draft_per_gpu / memory > DRAFT_SHARE_WARN:
        findings.warning(
            path_join("draft", "params_b"),
            "the draft takes %.0f%% of each GPU (%.1f of %.0f GiB), memory the KV cache no longer has"
            % (100 * draft_per_gpu / memory, draft_per_gpu, memory),
            "use a smaller draft (EAGLE heads and MTP cost far less)",
            "draft-memory-share",
        )
    return figures
