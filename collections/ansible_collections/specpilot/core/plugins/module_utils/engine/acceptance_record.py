# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The acceptance record of a service (issue 38): what smoke measured, per vLLM release, on the cluster.

ConfigMap ``<service>-specpilot-acceptance`` beside the revision record (``<service>-specpilot-history``, the
deploy role's ``record.yml``), one data key per vLLM release (``vllm-<version>``), each the JSON of the last
measurement on that release: the acceptance per draft position, the rate and mean acceptance length, the drafts
behind them, the method, k, the temperature the measurement ran at and the workload's, which step measured it
(``source``: ``smoke`` or ``benchmark``, and ``where``: the benchmark's part of the run) and when. Acceptance
regressed silently across releases more than once (vllm #26191, #33771, #40551) and moves with the temperature
by itself (vllm #33497), so a reading is only compared with one of the same release (:func:`compare`), and the
temperature is said beside it.

Pure functions: the role writes the ConfigMap (``specpilot.core.k8s_retry``) with :func:`merged`'s data.
"""

from __future__ import annotations

import json

__all__ = [
    "KEY_PREFIX", "change_lines", "compare", "entry", "key_of", "merged", "recorded_for", "record_name", "summary",
]

KEY_PREFIX = "vllm-"
RECORD_SUFFIX = "-specpilot-acceptance"


def record_name(service):
    """The ConfigMap of a service's acceptance record."""
    return "%s%s" % (service, RECORD_SUFFIX)


def key_of(version):
    """The data key of a vLLM release (a ConfigMap key: letters, digits, '-', '_', '.')."""
    text = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(version or "unknown"))
    return KEY_PREFIX + text


def _rounded(values, digits=4):
    return None if values is None else [None if v is None else round(float(v), digits) for v in values]


def entry(source, version, speculative, figures, temperature=None, workload=None, at=None, spec_digest=None):
    """One measurement to record, or None when it measured no acceptance (nothing to record). ``figures``: the
    acceptance a role measured (``acceptance_rate``, ``mean_acceptance_length``, ``per_position_acceptance``,
    ``num_drafts``, ``num_draft_tokens``, and ``where`` when a step measured at several points: the benchmark)."""
    figures = figures or {}
    if figures.get("acceptance_rate") is None and not figures.get("per_position_acceptance"):
        return None
    spec = speculative or {}
    return {
        "source": source,
        "vllm_version": str(version) if version else None,
        "method": spec.get("method"),
        "k": spec.get("num_speculative_tokens"),
        "temperature": temperature,
        "workload": workload or None,
        "acceptance_rate": None if figures.get("acceptance_rate") is None else round(float(figures["acceptance_rate"]), 4),
        "mean_acceptance_length": None if figures.get("mean_acceptance_length") is None
        else round(float(figures["mean_acceptance_length"]), 4),
        "per_position": _rounded(figures.get("per_position_acceptance")),
        "num_drafts": figures.get("num_drafts"),
        "num_draft_tokens": figures.get("num_draft_tokens"),
        "spec_digest": spec_digest,
        "where": figures.get("where"),
        "at": at,
    }


def merged(data, new):
    """The ConfigMap data with ``new`` as its release's record (the releases before it kept)."""
    out = dict(data or {})
    if new:
        out[key_of(new["vllm_version"])] = json.dumps(new, sort_keys=True)
    return out


def recorded_for(data, version):
    """The record of a release, or None (none, or not JSON)."""
    text = (data or {}).get(key_of(version))
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def summary(record):
    """One line of a record, as validate.yml and the guard say it."""
    if not record:
        return "no acceptance recorded"
    pp = record.get("per_position") or []
    return "vLLM %s, %s k=%s: acceptance %s (per position %s), mean acceptance length %s, temperature %s, by %s%s at %s" % (
        record.get("vllm_version"), record.get("method"), record.get("k"),
        "n/a" if record.get("acceptance_rate") is None else "%.3f" % record["acceptance_rate"],
        " / ".join("%.2f" % v for v in pp if v is not None) or "-",
        "n/a" if record.get("mean_acceptance_length") is None else "%.2f" % record["mean_acceptance_length"],
        record.get("temperature"), record.get("source"),
        " (%s)" % record["where"] if record.get("where") else "", record.get("at"),
    )


def _side(version, image):
    return "vLLM %s (image %s)" % (version or "not recorded", image or "not read")


def change_lines(changes, data, running, spec_version):
    """What validate.yml says of a spec against the live service (``changes``: ``live.changes``; ``running``: the
    release recorded on the live object, ``spec_version``: the plan's): nothing to compare when the spec keeps the
    image and the release; else the change, the acceptance recorded for the running release (or that there is
    none), and that the new release's acceptance is unmeasured until smoke or a canary measures it."""
    found = dict((c["field"], c) for c in changes or [] if c["field"] in ("image", "vllm_version"))
    if not found:
        return ["the spec keeps the running vLLM release (%s) and runtime image: no release change to compare"
                % (running or "not recorded on the live service")]
    image = found.get("image") or {}
    lines = ["the spec changes the runtime: live %s -> spec %s" % (
        _side(running, image.get("live")), _side(spec_version, image.get("spec")))]
    if not running:
        lines.append("the live service does not record its vLLM release (annotation specpilot.io/vllm-version): no "
                     "record to show (recorded releases: %s)" % (", ".join(sorted(data or {})) or "none"))
    else:
        record = recorded_for(data, running)
        lines.append("recorded acceptance of the running release: %s" % summary(record) if record else
                     "no acceptance recorded for vLLM %s (smoke.yml and benchmark.yml record it)" % running)
    lines.append("the acceptance of vLLM %s is unmeasured until smoke.yml or a canary measures it: canary.yml with this "
                 "spec (the live service the stable arm, the spec the canary) compares both per draft position"
                 % (spec_version or "of the spec"))
    return lines


def _differences(live, recorded):
    """[{position, live, recorded, difference}] at the positions both have."""
    return [
        {"position": i, "live": round(now, 4), "recorded": then, "difference": round(now - then, 4)}
        for i, (now, then) in enumerate(zip(live or [], recorded or []))
        if now is not None and then is not None
    ]


def compare(rate, per_position, record, tolerance=0.1):
    """The live acceptance against the record of the same release: ``{recorded, differences, lower, text}``;
    ``lower``: the positions (or the rate, position None) where live is below the record by more than
    ``tolerance`` (absolute). None without a record."""
    if not record:
        return None
    diffs = _differences(per_position, record.get("per_position"))
    lower = [d["position"] for d in diffs if d["difference"] < -tolerance]
    rate_then = record.get("acceptance_rate")
    if rate is not None and rate_then is not None and rate - rate_then < -tolerance and not diffs:
        lower.append(None)
    text = "live acceptance %s against the record of vLLM %s (%s, %s at temperature %s): %s" % (
        "n/a" if rate is None else "%.3f" % rate, record.get("vllm_version"), record.get("source"), record.get("at"),
        record.get("temperature"),
        "; ".join("position %d %.2f (recorded %.2f)" % (d["position"], d["live"], d["recorded"]) for d in diffs)
        or "rate recorded %s" % ("n/a" if rate_then is None else "%.3f" % rate_then),
    )
    if lower:
        text += "; lower than recorded by more than %.2f at %s" % (
            tolerance, ", ".join("the rate" if p is None else "position %d" % p for p in lower))
    return {"recorded": record, "differences": diffs, "lower": lower, "text": text}
