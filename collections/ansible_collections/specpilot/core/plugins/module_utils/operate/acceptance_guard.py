# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The acceptance guard: is speculative decoding on, what did the last window show, and what to do.

One guard run per service gives one *reading* (acceptance, drafted tokens, per-position acceptance)
from two scrapes of the engine's ``/metrics`` (a ``vllm_metrics_facts`` result with ``previous``) or
from a Prometheus server (the same PromQL as the PrometheusRule, with ``increase()``, through
``prometheus_api``, the client the canary shares). The reading gets a *status*:

``off``          the InferenceService carries no speculative flags: nothing to guard
``absent``       the InferenceService does not exist
``missing``      speculative flags are set but the engine exports no ``vllm:spec_decode_*`` series
``idle``         fewer than ``min_draft_tokens`` tokens were drafted in the window: no verdict
``no-window``    a V0 engine (cumulative gauge only): reported, never acted upon
``low``          acceptance below ``min_acceptance_rate``
``borderline``   below ``warn_acceptance_rate``
``healthy``

Readings are kept in a short history (the last ``history_size``). The *streak* counts the ``low``
readings at the end of the history taken with the current speculative config; ``idle``,
``missing`` and ``no-window`` readings neither count nor break it, ``healthy`` and ``borderline``
break it, and so does a change of the config (a new digest). With ``consecutive_readings`` low
readings in a row the action is ``rollback`` (when auto-rollback is on) or ``report``; a single
low reading is ``watch``.

Standard library only, plus the other specpilot.core module_utils.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import time

from ansible_collections.specpilot.core.plugins.module_utils.operate import monitoring as sm
from ansible_collections.specpilot.core.plugins.module_utils.operate import prometheus_api
from ansible_collections.specpilot.core.plugins.module_utils.operate.acceptance_band import band_reading
from ansible_collections.specpilot.core.plugins.module_utils.service import live, spec_flags

HISTORY_ANNOTATION = "specpilot.io/guard-history"
HISTORY_KEY = "history"
STATUSES = ("off", "absent", "missing", "idle", "no-window", "low", "borderline", "healthy")
NEUTRAL = ("idle", "missing", "no-window")
DEFAULTS = {
    "min_acceptance_rate": 0.5,
    "warn_acceptance_rate": 0.65,
    "min_draft_tokens": 100,
    "consecutive_readings": 3,
    "history_size": 10,
    "collapse_threshold": 0.05,
    "auto_rollback": False,
}

_CONFIG_FLAG = re.compile(r"^--speculative[-_]config(?:=(.*))?$", re.S)
_SHELL_CONFIG = re.compile(r"--speculative[-_]config[= ]+('(?:[^']*)'|\"(?:[^\"\\\\]|\\\\.)*\"|\S+)")


class GuardError(ValueError):
    """A reading that cannot be taken (bad parameters, Prometheus errors)."""


def _digest(value):
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _parse_config(text):
    """The config of a ``--speculative-config`` value (``spec_flags.config_value``), or
    ``{"unparsed": text}``."""
    value = spec_flags.config_value(text)
    if value is not None:
        return value
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = shlex.split(text)[0]
    return {"unparsed": text}


def isvc_speculative(isvc):
    """Whether the InferenceService's engine arguments turn speculative decoding on.

    Reads its live view (``service/live.py``: ``spec.predictor.model`` or the engine container):
    ``--speculative-config=<json>`` or the flag and the JSON as two items, a ``--speculative-config``
    inside a shell command string, and the other speculative flags of ``spec_flags`` (the V0 ones:
    ``--speculative-model``...).
    """
    if not isvc:
        return {"exists": False, "on": False, "config": None, "flags": [], "digest": None}
    config = None
    flags = []
    words = live.view(isvc).command_line
    for idx, word in enumerate(words):
        m = _CONFIG_FLAG.match(word)
        if m:
            value = m.group(1)
            if value is None and idx + 1 < len(words):
                value = words[idx + 1]
            if value is not None:
                config = _parse_config(value)
                flags.append("--speculative-config")
            continue
        if spec_flags.is_speculative(word):
            flags.append(word)
            continue
        if " " in word and "--speculative" in word:  # sh -c "... --speculative-config '{...}' ..."
            sm_ = _SHELL_CONFIG.search(word)
            if sm_:
                config = _parse_config(sm_.group(1))
                flags.append("--speculative-config")
            flags += [w for w in spec_flags.speculative_args(word.split()) if not _CONFIG_FLAG.match(w.split()[0])]
    on = bool(flags)
    digest = None
    if on:
        digest = _digest(config if config is not None else sorted(flags))
    return {"exists": True, "on": on, "config": config, "flags": flags, "digest": digest}


def reading_from_facts(facts):
    """A reading from a ``vllm_metrics_facts`` result (the second scrape, taken with ``previous``)."""
    facts = facts or {}
    derived = facts.get("derived") or {}
    reading = {
        "source": "scrape",
        "spec_series": bool(facts.get("spec_decode_enabled")),
        "window": derived.get("window"),
        "interval_seconds": derived.get("interval_seconds"),
        "drafts": derived.get("num_drafts"),
        "drafted": derived.get("num_draft_tokens"),
        "accepted": derived.get("num_accepted_tokens"),
        "acceptance_rate": derived.get("draft_acceptance_rate"),
        "mean_acceptance_length": derived.get("mean_acceptance_length"),
        "per_position": derived.get("per_position_acceptance"),
        "engine_era": facts.get("engine_era"),
        "running": facts.get("running"),
    }
    if derived.get("source") == "v0_gauges":
        reading["window"] = "cumulative-gauge"
    elif derived.get("window") == "cumulative":
        # no `previous`: the figures cover the engine's whole life, not a window
        reading["window"] = "cumulative"
    return reading


def _vector(fetch, base_url, expr, headers, timeout, validate_certs, at):
    try:
        return prometheus_api.instant_vector(fetch, base_url, expr, headers, timeout, validate_certs, at)
    except prometheus_api.PrometheusError as exc:
        raise GuardError(str(exc)) from exc


_total = prometheus_api.vector_total


def prometheus_reading(base_url, selector, window, vllm_version, headers=None, timeout=10.0,
                       validate_certs=True, fetch=None, at=None, crossover=None):
    """A reading over ``window`` from a Prometheus server, with the PrometheusRule's own PromQL.

    Every query is evaluated at the same instant ``at`` (default: now), so the ratios compare
    counters over exactly the same window. ``fetch(url, headers, timeout, validate_certs)`` returns the
    body: the module passes one over ansible-core's ``open_url`` (proxies, CA bundles, TLS options)."""
    if fetch is None:
        raise TypeError("prometheus_reading needs fetch(url, headers, timeout, validate_certs)")
    at = time.time() if at is None else at
    profile = sm.metric_profile(vllm_version)
    exprs = sm.expressions(profile, selector, window, "increase")

    def q(expr):
        return _vector(fetch, base_url, expr, headers, timeout, validate_certs, at)

    reading = {"source": "prometheus", "window": window, "interval_seconds": None, "engine_era": profile["era"],
               "drafts": None, "drafted": None, "accepted": None, "acceptance_rate": None,
               "mean_acceptance_length": None, "per_position": None}
    reading["spec_series"] = bool(q(exprs["spec_series"]))
    reading["engine_up"] = bool(q(exprs["engine_up"]))
    if crossover is not None:  # the share of the window the busiest engine ran above it (monitoring's PromQL)
        share = q(sm.above_crossover_share(selector, crossover, window))
        reading["above_crossover"] = max(v for _m, v in share) if share else None
    if profile["era"] != "v1":
        gauge = _total(q(exprs["acceptance_rate"]))
        reading.update(window="cumulative-gauge", acceptance_rate=gauge)
        return reading
    if not reading["spec_series"]:
        return reading
    drafted = _total(q(exprs["drafted_in_window"]))
    accepted = _total(q(exprs["accepted_tokens"]))
    reading["drafted"] = drafted
    reading["accepted"] = accepted
    if drafted:
        reading["acceptance_rate"] = accepted / drafted if accepted is not None else None
    if profile["drafts"]:
        drafts = _total(q(exprs["drafts"]))
        reading["drafts"] = drafts
        if drafts:
            if accepted is not None:
                reading["mean_acceptance_length"] = 1 + accepted / drafts
            per_pos = {}
            for metric, value in q(exprs["accepted_per_position"]):
                try:
                    per_pos[int(metric.get("position"))] = value
                except (TypeError, ValueError):
                    continue
            if per_pos:
                reading["per_position"] = [per_pos.get(i, 0.0) / drafts for i in range(max(per_pos) + 1)]
    return reading


def settings_of(params):
    s = dict(DEFAULTS)
    for key, value in (params or {}).items():
        if value is not None:
            s[key] = value
    for key in ("min_acceptance_rate", "warn_acceptance_rate", "collapse_threshold"):
        if not 0 <= float(s[key]) <= 1:
            raise GuardError("%s must be between 0 and 1, not %r" % (key, s[key]))
        s[key] = float(s[key])
    if s["warn_acceptance_rate"] < s["min_acceptance_rate"]:
        raise GuardError("warn_acceptance_rate (%s) is below min_acceptance_rate (%s)"
                         % (s["warn_acceptance_rate"], s["min_acceptance_rate"]))
    for key, low in (("consecutive_readings", 1), ("history_size", 1), ("min_draft_tokens", 0)):
        s[key] = int(s[key])
        if s[key] < low:
            raise GuardError("%s must be >= %d" % (key, low))
    if s["history_size"] < s["consecutive_readings"]:
        raise GuardError("history_size (%d) must hold at least consecutive_readings (%d)"
                         % (s["history_size"], s["consecutive_readings"]))
    return s


def load_history(raw):
    """The stored history (a JSON list, or already a list); anything unreadable gives []."""
    notes = []
    if raw in (None, ""):
        return [], notes
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return [], ["the stored guard history is not JSON; starting a new one"]
    if not isinstance(value, list):
        return [], ["the stored guard history is not a list; starting a new one"]
    entries = [e for e in value if isinstance(e, dict) and e.get("status") in STATUSES]
    if len(entries) != len(value):
        notes.append("%d unreadable history entries dropped" % (len(value) - len(entries)))
    return entries, notes


def history_json(history):
    return json.dumps(history, separators=(",", ":"), sort_keys=True)


def _round(value, digits=4):
    return round(value, digits) if isinstance(value, float) else value


def classify(state, reading, s):
    if not state["exists"]:
        return "absent"
    if not state["on"]:
        return "off"
    if not reading.get("spec_series"):
        return "missing"
    if reading.get("window") in ("cumulative-gauge", "cumulative"):
        return "no-window"
    drafted = reading.get("drafted")
    if not drafted or drafted < s["min_draft_tokens"] or reading.get("acceptance_rate") is None:
        return "idle"
    if reading["acceptance_rate"] < s["min_acceptance_rate"]:
        return "low"
    if reading["acceptance_rate"] < s["warn_acceptance_rate"]:
        return "borderline"
    return "healthy"


def streak_of(history, digest):
    """Low readings in a row at the end of the history, for the config ``digest``."""
    count = 0
    for entry in reversed(history):
        if entry.get("cfg") != digest:
            break
        status = entry.get("status")
        if status in NEUTRAL:
            continue
        if status != "low":
            break
        count += 1
    return count


def _history_entry(status, state, reading, now):
    """What one judged run adds to the history."""
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "status": status,
        "cfg": state["digest"],
        "src": reading.get("source"),
        "rate": _round(reading.get("acceptance_rate")),
        "drafted": reading.get("drafted"),
        "accepted": reading.get("accepted"),
        "mal": _round(reading.get("mean_acceptance_length"), 3),
        "pp": [_round(v, 3) for v in reading.get("per_position") or []] or None,
        "run": reading.get("running"),
    }


def load_above_crossover(state, reading, history):
    """How much of the time the service ran above the crossover its live speculative config carries
    (``monitoring.crossover_of``: the schedule's last k > 0): ``{crossover, share_above, basis, text}``, or
    None without a crossover or without a figure. From Prometheus: the share of the window; from scrapes:
    the share of the readings of this config that found more requests running than the crossover."""
    cross = sm.crossover_of(state.get("config"))
    if not cross:
        return None
    n = cross["concurrency"]
    share = reading.get("above_crossover")
    if share is not None:
        basis = "of the last %s (Prometheus)" % reading.get("window")
    else:
        runs = [e.get("run") for e in history
                if e.get("cfg") == state.get("digest") and e.get("run") is not None]
        if not runs:
            return None
        share = sum(1 for r in runs if r > n) / float(len(runs))
        basis = "of %d reading(s) of vllm:num_requests_running" % len(runs)
    return {
        "crossover": n,
        "source": cross["source"],
        "share_above": _round(share),
        "basis": basis,
        "text": "above its crossover of %d concurrent requests %.0f%% %s" % (n, 100 * share, basis),
    }


_JUDGED_STATUSES = ("low", "borderline", "healthy")


def _collapse_finding(reading, s):
    """The per-position curve collapsing after the first position, or None."""
    pp = reading.get("per_position") or []
    collapsed = [i for i, v in enumerate(pp) if i > 0 and v is not None and v < s["collapse_threshold"]]
    if not collapsed:
        return None
    return ("per-position acceptance collapses from position %d (%s): lower num_speculative_tokens "
            "to %d" % (collapsed[0], ", ".join("%d: %.3f" % (i, pp[i]) for i in collapsed), collapsed[0]))


def _status_finding(status, state, reading, s):
    """What the status itself says is wrong, or None."""
    rate = reading.get("acceptance_rate")
    if status == "low":
        return ("acceptance %.3f is below %.2f over %s drafted tokens: speculative decoding adds latency"
                % (rate, s["min_acceptance_rate"], reading.get("drafted")))
    if status == "borderline":
        return ("acceptance %.3f is borderline (%.2f to %.2f): benchmark before keeping it"
                % (rate, s["min_acceptance_rate"], s["warn_acceptance_rate"]))
    if status == "missing":
        return ("the InferenceService sets %s but the engine exports no vllm:spec_decode_* series: "
                "the engine is not running the speculative config" % ", ".join(sorted(set(state["flags"]))))
    if status == "no-window":
        return ("only cumulative figures are available (V0 gauge, or no second scrape): reported, "
                "never acted upon")
    return None


def _action(status, streak, s):
    """rollback (or report without auto_rollback) after K low readings in a row; watch a low one; report
    a missing series; else none."""
    if status == "low" and streak >= s["consecutive_readings"]:
        return "rollback" if s["auto_rollback"] else "report"
    return {"low": "watch", "missing": "report"}.get(status, "none")


def _message(label, status, reading, streak, s):
    rate = reading.get("acceptance_rate")
    if status == "absent":
        return "%s: no InferenceService" % label
    if status == "off":
        return "%s: speculative decoding is off; nothing to guard" % label
    if status == "idle":
        return "%s: idle (%s draft tokens in the window, %d needed): no verdict" % (
            label, reading.get("drafted") or 0, s["min_draft_tokens"])
    if rate is not None:
        return "%s: %s, %.3f over %s draft tokens, %d/%d low readings in a row" % (
            label, judged(status), rate, reading.get("drafted"), streak, s["consecutive_readings"])
    return "%s: %s" % (label, judged(status))


_ACTION_SUFFIX = {"rollback": "; rolling speculative decoding back"}


def evaluate(isvc, reading, history_raw, params=None, now=None, name=None, production_temperature=None):
    """The verdict of one guard run; pure (the caller stores the history and acts).

    production_temperature (specpilot_workload.temperature): the acceptance band of a judged reading
    (``acceptance_band``) says that live traffic was read, not a reading at that temperature."""
    s = settings_of(params)
    now = time.time() if now is None else now
    state = isvc_speculative(isvc)
    reading = dict(reading or {})
    history, notes = load_history(history_raw)
    status = classify(state, reading, s)
    record = status not in ("absent", "off")
    entry = None
    if record:
        entry = _history_entry(status, state, reading, now)
        history = (history + [entry])[-s["history_size"]:]
    streak = streak_of(history, state["digest"]) if state["on"] else 0
    rate = reading.get("acceptance_rate")
    findings = [f for f in (_collapse_finding(reading, s) if status in _JUDGED_STATUSES else None,
                            _status_finding(status, state, reading, s)) if f]
    action = _action(status, streak, s)
    label = name or ((isvc or {}).get("metadata") or {}).get("name") or "service"
    message = _message(label, status, reading, streak, s)
    load = load_above_crossover(state, reading, history) if state["on"] else None
    if load:
        message += "; " + load["text"]
    if action == "report" and status == "low":
        message += "; action needed"
    message += _ACTION_SUFFIX.get(action, "")
    banded = status in _JUDGED_STATUSES + ("no-window",) and rate is not None
    return {
        "state": state,
        "reading": reading,
        "status": status,
        "streak": streak,
        "consecutive_readings": s["consecutive_readings"],
        "action": action,
        "findings": findings,
        "notes": notes,
        "message": message,
        # the band rule applied to a judged reading of live traffic (its temperature is the clients')
        "acceptance_band": (band_reading(rate, production_temperature, None, "live traffic")
                            if banded else None),
        "load": load,
        "record": record,
        "entry": entry,
        "history": history,
        "history_json": history_json(history),
        "settings": s,
    }


# What the guard judged, in its words: acceptance only (issue 39: "healthy" right after the canary aborted the
# same config for TTFT +57% read as "paying off"; speed is the benchmark's and the canary's to judge).
_JUDGED = {
    "healthy": "acceptance healthy",
    "borderline": "acceptance borderline",
    "low": "acceptance low",
    "no-window": "acceptance not judged (cumulative figures only)",
    "missing": "speculative metrics missing",
}


def judged(status):
    """The words of a status: what was judged (``acceptance healthy``), not a verdict on the service."""
    return _JUDGED.get(status, status)


def latest_verdict(paths):
    """The newest of the benchmark and canary reports at ``paths`` (their report.json; missing ones
    skipped): ``{kind, verdict, summary, at, path}``, or None. When: the report's run time (``run.at``),
    else its ``generated_at``, else the file's time."""
    found = []
    for path in paths or ():
        try:
            with open(path, encoding="utf-8") as fh:
                report = json.load(fh)
            mtime = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(path)))
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict):
            continue
        kind = "canary" if "outcome" in report else "benchmark"
        at = (report.get("run") or {}).get("at") or report.get("generated_at") or mtime
        verdict = report.get("outcome") if kind == "canary" else report.get("decision")
        found.append({"kind": kind, "verdict": verdict, "summary": report.get("summary"), "at": at, "path": path})
    return max(found, key=lambda v: v["at"]) if found else None


def verdict_pointer(verdict, limit=200):
    """``; latest canary verdict (2026-...): aborted - <summary> (<path>)`` for the guard's message."""
    if not verdict:
        return ""
    summary = str(verdict.get("summary") or "")
    if len(summary) > limit:
        summary = summary[: limit - 3] + "..."
    return "; latest %s verdict (%s): %s%s (%s)" % (
        verdict["kind"], verdict["at"], verdict["verdict"], " - " + summary if summary else "", verdict["path"])
