# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Model facts (from the spec or a local directory) and draft/target compatibility.

A mismatched draft rarely fails at startup: it serves, with a low acceptance rate.  These
checks catch what can be known before deploying: tokenizer and vocabulary, EAGLE head vs
target architecture and hidden size, EAGLE-3 target families per vLLM release, MTP
layers, and the draft/target size ratio.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re

from ansible_collections.specpilot.core.plugins.module_utils import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.findings import path_join

__all__ = ["FACT_KEYS", "read_local_facts", "merge_facts", "check_compatibility", "family"]

FACT_KEYS = (
    "params_b",
    "dtype",
    "quantization",
    "architecture",
    "model_type",
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_nextn_predict_layers",
    "tokenizer",
)

_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "float32": "float32",
    "float": "float32",
    "float8_e4m3fn": "fp8",
}

# Draft/target size ratio the seed guide recommends for draft models.
TOKENS_LOW, TOKENS_HIGH = 2, 5  # num_speculative_tokens for model-based methods
# the proposers that draft one token per forward pass (dflash drafts a whole block at once: k of 8 to
# 16 is its normal range; MTP repeats its few layers: checked against num_nextn_predict_layers)
TOKENS_METHODS = ("draft_model", "eagle", "eagle3", "medusa", "mlp_speculator")
RATIO_LOW, RATIO_HIGH = 8.0, 12.0


def _load_json(path):
    with open(path, "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))


def _tokenizer_identity(directory):
    """A sha256 over the vocabulary (so formatting differences do not matter), and its size."""
    tok_json = os.path.join(directory, "tokenizer.json")
    if os.path.isfile(tok_json):
        data = _load_json(tok_json)
        vocab = (data.get("model") or {}).get("vocab")
        items = []
        if isinstance(vocab, dict):
            items = sorted((str(k), int(v)) for k, v in vocab.items())
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            items = [(str(p[0]) if isinstance(p, list) else str(p), i) for i, p in enumerate(vocab)]
        added = sorted((str(t.get("content")), int(t.get("id", -1))) for t in data.get("added_tokens") or [])
        digest = hashlib.sha256(json.dumps([items, added], separators=(",", ":")).encode("utf-8")).hexdigest()
        ids = {i for _t, i in items} | {i for _t, i in added}
        return "sha256:" + digest, (max(ids) + 1 if ids else None)
    for name in ("tokenizer.model", "vocab.json"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                return "sha256:" + hashlib.sha256(handle.read()).hexdigest(), None
    return None, None


def _weight_bytes(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        total = (_load_json(index).get("metadata") or {}).get("total_size")
        if isinstance(total, int) and total > 0:
            return total
    total = 0
    for pattern in ("*.safetensors", "pytorch_model*.bin"):
        for path in glob.glob(os.path.join(directory, pattern)):
            total += os.path.getsize(path)
    return total or None


def _estimate_params(cfg):
    """Rough parameter count of a decoder-only transformer config (dense layers)."""
    h, v, layers = cfg.get("hidden_size"), cfg.get("vocab_size"), cfg.get("num_hidden_layers")
    if not all(isinstance(x, int) for x in (h, v, layers)):
        return None
    heads = cfg.get("num_attention_heads") or 1
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or h // heads
    inter = cfg.get("intermediate_size") or 4 * h
    attn = h * heads * head_dim * 2 + h * kv * head_dim * 2
    mlp = 3 * h * inter
    experts = cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts") or 1
    embed = v * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return (embed + layers * (attn + mlp * experts)) / 1e9


def read_local_facts(directory):
    """Facts from ``directory``/config.json and the tokenizer files.  Returns (facts, problem)."""
    if not os.path.isdir(directory):
        return {}, "directory %s does not exist on the controller" % directory
    cfg_path = os.path.join(directory, "config.json")
    if not os.path.isfile(cfg_path):
        return {}, "%s has no config.json" % directory
    try:
        raw = _load_json(cfg_path)
    except (OSError, ValueError) as exc:
        return {}, "cannot read %s: %s" % (cfg_path, exc)
    cfg = dict(raw)
    if isinstance(raw.get("text_config"), dict):  # multimodal wrappers keep the LM facts here
        merged = dict(raw["text_config"])
        merged.update({k: v for k, v in raw.items() if k not in merged})
        cfg = merged
    facts = {}
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs:
        facts["architecture"] = str(archs[0])
    for key in (
        "model_type",
        "hidden_size",
        "vocab_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "num_nextn_predict_layers",
    ):
        if cfg.get(key) is not None:
            facts[key] = cfg[key]
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if isinstance(dtype, str) and dtype in _DTYPES:
        facts["dtype"] = _DTYPES[dtype]
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        facts["quantization"] = str(quant["quant_method"])
    if isinstance(cfg.get("max_position_embeddings"), int):
        facts["max_position_embeddings"] = cfg["max_position_embeddings"]
    if isinstance(cfg.get("draft_vocab_size"), int):
        facts["draft_vocab_size"] = cfg["draft_vocab_size"]
    tokenizer, tok_size = _tokenizer_identity(directory)
    if tokenizer:
        facts["tokenizer"] = tokenizer
    if tok_size:
        facts["tokenizer_vocab_size"] = tok_size
    weights = _weight_bytes(directory)
    if weights:
        facts["weight_bytes"] = weights
    params = _estimate_params(cfg)
    if params is not None:
        facts["params_b_estimate"] = round(params, 6)
    return facts, None


def merge_facts(role, artifact, findings, read_files=True):
    """Spec facts, completed from local_path.  Conflicts are warnings (the spec wins)."""
    facts = {k: artifact.get(k) for k in FACT_KEYS if artifact.get(k) is not None}
    local = artifact.get("local_path")
    if not local or not read_files:
        return facts
    found, problem = read_local_facts(local)
    if problem:
        findings.warning(
            path_join(role, "local_path"),
            "%s.local_path: %s; compatibility checks use only the facts given in the spec" % (role, problem),
            "fix the path or remove local_path",
            "local-path",
        )
        return facts
    for key, value in found.items():
        if key in facts and key in FACT_KEYS and facts[key] != value and key != "tokenizer":
            findings.warning(
                path_join(role, key),
                "%s.%s=%r but %s/config.json says %r; using the spec's value"
                % (role, key, facts[key], local, value),
                "make them agree",
                "fact-conflict",
            )
            continue
        facts.setdefault(key, value)
    if "params_b" not in facts and "params_b_estimate" in facts:
        facts["params_b"] = facts["params_b_estimate"]
    return facts


def family(name):
    """Model family of a model_type or architecture.

    'qwen3_moe' -> 'qwen', 'Eagle3LlamaForCausalLM' -> 'llama'.
    """
    if not isinstance(name, str):
        return None
    text = name.lower()
    for token in ("eagle3", "eagle", "forcausallm", "forconditionalgeneration", "model", "mtp", "medusa"):
        text = text.replace(token, "")
    if text.startswith("gpt_oss") or text.startswith("gptoss"):
        return "gpt_oss"
    match = re.match(r"[a-z]+", text)
    return match.group(0) if match else None


def _head_kind(architecture):
    arch = (architecture or "").lower()
    if "eagle3" in arch:
        return "eagle3"
    if "eagle" in arch:
        return "eagle"
    return None


def check_compatibility(cfg, target, draft, x, version_label, findings):
    """Draft/target checks for a resolved speculative config.  target/draft: fact dicts."""
    method = cfg.get("method")
    if not isinstance(method, str):
        return
    info = vp.method_info(method)
    draft = draft or {}
    if info["draft_artifact"] and draft:
        _tokenizer_and_vocab(method, cfg, target, draft, version_label, findings)
    if method in ("eagle", "eagle3") and draft:
        _eagle_head(method, target, draft, version_label, findings)
    if method == "eagle3":
        families, exhaustive = x.get("eagle3_target_families"), x.get("eagle3_target_families_exhaustive")
        model_type = target.get("model_type") or target.get("architecture")
        if families and model_type:
            mt = str(model_type).lower()
            if not any(f in mt for f in families):
                text = "EAGLE-3 targets in vLLM %s are limited to %s models; the target is %r" % (
                    version_label,
                    "/".join(families),
                    model_type,
                )
                if exhaustive:
                    findings.error(
                        "target.model_type",
                        text,
                        "use a supported target family, or vLLM >= 0.22.1 (no family restriction)",
                        "eagle3-target-family",
                    )
                else:
                    findings.warning(
                        "target.model_type",
                        text + " (list known to be at least these)",
                        "check the release notes, or use vLLM >= 0.22.1",
                        "eagle3-target-family",
                    )
    if info["mtp"]:
        layers = target.get("num_nextn_predict_layers")
        if layers == 0:
            findings.error(
                "target.num_nextn_predict_layers",
                "method '%s' needs MTP layers in the target checkpoint, but num_nextn_predict_layers is 0"
                % method,
                "use a checkpoint that ships MTP weights, or another method",
                "mtp-no-layers",
            )
    if method == "draft_model" and draft:
        _draft_ratio(target, draft, findings)
    if method in TOKENS_METHODS:
        _token_count(method, cfg.get("num_speculative_tokens"), findings)


def _token_count(method, k, findings):
    """Model-based proposers pay off with 2 to 5 tokens per step (the decision framework): one token
    barely amortises the draft's forward pass, and beyond five the acceptance of the last positions
    is usually too low to pay for the verification of all of them."""
    # below 1 is an error of its own (out-of-range)
    if isinstance(k, int) and not isinstance(k, bool) and k >= 1 and not TOKENS_LOW <= k <= TOKENS_HIGH:
        findings.warning(
            "speculative.num_speculative_tokens",
            "num_speculative_tokens=%d for method '%s': model-based proposers usually pay off with %d to %d "
            "tokens per step (%s)"
            % (
                k,
                method,
                TOKENS_LOW,
                TOKENS_HIGH,
                (
                    "one token barely amortises the draft's forward pass"
                    if k < TOKENS_LOW
                    else "the last positions are rarely accepted, yet every one is verified"
                ),
            ),
            "start at 3, then read the per-position acceptance of the smoke report and measure with the benchmark",
            "spec-tokens-range",
        )


def _tokenizer_and_vocab(method, cfg, target, draft, version_label, findings):
    t_tok, d_tok = target.get("tokenizer"), draft.get("tokenizer")
    hetero = cfg.get("use_heterogeneous_vocab") is True
    comparable = bool(t_tok and d_tok) and str(t_tok).startswith("sha256:") == str(d_tok).startswith(
        "sha256:"
    )
    if comparable and t_tok != d_tok and not hetero:
        findings.error(
            "draft.tokenizer",
            "the draft's tokenizer (%s) differs from the target's (%s): every proposed token would be "
            "judged against a different vocabulary (method %s)" % (d_tok, t_tok, method),
            "use a draft trained with the target's tokenizer%s"
            % ("" if method != "draft_model" else " (or use_heterogeneous_vocab on vLLM >= 0.25.1)"),
            "tokenizer-mismatch",
        )
    t_voc, d_voc = target.get("vocab_size"), draft.get("vocab_size")
    if isinstance(t_voc, int) and isinstance(d_voc, int) and t_voc != d_voc and not hetero:
        if comparable and t_tok == d_tok:
            findings.warning(
                "draft.vocab_size",
                "draft vocab_size %d != target vocab_size %d although the tokenizers are identical "
                "(padded embeddings?)" % (d_voc, t_voc),
                "check that vLLM %s accepts the pair on a test deployment" % version_label,
                "vocab-padding",
            )
        else:
            findings.error(
                "draft.vocab_size",
                "draft vocab_size %d != target vocab_size %d: the draft does not share the target's "
                "vocabulary (method %s)" % (d_voc, t_voc, method),
                "use a draft built for this target (same tokenizer and vocabulary)",
                "vocab-mismatch",
            )


def _eagle_head(method, target, draft, version_label, findings):
    t_h, d_h = target.get("hidden_size"), draft.get("hidden_size")
    if isinstance(t_h, int) and isinstance(d_h, int) and t_h != d_h:
        findings.error(
            "draft.hidden_size",
            "the %s head has hidden_size %d but the target has %d: the head was trained for another model"
            % (method.upper().replace("EAGLE3", "EAGLE-3"), d_h, t_h),
            "use the head published for exactly this target model",
            "eagle-hidden-size",
        )
    kind = _head_kind(draft.get("architecture"))
    if kind and kind != method:
        findings.error(
            "draft.architecture",
            "the draft %r is an %s head but method is '%s'"
            % (draft.get("architecture"), kind.upper().replace("EAGLE3", "EAGLE-3"), method),
            "set method: %s, or use a matching head" % kind,
            "eagle-head-kind",
        )
    t_fam = family(target.get("model_type") or target.get("architecture"))
    d_fam = family(draft.get("architecture")) or family(draft.get("model_type"))
    if t_fam and d_fam and t_fam != d_fam:
        findings.error(
            "draft.architecture",
            "the %s head is built for %s models but the target is %s (vLLM %s)"
            % (method, d_fam, t_fam, version_label),
            "use the head trained for this target",
            "eagle-target-family",
        )


def _draft_ratio(target, draft, findings):
    t_p, d_p = target.get("params_b"), draft.get("params_b")
    if t_p and d_p:
        ratio = float(t_p) / float(d_p)
        if not RATIO_LOW <= ratio <= RATIO_HIGH:
            findings.warning(
                "draft.params_b",
                "draft/target size ratio is 1:%.1f (%sB draft for a %sB target), outside the 1:8 to "
                "1:12 range where same-family drafts usually pay off: a much smaller draft is "
                "rejected too often, a larger one costs GPU memory and compute" % (ratio, d_p, t_p),
                "pick a same-family draft of about %.1fB to %.1fB, and measure the acceptance rate"
                % (float(t_p) / RATIO_HIGH, float(t_p) / RATIO_LOW),
                "draft-ratio",
            )
    t_fam, d_fam = family(target.get("model_type")), family(draft.get("model_type"))
    if t_fam and d_fam and t_fam != d_fam:
        findings.warning(
            "draft.model_type",
            "draft family %r differs from the target family %r; cross-family drafts rarely agree with "
            "the target" % (draft.get("model_type"), target.get("model_type")),
            "use a draft from the target's family",
            "draft-family",
        )
