# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Pre-flight rules that depend on the vLLM release *and* on the rest of the service spec.

Each rule below was read from vLLM's source at the release tags (the wheels on PyPI, whose
``vllm/`` tree is the tagged source); the function named in each comment is where vLLM decides.
The rules take the runtime's own release (``ctx["version"]``), not the profile's basis release,
so a release that was not examined but whose source was read (0.6.4) is judged as it behaves.

- draft tensor parallelism (``draft_tp_must_be_one``, ``check_draft_tp``), called from
  ``speculative._check``;
- chunked prefill with speculative decoding (``chunked_prefill_policy``, ``check_chunked_prefill``),
  called from ``speculative._v0_semantics``;
- synthetic rejection sampling only for a spec whose ``purpose`` is ``benchmark``;
- ``use_heterogeneous_vocab`` with a draft sampling method other than greedy;
- structured output (``workload.structured_output``) on the releases where it breaks under
  speculative decoding;
- LoRA (``--enable-lora`` in ``vllm_args.extra_args``) with speculative decoding.

The last four run from ``validator.py`` through ``check``.
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version

__all__ = [
    "check",
    "check_chunked_prefill",
    "check_draft_tp",
    "chunked_prefill_policy",
    "draft_tp_must_be_one",
    "engine_for",
]

_V = parse_version

# Methods the V1 engine ran before V0 went (0.10.0); the others fell back to V0.
# EngineArgs._is_v1_supported_oracle (vllm/engine/arg_utils.py): 0.8.5.post1 ngram, eagle, eagle3;
# 0.9.0 and 0.9.2 also medusa and deepseek_mtp.
_V1_METHODS_0_8 = ("ngram", "[ngram]", "eagle", "eagle3")
_V1_METHODS_0_9 = _V1_METHODS_0_8 + ("medusa", "deepseek_mtp")


def engine_for(version, method):
    """'v0' or 'v1': the engine that runs speculative ``method`` on vLLM ``version``."""
    if version >= _V("0.10.0"):
        return "v1"
    if version >= _V("0.9.0"):
        return "v1" if method in _V1_METHODS_0_9 else "v0"
    if version >= _V("0.8.0"):
        return "v1" if method in _V1_METHODS_0_8 else "v0"
    return "v0"


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- draft tensor parallelism ------------------------------------------------------------------


def draft_tp_must_be_one(version):
    """Whether vLLM ``version`` refuses every draft TP but 1.

    0.6.3.post1: vllm/config.py SpeculativeConfig.create_draft_parallel_config raises ValueError
    "speculative_draft_tensor_parallel_size=N cannot be other value than 1".  vllm#9394 (in 0.6.4)
    allowed the target's size: 0.6.4's SpeculativeConfig._verify_and_get_draft_model_tensor_parallel_size
    accepts (1, target tensor_parallel_size), and so does every later release
    (vllm/config/speculative.py SpeculativeConfig._verify_and_get_draft_tp in 0.32.0).  Read again from the
    sdists of 0.6.3.post1, 0.6.4, 0.6.4.post1 and 0.6.5 (vllm/config.py): 0.6.4 refuses draft TP 4 with
    target TP 4 only with --enable-chunked-prefill (``chunked_prefill_policy``).  vllm#10483's error text
    ("cannot be other value than 1", without "or target model tensor_parallel_size") is 0.6.3.post1's: its
    build ("API server version dev") predates the change.
    """
    return version < _V("0.6.4")


# --- chunked prefill with speculative decoding (V0) --------------------------------------------

_HIDDEN_STATE_DRAFTS = ("medusa", "mlp_speculator", "eagle")


def chunked_prefill_policy(version, profile_policy):
    """What vLLM ``version`` does with ``--enable-chunked-prefill`` and a speculative config.

    The profile's policy is its basis release's (0.6.4 and 0.6.5 are judged on 0.6.3.post1's
    profile); the releases between examined ones behave as their source says:

    - 0.6.3.post1: vllm/config.py SpeculativeConfig.maybe_create_spec_config raises "Speculative
      decoding and chunked prefill are currently mutually exclusive": ``incompatible``.
    - 0.6.4, 0.6.4.post1: the same function accepts chunked prefill (vllm#9291) but raises
      "Chunked prefill and hidden-state based draft models are not compatible" for a medusa,
      mlp_speculator or eagle draft, and "Chunked prefill and speculative decoding can be enabled
      simultaneously only for draft models with tensor parallel size 1" when the draft's TP (from
      _verify_and_get_draft_model_tensor_parallel_size: the spec's, or the target's when unset,
      1 for mlp_speculator) is not 1; an n-gram proposer never reaches either check:
      ``draft-tp-one``.
    - 0.6.5: the draft-TP clause is gone; the hidden-state one stays:
      ``incompatible-for-medusa-mlp-eagle``.
    """
    if version < _V("0.6.4"):
        return "incompatible"
    if version < _V("0.6.5"):
        return "draft-tp-one"
    if profile_policy == "incompatible":
        return "incompatible-for-medusa-mlp-eagle"
    return profile_policy


def _chunked_prefill_requested(ctx):
    return any(
        a.startswith("--enable-chunked-prefill") and not a.endswith(("=false", "=False"))
        for a in ctx.get("extra_args") or []
    )


def check_chunked_prefill(cfg, ctx, findings, path):
    """``--enable-chunked-prefill`` against the runtime's policy (``chunked_prefill_policy``)."""
    if not _chunked_prefill_requested(ctx):
        return
    method, label = cfg.get("method"), ctx["version_label"]
    policy = chunked_prefill_policy(ctx["version"], ctx.get("chunked_profile"))
    if policy == "incompatible" or (policy != "ok" and method in _HIDDEN_STATE_DRAFTS):
        findings.error(
            "vllm_args.extra_args",
            "vLLM %s cannot combine chunked prefill with %s speculative decoding"
            % (label, "any" if policy == "incompatible" else method),
            "remove --enable-chunked-prefill",
            "v0-chunked-prefill",
        )
        return
    if policy != "draft-tp-one" or method in ("ngram", "[ngram]"):
        return
    tp = ctx.get("target_tp") or 1
    dtp = _int(cfg.get("draft_tensor_parallel_size"))
    effective = dtp if dtp is not None else tp
    if effective != 1:
        findings.error(
            path_join(path, "draft_tensor_parallel_size"),
            "draft_tensor_parallel_size=%s with --enable-chunked-prefill: vLLM %s runs chunked prefill with "
            "speculative decoding only for a draft at tensor parallel size 1 (start-up fails: 'Chunked "
            "prefill and speculative decoding can be enabled simultaneously only for draft models with "
            "tensor parallel size 1', vllm/config.py SpeculativeConfig.maybe_create_spec_config)"
            % (effective if dtp is not None else "unset (the target's %d)" % tp, label),
            "set draft_tensor_parallel_size to 1, remove --enable-chunked-prefill, or use vLLM >= 0.6.5",
            "draft-tp",
        )


# V1 proposers that build the drafter with the target's parallel groups: they never read
# speculative_config.draft_parallel_config (0.9.2 ... 0.32.0: vllm/v1/spec_decode/eagle.py,
# medusa.py; only draft_model.py, dspark and standalone_ar read it), so draft_tensor_parallel_size
# is validated and then ignored (vllm#31345, #31398). dspark reads it in 0.32.0 and 0.33.0 (not in
# 0.25.1 or 0.28.0): kept out of the warning, the safe side.
_TP_READ_BY_V1 = ("draft_model", "dspark", "standalone_ar")
_DRAFT_MODEL_TP_EQUAL_SINCE = "0.16.0"


def check_draft_tp(cfg, ctx, findings, path):
    dtp = _int(cfg.get("draft_tensor_parallel_size"))
    if dtp is None or dtp < 1:  # < 1 is a bound error already
        return
    tp = ctx.get("target_tp") or 1
    version, label = ctx["version"], ctx["version_label"]
    field = path_join(path, "draft_tensor_parallel_size")
    if draft_tp_must_be_one(version):
        if dtp != 1:
            findings.error(
                field,
                "draft_tensor_parallel_size=%d: vLLM %s supports only 1 (start-up fails: 'cannot be other "
                "value than 1' in SpeculativeConfig.create_draft_parallel_config; 1 or the target's size "
                "from 0.6.4)" % (dtp, label),
                (
                    "set it to 1, or use vLLM >= 0.6.4 to keep %d (the target's size)" % tp
                    if dtp == tp
                    else "set it to 1"
                ),
                "draft-tp",
            )
        return
    if dtp not in (1, tp):
        findings.error(
            field,
            "draft_tensor_parallel_size=%d must be 1 or the target's tensor_parallel_size (%d) in vLLM %s "
            "(start-up fails: 'cannot be other value than 1 or target model tensor_parallel_size')"
            % (dtp, tp, label),
            "use 1" if tp == 1 else "use 1 or %d" % tp,
            "draft-tp",
        )
        return
    _v1_draft_tp(cfg.get("method"), dtp, tp, ctx, findings, field)


def _v1_draft_tp(method, dtp, tp, ctx, findings, field):
    """On the V1 engine: draft_model needs the target's size (0.16+); most drafters ignore it."""
    version, label = ctx["version"], ctx["version_label"]
    if (
        dtp == tp
        or engine_for(version, method) != "v1"
        or method in ("ngram", "[ngram]", "ngram_gpu", "suffix")
    ):
        return
    if method == "draft_model" and version >= _V(_DRAFT_MODEL_TP_EQUAL_SINCE):
        findings.error(
            field,
            "draft_tensor_parallel_size=%d with tensor_parallel_size %d: vLLM %s's draft_model proposer "
            "refuses a draft TP other than the target's at start-up ("
            "vllm/v1/spec_decode/draft_model.py DraftModelProposer._raise_if_draft_tp_mismatch)"
            % (dtp, tp, label),
            "set it to %d, or leave it out (it defaults to the target's)" % tp,
            "draft-tp",
        )
    elif method not in _TP_READ_BY_V1:
        findings.warning(
            field,
            "draft_tensor_parallel_size=%d is accepted and then ignored by vLLM %s's V1 %s proposer: the "
            "drafter runs with the target's tensor_parallel_size (%d) (vllm#31345, #31398)"
            % (dtp, label, method, tp),
            "remove it (the drafter's memory and speed are those of TP %d), or acknowledge draft-tp-ignored"
            % tp,
            "draft-tp-ignored",
        )


# --- what runs from the validator ----------------------------------------------------------------


def check(cfg, ctx, spec, findings, path="speculative"):
    """The rules that read the spec beyond its speculative config (purpose, workload, engine args)."""
    if not cfg:
        return
    _synthetic_purpose(cfg, ctx, spec, findings, path)
    _heterogeneous_vocab(cfg, ctx, findings, path)
    _structured_output(cfg, ctx, spec, findings)
    _lora(cfg, ctx, findings)


_SYNTHETIC_KEYS = ("synthetic_acceptance_rate", "synthetic_acceptance_rates", "synthetic_acceptance_length")


def _synthetic_purpose(cfg, ctx, spec, findings, path):
    """rejection_sample_method 'synthetic' (0.19.1+) accepts drafts at made-up rates, whatever the target
    says (vllm/config/speculative.py SpeculativeConfig.rejection_sample_method; the sampler in
    vllm/v1/sample/rejection_sampler.py): its output is not the target model's.  A benchmark tool only."""
    used = [k for k in _SYNTHETIC_KEYS if k in cfg]
    if cfg.get("rejection_sample_method") == "synthetic":
        used.insert(0, "rejection_sample_method")
    if not used or spec.get("purpose") == "benchmark":
        return
    findings.error(
        path_join(path, used[0]),
        "%s: synthetic rejection sampling accepts draft tokens at made-up rates regardless of the target "
        "model, so the service answers with text the model did not choose (vLLM %s); it exists to benchmark "
        "acceptance, not to serve" % (", ".join(used), ctx["version_label"]),
        "remove %s for a service; for a benchmark deployment set specpilot_purpose: benchmark"
        % ", ".join(used),
        "synthetic-in-service",
    )


def _heterogeneous_vocab(cfg, ctx, findings, path):
    """0.25.1+: vllm/config/speculative.py SpeculativeConfig._verify_args raises ValueError
    'use_heterogeneous_vocab currently only supports greedy draft sampling'.  (Outside draft_model it
    raises 'only works with method=draft_model': the profile rule use_heterogeneous_vocab says so.)"""
    sample = cfg.get("draft_sample_method")
    if cfg.get("use_heterogeneous_vocab") is True and sample not in (None, "greedy"):
        findings.error(
            path_join(path, "draft_sample_method"),
            "draft_sample_method %r with use_heterogeneous_vocab: vLLM %s supports only greedy draft "
            "sampling with a heterogeneous vocabulary (refused by SpeculativeConfig._verify_args)"
            % (sample, ctx["version_label"]),
            "remove draft_sample_method (greedy is the default), or use_heterogeneous_vocab",
            "heterogeneous-vocab-sampling",
        )


# Structured output (guided decoding) under speculative decoding:
# - V0 engine: the spec-decode worker scores drafts without the guided-decoding logits processors
#   (vllm/spec_decode/spec_decode_worker.py; vllm#9423, #11484; the compatibility matrix marked it
#   unsupported, vllm#12373); requests crash the engine or come back unconstrained;
# - V1 before 0.9.0: the scheduler built one grammar bitmask per request, none per draft position
#   (vllm/v1/structured_output/__init__.py StructuredOutputManager.grammar_bitmask in 0.8.5.post1), so
#   drafts that break the grammar are accepted (vllm#15554 on 0.8.2);
# - V1 from 0.9.0: one bitmask per draft position and drafts validated against the grammar (vllm#14702;
#   'max_num_spec_tokens' in StructuredOutputManager in 0.9.0).
_SO_FIXED_V1 = "0.9.0"
_SO_LATER_REPORTS = "vllm#27969 (crash on 0.11.0 with EAGLE-3), vllm#52620"


def _structured_output(cfg, ctx, spec, findings):
    workload = spec.get("workload") if isinstance(spec.get("workload"), dict) else {}
    if workload.get("structured_output") is not True:
        return
    version, label, method = ctx["version"], ctx["version_label"], cfg.get("method")
    engine = engine_for(version, method)
    if engine == "v1" and version >= _V(_SO_FIXED_V1):
        # The releases #52620 covers could not be read (the report is not in the corpus this was
        # built from): every V1 release from 0.9.0 gets the warning, which a service acknowledges.
        findings.warning(
            "workload.structured_output",
            "vLLM %s checks drafts against the grammar (vllm#14702), but structured output with speculative "
            "decoding was reported broken again later (%s)" % (label, _SO_LATER_REPORTS),
            "send a guided-decoding request in the smoke test (specpilot_smoke.request_params) on this "
            "image, then acknowledge structured-output-spec-reported",
            "structured-output-spec-reported",
        )
        return
    why = (
        "its V0 speculative-decoding worker does not apply guided decoding to the drafts it scores "
        "(vllm#9423, #11484)"
        if engine == "v0"
        else "its V1 scheduler masks only one position per request, not each draft position (vllm#15554; "
        "fixed in 0.9.0 by vllm#14702)"
    )
    findings.error(
        "workload.structured_output",
        "clients use structured output (guided decoding), which is broken with speculative decoding in vLLM "
        "%s: %s (method %s)" % (label, why, method),
        "use vLLM >= 0.9.0 with a method the V1 engine runs, or turn speculative decoding off for this "
        "service (specpilot_speculative: {})",
        "structured-output-spec",
    )


# LoRA under speculative decoding:
# - V0 engine: SpecDecodeWorker is a LoraNotSupportedWorkerBase (vllm/spec_decode/spec_decode_worker.py,
#   0.5.5 ... 0.9.2): add_lora raises ValueError "... does not support LoRA", so no adapter loads;
# - V1 before 0.11.1: LoRAModelRunnerMixin.set_active_loras maps one sampled token per request
#   (vllm/v1/worker/lora_model_runner_mixin.py in 0.11.0), while speculative decoding samples k + 1:
#   the LoRA logits do not match (vllm#21068 fixed it with num_sampled_tokens, first in 0.11.1);
# - V1 from 0.11.1: the adapter applies to the target only (the drafter runs without it), so requests
#   that use an adapter accept fewer drafts; adaptive verification refuses LoRA
#   (VllmConfig._validate_adaptive_verification, 0.32.0).
_LORA_FIXED_V1 = "0.11.1"


def _lora_enabled(extra):
    for arg in extra or ():
        name, _sep, value = str(arg).partition("=")
        if name.replace("_", "-") == "--enable-lora":
            return value.lower() not in ("false", "0", "no")
    return False


def _lora(cfg, ctx, findings):
    if not _lora_enabled(ctx.get("extra_args")):
        return
    version, label, method = ctx["version"], ctx["version_label"], cfg.get("method")
    engine = engine_for(version, method)
    if cfg.get("enable_adaptive_verification") is True:
        # 0.28.0: 'Model Runner V2 does not yet support: adaptive verification with LoRA'
        # (VllmConfig._validate_v2_model_runner); 0.32.0, 0.33.0: 'Adaptive verification is not currently
        # compatible with LoRA' (VllmConfig._validate_adaptive_verification)
        findings.error(
            "speculative.enable_adaptive_verification",
            "enable_adaptive_verification with --enable-lora: vLLM %s refuses the combination at start-up "
            "(the per-token LoRA mapping cannot follow the batch the GPU trims)" % label,
            "remove enable_adaptive_verification, or --enable-lora",
            "lora-adaptive-verification",
        )
    if engine == "v1" and version >= _V(_LORA_FIXED_V1):
        findings.warning(
            "vllm_args.extra_args",
            "--enable-lora with speculative decoding: vLLM %s applies adapters to the target only, not to "
            "the %s drafter, so requests that use an adapter accept fewer drafts than the base model's"
            % (label, method),
            "measure acceptance with adapter requests (specpilot_benchmark.request_params) and acknowledge "
            "lora-spec-partial",
            "lora-spec-partial",
        )
        return
    why = (
        "its speculative-decoding worker does not support LoRA: loading an adapter fails "
        "(SpecDecodeWorker is a LoraNotSupportedWorkerBase)"
        if engine == "v0"
        else "its V1 LoRA logits assume one sampled token per request, speculative decoding samples "
        "num_speculative_tokens + 1 (fixed by vllm#21068 in 0.11.1)"
    )
    findings.error(
        "vllm_args.extra_args",
        "--enable-lora with speculative decoding (method %s) fails in vLLM %s: %s" % (method, label, why),
        "use vLLM >= 0.11.1, or serve the adapters from a service without speculative decoding",
        "lora-spec",
    )
