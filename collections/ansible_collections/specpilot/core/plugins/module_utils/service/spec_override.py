# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Run-time overrides of the speculative method and num_speculative_tokens of a service spec.

``specpilot_override_method`` and ``specpilot_override_num_speculative_tokens`` (see
``spec.OVERRIDE_VARS``) are operational variables, typically extra variables of one run (an
AWX survey answer): they change the spec's ``speculative`` section for that run without
touching the inventory.  ``specpilot.core.spec_validate`` applies them before anything is
checked, so validate, deploy, smoke and benchmark all see the same effective spec and the same
plan (a deploy-only override would have smoke check a method that was never deployed).

``""`` or ``"spec"`` (the keep choice of an AWX multiple-choice question, which cannot be
empty) keeps the spec's method; ``0`` keeps its num_speculative_tokens.

When the method changes, the keys that only belong to the old method are dropped, so that a
valid spec stays valid: the keys whose effect the vLLM profile limits to some methods
(``x-methods``, e.g. prompt_lookup_* for ngram, suffix_decoding_* for suffix) and the keys
the profile's rules allow only with some methods (``if key is set then method in [...]``,
e.g. use_heterogeneous_vocab for draft_model), both read from the profile of the service's
vLLM release; and ``model``, which names the draft of the old method (specpilot fills it in
again from ``specpilot_draft``).  Keys common to all methods stay.  The spec's ``draft`` is
dropped too when the new method would not use it as what it is (ngram/suffix take none; an MTP
method must not load the old method's EAGLE head or draft model as its MTP weights).
"""

from __future__ import annotations

import difflib

from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import OVERRIDE_VARS
from ansible_collections.specpilot.core.plugins.module_utils.service.speculative import method_in_scope

__all__ = ["KEEP_METHOD", "apply", "method_scopes", "describe", "empty_record", "annotate"]

# Values of specpilot_override_method that keep the spec's method.
KEEP_METHOD = ("", "spec")

METHOD_VAR = OVERRIDE_VARS["method"]
NST_VAR = OVERRIDE_VARS["num_speculative_tokens"]
_PATH = {key: var[len("specpilot_") :] for key, var in OVERRIDE_VARS.items()}  # finding paths


def empty_record():
    """The record of a run without overrides."""
    return {
        "applied": False,
        "method": None,
        "num_speculative_tokens": None,
        "dropped_keys": [],
        "dropped_draft": False,
    }


def method_scopes(profile=None):
    """{key: set of methods} for the speculative keys that belong to some methods only.

    From the profile of a vLLM release: the keys' ``x-methods`` (no effect with other methods)
    and the rules ``if <key> is set then method in [...]`` (rejected with other methods).
    Without a profile (unknown release): the ``methods`` of the key table.
    """
    if profile is None:
        return {key: set(facts["methods"]) for key, facts in vp.KEYS.items() if facts.get("methods")}
    scopes = {}
    for key, schema in (profile.get("properties") or {}).items():
        if isinstance(schema, dict) and schema.get("x-methods"):
            scopes[key] = set(schema["x-methods"])
    for rule in profile.get("allOf") or ():
        key, allowed = _rule_scope(rule)
        if key is not None:
            scopes[key] = (scopes[key] & set(allowed)) if key in scopes else set(allowed)
    return scopes


def _rule_scope(rule):
    """(key, methods) of a rule ``if <key> is set then method in [...]``, else (None, None)."""
    cond, then = rule.get("if") or {}, rule.get("then") or {}
    required = cond.get("required") or []
    if len(required) != 1 or set(cond) - {"required", "properties"} or required[0] == "method":
        return None, None
    method = (then.get("properties") or {}).get("method") or {}
    allowed = method.get("enum") or ([method["const"]] if "const" in method else None)
    if allowed and "method" in (then.get("required") or ()):
        return required[0], allowed
    return None, None


def _parse_method(value, findings):
    if value is None:
        return None
    if not isinstance(value, str):
        findings.error(
            _PATH["method"],
            "%s=%r is not a method name" % (METHOD_VAR, value),
            "give a method name such as eagle3, or spec (or leave it empty) to keep the spec's method",
            "override-value",
        )
        return None
    value = value.strip()
    if value.lower() in KEEP_METHOD:
        return None
    return value


def _parse_nst(value, findings):
    if value is None:
        return None
    number = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        if not value.strip():
            return None
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if number is None or number < 0:
        findings.error(
            _PATH["num_speculative_tokens"],
            "%s=%r is not a whole number >= 0" % (NST_VAR, value),
            "give the number of speculative tokens (e.g. 4), or 0 to keep the spec's",
            "override-value",
        )
        return None
    return number or None  # 0 keeps the spec's


def _speculative_is_off(method, nst, where, findings):
    """An override of a spec whose speculative decoding is off: an error per variable set."""
    for key, value in (("method", method), ("num_speculative_tokens", nst)):
        if value is not None:
            findings.error(
                _PATH[key],
                "%s=%s: speculative decoding is off in %s (specpilot_speculative is null or not "
                "set), so there is no %s to override" % (OVERRIDE_VARS[key], value, where, key),
                "turn it on in the inventory (specpilot_speculative), or leave %s at %s"
                % (OVERRIDE_VARS[key], "spec" if key == "method" else "0"),
                "override-speculative-off",
            )


def _drop_other_keys(new, method, scopes):
    """Drop from ``new`` the draft model and the keys only other methods take; the keys dropped."""
    dropped = []
    for key in list(new):
        if key in ("method", "num_speculative_tokens") or new[key] is None:
            continue
        if key == "model" or (key in scopes and not method_in_scope(method, scopes[key])):
            dropped.append(key)
            del new[key]
    return dropped


def _switch_method(raw, cfg, new, method, nst, methods, profile, label, where, findings):
    """Switch ``new`` (a copy of the spec's config) to ``method``: drop the keys the new method does not
    take.  Returns (dropped keys, whether the spec's draft no longer serves), or None after an error."""
    old_method = cfg.get("method")
    if methods is not None and method not in methods:
        close = difflib.get_close_matches(method, list(methods), n=1, cutoff=0.6)
        findings.error(
            _PATH["method"],
            "%s=%r is not a speculative method of %s (the runtime of %s)"
            % (METHOD_VAR, method, label, where),
            "%suse spec to keep the spec's method (%s), or one of: %s"
            % ("did you mean %s? " % close[0] if close else "", old_method, ", ".join(sorted(methods))),
            "override-method-unknown",
        )
        return None
    info = (methods or {}).get(method) or vp.method_info(method)
    new["method"] = method
    dropped = _drop_other_keys(new, method, method_scopes(profile))
    # The spec's draft serves the new method only if it needs a separate draft too (the compatibility
    # checks then judge it), or if both take optional weights of the same kind (MTP -> MTP); an MTP,
    # ngram or suffix method must not load the old method's EAGLE head or draft model.
    old_name = old_method if isinstance(old_method, str) else ""  # the schema reports any other type
    old_info = (methods or {}).get(old_name) or vp.method_info(old_name)
    drop_draft = bool(raw.get("draft")) and (
        info["model"] == "none" or (info["model"] == "optional" and old_info["model"] != "optional")
    )
    if info["model"] == "required" and not raw.get("draft"):
        findings.error(
            _PATH["method"],
            "%s=%s needs specpilot_draft (the method's %s, delivered with the target), and %s has "
            "none%s"
            % (
                METHOD_VAR,
                method,
                "EAGLE head" if method.startswith("eagle") else "draft model",
                where,
                (
                    " (speculative.model named the draft of method %s)" % old_method
                    if "model" in dropped
                    else ""
                ),
            ),
            "describe the draft in specpilot_draft, choose a method that needs none (ngram, suffix, "
            "mtp), or keep the spec's method (%s=spec)" % METHOD_VAR,
            "override-needs-draft",
        )
        return None
    if info["num_speculative_tokens_required"] and nst is None and new.get("num_speculative_tokens") is None:
        findings.error(
            _PATH["method"],
            "%s=%s needs num_speculative_tokens, and the speculative config of %s (method %s) has none"
            % (METHOD_VAR, method, where, old_method),
            "set %s as well (3 to 5 is a usual start)" % NST_VAR,
            "override-needs-num-speculative-tokens",
        )
        return None
    return dropped, drop_draft


def apply(raw, method_value, nst_value, profile, findings, version_label=None):
    """Apply the overrides to ``raw["speculative"]`` (in place).  Returns the record.

    record: {applied, method, num_speculative_tokens, dropped_keys}; method and
    num_speculative_tokens are None or {variable, value, spec} (spec: the value the spec
    gives).  An override that cannot apply is reported as an error naming its variable and
    leaves the spec as it is.
    """
    record = empty_record()
    method = _parse_method(method_value, findings)
    nst = _parse_nst(nst_value, findings)
    if method is None and nst is None:
        return record
    cfg = raw.get("speculative")
    where = _where(raw)
    if cfg is None:
        _speculative_is_off(method, nst, where, findings)
        return record
    if not isinstance(cfg, dict) or not cfg:
        return record  # not a config (schema error) or an empty one (reported by the validator)
    methods = ((profile or {}).get("x-specpilot") or {}).get("methods")
    label = "vLLM %s" % version_label if version_label else "this vLLM release"
    old_method = cfg.get("method")
    new = dict(cfg)
    dropped = []
    drop_draft = False
    if method is not None and method != old_method:
        switched = _switch_method(raw, cfg, new, method, nst, methods, profile, label, where, findings)
        if switched is None:
            return record
        dropped, drop_draft = switched
    if method is not None:
        record["method"] = {"variable": METHOD_VAR, "value": method, "spec": old_method}
    if nst is not None:
        record["num_speculative_tokens"] = {
            "variable": NST_VAR,
            "value": nst,
            "spec": cfg.get("num_speculative_tokens"),
        }
        new["num_speculative_tokens"] = nst
    record["dropped_keys"] = sorted(dropped)
    record["dropped_draft"] = drop_draft
    record["applied"] = new != cfg or drop_draft
    raw["speculative"] = new
    if drop_draft:
        raw["draft"] = None
    if record["applied"]:
        _note_applied(record, findings)
    return record


def _where(raw):
    """How the messages name the spec: with its name when it has one."""
    name = raw.get("name") if isinstance(raw.get("name"), str) else None
    return "the spec%s" % (" of %s" % name if name else "")


def _note_applied(record, findings):
    findings.note(
        _PATH["method"] if record["method"] else _PATH["num_speculative_tokens"],
        describe(record),
        "the inventory is unchanged: write the values into specpilot_speculative to keep them",
        "spec-override",
    )


def describe(record):
    """One line: what the overrides changed."""
    parts = []
    for key in ("method", "num_speculative_tokens"):
        entry = record.get(key)
        if entry:
            parts.append(
                "%s=%s %s the spec's %s%s"
                % (
                    entry["variable"],
                    entry["value"],
                    "keeps" if entry["value"] == entry["spec"] else "replaces",
                    key,
                    "" if entry["spec"] is None else " (%s)" % entry["spec"],
                )
            )
    text = "speculative config overridden for this run: " + "; ".join(parts)
    if record.get("dropped_keys"):
        text += "; dropped the keys of the spec's method: %s" % ", ".join(record["dropped_keys"])
    if record.get("dropped_draft"):
        text += "; specpilot_draft (the draft of the spec's method) is not used and not delivered"
    return text


# Findings under these spec fields can follow from the method: they name the overrides in use.
_METHOD_DEPENDENT = ("speculative", "draft", "target", "delivery")


def annotate(record, findings_lists):
    """Errors and warnings about the speculative config (and the draft, target and delivery checks
    that depend on its method) name the overrides it was built with."""
    if not record or not record.get("applied"):
        return
    used = ", ".join(
        "%s=%s" % (record[key]["variable"], record[key]["value"])
        for key in ("method", "num_speculative_tokens")
        if record.get(key)
    )
    suffix = " [speculative config with %s]" % used
    for bucket in findings_lists:
        for item in bucket:
            root = (item.get("path") or "").split(".", 1)[0].split("[", 1)[0]
            if root in _METHOD_DEPENDENT and not item["message"].endswith(suffix):
                item["message"] += suffix
