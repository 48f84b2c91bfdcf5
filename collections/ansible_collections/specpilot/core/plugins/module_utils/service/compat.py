# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Model facts of a local directory and draft/target compatibility (model_facts.py merges the facts typed in
the spec with those read at the artifact's source).

A mismatched draft rarely fails at startup: it serves, with a low acceptance rate.  These
checks catch what can be known before deploying: tokenizer and vocabulary, EAGLE head vs
target architecture and hidden size, EAGLE-3 target families per vLLM release, MTP
layers, and the draft/target size ratio.
"""

from __future__ import annotations

import re

from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.staging.model_dir import (
    CONFIG_KEYS,
    read_local_facts,
)

__all__ = ["FACT_KEYS", "read_local_facts", "check_compatibility", "check_draft_kind", "draft_kind", "family"]

FACT_KEYS = ("params_b", "dtype", "quantization", "architecture") + CONFIG_KEYS + ("tokenizer",)


# Draft/target size ratio the seed guide recommends for draft models.
TOKENS_LOW, TOKENS_HIGH = 2, 5  # num_speculative_tokens for model-based methods
# the proposers that draft one token per forward pass (dflash drafts a whole block at once: k of 8 to
# 16 is its normal range; MTP repeats its few layers: checked against num_nextn_predict_layers)
TOKENS_METHODS = ("draft_model", "eagle", "eagle3", "medusa", "mlp_speculator")
RATIO_LOW, RATIO_HIGH = 8.0, 12.0


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


def _eagle3_target_family(target, x, version_label, findings):
    """EAGLE-3 targets limited to some model families (an error where the profile's list is exhaustive)."""
    families, exhaustive = x.get("eagle3_target_families"), x.get("eagle3_target_families_exhaustive")
    model_type = target.get("model_type") or target.get("architecture")
    if not families or not model_type or any(f in str(model_type).lower() for f in families):
        return
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


def check_compatibility(cfg, target, draft, x, version_label, findings, origins=None):
    """Draft/target checks for a resolved speculative config.  target/draft: fact dicts; origins:
    {role: {fact: field path}} for facts read from a source (the path that names the source), the
    facts typed in the spec are reported at <role>.<fact>."""
    method = cfg.get("method")
    if not isinstance(method, str):
        return
    info = vp.method_info(method)
    draft = draft or {}
    if info["draft_artifact"] and draft:
        check_draft_kind(method, target, draft, origins or {}, findings)
        _tokenizer_and_vocab(method, cfg, target, draft, version_label, findings)
    if method in ("eagle", "eagle3") and draft:
        _eagle_head(method, target, draft, version_label, findings)
    if method == "eagle3":
        _eagle3_target_family(target, x, version_label, findings)
    if info["mtp"] and target.get("num_nextn_predict_layers") == 0:
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


# What each method loads as its draft artifact (vLLM config/speculative.py SpeculativeConfig.__post_init__:
# eagle/eagle3 wrap the draft's config in EAGLEConfig, which renames a plain architecture Eagle<arch> /
# Eagle3<arch> and loads the head's classes; medusa and mlp_speculator load their own model types;
# draft_model loads a complete model and needs the target's vocabulary, verify_equal_vocab_size_if_draft_model).
_WANTED_KIND = {
    "eagle": "eagle",
    "eagle3": "eagle3",
    "draft_model": "causal_lm",
    "medusa": "medusa",
    "mlp_speculator": "mlp_speculator",
}
_KIND_WORDS = {
    "eagle3": "an EAGLE-3 head",
    "eagle": "an EAGLE head",
    "medusa": "a Medusa head",
    "mlp_speculator": "an MLP speculator",
    "mtp": "an MTP module",
    "dflash": "a DFlash drafter",
    "causal_lm": "a complete causal LM",
}
_EAGLE3_KEYS = ("draft_vocab_size", "target_hidden_size", "eagle_config")


def _architectures(facts):
    archs = facts.get("architectures") or ([facts["architecture"]] if facts.get("architecture") else [])
    return [str(a) for a in archs]


def draft_kind(facts):
    """What a draft artifact is, from its facts: eagle3, eagle, medusa, mlp_speculator, mtp, dflash,
    causal_lm, or None when its architecture is not known."""
    text = " ".join(_architectures(facts)).lower()
    model_type = str(facts.get("model_type") or "").lower()
    spec_type = str(facts.get("speculators_model_type") or "").lower()
    if "eagle3" in text or spec_type == "eagle3":
        return "eagle3"
    if "eagle" in text or spec_type == "eagle":
        return "eagle"
    for kind, words in (
        ("medusa", ("medusa",)),
        ("mlp_speculator", ("mlpspeculator", "mlp_speculator")),
        ("dflash", ("dflash",)),
        ("mtp", ("mtp",)),
    ):
        if any(w in text or w in model_type for w in words):
            return kind
    if re.search(r"(forcausallm|forconditionalgeneration|lmheadmodel)\b", text):
        if set(facts.get("head_markers") or ()) & set(_EAGLE3_KEYS):
            return "eagle3"  # an EAGLE-3 head under a plain name (EAGLEConfig renames it Eagle3<arch>)
        return "causal_lm"
    return None


def check_draft_kind(method, target, draft, origins, findings):
    """The draft must be what the method loads: an EAGLE / EAGLE-3 head for this target, a complete causal
    LM for draft_model, Medusa and MLP-speculator heads for theirs.  A mismatch is an error on the draft,
    at the field its architecture came from (typed: draft.architecture; read: the source's field).
    origins: {role: {path, source, uri, keys}} (model_facts.resolve)."""
    origin = origins.get("draft") or {}
    want = _WANTED_KIND.get(method)
    kind = draft_kind(draft)
    if want is None or kind is None:
        return
    path = origin.get("path") if "architecture" in (origin.get("keys") or ()) else "draft.architecture"
    seen = "%s (%s%s)" % (
        _KIND_WORDS[kind],
        "architecture " + "/".join(_architectures(draft)),
        (
            (", read from %s" % origin["source"])
            if path != "draft.architecture" and origin.get("source")
            else ""
        ),
    )
    if kind == want:
        if kind in ("eagle", "eagle3"):
            _eagle_target_named(
                method, target, draft, (origins.get("target") or {}).get("uri"), path, findings
            )
        return
    if kind in ("eagle", "eagle3") and want in ("eagle", "eagle3") and _head_kind(draft.get("architecture")):
        return  # _eagle_head reports it at draft.architecture
    if kind == "causal_lm" and want in ("eagle", "eagle3"):
        _causal_lm_as_head(method, draft, origin, path, seen, findings)
        return
    findings.error(
        path,
        "method '%s' needs %s, but the draft is %s" % (method, _wanted_words(method), seen),
        _kind_hint(method, kind),
        "draft-kind",
    )


def _wanted_words(method):
    if method in ("eagle", "eagle3"):
        return "%s trained for this target" % _KIND_WORDS[method]
    if method == "draft_model":
        return "a complete causal LM with the target's tokenizer and vocabulary"
    return _KIND_WORDS[_WANTED_KIND[method]]


def _kind_hint(method, kind):
    if kind in _WANTED_KIND.values() and kind != "causal_lm":
        other = [m for m, k in _WANTED_KIND.items() if k == kind][0]
        return "set method: %s for this draft, or give the draft that method '%s' loads" % (other, method)
    if kind == "causal_lm":
        return "use method draft_model for a complete small model, or the %s published for the target" % (
            _KIND_WORDS[_WANTED_KIND[method]]
        )
    return "give the draft that method '%s' loads" % method


def _causal_lm_as_head(method, draft, origin, path, seen, findings):
    """A plain *ForCausalLM with a tokenizer is a complete model (heads ship none); an EAGLE-3 head carries
    draft_vocab_size / target_hidden_size / eagle_config when its name is plain.  An EAGLE-1 head may be
    published under a plain name (yuhuili/EAGLE-LLaMA3-Instruct-8B: LlamaForCausalLM): without a tokenizer
    that case cannot be told from a small model."""
    config_read = "architecture" in (origin.get("keys") or ())
    if draft.get("tokenizer") or (method == "eagle3" and config_read):
        why = (
            "it ships its own tokenizer, which heads do not"
            if draft.get("tokenizer")
            else "its config.json has none of the EAGLE-3 head's keys (%s)" % ", ".join(_EAGLE3_KEYS)
        )
        findings.error(
            path,
            "method '%s' needs %s, but the draft is %s: %s; vLLM would load it as %s%s and its weights do "
            "not fit that class"
            % (
                method,
                _wanted_words(method),
                seen,
                why,
                "Eagle3" if method == "eagle3" else "Eagle",
                (_architectures(draft) or ["LlamaForCausalLM"])[0],
            ),
            _kind_hint(method, "causal_lm"),
            "draft-kind",
        )
        return
    findings.warning(
        path,
        "method '%s' needs %s, and the draft declares only a plain architecture (%s): an %s head published "
        "under that name cannot be told from a small causal LM"
        % (
            method,
            _wanted_words(method),
            "/".join(_architectures(draft)),
            "EAGLE-3" if method == "eagle3" else "EAGLE",
        ),
        "make sure the draft is the head published for the target (set draft.local_path to a copy of its "
        "config.json so the validator can tell)",
        "draft-kind-unsure",
    )


def _eagle_target_named(method, target, draft, target_uri, path, findings):
    """A head whose config names its target (the speculators format's verifier) must name this one."""
    wanted = draft.get("eagle_target_architectures") or []
    have = _architectures(target)
    if wanted and have and not set(wanted) & set(have):
        findings.error(
            path,
            "the %s head was trained for a %s target (its config's verifier), but the target is %s"
            % (method, "/".join(wanted), "/".join(have)),
            "use the head published for this target",
            "eagle-target-named",
        )
    name, uri = draft.get("eagle_target"), target_uri or ""
    if name and uri.startswith("hf://"):
        repo = uri[len("hf://") :].split("@", 1)[0].strip("/").lower()
        base = name.strip("/").split("/")[-1].lower()
        if repo and name.strip("/").lower() != repo and base != repo.split("/")[-1]:
            findings.warning(
                path,
                "the %s head names its target %r, but the target is %s" % (method, name, uri),
                "check that the target is that model (or a quantized copy of it); otherwise use its head",
                "eagle-target-name",
            )


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
    # An EAGLE-3 head reads the target's hidden states through its fc layer, sized 3 x target_hidden_size
    # when its config declares that key, else 3 x hidden_size (vLLM model_executor/models/llama_eagle3.py,
    # LlamaModel.__init__).
    declared = method == "eagle3" and isinstance(draft.get("target_hidden_size"), int)
    if declared:
        d_h = draft["target_hidden_size"]
    if isinstance(t_h, int) and isinstance(d_h, int) and t_h != d_h:
        findings.error(
            "draft.hidden_size",
            "the %s head has %s %d but the target has hidden_size %d: the head was trained for another model"
            % (
                method.upper().replace("EAGLE3", "EAGLE-3"),
                "target_hidden_size" if declared else "hidden_size",
                d_h,
                t_h,
            ),
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
    # vLLM restricts EAGLE-3 by the TARGET's family (config/speculative.py SpeculativeConfig._verify_args on
    # the releases that restrict it: the target's hf_text_config.model_type; the profiles' eagle3_target_
    # families), never by the head's declared model_type: EAGLEConfig (transformers_utils/configs/eagle.py)
    # keeps LlamaForCausalLMEagle3 as it is, and llama_eagle3.py's Eagle3LlamaForCausalLM is the generic
    # EAGLE-3 head that published heads for Qwen3, gpt-oss ... declare (architecture LlamaForCausalLMEagle3,
    # model_type llama).  So a llama head says nothing about its target; a head of another family's own
    # implementation (Eagle3Qwen2_5vl... ) does.  A speculators-format head names its target instead
    # (check_draft_kind compares it).
    generic = (method == "eagle3" and d_fam == "llama") or bool(draft.get("speculators_model_type"))
    if t_fam and d_fam and t_fam != d_fam and not generic:
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
