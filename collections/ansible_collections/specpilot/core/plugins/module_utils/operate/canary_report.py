# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The canary's report: Markdown per step (both arms' quantiles with the resolution of their buckets, the ratios, and
for a change between two speculative configs the acceptance per draft position) and its plots (latency.png,
acceptance_positions.png). Moved out of canary.py, which re-exports report_markdown, render_plots and
bucket_resolution."""

from __future__ import annotations

import os

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary_change
from ansible_collections.specpilot.core.plugins.module_utils.report.plots import plot_links, pyplot
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table

__all__ = ["bucket_resolution", "render_plots", "report_markdown"]


def _fmt(value, unit=""):
    return "n/a" if value is None else "%.2f%s" % (value, unit)


def _ratio_text(entry, resolution=None):
    if not entry or entry.get("value") is None:
        return "n/a"
    ci = entry.get("ci95")
    text = "95%% CI %.2f-%.2f" % tuple(ci) if ci else "no CI"
    if resolution:
        text += "; the buckets allow %s" % resolution
    return "%.2fx (%s)" % (entry["value"], text)


def _quantile_text(figure, quantile):
    """A quantile from a histogram as the table shows it: its value, or ``>= <last bound>`` when it is past
    the last finite bucket (the value is then that bound, not a measurement)."""
    edges = figure.get(quantile.replace("_ms", "_bucket_ms"))
    if edges and edges[1] is None:
        return ">= %s" % _fmt(edges[0])
    return _fmt(figure.get(quantile))


def bucket_resolution(baseline, canary, quantile="p50_ms"):
    """The range of baseline / canary ratios the two quantiles' buckets allow ('0.50-2.00x', '>= 1.50x'), or
    None when a bucket is not known: a ratio of histogram quantiles is no finer than that, whatever its
    bootstrap interval says (the resampled values are spread inside the same buckets)."""
    b = (baseline or {}).get(quantile.replace("_ms", "_bucket_ms"))
    c = (canary or {}).get(quantile.replace("_ms", "_bucket_ms"))
    if not b or not c:
        return None
    low = b[0] / c[1] if c[1] else 0.0
    if b[1] is None or not c[0]:
        return ">= %.2fx" % low
    return "%.2f-%.2fx" % (low, b[1] / c[0])


READ_FROM = {
    "pods": " Both arms are read from their own pods' /metrics.",
    "prometheus": " Both arms are read from Prometheus {url} (specpilot_canary_prometheus_url).",
}


def _warmup_text(step):
    warm = step.get("warmup")
    if not warm:
        return ""
    return ", after a warm-up of %s canary request(s) in %s s, left out of the figures" % (warm["requests"], warm["seconds"])


def _source_text(step):
    """Where a step's figures come from, in words ('' for a step that read nothing)."""
    if step.get("source") == "prometheus":
        prom = step.get("prometheus") or {}
        return "; figures from Prometheus %s (increase() over %s, evaluated at %s)" % (
            prom.get("url", "?"),
            prom.get("range", "?"),
            prom.get("evaluated_at", "?"),
        )
    if step.get("source") == "pods":
        return "; figures from the arms' pods' /metrics (deltas between scrapes)"
    return ""


_ARM_COLUMNS = ("arm", "requests", "failed", "TTFT p50 / p99 ms", "TPOT p50 / p99 ms", "E2E p50 / p99 ms", "acceptance")


def _arms(step):
    return ("baseline", "canary") if step.get("arms") else ()


def _arm_row(arm, a):
    """One arm's line of a step's table: requests, failures, the three figures' p50 / p99, acceptance."""
    figs = [a["figures"].get(f) or {} for f in ("ttft", "tpot", "e2e")]
    acc = (a.get("acceptance") or {}).get("draft_acceptance_rate")
    return (
        arm,
        a["requests"],
        a["failed"],
        *["%s / %s" % (_quantile_text(f, "p50_ms"), _quantile_text(f, "p99_ms")) for f in figs],
        _fmt(acc),
    )


def report_markdown(report):
    """The canary report as Markdown: per step both arms' p50/p99, acceptance, decision, reason."""
    lines = [
        "# Canary of %s/%s" % (report["namespace"], report["service"]),
        "",
        "**%s** - %s" % (report["outcome"].upper(), report["summary"]),
        "",
        "Canary predictor `%s` (speculative config `%s`), steps %s %%, window %s s, at least %s requests per arm, "
        "acceptance floor %s.%s"
        % (
            report["canary_name"],
            report.get("speculative_config"),
            report["steps_planned"],
            report["window_s"],
            report["min_requests"],
            report["min_acceptance"],
            READ_FROM.get(report.get("source"), "").format(url=report.get("prometheus_url")),
        ),
        "",
    ]
    if (report.get("images") or {}).get("text"):
        lines += [report["images"]["text"], ""]
    if report.get("resumed_at"):
        lines += [
            "Resumed at %s%%: this canary, left in place by a run killed mid-step, was taken up again at that step "
            "(held from the start of a new window), then the steps above it." % report["resumed_at"],
            "",
        ]
    for step in report["steps"]:
        lines += [
            "## Step %s%% - %s" % (step["traffic_percent"], step["decision"]),
            "",
            "Held %s s (%s extension(s))%s%s."
            % (step.get("window_s", 0), step.get("extensions", 0), _warmup_text(step), _source_text(step)),
            "",
        ]
        lines += markdown_table(_ARM_COLUMNS, [_arm_row(arm, step["arms"][arm]) for arm in _arms(step)])
        ratios = step.get("ratios") or {}
        if ratios:
            lines += [
                "",
                "Speedup (baseline / canary): "
                + ", ".join(
                    "%s p50 %s, p99 %s"
                    % (
                        f.upper(),
                        _ratio_text(ratios.get(f), _step_resolution(step, f, "p50_ms")),
                        _ratio_text((ratios.get(f) or {}).get("p99"), _step_resolution(step, f, "p99_ms")),
                    )
                    for f in ("ttft", "tpot", "e2e")
                ),
                "",
                "The figures come from histogram buckets: a quantile is known to its bucket, and a ratio to the "
                "range the two buckets allow (shown after each interval); `>=` marks a quantile past the last "
                "bucket.",
            ]
        lines += _methods_markdown(step)
        lines += canary_change.positions_markdown(step)
        lines += ["", "Reasons:", ""] + ["- %s" % r for r in step["reasons"]] + [""]
        if step.get("notes"):
            lines += ["Notes:", ""] + ["- %s" % n for n in step["notes"]] + [""]
    lines += plot_links(report)
    return "\n".join(lines) + "\n"


def _methods_markdown(step):
    """How the step judged each latency figure: the histograms' p50 where their buckets resolve it, else the mean
    from vLLM's _sum/_count (batch means over the scrape intervals; the histogram method where there are none)."""
    methods = step.get("methods") or {}
    if not methods:
        return []
    return ["", "How each figure was judged:", ""] + [
        "- %s" % methods[f] for f in ("ttft", "tpot", "e2e") if methods.get(f)
    ]


def _step_resolution(step, figure, quantile):
    arms = step.get("arms") or {}
    pick = [((arms.get(a) or {}).get("figures") or {}).get(figure) for a in ("baseline", "canary")]
    return bucket_resolution(pick[0], pick[1], quantile)


PLOT_FIGURES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E"))
ARM_STYLE = {"baseline": "#1f77b4", "canary": "#d62728"}


def _arm_series(steps, arm, figure, quantile):
    """(traffic percents, values in ms) of one arm's figure over the steps that measured it."""
    xs, ys = [], []
    for step in steps:
        value = (((step.get("arms") or {}).get(arm) or {}).get("figures") or {}).get(figure) or {}
        if value.get(quantile) is not None:
            xs.append(step["traffic_percent"])
            ys.append(value[quantile])
    return xs, ys


def render_plots(report, out_dir):
    """latency.png: per step (traffic percent), both arms' p50 (solid) and p99 (dashed) of TTFT, TPOT
    and E2E. Nothing when no step measured both arms (an abort before the first window)."""
    plt = pyplot()[0]
    steps = [s for s in report.get("steps") or [] if s.get("arms")]
    if plt is None or not steps:
        return []
    fig, axes = plt.subplots(1, len(PLOT_FIGURES), figsize=(12, 4))
    for ax, (figure, title) in zip(axes, PLOT_FIGURES):
        for arm, colour in ARM_STYLE.items():
            for quantile, style in (("p50_ms", "-"), ("p99_ms", "--")):
                xs, ys = _arm_series(steps, arm, figure, quantile)
                if xs:
                    label = "%s %s" % (arm, quantile[:3])
                    ax.plot(xs, ys, style, marker="o", color=colour, label=label)
        ax.set_title("%s (ms)" % title)
        ax.set_xlabel("canary share of traffic (%)")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "Canary of %s/%s: %s" % (report.get("namespace"), report.get("service"), report.get("outcome"))
    )
    fig.tight_layout()
    path = os.path.join(out_dir, "latency.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return [{"file": "latency.png", "title": "Latency of both arms per step", "path": path}] + (
        canary_change.render_positions_plot(report, out_dir))
