# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The acceptance the engine reports, as the smoke verdict reads it: the figures (from /metrics after the
probes and the engine log window), their reading against the seed guides (:data:`INTERPRET`), and the
checks on them (metrics, acceptance, the per-position curve, the log cross-check).  The verdict that
runs these checks is :mod:`verify.smoke`."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.common import get_path
from ansible_collections.specpilot.core.plugins.module_utils.verify.smoke_checks import (
    _check,
    _curve,
    _fmt,
    _number_or_none,
)

INTERPRET = {
    "fail": (
        "Below about 0.5 acceptance speculative decoding adds latency instead of removing it: turn it off "
        "for this workload, or fix the proposer (a draft that does not match the target starts up and "
        "serves correctly but accepts almost nothing)."
    ),
    "warn": (
        "Between 0.5 and 0.65 the service is near the break-even line: measure P99 latency under real "
        "load (specpilot benchmark) before keeping it."
    ),
    "pass": (
        "Above 0.65 speculative decoding likely helps: confirm with a baseline comparison at the QPS you "
        "serve (specpilot benchmark)."
    ),
    "mal": (
        "Mean acceptance length {mal:.2f}: tokens delivered per decode step (1 without speculation). It "
        "is the practical ceiling of the speedup ({mal:.2f}x) with zero proposer overhead; real gains are "
        "lower."
    ),
    "collapse": (
        "Per-position acceptance collapses to near zero by slot {pos} ({curve}): almost every step emits "
        "only the verified token and the later drafted tokens are wasted; the workload is not a fit for "
        "this proposer (or lower num_speculative_tokens)."
    ),
    "decay": (
        "Per-position acceptance {curve}: a slowly decaying curve; even slot {k} pays off {last:.0%} of "
        "the time."
    ),
    "temperature": (
        "Probes sampled at temperature {t:g}: higher temperatures lower acceptance; compare with "
        "production sampling settings."
    ),
}


def figures(metrics_after, log_window, plan_cfg=None):
    """Acceptance figures: from the /metrics deltas (primary) and the log windows after the
    probes (cross-check)."""
    derived = get_path(metrics_after, "derived") or {}
    summary = get_path(log_window, "summary") or {}
    log = {
        "acceptance_rate": _number_or_none(summary.get("draft_acceptance_rate")),
        "mean_acceptance_length": _number_or_none(summary.get("mean_acceptance_length")),
        "per_position_acceptance": [_number_or_none(v) for v in summary.get("per_position_acceptance") or []],
        "drafted_tokens": summary.get("drafted_tokens"),
        "accepted_tokens": summary.get("accepted_tokens"),
        "windows": summary.get("windows") or 0,
        "format": summary.get("format"),
        "since_found": get_path(log_window, "since_found"),
    }
    metrics = {
        "acceptance_rate": _number_or_none(derived.get("draft_acceptance_rate")),
        "mean_acceptance_length": _number_or_none(derived.get("mean_acceptance_length")),
        "per_position_acceptance": [_number_or_none(v) for v in derived.get("per_position_acceptance") or []],
        "num_drafts": derived.get("num_drafts"),
        "num_draft_tokens": derived.get("num_draft_tokens"),
        "num_accepted_tokens": derived.get("num_accepted_tokens"),
        "accepted_per_position": derived.get("accepted_per_position") or [],
        "source": derived.get("source"),
        "window": derived.get("window"),
    }
    out = {
        "metrics": metrics,
        "log": log,
        "source": None,
        "acceptance_rate": None,
        "mean_acceptance_length": None,
        "per_position_acceptance": [],
        "num_spec_tokens": (plan_cfg or {}).get("num_speculative_tokens"),
    }
    if metrics["acceptance_rate"] is not None:
        out.update(
            source="metrics",
            acceptance_rate=metrics["acceptance_rate"],
            mean_acceptance_length=metrics["mean_acceptance_length"],
            per_position_acceptance=metrics["per_position_acceptance"],
        )
        if out["mean_acceptance_length"] is None:
            out["mean_acceptance_length"] = log["mean_acceptance_length"]
        if not out["per_position_acceptance"]:
            out["per_position_acceptance"] = log["per_position_acceptance"]
    elif log["acceptance_rate"] is not None:
        out.update(
            source="log",
            acceptance_rate=log["acceptance_rate"],
            mean_acceptance_length=log["mean_acceptance_length"],
            per_position_acceptance=log["per_position_acceptance"],
        )
    latency = {}
    for key, lat in (get_path(metrics_after, "latency") or {}).items():
        if isinstance(lat, dict) and lat.get("mean") is not None:
            latency[key] = {
                "mean_s": lat["mean"],
                "count": lat.get("window_count"),
                "metric": lat.get("metric"),
            }
    out["latency"] = latency
    return out


def _accept_class(rate, th):
    if rate < th["min_acceptance_rate"]:
        return "fail"
    if rate < th["warn_acceptance_rate"]:
        return "warn"
    return "pass"


def interpretation(fig, th, temperature=None):
    """The seed guide's reading of the figures, as sentences."""
    out = []
    rate = fig.get("acceptance_rate")
    if rate is not None:
        out.append(INTERPRET[_accept_class(rate, th)])
    mal = fig.get("mean_acceptance_length")
    if mal is not None:
        out.append(INTERPRET["mal"].format(mal=mal))
    curve = [v for v in fig.get("per_position_acceptance") or [] if v is not None]
    pos = th["collapse_position"]
    if len(curve) >= pos:
        if curve[pos - 1] < th["collapse_threshold"]:
            out.append(INTERPRET["collapse"].format(pos=pos, curve=_curve(curve)))
        else:
            out.append(INTERPRET["decay"].format(curve=_curve(curve), k=len(curve), last=curve[-1]))
    t = _number_or_none(temperature)
    if t:
        out.append(INTERPRET["temperature"].format(t=t))
    return out


def _metrics_checks(ctx):
    """/metrics: speculative decoding enabled and active (or not, for expect=off)."""
    expect, plan_cfg, m_after, probes, fig = (
        ctx["expect"],
        ctx["plan_cfg"],
        ctx["m_after"],
        ctx["probes"],
        ctx["fig"],
    )
    checks = []
    if m_after is None:
        checks.append(
            _check(
                "spec_metrics",
                "fail",
                "/metrics",
                "/metrics could not be read%s"
                % (
                    ": " + str((probes or {}).get("metrics_error"))
                    if (probes or {}).get("metrics_error")
                    else ""
                ),
            )
        )
    elif expect == "off":
        if m_after.get("spec_decode_enabled"):
            checks.append(
                _check(
                    "spec_metrics",
                    "fail",
                    "/metrics",
                    "vllm:spec_decode_* series are present (%s): speculative decoding is still on"
                    % ", ".join(m_after.get("spec_metric_names") or []),
                )
            )
        else:
            checks.append(_check("spec_metrics", "pass", "/metrics", "no vllm:spec_decode_* series"))
    else:
        if not m_after.get("spec_decode_enabled"):
            checks.append(
                _check(
                    "spec_metrics",
                    "fail",
                    "/metrics",
                    "speculative decoding was planned (%s) but /metrics has no vllm:spec_decode_* "
                    "series: the engine runs without it" % ((plan_cfg or {}).get("method")),
                )
            )
        elif not m_after.get("spec_decode_active") and fig["log"]["acceptance_rate"] is None:
            checks.append(
                _check(
                    "spec_metrics",
                    "fail",
                    "/metrics",
                    "no drafts during the probe requests: acceptance cannot be measured (an n-gram "
                    "or suffix proposer found no match: use prompts whose output repeats them)",
                )
            )
        else:
            note = ""
            if fig["metrics"]["window"] == "since_restart":
                note = " (the engine restarted between the scrapes: figures cover the time since)"
            checks.append(
                _check(
                    "spec_metrics",
                    "warn" if note else "pass",
                    "/metrics",
                    "%s drafts, %s draft tokens, %s accepted in the probe window%s"
                    % (
                        fig["metrics"]["num_drafts"],
                        fig["metrics"]["num_draft_tokens"],
                        fig["metrics"]["num_accepted_tokens"],
                        note,
                    ),
                )
            )

    return checks


def _acceptance_checks(ctx):
    """The acceptance rate against the thresholds."""
    expect, th, fig = ctx["expect"], ctx["th"], ctx["fig"]
    checks = []
    if expect != "on":
        return []
    rate = fig["acceptance_rate"]
    if rate is None:
        checks.append(
            _check(
                "acceptance",
                "fail",
                "Acceptance rate",
                "no acceptance figure: neither /metrics nor the engine log measured any drafts",
            )
        )
    else:
        cls = _accept_class(rate, th)
        where = "from /metrics" if fig["source"] == "metrics" else "from the engine log"
        if cls == "fail":
            msg = (
                "draft acceptance rate %s (%s) is below the minimum %s: speculative decoding adds "
                "latency on this workload" % (_fmt(rate), where, _fmt(th["min_acceptance_rate"]))
            )
        elif cls == "warn":
            msg = (
                "draft acceptance rate %s (%s) is below %s: borderline, measure P99 latency before "
                "keeping it" % (_fmt(rate), where, _fmt(th["warn_acceptance_rate"]))
            )
        else:
            msg = "draft acceptance rate %s (%s), at or above %s" % (
                _fmt(rate),
                where,
                _fmt(th["warn_acceptance_rate"]),
            )
        checks.append(_check("acceptance", cls, "Acceptance rate", msg, rate=rate))
    return checks


def _acceptance_shape_checks(ctx):
    """The mean acceptance length and the per-position curve (a collapse)."""
    expect, th, fig = ctx["expect"], ctx["th"], ctx["fig"]
    checks = []
    if expect != "on":
        return []
    mal = fig["mean_acceptance_length"]
    if mal is not None:
        floor = th["min_mean_acceptance_length"]
        if floor is not None and mal < floor:
            checks.append(
                _check(
                    "mean_acceptance_length",
                    "fail",
                    "Mean acceptance length",
                    "mean acceptance length %s is below the minimum %s" % (_fmt(mal), _fmt(floor)),
                )
            )
        else:
            checks.append(
                _check(
                    "mean_acceptance_length",
                    "info",
                    "Mean acceptance length",
                    "%s tokens per decode step (ceiling of the speedup)" % _fmt(mal),
                )
            )
    curve = [v for v in fig["per_position_acceptance"] if v is not None]
    pos = th["collapse_position"]
    if len(curve) >= pos and curve[pos - 1] < th["collapse_threshold"]:
        checks.append(
            _check(
                "per_position",
                "warn",
                "Per-position acceptance",
                "collapses by slot %d: %s (position %d < %s)"
                % (pos, _curve(curve), pos, _fmt(th["collapse_threshold"])),
                curve=curve,
            )
        )
    elif curve:
        checks.append(_check("per_position", "info", "Per-position acceptance", _curve(curve), curve=curve))

    return checks


def _log_window_checks(ctx):
    """The engine log windows after the probes: cross-check the acceptance (on), no spec lines (off)."""
    expect, th, window, fig = ctx["expect"], ctx["th"], ctx["window"], ctx["fig"]
    checks = []
    if expect != "on":
        if window is not None and log_window_count(window):
            checks.append(
                _check(
                    "log_cross_check",
                    "fail",
                    "Log cross-check",
                    "the engine log shows %d speculative metrics line(s) after the probes"
                    % log_window_count(window),
                )
            )
        elif window is not None:
            checks.append(
                _check(
                    "log_cross_check",
                    "pass",
                    "Log cross-check",
                    "no speculative metrics line in the engine log after the probes",
                )
            )
        return checks
    # cross-check with the log windows after the probes
    log = fig["log"]
    met = fig["metrics"]
    if window is None or log["acceptance_rate"] is None:
        checks.append(
            _check(
                "log_cross_check",
                "warn",
                "Log cross-check",
                "no speculative metrics line in the engine log after the probes (stat logging off "
                "with --disable-log-stats, or no log interval has passed): acceptance is taken "
                "from /metrics only",
            )
        )
    elif met["acceptance_rate"] is None:
        checks.append(
            _check(
                "log_cross_check",
                "warn",
                "Log cross-check",
                "only the engine log measured acceptance (%s); /metrics has no usable counters"
                % _fmt(log["acceptance_rate"]),
            )
        )
    else:
        diff = abs(log["acceptance_rate"] - met["acceptance_rate"])
        same = (
            log["drafted_tokens"] == met["num_draft_tokens"]
            and log["accepted_tokens"] == met["num_accepted_tokens"]
            and log["format"] == "v1"
        )
        cover = ""
        if log["format"] == "v1" and met["num_draft_tokens"]:
            cover = ", the log windows cover %s of %s drafted tokens" % (
                log["drafted_tokens"],
                met["num_draft_tokens"],
            )
        if same:
            checks.append(
                _check(
                    "log_cross_check",
                    "pass",
                    "Log cross-check",
                    "the log windows match /metrics exactly (%s drafted, %s accepted)"
                    % (log["drafted_tokens"], log["accepted_tokens"]),
                )
            )
        elif diff <= th["cross_check_tolerance"]:
            checks.append(
                _check(
                    "log_cross_check",
                    "pass",
                    "Log cross-check",
                    "log %s vs /metrics %s (within %s%s)"
                    % (
                        _fmt(log["acceptance_rate"], 3),
                        _fmt(met["acceptance_rate"], 3),
                        _fmt(th["cross_check_tolerance"]),
                        cover,
                    ),
                )
            )
        else:
            checks.append(
                _check(
                    "log_cross_check",
                    "warn",
                    "Log cross-check",
                    "log %s vs /metrics %s differ by more than %s%s: other traffic or partial "
                    "log windows"
                    % (
                        _fmt(log["acceptance_rate"], 3),
                        _fmt(met["acceptance_rate"], 3),
                        _fmt(th["cross_check_tolerance"]),
                        cover,
                    ),
                )
            )
    if window is not None and log["since_found"] is False:
        checks.append(
            _check(
                "log_window",
                "warn",
                "Log window",
                "the marker line was not found again: the log figures cover the whole log",
            )
        )
    return checks


def log_window_count(window):
    return int(get_path(window, "summary", "windows") or 0)
