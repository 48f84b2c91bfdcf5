# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The facts read from each examined vLLM release's source: the eras of its speculative-config surface, the
keys of the config (:data:`KEYS`) and the methods (:data:`METHODS`) with the releases that have them, and what
each method needs.  :mod:`service.vllm_profiles` builds the version profiles from them."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version

_V = parse_version

# Eras of the configuration surface.
ERA_V0_FLAGS = "v0-flags"  # <= 0.8.1: separate CLI flags
ERA_TRANSITION = "literal-eval"  # 0.8.2: --speculative-config parsed by ast.literal_eval
ERA_DATACLASS = "json-dataclass"  # 0.8.3 - 0.9.0: JSON, stdlib dataclass
ERA_LENIENT = "json-lenient"  # 0.9.1 - 0.14.x: pydantic, unknown keys dropped
ERA_STRICT = "json-strict"  # 0.16.0 -: pydantic extra=forbid


def _era(version):
    if version < _V("0.8.2"):
        return ERA_V0_FLAGS
    if version < _V("0.8.3"):
        return ERA_TRANSITION
    if version < _V("0.9.1"):
        return ERA_DATACLASS
    if version < _V("0.16.0"):
        return ERA_LENIENT
    return ERA_STRICT


_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_STR = {"type": "string", "minLength": 1}
_NUM = {"type": "number"}

# key -> facts.  since: first examined release that has it; until: first examined release
# without it (None: still there in 0.33.0).  values: list of (since, allowed values) for
# Literal-typed keys.  methods: the methods the key has an effect for (a warning
# otherwise).  bound: the lower bound in words for the messages.
KEYS = {
    "method": {
        "since": "0.5.5",
        "schema": {"type": "string"},
        "doc": "The proposer: ngram, eagle, eagle3, draft_model, mtp, suffix, ...  The allowed values "
        "depend on the vLLM release (see x-specpilot.methods).  specpilot requires it to be set: "
        "vLLM's auto-detection from the draft's name has changed between releases.",
    },
    "model": {
        "since": "0.5.5",
        "schema": _STR,
        "doc": "Path (inside the pod) or Hugging Face id of the draft model, EAGLE head or MTP weights. "
        "specpilot fills it in from specpilot_draft and the delivery when it is not given.",
    },
    "num_speculative_tokens": {
        "since": "0.5.5",
        "schema": dict(_INT, minimum=1, maximum=64),
        "bound": "1..64",
        "doc": "Tokens proposed per step (k).  Required except for suffix (defaults to the tree depth) "
        "and for drafts whose config carries n_predict (MTP, Medusa, MLP speculator).",
    },
    "draft_tensor_parallel_size": {
        "since": "0.5.5",
        "schema": dict(_INT, minimum=1),
        "bound": ">= 1",
        "doc": "Tensor parallel size of the draft: 1 or the target's tensor_parallel_size.",
    },
    "quantization": {
        "since": "0.5.5",
        "schema": _STR,
        "doc": "Quantization method of the draft model weights (draft model methods only).",
    },
    "max_model_len": {
        "since": "0.5.5",
        "schema": dict(_INT, minimum=1),
        "bound": ">= 1",
        "doc": "Maximum sequence length of the draft; must not exceed the draft's or the target's.",
    },
    "disable_by_batch_size": {
        "since": "0.5.5",
        "until": "0.17.1",
        "schema": dict(_INT, minimum=2),
        "bound": ">= 2",
        "doc": "Disable speculation for new requests when the batch is larger than this.",
    },
    "prompt_lookup_max": {
        "since": "0.5.5",
        "schema": dict(_INT, minimum=1),
        "bound": ">= 1",
        "methods": ["ngram", "ngram_gpu"],
        "doc": "ngram: largest n-gram window.  Both lookup sizes default to 5 in the JSON era; "
        "with the V0 flags (<= 0.8.1) it is required.",
    },
    "prompt_lookup_min": {
        "since": "0.5.5",
        "schema": dict(_INT, minimum=1),
        "bound": ">= 1",
        "methods": ["ngram", "ngram_gpu"],
        "doc": "ngram: smallest n-gram window; must be <= prompt_lookup_max.",
    },
    "acceptance_method": {
        "since": "0.5.5",
        "until": "0.10.0",
        "schema": {"type": "string", "enum": ["rejection_sampler", "typical_acceptance_sampler"]},
        "doc": "V0 engine acceptance sampler (removed with the V0 engine).",
    },
    "posterior_threshold": {
        "since": "0.5.5",
        "until": "0.10.0",
        "schema": dict(_NUM, minimum=0),
        "bound": ">= 0",
        "doc": "typical_acceptance_sampler posterior threshold (V0 only).",
    },
    "posterior_alpha": {
        "since": "0.5.5",
        "until": "0.10.0",
        "schema": dict(_NUM, minimum=0),
        "bound": ">= 0",
        "doc": "typical_acceptance_sampler posterior alpha (V0 only).",
    },
    "disable_logprobs": {
        "since": "0.5.5",
        "until": "0.11.2",
        "schema": _BOOL,
        "doc": "Skip log-probabilities of draft tokens (V0 behaviour).",
    },
    "disable_mqa_scorer": {
        "since": "0.6.3",
        "until": "0.10.0",
        "schema": _BOOL,
        "doc": "V0: score proposals with batch expansion instead of the MQA scorer.",
    },
    "revision": {
        "since": "0.8.2",
        "schema": _STR,
        "doc": "Draft model revision (branch, tag or commit).",
    },
    "code_revision": {
        "since": "0.8.2",
        "schema": _STR,
        "doc": "Draft model code revision on the Hugging Face Hub.",
    },
    "speculative_token_tree": {
        "since": "0.9.0",
        "until": "0.21.0",
        "schema": _STR,
        "doc": "Tree of speculative tokens (EAGLE tree decoding), as a string.",
    },
    "enforce_eager": {
        "since": "0.11.0",
        "schema": _BOOL,
        "doc": "Override the target's enforce_eager for the draft.",
    },
    "disable_padded_drafter_batch": {
        "since": "0.11.0",
        "schema": _BOOL,
        "methods": ["eagle", "eagle3"],
        "doc": "EAGLE: do not pad drafter batches.  Disables async scheduling (0.14.1+).",
    },
    "suffix_decoding_max_tree_depth": {
        "since": "0.11.2",
        "schema": dict(_INT, minimum=1),
        "bound": ">= 1",
        "methods": ["suffix"],
        "doc": "suffix: maximum depth of the suffix trees (default 24).",
    },
    "suffix_decoding_max_cached_requests": {
        "since": "0.11.2",
        "schema": dict(_INT, minimum=0),
        "bound": ">= 0",
        "methods": ["suffix"],
        "doc": "suffix: requests kept in the global suffix tree (0 disables it; default 10000).",
    },
    "suffix_decoding_max_spec_factor": {
        "since": "0.11.2",
        "schema": dict(_NUM, minimum=0),
        "bound": ">= 0",
        "methods": ["suffix"],
        "doc": "suffix: speculation length per matched prefix token (default 1.0).",
    },
    "suffix_decoding_min_token_prob": {
        "since": "0.11.2",
        "schema": dict(_NUM, minimum=0, maximum=1),
        "bound": "in [0, 1]",
        "methods": ["suffix"],
        "doc": "suffix: minimum estimated probability of a proposed token (default 0.1).",
    },
    "parallel_drafting": {
        "since": "0.16.0",
        "schema": _BOOL,
        "doc": "PARD-style parallel drafting (EAGLE and draft_model methods, with a draft trained for it).",
    },
    "use_local_argmax_reduction": {
        "since": "0.17.1",
        "schema": _BOOL,
        "doc": "Greedy drafting: vocab-parallel local argmax instead of gathering the full logits.",
    },
    "draft_load_config": {
        "since": "0.17.1",
        "schema": {"type": "object"},
        "doc": "Load configuration of the draft model (defaults to the target's).",
    },
    "rejection_sample_method": {
        "since": "0.18.1",
        "schema": {"type": "string"},
        "values": [
            ("0.18.1", ["strict", "probabilistic"]),
            ("0.19.1", ["strict", "probabilistic", "synthetic"]),
            ("0.21.0", ["standard", "synthetic"]),
            ("0.25.1", ["standard", "synthetic", "block"]),
            ("0.33.0", ["standard", "synthetic", "block", "fly"]),
        ],
        "doc": "How draft tokens are verified.  The value names changed in 0.21.0 (strict -> standard).",
    },
    "moe_backend": {
        "since": "0.19.1",
        "schema": _STR,
        "doc": "MoE kernel backend of the draft (inherits the target's).",
    },
    "synthetic_acceptance_rate": {
        "since": "0.19.1",
        "until": "0.20.2",
        "schema": dict(_NUM, minimum=0, maximum=1),
        "bound": "in [0, 1]",
        "doc": "synthetic rejection sampling: acceptance probability (0.19 only).",
    },
    "synthetic_acceptance_rates": {
        "since": "0.20.2",
        "schema": {"type": "array", "minItems": 1, "items": dict(_NUM, minimum=0, maximum=1)},
        "doc": "synthetic: per-position unconditional acceptance rates, non-increasing, one per speculative "
        "token.",
    },
    "synthetic_acceptance_length": {
        "since": "0.20.2",
        "schema": dict(_NUM, minimum=1),
        "bound": ">= 1",
        "doc": "synthetic: target mean acceptance length in [1, num_speculative_tokens + 1].",
    },
    "attention_backend": {
        "since": "0.21.0",
        "schema": _STR,
        "doc": "Attention backend of the draft (auto-selected when unset).",
    },
    "draft_sample_method": {
        "since": "0.21.0",
        "schema": {"type": "string"},
        "values": [("0.21.0", ["greedy", "gumbel"]), ("0.22.1", ["greedy", "probabilistic"])],
        "doc": "How the draft samples its tokens (default greedy).",
    },
    "num_speculative_tokens_per_batch_size": {
        "since": "0.24.0",
        "schema": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "array", "minItems": 3, "maxItems": 3, "items": dict(_INT, minimum=0)},
        },
        "doc": "Dynamic speculation: [first batch size, last batch size, tokens] ranges.",
    },
    "use_heterogeneous_vocab": {
        "since": "0.25.1",
        "schema": _BOOL,
        "methods": ["draft_model"],
        "doc": "Allow a draft with a different vocabulary (draft_model with greedy draft sampling only).",
    },
    "kv_cache_dtype": {
        "since": "0.26.0",
        "schema": _STR,
        "doc": "KV cache dtype of the draft (inherits the target's).",
    },
    "enable_adaptive_verification": {
        "since": "0.28.0",
        "schema": _BOOL,
        "methods": ["dspark"],
        "doc": "dspark: size the verification budget from per-request confidence.",
    },
    "dspark_draft_topk": {
        "since": "0.28.0",
        "schema": dict(_INT, minimum=1),
        "bound": ">= 1",
        "methods": ["dspark"],
        "doc": "dspark: evaluate only the top-k base-logit candidates (draft TP 1).",
    },
    "index_share_for_mtp_iteration": {
        "since": "0.29.0",
        "schema": _BOOL,
        "methods": ["mtp"],
        "doc": "MTP: reuse the first step's sparse indices in later iterations.",
    },
    "disable_eagle_block_drop": {
        "since": "0.30.0",
        "schema": _BOOL,
        "doc": "EAGLE-like methods: keep the trailing prefix-cache block.",
    },
    "disable_lookahead_block_hashes": {
        "since": "0.33.0",
        "schema": _BOOL,
        "doc": "Disable lookahead block hashes.",
    },
    "draft_lm_head_quantization": {
        "since": "0.33.0",
        "schema": {"type": "string", "enum": ["fp8", "nvfp4"]},
        "methods": ["eagle", "eagle3", "mtp"],
        "doc": "Quantize the draft's LM head (EAGLE, EAGLE-3, MTP).",
    },
    "xpress_topc": {
        "since": "0.33.0",
        "schema": dict(_INT, minimum=0),
        "bound": ">= 0",
        "doc": "XPress drafting top-c.",
    },
    "fly_window_size": {
        "since": "0.33.0",
        "schema": dict(_INT, minimum=1),
        "bound": ">= 1",
        "doc": "FLy verification window; smaller than num_speculative_tokens.",
    },
    "fly_entropy_threshold": {
        "since": "0.33.0",
        "schema": dict(_NUM, minimum=0),
        "bound": ">= 0",
        "doc": "FLy entropy threshold.",
    },
    "fly_entropy_top_k": {
        "since": "0.33.0",
        "schema": dict(_INT, minimum=1),
        "bound": ">= 1",
        "doc": "FLy entropy top-k.",
    },
}

# method -> (first release, first release without it).  In the V0-flag era the "method"
# is specpilot vocabulary that the renderer turns into flags.
METHODS = {
    "ngram": ("0.5.5", None),
    "draft_model": ("0.5.5", None),
    "eagle": ("0.5.5", None),
    "medusa": ("0.5.5", "0.33.0"),
    "mlp_speculator": ("0.5.5", "0.33.0"),
    "eagle3": ("0.8.5.post1", None),
    "deepseek_mtp": ("0.9.0", None),
    "ernie_mtp": ("0.10.2", None),
    "qwen3_next_mtp": ("0.10.2", None),
    "mimo_mtp": ("0.11.0", None),
    "longcat_flash_mtp": ("0.11.0", None),
    "mtp": ("0.11.0", None),
    "suffix": ("0.11.2", None),
    "glm4_moe_mtp": ("0.11.2", None),
    "pangu_ultra_moe_mtp": ("0.11.2", None),
    "exaone_moe_mtp": ("0.14.1", None),
    "glm4_moe_lite_mtp": ("0.16.0", None),
    "glm_ocr_mtp": ("0.16.0", None),
    "step3p5_mtp": ("0.16.0", None),
    "extract_hidden_states": ("0.17.1", None),
    "nemotron_h_mtp": ("0.17.1", None),
    "qwen3_5_mtp": ("0.17.1", None),
    "ngram_gpu": ("0.18.1", None),
    "dflash": ("0.20.2", None),
    "exaone4_5_mtp": ("0.20.2", None),
    "hy_v3_mtp": ("0.20.2", None),
    "mimo_v2_mtp": ("0.21.0", None),
    "gemma4_mtp": ("0.21.0", None),
    "custom_class": ("0.22.1", None),
    "minimax_m3_mtp": ("0.24.0", None),
    "dspark": ("0.25.1", None),
    "bailing_hybrid_mtp": ("0.25.1", None),
    "inkling_mtp": ("0.26.0", None),
    "kimi_k3_mtp": ("0.27.1", None),
    "dots3_note_mtp": ("0.28.0", None),
    "bailing_hybrid_v3_mtp": ("0.28.0", None),
    "qwen4_exp_mtp": ("0.29.0", None),
    "hy_v4_mtp": ("0.29.0", None),
    "glm5_next_mtp": ("0.30.0", None),
    "step5_mtp": ("0.33.0", None),
}

# The V0 engine (<= 0.8.1) chose the draft kind from the draft checkpoint and took
# DeepSeek-V3's own MTP layer from 0.7.3; the JSON era names the method explicitly.
_V0_METHODS = {"ngram", "draft_model", "eagle", "medusa", "mlp_speculator"}

NEEDS_MODEL = {"eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "dflash", "custom_class"}
NO_MODEL = {"ngram", "[ngram]", "ngram_gpu", "suffix", "extract_hidden_states"}
NST_REQUIRED = {"ngram", "[ngram]", "ngram_gpu", "eagle", "eagle3", "draft_model", "dflash"}
# Methods whose draft is a separate artifact that must be delivered into the pod.
DRAFT_ARTIFACT = {"eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "dflash"}
# Methods that keep async scheduling on (0.14.1+), with the release that exempted them.
ASYNC_EXEMPT_SINCE = {
    "eagle": "0.5.5",
    "eagle3": "0.5.5",
    "extract_hidden_states": "0.17.1",
    "dflash": "0.20.2",
    "ngram_gpu": "0.18.1",
    "dspark": "0.25.1",
    "draft_model": "0.28.0",
}
