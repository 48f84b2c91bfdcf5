# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The tuning run's choice: which speculative config serves the service best under its SLO.

The tuning run (``playbooks/tune.yml``, the ``tune`` entry point of the benchmark role) measures one
baseline and then, one after another, a speculative twin per candidate (``num_speculative_tokens``
and optionally the method), each exactly the way the benchmark measures, and gets the benchmark's
own verdict for each (``specpilot.core.benchmark_report``: keep, rollback, inconclusive or invalid,
with the ratios and their 95% intervals). This module only reads those verdicts:

* :func:`candidate_row` - one row of the table per candidate, at the verdict's (target) level;
* :func:`choose` - the recommendation: among the candidates the verdict **keeps**, the one with
  the largest gain on the figure the service is bound by (``workload.slo.bound_by``); a tie goes
  to the smaller ``num_speculative_tokens`` (less proposer work). None when no candidate is a keep;
* :func:`build_tune_report`, :func:`render_markdown`, :func:`render_plot`,
  :func:`write_tune_report` - ``tune.json``, ``tune.md`` and ``tune.png``.
"""

from __future__ import annotations

import datetime
import os

from ansible_collections.specpilot.core.plugins.module_utils.report.plots import plot_links, pyplot, saved
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_report import (
    fmt_value,
    md_escape,
    ratio_ci,
)
from ansible_collections.specpilot.core.plugins.module_utils.report import files as report_files
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_schedule, bench_schedule_report

__all__ = [
    "build_tune_report",
    "candidate_row",
    "choose",
    "render_markdown",
    "render_plot",
    "row_line",
    "write_tune_report",
]

REPORT_FORMAT = 1
FIGURES = ("ttft", "tpot", "e2e", "throughput")
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E latency", "throughput": "per-request tok/s"}
DECISION_COLOURS = {
    "keep": "#55a868",
    "inconclusive": "#8c8c8c",
    "rollback": "#c44e52",
    "invalid": "#dddddd",
    "error": "#dddddd",
}


def _ratio(entry):
    entry = entry or {}
    ci = entry.get("ci95")
    return {"value": entry.get("value"), "ci95": list(ci) if ci else None}


def _bound_by(candidates):
    """The figure the service is bound by, from the first verdict that names its policy."""
    for cand in candidates:
        policy = ((cand.get("result") or {}).get("verdict") or {}).get("policy") or {}
        if policy.get("bound_by"):
            return policy["bound_by"], policy
    return "tpot", {}


def candidate_row(candidate, bound_by):
    """One table row: the candidate, its decision and the ratios at the verdict's level.

    candidate: ``{id, method, num_speculative_tokens, configured, result, error}`` where result is
    what ``specpilot.core.benchmark_report`` returned for the candidate (verdict, levels, paths)."""
    res = candidate.get("result") or {}
    verdict = res.get("verdict") or {}
    key = (verdict.get("level") or {}).get("key")
    level = next((lv for lv in res.get("levels") or [] if (lv.get("level") or {}).get("key") == key), {})
    ratios = dict((fig, _ratio((level.get("ratios") or {}).get(fig))) for fig in FIGURES)
    acc = level.get("acceptance") or {}
    error = candidate.get("error")
    decision = "error" if error or not verdict else verdict.get("decision") or res.get("decision")
    reasons = [str(error)] if error else list(verdict.get("reasons") or [])
    return {
        "id": candidate.get("id"),
        "method": candidate.get("method"),
        "num_speculative_tokens": candidate.get("num_speculative_tokens"),
        "configured": bool(candidate.get("configured")),
        "decision": decision,
        "level": key,
        "bound": dict(ratios[bound_by], figure=bound_by),
        "ratios": ratios,
        "acceptance_rate": acc.get("draft_acceptance_rate"),
        "mean_acceptance_length": acc.get("mean_acceptance_length"),
        "per_position": acc.get("per_position_acceptance") or [],
        "runs_needed": level.get("runs_needed"),
        "reasons": reasons,
        "report": (res.get("paths") or {}).get("markdown"),
    }


def row_line(row):
    """One candidate in one line, for the play's output."""
    bound = row["bound"]
    return "%s (%s k=%s%s): %s, %s %s" % (
        row["id"],
        row["method"],
        row["num_speculative_tokens"],
        ", configured" if row["configured"] else "",
        row["decision"],
        LABELS.get(bound["figure"], bound["figure"]),
        ratio_ci(bound, no_ci=""),
    )


def _ci_text(entry):
    ci = entry.get("ci95")
    return "95%% CI %.2f-%.2fx" % tuple(ci) if ci else "no CI"


def _name(row):
    return "%s k=%s" % (row["method"], row["num_speculative_tokens"])


def _no_keep(rows):
    """The recommendation when no candidate is a keep: the decisions counted, nothing chosen."""
    counts = {}
    for r in rows:
        counts[r["decision"]] = counts.get(r["decision"], 0) + 1
    return {
        "id": None,
        "method": None,
        "num_speculative_tokens": None,
        "decision": None,
        "gain": None,
        "change": None,
        "reason": "no candidate is a keep under the service's SLO (%s): keep the configuration as it is, "
        "or turn speculative decoding off if the benchmark says rollback"
        % (", ".join("%d %s" % (n, d) for d, n in sorted(counts.items())) or "no candidates"),
    }


def _runner_up(best, second):
    lo, hi = best["bound"]["ci95"], second["bound"]["ci95"]
    overlap = bool(lo and hi and lo[0] <= hi[1])
    return "; the runner-up %s gives %.2fx%s" % (
        _name(second),
        second["bound"]["value"],
        " (the intervals overlap: the difference is within the noise)" if overlap else "",
    )


def _configured_text(configured, change):
    """What the reason says of the configured setting against the best one."""
    if configured is None:
        return "; the configured setting was not among the candidates"
    if not change:
        return "; that is the configured setting: nothing to change"
    value = configured["bound"]["value"]
    return "; the service runs %s (%s%s)" % (
        _name(configured),
        configured["decision"],
        ", %.2fx" % value if value is not None else "",
    )


def choose(rows, bound_by="tpot"):
    """The recommendation ``{id, method, num_speculative_tokens, decision, gain, change, reason}``.

    The kept candidate with the largest gain on the bound figure (ties: the smaller k); when no
    candidate is a keep, every field but ``reason`` is None."""
    label = LABELS.get(bound_by, bound_by)
    kept = [r for r in rows if r["decision"] == "keep" and r["bound"]["value"] is not None]
    configured = next((r for r in rows if r["configured"]), None)
    if not kept:
        return _no_keep(rows)
    ranked = sorted(
        kept, key=lambda r: (-r["bound"]["value"], r["num_speculative_tokens"] or 0, r["id"] or "")
    )
    best = ranked[0]
    reason = (
        "%s: kept with %s %.2fx better than baseline (%s), the largest gain of the %d kept candidate(s)"
        % (
            _name(best),
            label,
            best["bound"]["value"],
            _ci_text(best["bound"]),
            len(kept),
        )
    )
    if len(ranked) > 1:
        reason += _runner_up(best, ranked[1])
    change = configured is None or configured["id"] != best["id"]
    reason += _configured_text(configured, change)
    return {
        "id": best["id"],
        "method": best["method"],
        "num_speculative_tokens": best["num_speculative_tokens"],
        "decision": best["decision"],
        "gain": best["bound"],
        "change": change,
        "reason": reason,
    }


def _with_sweep(report, candidates, sweep):
    """The schedule sweep (issue 37), when the run measured one: ``schedule`` and ``crossover`` at the
    top, the rest under ``sweep``. sweep: {max_num_seqs, version (tuple), data_parallel_size}."""
    method = (report.get("configured") or {}).get("method")
    result = bench_schedule.analyse_sweep(
        candidates, report["bound_by"], sweep.get("max_num_seqs"), method, sweep.get("version"),
        sweep.get("data_parallel_size") or 1,
    )
    report.update(sweep=result, schedule=result["schedule"], crossover=result["crossover"])
    report["summary"] += " Schedule by load: %s (%s)." % (result["crossover"]["text"], result["schedule_text"])
    return report


def build_tune_report(candidates, service=None, configured=None, notes=None, generated_at=None, sweep=None):
    """The tuning report: the rows, the recommendation, the policy the verdicts used (and the
    schedule by load when ``sweep`` is given)."""
    bound_by, policy = _bound_by(candidates)
    rows = [candidate_row(c, bound_by) for c in candidates]
    rec = choose(rows, bound_by)
    if rec["id"] is None:
        summary = "no recommendation: " + rec["reason"]
    else:
        summary = "recommended %s num_speculative_tokens=%d: %s." % (
            rec["method"],
            rec["num_speculative_tokens"],
            rec["reason"],
        )
    report = {
        "format": REPORT_FORMAT,
        "kind": "specpilot-tune",
        "service": service,
        "generated_at": generated_at
        or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "bound_by": bound_by,
        "policy": policy,
        "configured": configured or {},
        "level": next((r["level"] for r in rows if r["level"]), None),
        "candidates": rows,
        "recommendation": rec,
        "summary": summary,
        "notes": list(notes or []),
        "plots": [],
    }
    return _with_sweep(report, candidates, sweep) if sweep is not None else report


def _link(path, out_dir):
    if not path:
        return ""
    return "[report](%s)" % (os.path.relpath(path, out_dir) if out_dir else path)


def _candidate_row(r, rec, out_dir):
    """One candidate's line of tune.md's table."""
    mark = " (recommended)" if rec["id"] is not None and r["id"] == rec["id"] else ""
    mark += " (configured)" if r["configured"] else ""
    return (
        md_escape(r["id"]) + mark,
        md_escape(r["method"]),
        r["num_speculative_tokens"],
        "**%s**" % r["decision"],
        ratio_ci(r["bound"], no_ci=""),
        ratio_ci(r["ratios"]["ttft"], no_ci=""),
        ratio_ci(r["ratios"]["tpot"], no_ci=""),
        ratio_ci(r["ratios"]["e2e"], no_ci=""),
        ratio_ci(r["ratios"]["throughput"], no_ci=""),
        fmt_value(r["acceptance_rate"], "%.3f"),
        fmt_value(r["mean_acceptance_length"]),
        _link(r.get("report"), out_dir),
    )


def render_markdown(report, out_dir=None):
    """tune.md: the recommendation, the table of candidates, their reasons, the plot (candidate
    reports linked relative to out_dir, where tune.md is written)."""
    rec = report["recommendation"]
    label = LABELS.get(report["bound_by"], report["bound_by"])
    out = ["# Speculative decoding tuning run: %s" % (report.get("service") or "service"), ""]
    out += [report["summary"], "", "Generated %s." % report["generated_at"], ""]
    conf = report.get("configured") or {}
    out.append(
        "Configured: %s num_speculative_tokens=%s. Bound by %s; every candidate measured the same way "
        "(same prompts, levels and seed) against one baseline, at %s. Ratios: baseline / candidate for "
        "latencies, candidate / baseline for throughput (> 1 is better), with 95%% confidence intervals."
        % (conf.get("method"), conf.get("num_speculative_tokens"), label, report.get("level") or "n/a")
    )
    out.append("")
    columns = ("candidate", "method", "k", "decision", "%s (bound)" % label, "TTFT", "TPOT", "E2E", "tok/s")
    columns += ("acceptance rate", "mean acceptance length", "report")
    out += markdown_table(columns, [_candidate_row(r, rec, out_dir) for r in report["candidates"]])
    out.append("")
    out += ["## Why", ""]
    for r in report["candidates"]:
        out.append("- %s (%s): %s" % (r["id"], r["decision"], md_escape("; ".join(r["reasons"][:3]) or "-")))
    out.append("")
    if report.get("notes"):
        out += ["Notes:", ""] + ["- " + md_escape(n) for n in report["notes"]] + [""]
    out += bench_schedule_report.markdown_lines(report)
    out += plot_links(report)
    return "\n".join(out)


def render_plot(report, out_dir):
    """tune.png: the bound figure's ratio per candidate with its interval (coloured by decision,
    the recommendation starred), and acceptance per candidate. [] without matplotlib or rows."""
    rows = report["candidates"]
    plt = pyplot()[0]
    if plt is None or not rows:
        return []
    xs = list(range(len(rows)))
    labels = ["%s\nk=%s" % (r["method"], r["num_speculative_tokens"]) for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax = axes[0]
    values = [r["bound"]["value"] or 0.0 for r in rows]
    errs = [
        [max(0.0, v - r["bound"]["ci95"][0]) if r["bound"]["ci95"] else 0.0 for v, r in zip(values, rows)],
        [max(0.0, r["bound"]["ci95"][1] - v) if r["bound"]["ci95"] else 0.0 for v, r in zip(values, rows)],
    ]
    colours = [DECISION_COLOURS.get(r["decision"], "#dddddd") for r in rows]
    ax.bar(xs, values, color=colours, yerr=errs, capsize=4)
    ax.axhline(1.0, color="#333333", linestyle="--", linewidth=1)
    rec = report["recommendation"]
    for x, r, v in zip(xs, rows, values):
        top = r["bound"]["ci95"][1] if r["bound"]["ci95"] else v
        ax.annotate(
            r["decision"],
            (x, top),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 3),
            textcoords="offset points",
        )
        if rec["id"] is not None and r["id"] == rec["id"]:
            ax.scatter(
                [x], [top * 1.1 + 0.1], marker="*", s=220, color="#dd8452", zorder=3, label="recommended"
            )
    ax.set_xticks(xs)
    ax.set_xticklabels(labels)
    ax.set_ylabel("%s ratio vs baseline (> 1 better)" % LABELS.get(report["bound_by"], report["bound_by"]))
    ax.set_title("Bound figure per candidate, 95% CI")
    ax.grid(True, axis="y", alpha=0.3)
    if rec["id"] is not None:
        ax.legend(fontsize=8)
    ax = axes[1]
    ax.bar(xs, [r["acceptance_rate"] or 0.0 for r in rows], color="#4c72b0", label="acceptance rate")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("draft acceptance rate")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels)
    ax2 = ax.twinx()
    pts = [
        (x, r["mean_acceptance_length"]) for x, r in zip(xs, rows) if r["mean_acceptance_length"] is not None
    ]
    if pts:
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color="#dd8452")
    ax2.set_ylabel("mean acceptance length (tokens per step)", color="#dd8452")
    ax.set_title("Acceptance per candidate")
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Tuning run: %s" % (report.get("service") or ""))
    return [saved(fig, out_dir, "tune.png", "Candidates against the baseline")] + bench_schedule_report.render_heatmap(
        report, out_dir
    )


def write_tune_report(report, out_dir, plots=True):
    """Write tune.json, tune.md and tune.png under out_dir; returns {json, markdown, plots}."""
    return report_files.write_report(
        out_dir, "tune", report, lambda r: render_markdown(r, out_dir), render_plot, plots
    )[0]
