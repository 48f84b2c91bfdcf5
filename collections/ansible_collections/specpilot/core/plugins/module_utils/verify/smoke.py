# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The smoke verdict: is speculative decoding running as planned, and is it paying off?

Inputs are what the smoke role gathered for one service (the plan of
``specpilot.core.spec_validate``, the InferenceService and predictor pod, the facts of
``specpilot.core.vllm_log_facts`` for the whole engine log and for the lines after the
probes started, ``specpilot.core.vllm_metrics_facts`` before and after the probes, and
the probe results of ``specpilot.core.smoke_probe``). :func:`evaluate` turns them into a
list of checks and a verdict; :mod:`verify.smoke_report` makes the per-service report from it.

Thresholds and readings follow the seed guides: below about 0.5 acceptance speculative
decoding adds latency, 0.5 to 0.65 is borderline, above 0.65 it likely helps; the mean
acceptance length is the practical ceiling of the speedup; a per-position curve that
collapses to near zero by the 2nd slot means the workload does not fit the proposer.
"""

from __future__ import annotations

import json

from ansible_collections.specpilot.core.plugins.module_utils.verify import pod_view
from ansible_collections.specpilot.core.plugins.module_utils.service import live, llmisvc, render, spec_flags
from ansible_collections.specpilot.core.plugins.module_utils.operate.acceptance_band import band_reading
from ansible_collections.specpilot.core.plugins.module_utils.common import get_path, with_defaults
from ansible_collections.specpilot.core.plugins.module_utils.verify.smoke_acceptance import (
    _acceptance_checks,
    _acceptance_shape_checks,
    _log_window_checks,
    _metrics_checks,
    figures,
    interpretation,
)
from ansible_collections.specpilot.core.plugins.module_utils.verify.smoke_schedule import (
    _running_checks,
    _schedule_checks,
)
from ansible_collections.specpilot.core.plugins.module_utils.verify.smoke_checks import (
    _check,
    _fmt,
    _number_or_none,
)

REPORT_FORMAT = 1
VERDICTS = ("pass", "warn", "fail")
STATUS_RANK = {"pass": 0, "info": 0, "skip": 0, "warn": 1, "fail": 2}
EXPECT_MODES = ("on", "off")

DEFAULT_THRESHOLDS = {
    "min_acceptance_rate": 0.5,
    "warn_acceptance_rate": 0.65,
    "min_mean_acceptance_length": None,
    "collapse_position": 2,
    "collapse_threshold": 0.05,
    "cross_check_tolerance": 0.05,
}

NO_DRAFT_METHODS = ("ngram", "ngram_gpu", "suffix")


def _details(cmp):
    return {k: v for k, v in cmp.items() if k != "status"}


def thresholds(values=None):
    """DEFAULT_THRESHOLDS updated with ``values`` (None values keep the default), validated."""
    out = with_defaults(DEFAULT_THRESHOLDS, values, "threshold")
    for key in ("min_acceptance_rate", "warn_acceptance_rate", "collapse_threshold", "cross_check_tolerance"):
        val = _number_or_none(out[key])
        if val is None or not 0.0 <= val <= 1.0:
            raise ValueError("%s must be a number between 0 and 1, got %r" % (key, out[key]))
        out[key] = val
    if out["warn_acceptance_rate"] < out["min_acceptance_rate"]:
        raise ValueError(
            "warn_acceptance_rate (%s) must not be below min_acceptance_rate (%s)"
            % (out["warn_acceptance_rate"], out["min_acceptance_rate"])
        )
    if out["min_mean_acceptance_length"] is not None:
        mal = _number_or_none(out["min_mean_acceptance_length"])
        if mal is None or mal < 1.0:
            raise ValueError(
                "min_mean_acceptance_length must be >= 1, got %r" % out["min_mean_acceptance_length"]
            )
        out["min_mean_acceptance_length"] = mal
    pos = out["collapse_position"]
    if isinstance(pos, bool) or not isinstance(pos, int) or pos < 1:
        raise ValueError("collapse_position must be an integer >= 1, got %r" % pos)
    return out


# --------------------------------------------------------------------------- arguments


def is_spec_flag(flag):
    """Whether a command-line flag (without its value) configures speculative decoding (spec_flags)."""
    return spec_flags.is_speculative(flag)


def spec_args(args):
    """The speculative arguments in ``args``, each as one ``flag=value`` (or bare ``flag``) item,
    whether written ``--flag=value`` or ``--flag value`` (``spec_flags.flag_value_items``)."""
    return spec_flags.flag_value_items(args)


def _arg_present(item, args):
    if item in args:
        return True
    if "=" in item:
        flag, value = item.split("=", 1)
        return any(a == flag and i + 1 < len(args) and args[i + 1] == value for i, a in enumerate(args))
    return False


def _json_equal(a, b):
    fa, va = a.split("=", 1) if "=" in a else (a, None)
    fb, vb = b.split("=", 1) if "=" in b else (b, None)
    if fa != fb or va is None or vb is None:
        return False
    try:
        return json.loads(va) == json.loads(vb)
    except ValueError:
        return False


def _split_planned(planned, expect):
    """(the planned speculative arguments, the other planned arguments); none when speculation is expected off."""
    if expect != "on":
        return [], []
    planned_spec = [p for p in (planned or []) if is_spec_flag(str(p).split("=", 1)[0])]
    return planned_spec, [p for p in (planned or []) if p not in planned_spec]


def _pair_equivalent(missing, unexpected):
    """Take each missing planned argument that an unexpected one equals as JSON out of both lists; the pairs."""
    equivalent = []
    for m in list(missing):
        twin = next((u for u in unexpected if _json_equal(m, u)), None)
        if twin is not None:
            equivalent.append({"planned": m, "found": twin})
            missing.remove(m)
            unexpected.remove(twin)
    return equivalent


def _missing_required(required, other_planned, actual):
    """The required (non-speculative) and other planned arguments that ``actual`` lacks."""
    required = [r for r in (required or []) if not is_spec_flag(str(r).split("=", 1)[0])]
    return [
        r
        for r in required + [o for o in other_planned if o not in required]
        if not _arg_present(str(r), actual)
    ]


def compare_args(planned, actual, expect="on", required=None):
    """Compare the speculative arguments of ``actual`` with ``planned`` (the plan's
    ``speculative_args``). ``required`` are further planned arguments that must be present.

    Returns {status, missing, unexpected, equivalent, found, missing_required}."""
    actual = [str(a) for a in (actual or [])]
    found = spec_args(actual)
    planned_spec, other_planned = _split_planned(planned, expect)
    missing = [p for p in planned_spec if p not in found]
    unexpected = [f for f in found if f not in planned_spec]
    equivalent = _pair_equivalent(missing, unexpected)
    missing_required = _missing_required(required, other_planned, actual)
    if missing or unexpected or missing_required:
        status = "fail"
    else:
        status = "warn" if equivalent else "pass"
    return {
        "status": status,
        "missing": missing,
        "unexpected": unexpected,
        "equivalent": equivalent,
        "found": found,
        "missing_required": missing_required,
    }


def isvc_args(isvc):
    """The vLLM arguments the InferenceService asks for (its live view's command line)."""
    return live.view(isvc).command_line


def pod_container(pod, container="kserve-container"):
    for c in get_path(pod, "spec", "containers") or []:
        if c.get("name") == container:
            return c
    return None


def pod_args(pod, container="kserve-container"):
    """The container's command and args; an LLMInferenceService's ``main`` container's args as vLLM gets them
    (the ``$@`` of its template's eval, service/llmisvc.py ``engine_words``)."""
    c = pod_container(pod, container) or {}
    args = llmisvc.engine_words(c.get("args")) if container == llmisvc.CONTAINER else (c.get("args") or [])
    return [str(a) for a in (c.get("command") or []) + list(args)]


def _condition(obj, ctype):
    for c in get_path(obj, "status", "conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def _container_status(pod, container):
    for c in get_path(pod, "status", "containerStatuses") or []:
        if c.get("name") == container:
            return c
    return {}


def _args_message(what, cmp, expect):
    parts = []
    if cmp["missing"]:
        parts.append("missing %s" % ", ".join(cmp["missing"]))
    if cmp["unexpected"]:
        parts.append(
            "%s %s"
            % ("speculative flags present" if expect == "off" else "unexpected", ", ".join(cmp["unexpected"]))
        )
    if cmp["missing_required"]:
        parts.append("planned arguments missing: %s" % ", ".join(cmp["missing_required"]))
    if cmp["equivalent"]:
        parts.append("same config, different spelling: %s" % ", ".join(e["found"] for e in cmp["equivalent"]))
    if not parts:
        if expect == "off":
            return "%s carries no speculative-decoding flag" % what
        return "%s carries the planned %s exactly" % (what, ", ".join(cmp["found"]) or "arguments")
    return "%s: %s" % (what, "; ".join(parts))


# --------------------------------------------------------------------------- engine config


def _method_matches(planned, logged):
    if planned == logged:
        return True
    if planned and logged == "mtp" and planned.endswith("_mtp"):
        return True  # vLLM >= 0.11 rewrites deprecated *_mtp names to mtp
    return False


def unalias(path, aliases=None):
    """A path the engine printed, with a prefix it sees differently from the pod spec (``aliases``:
    {seen prefix: path in the pod}) put back; other paths unchanged."""
    if path is None or not aliases:
        return path
    text = str(path)
    for seen in sorted(aliases, key=len, reverse=True):
        base = seen.rstrip("/")
        if base and (text == base or text.startswith(base + "/")):
            return str(aliases[seen]).rstrip("/") + text[len(base) :]
    return text


def compare_engine_config(plan_cfg, logged, aliases=None):
    """Differences between the planned speculative config and the resolved one of the
    engine-init line: list of strings (empty when they match). ``aliases`` maps path prefixes
    the engine sees to the pod's (see :func:`unalias`)."""
    diffs = []
    plan_cfg = plan_cfg or {}
    logged = dict(logged or {})
    logged["model"] = unalias(logged.get("model"), aliases)
    method = plan_cfg.get("method")
    if (
        logged.get("method") is not None
        and method is not None
        and not _method_matches(method, logged["method"])
    ):
        diffs.append("method %s (planned %s)" % (logged["method"], method))
    planned_model = plan_cfg.get("model")
    if planned_model is not None and method not in NO_DRAFT_METHODS:
        got = logged.get("model")
        if got is None or str(got).rstrip("/") != str(planned_model).rstrip("/"):
            diffs.append("draft model %s (planned %s)" % (got, planned_model))
    k = plan_cfg.get("num_speculative_tokens")
    if (
        k is not None
        and logged.get("num_spec_tokens") is not None
        and int(logged["num_spec_tokens"]) != int(k)
    ):
        diffs.append("num_spec_tokens %s (planned %s)" % (logged["num_spec_tokens"], k))
    return diffs


# --------------------------------------------------------------------------- the verdict


def _plan_checks(ctx):
    """The plan itself: expect=on needs a speculative config."""
    expect, plan_cfg = ctx["expect"], ctx["plan_cfg"]
    checks = []
    if expect == "on" and not plan_cfg:
        checks.append(
            _check(
                "plan",
                "fail",
                "Plan",
                "expect is 'on' but the plan has no speculative config: nothing to check",
            )
        )

    return checks


def _inferenceservice_checks(ctx):
    """The InferenceService: Ready, and its args against the plan."""
    expect, container, plan, isvc = ctx["expect"], ctx["container"], ctx["plan"], ctx["isvc"]
    checks = []
    if isvc is None:
        checks.append(
            _check(
                "inferenceservice",
                "fail",
                "InferenceService",
                "InferenceService %s/%s not found" % (plan.get("namespace"), plan.get("name")),
            )
        )
    else:
        ready = _condition(isvc, "Ready") or {}
        if ready.get("status") == "True":
            checks.append(_check("inferenceservice", "pass", "InferenceService", "Ready"))
        else:
            checks.append(
                _check(
                    "inferenceservice",
                    "fail",
                    "InferenceService",
                    "not Ready: %s" % (ready.get("message") or ready.get("reason") or "no Ready condition"),
                )
            )
        cmp = compare_args(plan.get("speculative_args"), isvc_args(isvc), expect)
        checks.append(
            _check(
                "isvc_args",
                cmp["status"],
                "InferenceService arguments",
                _args_message("the InferenceService", cmp, expect),
                **_details(cmp),
            )
        )

    return checks


def _pod_checks(ctx):
    """The predictor pod: ready, restarts, and its args against the plan."""
    expect, container, plan, pod, pod_name = (
        ctx["expect"],
        ctx["container"],
        ctx["plan"],
        ctx["pod"],
        ctx["pod_name"],
    )
    checks = []
    if pod is None:
        checks.append(_check("pod", "fail", "Predictor pod", "no predictor pod found"))
    else:
        cs = _container_status(pod, container)
        restarts = int(cs.get("restartCount") or 0)
        if cs.get("ready"):
            status, msg = "pass", "%s: %s Ready" % (pod_name, container)
        else:
            state = cs.get("state") or {}
            why = (
                (state.get("waiting") or {}).get("reason")
                or ("running" in state and "not ready")
                or "not started"
            )
            status, msg = "fail", "%s: %s is not ready (%s)" % (pod_name, container, why)
        if restarts and status == "pass":
            status, msg = "warn", msg + ", but restarted %d time(s)" % restarts
        elif restarts:
            msg += ", restarted %d time(s)" % restarts
        checks.append(_check("pod", status, "Predictor pod", msg, pod=pod_name, restarts=restarts))
        cmp = compare_args(
            plan.get("speculative_args"),
            pod_args(pod, container),
            expect,
            required=_placeholders(plan.get("args"), ctx["isvc"], plan) if expect == "on" else None,
        )
        checks.append(
            _check(
                "pod_args",
                cmp["status"],
                "Pod arguments",
                _args_message("pod %s" % pod_name, cmp, expect),
                **_details(cmp),
            )
        )

    return checks


def _placeholders(args, isvc, plan):
    """``args`` as the pod has them (render.in_pod), for the InferenceService the pod belongs to."""
    meta = (isvc or {}).get("metadata") or {}
    name, namespace = meta.get("name") or plan.get("name"), meta.get("namespace") or plan.get("namespace")
    return render.in_pod(args, name, namespace)


def _engine_start_checks(ctx):
    """The engine log: start errors, readiness, a failed previous instance."""
    log_facts, log_prev = ctx["log_facts"], ctx["log_prev"]
    checks = []
    if log_facts is None:
        why = ": %s" % ctx["log_error"] if ctx.get("log_error") else ""
        return [_check("engine_start", "fail", "Engine start", "the engine log could not be read%s" % why)]
    errors = [e for e in log_facts.get("log_errors") or [] if not e.get("after_shutdown")]
    if errors:
        checks.append(
            _check(
                "engine_start",
                "fail",
                "Engine start",
                "start errors in the engine log: %s"
                % "; ".join("%s: %s" % (e.get("code"), e.get("message")) for e in errors[:5]),
                errors=errors,
            )
        )
    elif not log_facts.get("ready"):
        checks.append(
            _check(
                "engine_start",
                "fail",
                "Engine start",
                "the engine log has no 'Application startup complete.' (not started yet?)",
            )
        )
    else:
        checks.append(
            _check(
                "engine_start",
                "pass",
                "Engine start",
                "started (vLLM %s, engine %s), no start errors"
                % (log_facts.get("vllm_version") or "?", log_facts.get("engine") or "?"),
            )
        )
    prev_errors = [e for e in (log_prev or {}).get("log_errors") or [] if not e.get("after_shutdown")]
    if prev_errors:
        checks.append(
            _check(
                "engine_previous",
                "warn",
                "Previous engine instance",
                "the previous container instance failed: %s"
                % "; ".join("%s: %s" % (e.get("code"), e.get("message")) for e in prev_errors[:3]),
                errors=prev_errors,
            )
        )

    return checks


def _engine_config_checks(ctx):
    """The engine-init line: speculative_config as the engine resolved it, and as the API server received it."""
    expect, plan_cfg, aliases, log_facts = ctx["expect"], ctx["plan_cfg"], ctx["aliases"], ctx["log_facts"]
    checks = []
    if log_facts is None:
        return []
    found = log_facts.get("speculative_config_found")
    logged = log_facts.get("speculative_config")
    if expect == "off":
        if found and logged is None:
            checks.append(
                _check(
                    "engine_config",
                    "pass",
                    "Engine speculative_config",
                    "speculative_config=None: speculative decoding is off",
                )
            )
        elif logged is not None:
            checks.append(
                _check(
                    "engine_config",
                    "fail",
                    "Engine speculative_config",
                    "the engine still runs speculative decoding: %s" % logged.get("repr"),
                )
            )
        else:
            checks.append(
                _check(
                    "engine_config",
                    "fail",
                    "Engine speculative_config",
                    "no engine-init line in the log: cannot confirm speculative_config=None",
                )
            )
    elif plan_cfg:
        if logged is None:
            checks.append(
                _check(
                    "engine_config",
                    "fail",
                    "Engine speculative_config",
                    (
                        "the engine logged speculative_config=None: speculative decoding is not " "running"
                        if found
                        else "no engine-init line with speculative_config in the log"
                    ),
                )
            )
        else:
            diffs = compare_engine_config(plan_cfg, logged, aliases)
            seen = logged.get("model")
            alias_note = ""
            if seen is not None and unalias(seen, aliases) != seen:
                alias_note = " (the engine sees %s as %s)" % (unalias(seen, aliases), seen)
            checks.append(
                _check(
                    "engine_config",
                    "fail" if diffs else "pass",
                    "Engine speculative_config",
                    (
                        ("the engine resolved %s: %s" % (logged.get("repr"), "; ".join(diffs)))
                        if diffs
                        else "%s matches the plan%s" % (logged.get("repr"), alias_note)
                    ),
                    logged=logged,
                )
            )
        requested = log_facts.get("requested_speculative_config")
        if isinstance(requested, dict) and "model" in requested:
            requested = dict(requested, model=unalias(requested["model"], aliases))
        if requested is None:
            checks.append(
                _check(
                    "engine_requested_config",
                    "skip",
                    "Requested config",
                    "no 'non-default args' line with speculative_config in the log",
                )
            )
        elif requested == plan_cfg:
            checks.append(
                _check(
                    "engine_requested_config",
                    "pass",
                    "Requested config",
                    "the API server received exactly the planned config",
                )
            )
        else:
            keys = sorted(k for k in set(requested) | set(plan_cfg) if requested.get(k) != plan_cfg.get(k))
            checks.append(
                _check(
                    "engine_requested_config",
                    "fail",
                    "Requested config",
                    "the API server received %s, planned %s (differs in %s)"
                    % (
                        json.dumps(requested, sort_keys=True),
                        json.dumps(plan_cfg, sort_keys=True),
                        ", ".join(keys),
                    ),
                    requested=requested,
                )
            )
    return checks


def _engine_version_checks(ctx):
    """The vLLM release the engine runs, and the warnings it logged."""
    plan, log_facts = ctx["plan"], ctx["log_facts"]
    checks = []
    if log_facts is None:
        return []
    planned_version = plan.get("vllm_version")
    logged_version = log_facts.get("vllm_version")
    if planned_version and logged_version and str(planned_version) != str(logged_version):
        checks.append(
            _check(
                "engine_version",
                "warn",
                "vLLM version",
                "the engine runs vLLM %s, the spec says %s: the config was validated for another "
                "release" % (logged_version, planned_version),
            )
        )
    warnings = log_facts.get("log_warnings") or []
    relevant = [w for w in warnings if not w.get("after_shutdown")]
    checks.append(
        _check(
            "engine_warnings",
            "info",
            "Engine warnings",
            "; ".join("%s: %s" % (w.get("code"), w.get("message")) for w in relevant) or "none",
            warnings=relevant,
        )
    )

    return checks


def _pod_view_checks(ctx):
    """Inside the predictor pod (pod_view.py): the vLLM release the image holds and the model paths the
    engine is told to load. A look that could not be taken says why: a skip in mode auto (exec needs
    create on pods/exec, which a least-privilege Role may leave out), a failure in mode required."""
    mode, view = ctx["inside_mode"], pod_view.parse(ctx["inside_pod"])
    title = "Inside the pod"
    if mode == "off":
        return [_check("pod_view", "skip", title, "not looked at (specpilot_smoke_inside_pod: off)")]
    if view is None:
        return [_check("pod_view", "skip", title, "not looked at: no predictor pod to exec into")]
    if view["error"]:
        status = "fail" if mode == "required" else "skip"
        why = "could not look inside pod %s: %s" % (ctx["pod_name"], view["error"])
        if "403" in view["error"] or "forbidden" in view["error"].lower():
            why += " (exec needs create on pods/exec)"
        if status == "skip":
            why += "; skipped (specpilot_smoke_inside_pod: required makes it a failure)"
        return [_check("pod_view", status, title, why)]
    return [_pod_version_check(ctx["plan"], view), _pod_models_check(ctx["plan"], ctx["expect"], view)]


def _pod_version_check(plan, view):
    title = "vLLM in the image"
    if view.get("vllm_error"):
        return _check(
            "pod_vllm_version", "warn", title, "the pod's Python cannot import vllm: %s" % view["vllm_error"]
        )
    found, planned = view.get("vllm_version"), plan.get("vllm_version")
    if planned and str(planned) != str(found):
        return _check(
            "pod_vllm_version",
            "warn",
            title,
            "the image holds vLLM %s, the spec says %s: the config was validated for another release"
            % (found, planned),
            vllm_version=found,
        )
    return _check("pod_vllm_version", "pass", title, "the image holds vLLM %s" % found, vllm_version=found)


def _pod_models_check(plan, expect, view):
    title = "Model files in the pod"
    problems, seen = [], []
    for what, path in pod_view.expected_paths(plan, expect).items():
        entry = (view.get("paths") or {}).get(path) or {}
        if not entry.get("dir"):
            problems.append("the %s %s is not a directory in the pod" % (what, path))
        elif not entry.get("config_json"):
            problems.append(
                "the %s %s has no config.json (%s)"
                % (what, path, ", ".join(entry.get("entries") or []) or "empty")
            )
        else:
            seen.append("%s %s" % (what, path))
    if problems:
        return _check("pod_models", "fail", title, "; ".join(problems), paths=view.get("paths"))
    message = ("%s hold config.json" % ", ".join(seen)) if seen else "no model path to look at"
    return _check("pod_models", "pass", title, message, paths=view.get("paths"))


def _probe_checks(ctx):
    """The probe requests."""
    probes, skip_reason = ctx["probes"], ctx["skip_reason"]
    checks = []
    if probes is None:
        checks.append(
            _check(
                "probes",
                "fail",
                "Probe requests",
                "no probe requests were sent%s" % (": " + skip_reason if skip_reason else ""),
            )
        )
    elif probes.get("error"):
        checks.append(
            _check("probes", "fail", "Probe requests", "the probe run failed: %s" % probes["error"])
        )
    else:
        bad = [r for r in probes.get("results") or [] if not r.get("ok")]
        if probes.get("requests", 0) and not bad:
            checks.append(
                _check(
                    "probes",
                    "pass",
                    "Probe requests",
                    "%d/%d succeeded (%d tokens generated, mean latency %s s) via %s"
                    % (
                        probes["succeeded"],
                        probes["requests"],
                        probes.get("completion_tokens") or 0,
                        _fmt(probes.get("latency_mean_s")),
                        probes.get("url"),
                    ),
                )
            )
        else:
            checks.append(
                _check(
                    "probes",
                    "fail",
                    "Probe requests",
                    "%d of %d failed: %s"
                    % (len(bad), probes.get("requests", 0), bad[0].get("error") if bad else "no requests"),
                )
            )

    return checks


# The checks of one service, in the order the report lists them: one function per check (or per
# group of checks on one source), each returning its _check() entries.
CHECK_SECTIONS = (
    _plan_checks,
    _inferenceservice_checks,
    _pod_checks,
    _engine_start_checks,
    _engine_config_checks,
    _schedule_checks,
    _engine_version_checks,
    _pod_view_checks,
    _probe_checks,
    _running_checks,
    _metrics_checks,
    _acceptance_checks,
    _acceptance_shape_checks,
    _log_window_checks,
)


def evaluate(data):
    """The checks and the verdict for one service.

    ``data`` keys: service, expect ('on'/'off'), plan, inferenceservice, pod, container,
    log_facts, log_previous, log_error, log_window, metrics_before, metrics_after, probes, access,
    thresholds, request ({prompts, count, max_tokens, temperature, request_params}), inside_pod (the
    pod_exec result of pod_view.command) and inside_pod_mode (auto, required, off),
    skip_reason (why no probes were sent), production_temperature (specpilot_workload.temperature:
    the acceptance band says whether the probes ran at it). Missing pieces fail the checks that need them.
    """
    ctx = _inputs(data)
    checks = []
    for section in CHECK_SECTIONS:
        checks.extend(section(ctx))
    return _verdict(ctx, checks)


def _inputs(data):
    """What the checks read, from the data evaluate() was given (missing pieces are None)."""
    expect = data.get("expect") or "on"
    if expect not in EXPECT_MODES:
        raise ValueError("expect must be 'on' or 'off', got %r" % expect)
    th = thresholds(data.get("thresholds"))
    container = data.get("container") or "kserve-container"
    plan = data.get("plan") or {}
    plan_cfg = plan.get("speculative_config") or None
    isvc = data.get("inferenceservice") or None
    pod = data.get("pod") or None
    aliases = data.get("path_aliases") or {}
    log_facts = data.get("log_facts") or None
    log_prev = data.get("log_previous") or None
    window = data.get("log_window") or None
    m_after = data.get("metrics_after") or None
    probes = data.get("probes") or None
    request = data.get("request") or {}
    svc = data.get("service") or plan.get("name") or "service"
    pod_name = get_path(pod, "metadata", "name")
    fig = figures(m_after, window, plan_cfg)
    return dict(
        expect=expect,
        th=th,
        container=container,
        plan=plan,
        plan_cfg=plan_cfg,
        isvc=isvc,
        pod=pod,
        pod_name=pod_name,
        aliases=aliases,
        log_facts=log_facts,
        log_prev=log_prev,
        window=window,
        m_after=m_after,
        probes=probes,
        request=request,
        svc=svc,
        fig=fig,
        skip_reason=data.get("skip_reason"),
        log_error=data.get("log_error"),
        production_temperature=data.get("production_temperature"),
        inside_pod=data.get("inside_pod"),
        inside_mode=data.get("inside_pod_mode") or "auto",
    )


def _verdict(ctx, checks):
    """The worst check decides; the result evaluate() returns."""
    expect, th, pod_name, request, svc, fig = (
        ctx["expect"],
        ctx["th"],
        ctx["pod_name"],
        ctx["request"],
        ctx["svc"],
        ctx["fig"],
    )
    worst = max((STATUS_RANK[c["status"]] for c in checks), default=0)
    verdict = VERDICTS[worst]
    failing = [c for c in checks if c["status"] == verdict and verdict != "pass"]
    if verdict == "pass":
        if expect == "on":
            message = (
                "%s: PASS - speculative decoding runs as planned, acceptance %s, mean acceptance length %s"
                % (svc, _fmt(fig["acceptance_rate"]), _fmt(fig["mean_acceptance_length"]))
            )
        else:
            message = (
                "%s: PASS - speculative decoding is off (speculative_config=None, no spec metrics)" % svc
            )
    else:
        message = "%s: %s - %s" % (
            svc,
            verdict.upper(),
            " | ".join("%s: %s" % (c["title"], c["message"]) for c in failing),
        )
    return {
        "service": svc,
        "expect": expect,
        "verdict": verdict,
        "ok": verdict != "fail",
        "message": message,
        "checks": checks,
        "figures": fig,
        "interpretation": interpretation(fig, th, request.get("temperature")) if expect == "on" else [],
        # the band rule applied to the probes' acceptance, and whether they ran at the production temperature
        "acceptance_band": (
            band_reading(
                fig["acceptance_rate"],
                ctx["production_temperature"],
                request.get("temperature", 0.0) if (ctx["probes"] or {}).get("succeeded") else None,
                "the probes" if (ctx["probes"] or {}).get("succeeded") else "the engine's own traffic",
            )
            if expect == "on"
            else None
        ),
        "thresholds": th,
        "pod": pod_name,
    }
