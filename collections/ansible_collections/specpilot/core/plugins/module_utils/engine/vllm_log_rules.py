# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The warnings and start errors of a vLLM engine log that matter for speculative decoding
(:data:`ISSUE_RULES`), as :class:`engine.vllm_logs.LogParser` classifies its records.
Pure standard library."""

from __future__ import annotations

import re


class _Rule(object):
    """One known warning/error: ``needles`` are plain substrings of the record message."""

    __slots__ = ("code", "severity", "needles", "regex", "description")

    def __init__(self, code, severity, needles, description, regex=None):
        self.code = code
        self.severity = severity
        self.needles = tuple(needles)
        self.regex = re.compile(regex) if regex else None
        self.description = description

    def match(self, msg):
        for needle in self.needles:
            if needle in msg:
                if self.regex is None or self.regex.search(msg):
                    return True
        return False


# Ordered: the first rule whose needle occurs in a record's message wins. Texts are the vLLM
# format strings from vllm-facts.md section 3.4 (and 2.x for the start errors).
ISSUE_RULES = (
    # ---- warnings
    _Rule("ASYNC_SCHEDULING_DISABLED", "warning", (
        "-based speculative decoding and will be disabled",  # 0.14.1-0.32.0
        "Async scheduling is not yet supported with speculative decoding",  # 0.11.2-0.13.0
        "Async scheduling is not compatible with disable_padded_drafter_batch=True",  # 0.14.1-0.32.0
        "Async scheduling is disabled because the V1 model runner does not support it",  # 0.33.0
    ), "vLLM turned async scheduling off because of the speculative method"),
    _Rule("DYNAMIC_SD_DROPPED", "warning", (
        # vllm/config/vllm.py VllmConfig._maybe_disable_dynamic_sd_for_data_parallel (0.26.0-0.32.0)
        "Disabling num_speculative_tokens_per_batch_size and falling back",
    ), "vLLM dropped the batch-size schedule of k (data parallelism) and runs the static k"),
    _Rule("SAMPLING_PARAM_IGNORED", "warning", (
        "min_p and logit_bias parameters won't work with speculative decoding",  # 0.17.1-0.33.0
        "min_p, logit_bias, and min_tokens parameters won't currently work with speculative decoding",
    ), "min_p / logit_bias (and min_tokens) request parameters are ignored with speculative decoding"),
    _Rule("MTP_MULTI_STEP", "warning", (
        "Enabling num_speculative_tokens > 1 will run",  # "will runmultiple" (<=0.16) and "will run multiple"
        "All Deepseek MTP models only have one layer",
    ), "num_speculative_tokens > 1 reuses the single MTP layer; acceptance may drop"),
    _Rule("DEPRECATED_METHOD", "warning", (
        "is deprecated and replaced with mtp",
    ), "a deprecated *_mtp method name was rewritten to 'mtp'"),
    _Rule("DEPRECATED_SPEC_FLAGS", "warning", (
        "Please use '--speculative-config' to set all configurations related to speculative decoding",
    ), "legacy --speculative-model/--num-speculative-tokens flags (removed in 0.8.3)"),
    _Rule("V0_FALLBACK", "warning", (
        "is not supported by the V1 Engine. Falling back to V0",
    ), "the V1 engine does not support this configuration; vLLM fell back to the V0 engine"),
    _Rule("ASYNC_OUTPUT_DISABLED", "warning", (
        "Async output processing is not supported with speculative decoding",
    ), "async output processing is disabled with speculative decoding (V0)"),
    _Rule("DRAFT_TP_FORCED", "warning", (
        "cannot currently be run with tp>1; setting speculative_draft_tensor_parallel_size=1",
    ), "the draft model was forced to tensor parallel size 1"),
    _Rule("SUFFIX_DEFAULT_TOKENS", "warning", (
        "for suffix decoding",
    ), "num_speculative_tokens defaulted for suffix decoding",
        regex=r"Defaulted num_speculative_tokens to \d+"),
    _Rule("SCHEDULED_TOKENS_CAPPED", "warning", (
        "based on the speculative decoding settings",
    ), "max_num_scheduled_tokens was lowered to make room for draft tokens"),
    # ---- start errors
    _Rule("UNKNOWN_SPEC_KEY", "error", (
        "is not a valid argument in the speculative_config",  # 0.16+ tensor_parallel_size sentinel
        "got an unexpected keyword argument",  # 0.8.2-0.9.0 dataclass TypeError
    ), "speculative_config has a key this vLLM version does not accept",
        regex=r"is not a valid argument in the speculative_config"
              r"|SpeculativeConfig.*unexpected keyword argument"),
    _Rule("DRAFT_MODEL_UNSUPPORTED", "error", (
        "Speculative decoding with draft model is not supported yet",  # 0.10.0-0.14.1
    ), "this vLLM version does not support a separate draft model"),
    _Rule("UNSUPPORTED_METHOD", "error", (
        "Unsupported speculative method",  # 0.16.0+
        "is not supported with Speculative Decoding",  # VLLM_USE_V1=1 with a V0-only method
        "is only supported for",  # "Eagle3 is only supported for Llama models." and successors
    ), "the speculative method is not supported by this vLLM version or target model",
        regex=r"Unsupported speculative method|not supported with Speculative Decoding"
              r"|(?i:eagle|mtp|draft|specul)[^.]*is only supported for"),
    _Rule("ASYNC_SCHEDULING_CONFLICT", "error", (
        "speculative decoding is not supported with async scheduling",  # 0.10.0-0.11.0
        "Async scheduling is not supported by the V1 model runner with",  # 0.33.0
    ), "--async-scheduling was requested with a method that cannot run with it"),
    _Rule("MISSING_PACKAGE", "error", (
        "ImportError",
        "ModuleNotFoundError",
        "No module named",
        "Arctic Inference is required",
    ), "a Python package the method needs is not installed (e.g. arctic-inference for suffix)"),
    _Rule("CUDA_OOM", "error", (
        "CUDA out of memory",
        "OutOfMemoryError",
        "CUDA error: out of memory",
    ), "the GPU ran out of memory (target + draft weights, KV cache)"),
    _Rule("CONFIG_VALIDATION_ERROR", "error", (
        "num_speculative_tokens was provided",
        "error: argument --speculative-config",
        "must be <= prompt_lookup_max",
        "Speculative decoding requires usage of the V2 block manager",
        "Speculative decoding and chunked prefill are currently mutually exclusive",
    ), "the speculative configuration was rejected"),
    _Rule("CLI_ARGUMENT_ERROR", "error", (
        "error: unrecognized arguments:",
    ), "the server command line has flags this vLLM version does not know"),
    _Rule("ENGINE_START_FAILED", "error", (
        "EngineCore failed to start",
        "Engine core initialization failed",
        "Engine process failed to start",
    ), "the engine did not start"),
    _Rule("ENGINE_DEAD", "error", (
        "EngineDeadError",
    ), "the engine process died"),
)
# (needle, rule) in rule order: the first rule with a needle in the message wins
_NEEDLES = tuple((needle, rule) for rule in ISSUE_RULES for needle in rule.needles)
# records worth testing against ISSUE_RULES / the exception pattern
_ISSUE_HINTS = (
    "rror", "WARN", "xception", "not supported", "deprecated", "Please use", "only supported",
    "out of memory", "Defaulted", "speculative decoding settings", "Falling back",
)
