# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The fleet view (issue 40): the guard's and smoke's reports of every slice of a run, merged into one
summary of every service, sorted by risk (failing services first).

A sliced AWX job runs one ansible-playbook per slice, each on its share of the inventory. AWX hands the
slices' ``set_stats`` to the next workflow node merged with ``dict.update`` in the order the slices
finished (awx/main/models/workflow.py ``WorkflowJobNode.get_job_kwargs``: ``aa_dict.update(
parent_node.job.get_effective_artifacts(...))``; a sliced job's ``WorkflowJob.get_effective_artifacts``
updates one dict with each slice's artifacts): one key every slice publishes keeps the last slice's value
only. So each slice publishes its part under a key of its own, :func:`slice_key` (a digest of the slice's
hosts), and :func:`merge` puts the parts back together: no slice is lost, a host two slices report is a
conflict, not a silent overwrite.
"""

from __future__ import annotations

import hashlib
import os
import re

from ansible_collections.specpilot.core.plugins.module_utils.report.plots import plot_links, pyplot, saved
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table

__all__ = ["SLICE_KINDS", "slice_key", "slice_payload", "slices_of", "merge", "fleet_markdown", "render_plots"]

SLICE_KINDS = ("guard", "smoke")
_KEY = re.compile(r"^specpilot_(%s)_slice_[0-9a-f]{12}$" % "|".join(SLICE_KINDS))

# Risk tiers, the most urgent first; the report lists the services in this order.
TIERS = ("fail", "warn", "ok", "off")
_GUARD_FAIL_STATUSES = ("error", "missing")
_GUARD_WARN_STATUSES = ("low", "borderline", "no-window", "absent")
_GUARD_FAIL_ACTIONS = ("report", "rollback")
_VERDICT_FAIL = ("rollback", "aborted", "error", "invalid")
_VERDICT_WARN = ("inconclusive",)


def slice_key(kind, hosts):
    """``specpilot_<kind>_slice_<12 hex>``: the set_stats key of one slice's part, the same in every host
    of the slice (a digest of its sorted hosts) and another in every other slice (slices share no host)."""
    if kind not in SLICE_KINDS:
        raise ValueError("slice kind must be one of %s, not %r" % (", ".join(SLICE_KINDS), kind))
    text = "\n".join(sorted(str(h) for h in hosts or ()))
    return "specpilot_%s_slice_%s" % (kind, hashlib.sha256(text.encode()).hexdigest()[:12])


def slice_payload(kind, hosts, data, limit=None):
    """What one slice publishes under :func:`slice_key`: its kind, its hosts, the run's ``--limit`` (AWX's
    limit prompt; None without one) and its part (the guard's report without the histories; smoke:
    ``{host: stats}``)."""
    return {"kind": kind, "hosts": sorted(str(h) for h in hosts or ()), "limit": limit or None, "data": data}


def slices_of(variables):
    """The slice parts among ``variables`` (a job's extra variables: AWX's merged artifacts), by key."""
    return {k: v for k, v in (variables or {}).items() if _KEY.match(str(k)) and isinstance(v, dict)}


# ------------------------------------------------------------------ the merge


def _guard_services(part):
    report = part.get("data") or {}
    return [dict(s) for s in report.get("services") or [] if isinstance(s, dict)]


def _smoke_services(part):
    data = part.get("data") or {}
    return [dict(stats, host=host) for host, stats in sorted(data.items()) if isinstance(stats, dict)]


def _collect(slices, conflicts):
    """{kind: {host: result}} over every slice; a host two slices report goes to ``conflicts``."""
    seen = {kind: {} for kind in SLICE_KINDS}
    owner = {}
    for key in sorted(slices):
        part = slices[key]
        kind = part.get("kind")
        if kind not in SLICE_KINDS:
            continue
        for result in (_guard_services if kind == "guard" else _smoke_services)(part):
            host = str(result.get("host") or result.get("name"))
            if host in seen[kind]:
                conflicts.append("%s: %s reported by slices %s and %s" % (host, kind, owner[(kind, host)], key))
                continue
            seen[kind][host] = result
            owner[(kind, host)] = key
    return seen


def _first(*values):
    return next((v for v in values if v is not None), None)


def _speculative(guard):
    status = guard.get("status")
    if status == "absent":
        return "absent"
    if status == "off":
        return "off"
    return "on" if guard else None


def _risk(guard, smoke, verdict):
    """(tier, reasons): ``fail`` when something needs action now, ``warn`` to watch, ``ok``, ``off``."""
    fail, warn = [], []
    status, action = guard.get("status"), guard.get("action")
    if status in _GUARD_FAIL_STATUSES or action in _GUARD_FAIL_ACTIONS or guard.get("rolled_back"):
        fail.append("guard %s (%s)" % (status, action))
    elif status in _GUARD_WARN_STATUSES:
        warn.append("guard %s" % status)
    if smoke.get("verdict") == "fail":
        fail.append("smoke fail")
    elif smoke.get("verdict") == "warn":
        warn.append("smoke warn")
    word = (verdict or {}).get("verdict")
    if word in _VERDICT_FAIL:
        fail.append("%s %s" % (verdict.get("kind"), word))
    elif word in _VERDICT_WARN:
        warn.append("%s %s" % (verdict.get("kind"), word))
    if fail:
        return "fail", fail + warn
    if warn:
        return "warn", warn
    return ("off" if status in ("off",) else "ok"), []


def _row(host, guard, smoke):
    verdict = guard.get("latest_verdict") or None
    tier, reasons = _risk(guard, smoke, verdict)
    return {
        "host": host,
        "name": guard.get("name") or host,
        "namespace": guard.get("namespace") or "",
        "speculative": _first(_speculative(guard), smoke.get("expect")),
        "method": guard.get("method"),
        "num_speculative_tokens": guard.get("num_speculative_tokens"),
        "acceptance_rate": _first(guard.get("acceptance_rate"), smoke.get("acceptance_rate")),
        "acceptance_source": ("guard" if guard.get("acceptance_rate") is not None
                              else "smoke" if smoke.get("acceptance_rate") is not None else None),
        "drafted": guard.get("drafted"),
        "guard": {"status": guard.get("status"), "action": guard.get("action"), "streak": guard.get("streak"),
                  "rolled_back": bool(guard.get("rolled_back"))} if guard else None,
        "smoke": smoke.get("verdict"),
        "last_verdict": ({k: verdict.get(k) for k in ("kind", "verdict", "at")} if verdict else None),
        "risk": tier,
        "reasons": reasons,
        "message": guard.get("message") or smoke.get("message") or "",
    }


def _order(row):
    rate = row["acceptance_rate"]
    return (TIERS.index(row["risk"]), rate is None, rate if rate is not None else 0.0, row["namespace"], row["name"])


def _slice_notes(slices):
    out = []
    for key in sorted(slices):
        part = slices[key]
        data = part.get("data") or {}
        out.append({"key": key, "kind": part.get("kind"), "hosts": len(part.get("hosts") or ()),
                    "generated_at": data.get("generated_at") if part.get("kind") == "guard" else None})
    return out


def _unreported(host):
    message = "%s: no slice reported it (a slice failed before its report, or the host was not in the run)" % host
    return {"host": host, "name": host, "namespace": "", "speculative": None, "method": None,
            "num_speculative_tokens": None, "acceptance_rate": None, "acceptance_source": None, "drafted": None,
            "guard": None, "smoke": None, "last_verdict": None, "risk": "fail",
            "reasons": ["no slice reported it"], "message": message}


def merge(slices, generated_at=None, expected=None):
    """The fleet summary of the slice parts (:func:`slices_of`): one row per service (guard and smoke
    joined by host), sorted by risk then by acceptance (lowest first), the counts per tier, the slices
    it was made of and the conflicts (a host reported by two slices: the first by key is kept).

    ``expected`` (the inventory's hosts): each one no slice reported is a failing row of its own, so a
    slice lost on the way shows as its services, not as a shorter list."""
    conflicts, notes = [], []
    limits = sorted(set(str(p["limit"]) for p in slices.values() if p.get("limit")))
    if limits and expected:
        # the run covered the hosts of its limit only: the others are not missing
        notes.append("the run was limited to %s: hosts outside it are not listed as unreported" % ", ".join(limits))
        expected = None
    seen = _collect(slices, conflicts)
    hosts = sorted(set(seen["guard"]) | set(seen["smoke"]))
    missing = sorted(set(str(h) for h in expected or ()) - set(hosts))
    rows = [_row(h, seen["guard"].get(h, {}), seen["smoke"].get(h, {})) for h in hosts]
    rows = sorted(rows + [_unreported(h) for h in missing], key=_order)
    thresholds = next((p["data"].get("thresholds") for _k, p in sorted(slices.items())
                       if p.get("kind") == "guard" and isinstance(p.get("data"), dict)
                       and p["data"].get("thresholds")), None)
    return {
        "generated_at": generated_at,
        "slices": _slice_notes(slices),
        "thresholds": thresholds,
        "counts": {tier: sum(1 for r in rows if r["risk"] == tier) for tier in TIERS},
        "failing": [r["host"] for r in rows if r["risk"] == "fail"],
        "unreported": missing,
        "services": rows,
        "conflicts": conflicts,
        "notes": notes,
    }


# ------------------------------------------------------------------ Markdown and plot


def _fmt(value, spec="%.3f"):
    return "-" if value is None else spec % value


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", "<br>")


_COLUMNS = ("risk", "service", "speculative", "method", "k", "acceptance", "guard", "smoke", "last verdict", "why")


def _table_row(row):
    guard = row.get("guard") or {}
    verdict = row.get("last_verdict") or {}
    return [
        row["risk"].upper() if row["risk"] == "fail" else row["risk"],
        _cell("%s/%s" % (row["namespace"], row["name"]) if row["namespace"] else row["name"]),
        row["speculative"] or "-", row["method"] or "-", _fmt(row["num_speculative_tokens"], "%d"),
        _fmt(row["acceptance_rate"]),
        _cell("%s / %s" % (guard.get("status"), guard.get("action")) if guard else "-"),
        row["smoke"] or "-",
        _cell("%s %s" % (verdict.get("kind"), verdict.get("verdict")) if verdict else "-"),
        _cell("; ".join(row["reasons"]) or "-"),
    ]


def fleet_markdown(report):
    """The fleet summary in Markdown: the counts, the failing services by name, then one table line per
    service (failing first): readable at 200 services."""
    counts = report["counts"]
    rows = report["services"]
    lines = ["# Fleet summary", ""]
    lines.append("%d services in %d slice(s): %s." % (
        len(rows), len(report.get("slices") or []), ", ".join("%d %s" % (counts.get(t, 0), t) for t in TIERS)))
    if report.get("generated_at"):
        lines.append("Generated %s." % report["generated_at"])
    lines.append("")
    if report.get("failing"):
        lines += ["**Failing:** %s" % ", ".join(report["failing"]), ""]
    lines += ["- %s" % n for n in report.get("notes") or []] + ([""] if report.get("notes") else [])
    if report.get("conflicts"):
        lines += ["## Conflicts", ""] + ["- %s" % c for c in report["conflicts"]] + [""]
    lines += plot_links(report)
    lines += markdown_table(_COLUMNS, [_table_row(r) for r in rows])
    slices = ["%s (%s, %d hosts)" % (s["key"], s["kind"], s["hosts"]) for s in report.get("slices") or []]
    lines += ["", "Slices: " + (", ".join(slices) or "none")]
    return "\n".join(lines) + "\n"


_TIER_COLOURS = {"fail": "#c44e52", "warn": "#dd8452", "ok": "#55a868", "off": "#8c8c8c"}


def render_plots(report, out_dir):
    """fleet.png: each service's acceptance (one point per service in the report's order, failing first),
    coloured by risk, with the guard's thresholds. Nothing when no service has an acceptance."""
    plt = pyplot()[0]
    rows = report.get("services") or []
    if plt is None or not any(r.get("acceptance_rate") is not None for r in rows):
        return []
    fig, ax = plt.subplots(figsize=(10, 4))
    for tier in TIERS:
        pts = [(i, r["acceptance_rate"]) for i, r in enumerate(rows)
               if r["risk"] == tier and r.get("acceptance_rate") is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color=_TIER_COLOURS[tier],
                       label="%s (%d)" % (tier, (report.get("counts") or {}).get(tier, len(pts))))
    thresholds = report.get("thresholds") or {}
    for key, style in (("min_acceptance_rate", "--"), ("warn_acceptance_rate", ":")):
        if thresholds.get(key) is not None:
            ax.axhline(float(thresholds[key]), linestyle=style, color="#444444", linewidth=1, label=key)
    ax.set_xlabel("services, most at risk first (%d)" % len(rows))
    ax.set_ylabel("draft acceptance rate")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Fleet acceptance by risk")
    os.makedirs(out_dir, exist_ok=True)
    return [saved(fig, out_dir, "fleet.png", "Acceptance of every service, by risk")]
