# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Check a speculative config against a vLLM profile, and render it as engine arguments.

The profile (see vllm_profiles) is a JSON Schema with an ``x-specpilot`` block.  The
schema covers types, bounds, allowed values and the required/forbidden combinations;
the code here adds what JSON Schema cannot say (key history across releases,
prompt_lookup_min <= max, synthetic rates, draft TP, async scheduling, ...) and turns
every problem into a finding that names the key, the value, the vLLM release and a fix.
"""

from __future__ import annotations

import difflib
import json

from ansible_collections.specpilot.core.plugins.module_utils.service import preflight_rules
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join
from ansible_collections.specpilot.core.plugins.module_utils.service import spec_flags
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version

try:
    from jsonschema import Draft202012Validator

    HAS_JSONSCHEMA = True
except ImportError:  # pragma: no cover - reported by the module
    Draft202012Validator = None
    HAS_JSONSCHEMA = False

__all__ = ["check", "render_args", "compact_json", "method_in_scope", "RENDERED_FLAGS"]

# Engine flags that belong to the speculative config (rendered by specpilot only): spec_flags' one list
RENDERED_FLAGS = tuple(sorted(spec_flags.FLAGS | spec_flags.COMPANIONS))

_VALIDATORS = {}


def compact_json(value):
    """JSON with no whitespace, keys in their given order (what --speculative-config gets)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def _validator(profile):
    key = profile.get("$id") or id(profile)
    validator = _VALIDATORS.get(key)
    if validator is None or validator.schema is not profile:
        validator = Draft202012Validator(profile)
        _VALIDATORS[key] = validator
    return validator


def _ctx_version(ctx):
    return ctx["version_label"]


def _rule_inputs(cfg, ctx):
    """What the method rules read: the configured method, the profile's x-specpilot facts and the
    version label."""
    return cfg.get("method"), ctx["profile"]["x-specpilot"], _ctx_version(ctx)


def _history_text(since, until):
    if until:
        return "exists in vLLM %s up to (not including) %s" % (since, until)
    return "exists from vLLM %s" % since


def _misplaced_key(key, value, version, policy):
    """(message, hint, code) of a key that belongs in no release's speculative config, or None."""
    if key in vp.INTERNAL_KEYS:
        return (
            "'%s' is an engine-internal field that vLLM fills in itself; it is not user "
            "configuration (vLLM %s)" % (key, version),
            "remove it: the engine derives it from the target model and parallel settings",
            "internal-key",
        )
    if key == "tensor_parallel_size":
        return (
            "tensor_parallel_size=%r inside the speculative config is wrong in every vLLM "
            "release: 0.16+ rejects it, 0.9.1-0.14 silently ignore it, older ones crash "
            "(vLLM %s)" % (value, version),
            "use draft_tensor_parallel_size (1 or the target's tensor_parallel_size); the target's "
            "TP is vllm_args.tensor_parallel_size",
            "tp-in-config",
        )
    if key in vp.SAMPLING_KEYS:
        return (
            "'%s' is a per-request sampling parameter, not a speculative-config key "
            "(vLLM %s)" % (key, version),
            "send it with the request (or --override-generation-config), and remove it here",
            "sampling-param",
        )
    if key in vp.LEGACY_KEYS:
        return (
            "'%s' is an old CLI flag spelling, not a --speculative-config key; vLLM %s %s it"
            % (key, version, "would silently ignore" if policy == "ignored" else "rejects"),
            "rename it to '%s'" % vp.LEGACY_KEYS[key],
            "legacy-key",
        )
    return None


def _classify_extra_key(key, value, ctx, findings, path):
    """A key that the profile does not list.  Returns True when it was reported."""
    x = ctx["profile"]["x-specpilot"]
    version = _ctx_version(ctx)
    kpath = path_join(path, key)
    policy = x["unknown_keys"]
    misplaced = _misplaced_key(key, value, version, policy)
    if misplaced is not None:
        findings.error(kpath, *misplaced)
        return
    history = vp.key_history(key)
    severity = "warning" if policy == "ignored" else "error"
    effect = (
        "vLLM %s silently ignores it, so it has no effect" % version
        if policy == "ignored"
        else "vLLM %s rejects it" % version
    )
    if history is not None:
        since, until = history
        ver = ctx["version"]
        if ver < parse_version(since):
            why = "'%s' is not available in vLLM %s (it first appears in %s); %s" % (
                key,
                version,
                since,
                effect,
            )
            hint = "remove it, or use a runtime image with vLLM >= %s" % since
        elif x["era"] == vp.ERA_V0_FLAGS and key not in vp.V0_FLAGS:
            why = (
                "'%s' has no CLI flag in vLLM %s (the speculative options are separate flags up to 0.8.1)"
                % (key, version)
            )
            hint = "remove it, or use vLLM >= 0.8.2 where --speculative-config takes it"
        else:
            why = "'%s' was removed in vLLM %s (%s); %s" % (key, until, _history_text(since, until), effect)
            hint = "remove it%s" % (
                "; the typical-acceptance sampler went away with the V0 engine"
                if key in ("acceptance_method", "posterior_threshold", "posterior_alpha")
                else ""
            )
        findings.add(severity, kpath, why, hint, "key-not-in-version")
        return
    props = sorted(ctx["profile"]["properties"])
    close = difflib.get_close_matches(key, props, n=1, cutoff=0.7)
    hint = ("did you mean '%s'?" % close[0]) if close else "remove it; known keys: %s" % ", ".join(props)
    findings.add(
        severity, kpath, "unknown speculative-config key '%s'; %s" % (key, effect), hint, "unknown-key"
    )


def _schema_notes(profile, schema_path):
    """x-message/x-hint/x-path of the deepest schema on the error's path."""
    node = profile
    message = hint = key = None
    for part in schema_path:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            break
        if isinstance(node, dict):
            message = node.get("x-message", message)
            hint = node.get("x-hint", hint)
            key = node.get("x-path", key)
    return message, hint, key


def _method_message(value, ctx):
    x = ctx["profile"]["x-specpilot"]
    version = _ctx_version(ctx)
    allowed = ", ".join(sorted(x["methods"]))
    if value == "[ngram]":
        return (
            "method '[ngram]' is rejected by vLLM %s (the method is a Literal from 0.9.1)" % version,
            "use method: ngram",
            "method-not-in-version",
        )
    if not isinstance(value, str):
        return ("method must be a string, got %r" % (value,), "one of: %s" % allowed, "method-type")
    history = vp.method_history(value)
    if x["era"] == vp.ERA_V0_FLAGS and history is not None:
        return (
            "method '%s' cannot be expressed with the V0 speculative flags of vLLM %s" % (value, version),
            "use one of %s, or a runtime with vLLM >= %s" % (allowed, history[0]),
            "method-not-in-version",
        )
    if history is not None:
        since, until = history
        if ctx["version"] < parse_version(since):
            return (
                "method '%s' is not available in vLLM %s: it first appears in %s" % (value, version, since),
                "use a runtime image with vLLM >= %s, or one of: %s" % (since, allowed),
                "method-not-in-version",
            )
        return (
            "method '%s' was removed in vLLM %s (runtime: %s)" % (value, until, version),
            "use one of: %s (or a runtime with vLLM < %s)" % (allowed, until),
            "method-not-in-version",
        )
    close = difflib.get_close_matches(value, list(x["methods"]), n=1, cutoff=0.6)
    return (
        "unknown method '%s' for vLLM %s" % (value, version),
        ("did you mean '%s'? " % close[0] if close else "") + "allowed: %s" % allowed,
        "unknown-method",
    )


def _enum_message(key, value, allowed, ctx):
    others = []
    facts = vp.KEYS.get(key, {})
    for since, values in facts.get("values", ()):
        if value in values:
            others.append(since)
    text = "%s=%r is not allowed in vLLM %s (allowed: %s)" % (
        key,
        value,
        _ctx_version(ctx),
        ", ".join(map(str, allowed)),
    )
    if others:
        text += "; that value belongs to the set valid from %s" % others[0]
    if key == "rejection_sample_method" and value in ("strict", "probabilistic") and "standard" in allowed:
        text += " (0.21.0 renamed strict/probabilistic to standard)"
    return text, "use one of: %s" % ", ".join(map(str, allowed))


def _translate(error, ctx, path, findings):
    profile = ctx["profile"]
    version = _ctx_version(ctx)
    epath = path_join(path, *list(error.absolute_path))
    message, hint, rule_key = _schema_notes(profile, list(error.absolute_schema_path))
    instance = error.instance
    cfg = ctx.get("config") or {}
    if error.validator == "required":
        missing = [k for k in error.validator_value if not (isinstance(instance, dict) and k in instance)]
        if missing:
            epath = path_join(epath, missing[0])
    if rule_key:
        epath = path_join(path, rule_key)
    if message:
        text = message.format(version=version, method=cfg.get("method"), value=instance)
        if version not in text:
            text += " (vLLM %s)" % version
        findings.error(epath, text, (hint or "").format(version=version), "profile-rule")
        return
    key = error.absolute_path[0] if error.absolute_path else None
    if error.validator == "enum" and key == "method":
        text, hint, code = _method_message(instance, ctx)
        findings.error(epath, text, hint, code)
        return
    if error.validator == "enum":
        text, hint = _enum_message(key, instance, error.validator_value, ctx)
        findings.error(epath, text, hint, "value-not-allowed")
        return
    if error.validator == "required" and error.validator_value == ["method"]:
        findings.error(
            path_join(path, "method"),
            "method is not set; vLLM %s would guess it from the draft's name or config, and that "
            "guess has changed between releases" % version,
            "set method explicitly (e.g. ngram, eagle3, draft_model, mtp)",
            "method-missing",
        )
        return
    if error.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        bound = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[
            error.validator
        ]
        findings.error(
            epath,
            "%s=%r is out of range for vLLM %s: it must be %s %s"
            % (epath.split(".", 1)[-1], instance, version, bound, error.validator_value),
            "use a value %s %s" % (bound, error.validator_value),
            "out-of-range",
        )
        return
    if error.validator == "type":
        findings.error(
            epath,
            "%s=%r has the wrong type for vLLM %s: expected %s"
            % (epath.split(".", 1)[-1], instance, version, error.validator_value),
            "write it as a %s (no quotes around numbers and booleans)" % error.validator_value,
            "wrong-type",
        )
        return
    findings.error(
        epath, "%s (vLLM %s)" % (error.message, version), "fix the value", "profile-" + str(error.validator)
    )


def _lookup_bounds(cfg, ctx, findings, path):
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    if isinstance(lo, int) and isinstance(hi, int) and not isinstance(lo, bool) and lo > hi:
        findings.error(
            path_join(path, "prompt_lookup_min"),
            "prompt_lookup_min=%d must be <= prompt_lookup_max=%d (vLLM %s)" % (lo, hi, _ctx_version(ctx)),
            "lower prompt_lookup_min or raise prompt_lookup_max",
            "lookup-min-gt-max",
        )


def _synthetic(cfg, ctx, findings, path):
    nst = cfg.get("num_speculative_tokens")
    rates = cfg.get("synthetic_acceptance_rates")
    version = _ctx_version(ctx)
    if isinstance(rates, list) and all(
        isinstance(r, (int, float)) and not isinstance(r, bool) for r in rates
    ):
        if isinstance(nst, int) and len(rates) != nst:
            findings.error(
                path_join(path, "synthetic_acceptance_rates"),
                "synthetic_acceptance_rates has %d entries but num_speculative_tokens=%d (vLLM %s)"
                % (len(rates), nst, version),
                "give exactly one rate per speculative token",
                "synthetic-length",
            )
        if any(b > a for a, b in zip(rates, rates[1:])):
            findings.error(
                path_join(path, "synthetic_acceptance_rates"),
                "synthetic_acceptance_rates %r must be non-increasing (they are unconditional rates of "
                "accepting the first i+1 tokens; vLLM %s)" % (rates, version),
                "sort the rates from high to low",
                "synthetic-order",
            )
    length = cfg.get("synthetic_acceptance_length")
    if (
        isinstance(length, (int, float))
        and not isinstance(length, bool)
        and isinstance(nst, int)
        and length > nst + 1
    ):
        findings.error(
            path_join(path, "synthetic_acceptance_length"),
            "synthetic_acceptance_length=%r must be in [1, num_speculative_tokens + 1 = %d] (vLLM %s)"
            % (length, nst + 1, version),
            "lower it to at most %d" % (nst + 1),
            "synthetic-range",
        )


# The release from which vLLM drops the batch-size schedule under data parallelism: vLLM 0.26.0
# vllm/config/vllm.py VllmConfig._maybe_disable_dynamic_sd_for_data_parallel (called from
# __post_init__) sets num_speculative_tokens_per_batch_size = None when data_parallel_size > 1. The
# key itself exists from 0.24.0 (vllm/config/speculative.py SpeculativeConfig; vllm/v1/core/sched/
# scheduler.py Scheduler.__init__ builds the lookup with build_dynamic_sd_schedule_lookup); 0.24.0 and
# 0.25.1 have no such guard and run the schedule on every rank (wheels of vllm 0.23.0, 0.24.0, 0.25.1
# and 0.26.0 read on 2026-11-28). The "since 0.26" is this guard's release, not the key's.
PER_BATCH_DP_DROPPED_SINCE = "0.26.0"


def per_batch_dp_note(version, dp, k):
    """What vLLM ``version`` (a parsed tuple, or None) does with a batch-size schedule under
    ``--data-parallel-size`` ``dp`` > 1; ``k`` is the static num_speculative_tokens."""
    if version is not None and version < parse_version(PER_BATCH_DP_DROPPED_SINCE):
        return (
            "data_parallel_size=%s: this vLLM keeps the batch-size schedule on every data-parallel rank, "
            "where ranks may pick different k in one step and diverge or deadlock (vLLM %s and later "
            "drop the schedule under data parallelism and run num_speculative_tokens=%s)"
            % (dp, PER_BATCH_DP_DROPPED_SINCE, k)
        )
    return (
        "data_parallel_size=%s: vLLM drops the batch-size schedule under data parallelism and runs "
        "num_speculative_tokens=%s at every batch size" % (dp, k)
    )


def _per_batch_dp(cfg, ctx, findings, path):
    """vllm/config/vllm.py VllmConfig._maybe_disable_dynamic_sd_for_data_parallel: with
    data_parallel_size > 1 vLLM (0.26.0+) drops the schedule and runs the static num_speculative_tokens."""
    dp = render.extra_arg(ctx.get("extra_args"), "--data-parallel-size")
    if dp and dp.isdigit() and int(dp) > 1:
        findings.warning(
            path_join(path, "num_speculative_tokens_per_batch_size"),
            "%s (vLLM %s)"
            % (
                per_batch_dp_note(ctx.get("version"), dp, cfg.get("num_speculative_tokens")),
                _ctx_version(ctx),
            ),
            "run one data-parallel rank per replica (scale with replicas), or set num_speculative_tokens "
            "to the k that suits the load",
            "per-batch-dropped-by-dp",
        )


def _per_batch(cfg, ctx, findings, path):
    table = cfg.get("num_speculative_tokens_per_batch_size")
    if not isinstance(table, list):
        return
    _per_batch_dp(cfg, ctx, findings, path)
    for i, row in enumerate(table):
        if (
            isinstance(row, list)
            and len(row) == 3
            and all(isinstance(v, int) for v in row)
            and row[0] > row[1]
        ):
            findings.error(
                path_join(path, "num_speculative_tokens_per_batch_size", i),
                "batch-size range %r starts after it ends (vLLM %s)" % (row, _ctx_version(ctx)),
                "write [first_batch_size, last_batch_size, num_tokens] with first <= last",
                "per-batch-range",
            )


def method_in_scope(method, scope):
    """Whether a key whose effect is limited to ``scope`` (methods, x-methods) applies to ``method``."""
    return (
        method in scope
        or ("mtp" in scope and vp.is_mtp_method(method))
        or (method == "[ngram]" and "ngram" in scope)
    )


def _method_scoped_keys(cfg, ctx, findings, path):
    method = cfg.get("method")
    props = ctx["profile"]["properties"]
    if method not in ctx["profile"]["x-specpilot"]["methods"]:
        return
    for key in cfg:
        scope = props.get(key, {}).get("x-methods")
        if not scope or not isinstance(method, str):
            continue
        if not method_in_scope(method, scope):
            findings.warning(
                path_join(path, key),
                "'%s' has no effect with method '%s' (it applies to %s; vLLM %s)"
                % (key, method, ", ".join(scope), _ctx_version(ctx)),
                "remove it",
                "key-without-effect",
            )


def _method_semantics(cfg, ctx, findings, path):
    method, x, version = _rule_inputs(cfg, ctx)
    if not isinstance(method, str) or method not in x["methods"]:
        return
    info = x["methods"][method]
    if info["model"] == "none" and cfg.get("model") is not None:
        findings.warning(
            path_join(path, "model"),
            "method '%s' uses no draft model; model=%r is ignored (vLLM %s)"
            % (method, cfg.get("model"), version),
            "remove speculative.model (and specpilot_draft)",
            "model-ignored",
        )
    listed_from = x.get("unlisted_methods", {}).get(method)
    if listed_from:
        findings.warning(
            path_join(path, "method"),
            "method '%s' works in vLLM %s only because the method is not checked there; it becomes an "
            "official method value in %s" % (method, version, listed_from),
            "prefer vLLM >= %s for %s" % (listed_from, method),
            "method-unlisted",
        )
    if method == "[ngram]" and x["ngram_brackets_method"]:
        findings.warning(
            path_join(path, "method"),
            "method '[ngram]' is the old spelling; vLLM 0.9.1 and later reject it",
            "use method: ngram",
            "ngram-brackets",
        )
    if vp.is_mtp_method(method) and method != "mtp" and x["deprecated_methods_to_mtp"]:
        findings.warning(
            path_join(path, "method"),
            "method '%s' is deprecated in vLLM %s and rewritten to 'mtp' with a warning" % (method, version),
            "use method: mtp",
            "deprecated-mtp-name",
        )
    if info["mtp"] and x["mtp_multi_token_warning"]:
        _mtp_multi_token(cfg, ctx, version, findings, path)
    if x["era"] == vp.ERA_V0_FLAGS:
        _v0_semantics(cfg, ctx, findings, path)
    if x["render"] == "literal-eval-json":
        _literal_eval_values(cfg, findings, path)


def _mtp_multi_token(cfg, ctx, version, findings, path):
    """More than one speculative token on a checkpoint with (probably) one MTP layer."""
    nst = cfg.get("num_speculative_tokens")
    layers = (ctx.get("target") or {}).get("num_nextn_predict_layers")
    if isinstance(nst, int) and nst > 1 and (layers is None or layers <= 1):
        findings.warning(
            path_join(path, "num_speculative_tokens"),
            "num_speculative_tokens=%d with MTP runs the %s MTP layer %d times per step, which "
            "usually lowers the acceptance rate (vLLM %s warns about it)"
            % (nst, "single" if layers == 1 else "(probably single)", nst, version),
            "use num_speculative_tokens: 1 unless the checkpoint has %d MTP layers" % nst,
            "mtp-multi-token",
        )


def _literal_eval_values(cfg, findings, path):
    """vLLM 0.8.2 reads the config with ast.literal_eval: JSON true, false and null do not parse."""
    for key, value in cfg.items():
        if isinstance(value, bool) or value is None:
            findings.error(
                path_join(path, key),
                "vLLM 0.8.2 parses --speculative-config with ast.literal_eval, so the JSON value %s "
                "of '%s' is not accepted" % (json.dumps(value), key),
                "remove '%s' (use its default) or use vLLM >= 0.8.3" % key,
                "literal-eval",
            )


def _v0_semantics(cfg, ctx, findings, path):
    method, x, version = _rule_inputs(cfg, ctx)
    draft = ctx.get("draft") or {}
    target = ctx.get("target") or {}
    if method == "deepseek_mtp":
        if cfg.get("model") is not None:
            findings.error(
                path_join(path, "model"),
                "with the V0 flags of vLLM %s, DeepSeek-V3 MTP uses the target itself; a separate model "
                "is not accepted" % version,
                "remove speculative.model and specpilot_draft",
                "v0-mtp-model",
            )
        if target.get("model_type") not in (None, "deepseek_v3"):
            findings.error(
                path_join(path, "method"),
                "vLLM %s supports MTP only for DeepSeek-V3 targets (target model_type %r)"
                % (version, target.get("model_type")),
                "use vLLM >= 0.11.0 with method mtp",
                "v0-mtp-target",
            )
    expected = {"eagle": "eagle", "medusa": "medusa", "mlp_speculator": "mlp_speculator"}.get(method)
    if expected and draft.get("model_type") not in (None, expected):
        findings.error(
            path_join(path, "method"),
            "vLLM %s has no method setting: it picks the draft kind from the draft's model_type, which is "
            "%r, not %r" % (version, draft.get("model_type"), expected),
            "use a draft checkpoint converted to model_type '%s'" % expected,
            "v0-draft-kind",
        )
    preflight_rules.check_chunked_prefill(
        cfg, dict(ctx, chunked_profile=x["chunked_prefill"]), findings, path
    )


def _async_scheduling(cfg, ctx, findings, path):
    method, x, version = _rule_inputs(cfg, ctx)
    policy = x["async_scheduling"]
    requested = ctx.get("async_requested")
    info = x["methods"].get(method) if isinstance(method, str) else None
    if policy == "none" or info is None:
        return
    if policy == "error-if-requested":
        if requested:
            findings.error(
                "vllm_args",
                "vLLM %s raises 'speculative decoding is not supported with async "
                "scheduling' when --async-scheduling is set" % version,
                "drop async scheduling for this service",
                "async-scheduling-conflict",
            )
        return
    if policy == "disabled-if-requested":
        if requested:
            findings.warning(
                "vllm_args",
                "vLLM %s disables async scheduling when speculative decoding is on" % version,
                "drop --async-scheduling or measure the trade-off",
                "async-scheduling-disabled",
            )
        return
    if not info["keeps_async_scheduling"]:
        if requested and policy.endswith("error-if-requested"):
            findings.error(
                "vllm_args",
                "vLLM %s refuses --async-scheduling with %s-based speculative decoding" % (version, method),
                "drop --async-scheduling, or use an EAGLE/MTP method",
                "async-scheduling-conflict",
            )
        else:
            findings.warning(
                path_join(path, "method"),
                "%s-based speculative decoding turns async scheduling off in vLLM %s, which costs "
                "throughput" % (method, version),
                "measure against the baseline, or use a method that keeps it (EAGLE/EAGLE-3/MTP%s); "
                "acknowledge with acknowledged_warnings: [async-scheduling-disabled]"
                % (", ngram_gpu" if "ngram_gpu" in x["methods"] else ""),
                "async-scheduling-disabled",
            )
    if cfg.get("disable_padded_drafter_batch") is True and version_ge(ctx, "0.14.1"):
        findings.warning(
            path_join(path, "disable_padded_drafter_batch"),
            "disable_padded_drafter_batch=true turns async scheduling off in vLLM %s" % version,
            "remove it unless the attention backend needs it",
            "async-scheduling-disabled",
        )


PP_FIELD = "vllm_args.pipeline_parallel_size"


def _pp_route(facts, ctx):
    route = facts["default"]
    alt = facts.get("v1_backends")
    if alt and render.extra_arg(ctx.get("extra_args"), "--distributed-executor-backend") in alt["backends"]:
        route = alt
    return route


def _pp_fix(facts, route, path):
    fix = (
        "set %s to 1 (spread the target with tensor_parallel_size instead), or turn speculative decoding off "
        "(%s: null)" % (PP_FIELD, path)
    )
    alt = facts.get("v1_backends")
    if alt and route is not alt:
        fix += (
            "; this release runs ngram, eagle, eagle3, deepseek_mtp and medusa on the V1 engine only with "
            "--distributed-executor-backend=%s in extra_args" % "|".join(alt["backends"])
        )
    return fix


def _pipeline_parallel(cfg, ctx, findings, path):
    """Speculative decoding with vllm_args.pipeline_parallel_size > 1 (see vllm_profiles._pp_policy)."""
    pp = ctx.get("target_pp") or 1
    x = ctx["profile"]["x-specpilot"]
    facts = x.get("pipeline_parallel")
    method = cfg.get("method")
    if pp <= 1 or not facts or not isinstance(method, str):
        return
    version = _ctx_version(ctx)
    route = _pp_route(facts, ctx)
    # "others": a method the release does not list (reported as such already), taking the fallback route
    why = route["refused"].get(method) if method in x["methods"] else route["others"]
    if cfg.get("enable_adaptive_verification") is True and facts.get("adaptive_verification"):
        why = why or facts["adaptive_verification"]
    head = "%s=%d with speculative method '%s': " % (PP_FIELD, pp, method)
    if why:
        findings.error(
            PP_FIELD,
            head + "vLLM %s refuses it at start-up: %s" % (version, why),
            _pp_fix(facts, route, path),
            "pp-spec-refused",
        )
        return
    findings.warning(
        PP_FIELD,
        head + facts["accepted"].format(version=version),
        "prefer %s=1 with tensor_parallel_size; or verify it on the runtime image and acknowledge with "
        "acknowledged_warnings: [pp-spec-unverified]" % PP_FIELD,
        "pp-spec-unverified",
    )


def version_ge(ctx, label):
    return ctx["version"] >= parse_version(label)


def check(cfg, ctx, findings, path="speculative"):
    """Validate ``cfg`` (already resolved: model filled in) for ctx's profile.

    ctx: version (tuple), version_label, profile, target_tp, async_requested,
    extra_args, target, draft (fact dicts).  Errors and warnings go to ``findings``.

    A release that was not examined is judged against the basis profile (the newest examined
    release before it) and, where that differs from the next examined release's profile,
    against that one too.  What only one of the two refuses may have changed in this very
    release (a method or key that arrived in a patch release), so it is not refused: it is a
    warning that names both profiles (the safe side).  What both refuse stays an error.
    """
    nxt = vp.next_profile(tuple(ctx["version"])) if ctx.get("version") is not None else None
    if nxt is None or ctx.get("profile", {}).get("x-specpilot", {}).get("profile") == nxt[0].get(
        "x-specpilot", {}
    ).get("profile"):
        _check(cfg, ctx, findings, path)
        return
    other, other_label = nxt
    mine, theirs = _Scratch(), _Scratch()
    _check(cfg, ctx, mine, path)
    _check(cfg, dict(ctx, profile=other), theirs, path)
    basis = ctx["profile"]["x-specpilot"]
    used = "%s (examined: %s)" % (basis["profile"], ", ".join(basis["examined"]))
    their_errors = {(e["path"], e["code"]) for e in theirs.errors}
    my_errors = {(e["path"], e["code"]) for e in mine.errors}
    for e in mine.errors:
        if (e["path"], e["code"]) in their_errors:
            findings.error(e["path"], e["message"], e["hint"], e["code"])
        else:
            findings.warning(
                e["path"],
                "%s; but vLLM %s was not examined: this verdict comes from profile %s, and the next "
                "examined release %s accepts it, so the change may have landed in %s itself"
                % (e["message"], ctx["version_label"], used, other_label, ctx["version_label"]),
                "check it on the runtime image, or use an examined release; " + e["hint"],
                "vllm-unexamined-disagrees",
            )
    for e in theirs.errors:
        if (e["path"], e["code"]) not in my_errors:
            findings.warning(
                e["path"],
                "vLLM %s was not examined and is checked against profile %s, which accepts this; the "
                "next examined release %s refuses it: %s"
                % (ctx["version_label"], used, other_label, e["message"]),
                "check it on the runtime image, or use an examined release; " + e["hint"],
                "vllm-unexamined-disagrees",
            )
    for bucket, add in ((mine.warnings, findings.warning), (mine.notes, findings.note)):
        for e in bucket:
            add(e["path"], e["message"], e["hint"], e["code"])


class _Scratch(object):
    """A findings collector for one of the two verdicts of an unexamined release."""

    def __init__(self):
        self.errors, self.warnings, self.notes = [], [], []

    def error(self, path, message, hint, code):
        self.errors.append({"path": path, "message": message, "hint": hint, "code": code})

    def warning(self, path, message, hint, code):
        self.warnings.append({"path": path, "message": message, "hint": hint, "code": code})

    def note(self, path, message, hint, code):
        self.notes.append({"path": path, "message": message, "hint": hint, "code": code})

    def add(self, severity, path, message, hint, code):
        getattr(self, severity if severity in ("error", "warning", "note") else "error")(
            path, message, hint, code
        )


def _check(cfg, ctx, findings, path="speculative"):
    profile = ctx["profile"]
    ctx = dict(ctx, config=cfg)
    props = profile["properties"]
    known = {}
    for key, value in cfg.items():
        if key in props:
            known[key] = value
        else:
            _classify_extra_key(key, value, ctx, findings, path)
    for error in sorted(_validator(profile).iter_errors(known), key=lambda e: list(e.absolute_schema_path)):
        _translate(error, ctx, path, findings)
        if error.absolute_path:
            # reported: the checks below expect the types the schema promises
            known.pop(error.absolute_path[0], None)
    _lookup_bounds(known, ctx, findings, path)
    _synthetic(known, ctx, findings, path)
    preflight_rules.check_draft_tp(known, ctx, findings, path)
    _per_batch(known, ctx, findings, path)
    _method_scoped_keys(known, ctx, findings, path)
    _method_semantics(known, ctx, findings, path)
    _async_scheduling(known, ctx, findings, path)
    _pipeline_parallel(known, ctx, findings, path)
    x = profile["x-specpilot"]
    if x["min_p_logit_bias_ignored"]:
        findings.note(
            path,
            "under speculative decoding vLLM %s ignores the request parameters min_p and logit_bias%s"
            % (ctx["version_label"], " (and min_tokens)" if ctx["version"] < parse_version("0.17.1") else ""),
            "clients that rely on them get a 200 response without their effect",
            "min-p-logit-bias",
        )


def _flag_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_args(cfg, profile):
    """Engine arguments for a validated config: one list item per argument."""
    if not cfg:
        return []
    x = profile["x-specpilot"]
    if x["render"] != "v0-flags":
        return ["--speculative-config=" + compact_json(cfg)]
    args = []
    method = cfg.get("method")
    if method == "ngram":
        args.append("--speculative-model=[ngram]")
    elif cfg.get("model") is not None:
        args.append("--speculative-model=" + str(cfg["model"]))
    flags = x["v0_flags"]
    for key, value in cfg.items():
        if key in ("method", "model"):
            continue
        flag = flags.get(key)
        if flag is None:  # not expressible as a flag: reported as an error already
            continue
        if key == "disable_mqa_scorer":
            if value:
                args.append(flag)
            continue
        args.append("%s=%s" % (flag, _flag_value(value)))
    if x["requires_v2_block_manager"]:
        args.append("--use-v2-block-manager")
    return args
