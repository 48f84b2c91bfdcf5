# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The schedule sweep in tune.md and tune_schedule.png (issue 37): the crossover and the schedule in
words, the cells that no measurement decided, the spec snippet to paste, and a heatmap of the bound
figure's speedup over concurrency x k with invalid and inconclusive cells marked. Reads the
``sweep`` that :func:`bench_schedule.analyse_sweep` put in the tuning report."""

from __future__ import annotations

import json

from ansible_collections.specpilot.core.plugins.module_utils.report.plots import pyplot, saved
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table

__all__ = ["markdown_lines", "render_heatmap", "snippet"]

MARKS = {"invalid": "invalid", "error": "not measured", "inconclusive": "?", "rollback": "", "keep": ""}


def snippet(advice):
    """The spec lines to paste (specpilot_speculative), or None when speculation should stay off."""
    spec = advice.get("speculative")
    if not spec:
        return None
    lines = ["specpilot_speculative:"]
    for key, value in spec.items():
        if value is None:
            continue
        lines.append("  %s: %s" % (key, json.dumps(value)))
    return "\n".join(lines)


def _open_lines(sweep):
    return [
        "- concurrency %d, k=%d: %s - %s" % (o["concurrency"], o["k"], o["decision"], o["would_decide"])
        for o in sweep.get("open") or []
    ]


def _level_row(lv):
    b = lv.get("bound") or {}
    ratio = "%.2fx (%.2f-%.2f)" % ((b["value"],) + tuple(b["ci95"])) if b.get("ci95") else "-"
    return ("%d" % lv["concurrency"], lv["status"], "%d" % lv["k"], ratio, len(lv["open"]))


def markdown_lines(report):
    """The '## Schedule by load' section of tune.md ([] when the run swept no schedule)."""
    sweep = report.get("sweep")
    if not sweep:
        return []
    cross = report["crossover"]
    out = ["## Schedule by load", "", cross["text"] + ".", ""]
    out.append(
        "Schedule (batch size -> k, to max_num_seqs=%d): %s."
        % (sweep["max_num_seqs"], sweep["schedule_text"])
    )
    out.append("")
    out += markdown_table(
        ("concurrency", "decision", "k", "%s speedup (95%% CI)" % sweep["bound_by"].upper(), "open cells"),
        [_level_row(lv) for lv in sweep["levels"]],
    )
    out.append("")
    opened = _open_lines(sweep)
    if opened:
        out += ["Cells no measurement decided (never guessed; k=0 where they leave a level open):", ""]
        out += opened + [""]
    advice = sweep["advice"]
    text = snippet(advice)
    out += ["Deploy (%s):" % advice["form"], ""]
    out += ["```yaml", text, "```", ""] if text else ["Keep speculative decoding off.", ""]
    out += ["- " + n for n in advice["notes"] + sweep.get("notes", [])]
    return out + [""]


def _grid(sweep):
    levels = sorted({c["concurrency"] for c in sweep["cells"]})
    ks = sorted({c["k"] for c in sweep["cells"]})
    cell = {(c["concurrency"], c["k"]): c for c in sweep["cells"]}
    return levels, ks, cell


def _annotate(plt, ax, sweep, levels, ks, cell):
    """Each cell's ratio (or why it has none), '?' when inconclusive; the schedule's k outlined."""
    chosen = {lv["concurrency"]: lv["k"] for lv in sweep["levels"]}
    for i, k in enumerate(ks):
        for j, c in enumerate(levels):
            entry = cell.get((c, k))
            if entry is None:
                continue
            mark = MARKS.get(entry["decision"], entry["decision"])
            value = entry["bound"]["value"]
            text = mark if entry["decision"] in ("invalid", "error") else "%.2f%s" % (value or 0.0, mark)
            ax.text(j, i, text, ha="center", va="center", fontsize=8)
            if chosen.get(c) == k:
                ax.add_patch(
                    plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=2)
                )


def render_heatmap(report, out_dir):
    """tune_schedule.png: the bound figure's speedup per (k, concurrency); invalid, unmeasured and
    inconclusive cells marked; the schedule's k per level outlined. [] without a sweep."""
    sweep = report.get("sweep")
    plt = pyplot()[0]
    if plt is None or not sweep or not sweep["cells"]:
        return []
    levels, ks, cell = _grid(sweep)
    values = [[(cell.get((c, k)) or {}).get("bound", {}).get("value") for c in levels] for k in ks]
    shown = [
        [
            v if v is not None and cell[(c, k)]["decision"] not in ("invalid", "error") else float("nan")
            for v, c in zip(row, levels)
        ]
        for row, k in zip(values, ks)
    ]
    fig, ax = plt.subplots(figsize=(1.2 * len(levels) + 3, 0.8 * len(ks) + 2.5))
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="#cccccc")  # grey: invalid or not measured
    img = ax.imshow(shown, cmap=cmap, vmin=0.5, vmax=1.5, aspect="auto", origin="lower")
    fig.colorbar(img, ax=ax, label="%s speedup vs k=0 (> 1 better)" % sweep["bound_by"].upper())
    _annotate(plt, ax, sweep, levels, ks, cell)
    ax.set_xticks(range(len(levels)))
    ax.set_xticklabels([str(c) for c in levels])
    ax.set_yticks(range(len(ks)))
    ax.set_yticklabels(["k=%d" % k for k in ks])
    ax.set_xlabel("concurrent requests")
    ax.set_title(
        "Speedup by load (outlined: the schedule's k; ?: inconclusive; grey: invalid or not measured)",
        fontsize=9,
    )
    return [saved(fig, out_dir, "tune_schedule.png", "Speedup over concurrency x k")]
