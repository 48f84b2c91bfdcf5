# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The smoke report of one service: :func:`build_report` (JSON), :func:`render_markdown`, :func:`render_plot`,
:func:`write_report`, and the :func:`stats` the play keeps.  The verdict itself is :mod:`verify.smoke`."""

from __future__ import annotations

import datetime
import json
import os

from ansible_collections.specpilot.core.plugins.module_utils.common import write_if_changed
from ansible_collections.specpilot.core.plugins.module_utils.report.files import write_json_and_markdown
from ansible_collections.specpilot.core.plugins.module_utils.report.plots import plot_links, pyplot
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table
from ansible_collections.specpilot.core.plugins.module_utils.verify.smoke import REPORT_FORMAT
from ansible_collections.specpilot.core.plugins.module_utils.verify.smoke_checks import _fmt


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_report(result, data):
    """The JSON-able report of one smoke run."""
    plan = data.get("plan") or {}
    log_facts = data.get("log_facts") or {}
    probes = data.get("probes") or {}
    m_after = data.get("metrics_after") or {}
    request = dict(data.get("request") or {})
    return {
        "format": REPORT_FORMAT,
        "kind": "specpilot-smoke",
        "generated_at": data.get("generated_at") or _now(),
        "service": result["service"],
        "namespace": plan.get("namespace"),
        "expect": result["expect"],
        "verdict": result["verdict"],
        "message": result["message"],
        "checks": result["checks"],
        "figures": result["figures"],
        "interpretation": result["interpretation"],
        "acceptance_band": result.get("acceptance_band"),
        "thresholds": result["thresholds"],
        "plan": {
            "speculative_config": plan.get("speculative_config"),
            "speculative_args": plan.get("speculative_args"),
            "vllm_version": plan.get("vllm_version"),
            "spec_digest": plan.get("spec_digest"),
        },
        "engine": {
            "pod": result.get("pod"),
            "vllm_version": log_facts.get("vllm_version"),
            "engine": log_facts.get("engine"),
            "speculative_config": log_facts.get("speculative_config"),
            "requested_speculative_config": log_facts.get("requested_speculative_config"),
            "served_model_name": log_facts.get("served_model_name"),
            "warnings": [w for w in log_facts.get("log_warnings") or [] if not w.get("after_shutdown")],
            "errors": log_facts.get("log_errors") or [],
        },
        "access": data.get("access") or {},
        "request": request,
        "probes": {
            k: probes.get(k)
            for k in (
                "url",
                "endpoint",
                "requests",
                "succeeded",
                "failed",
                "completion_tokens",
                "prompt_tokens",
                "latency_mean_s",
                "elapsed_s",
            )
        },
        "probe_results": [
            {
                k: r.get(k)
                for k in ("status", "ok", "latency_s", "completion_tokens", "finish_reason", "error")
            }
            for r in probes.get("results") or []
        ],
        "metrics": {
            "engine_era": m_after.get("engine_era"),
            "spec_decode_enabled": m_after.get("spec_decode_enabled"),
            "notes": m_after.get("notes") or [],
        },
        "notes": [],
        "plots": [],
    }


def _status_mark(status):
    return {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "info": "info", "skip": "skip"}[status]


def _md_escape(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_header(report):
    """Title, message, and the plan, engine and probes in a few lines."""
    lines = ["# Smoke check: %s - %s" % (report["service"], report["verdict"].upper()), ""]
    lines.append("%s" % report["message"])
    lines.append("")
    lines.append(
        "- namespace: `%s`; expected speculative decoding: **%s**; generated %s"
        % (report.get("namespace"), report["expect"], report["generated_at"])
    )
    plan_cfg = report["plan"].get("speculative_config")
    if plan_cfg:
        lines.append("- planned: `%s`" % json.dumps(plan_cfg, sort_keys=True))
    eng = report["engine"]
    lines.append(
        "- engine: pod `%s`, vLLM %s, %s"
        % (
            eng.get("pod"),
            eng.get("vllm_version") or "?",
            (eng.get("speculative_config") or {}).get("repr") or "speculative_config=None",
        )
    )
    probes = report["probes"]
    if probes.get("requests"):
        req = report["request"]
        lines.append(
            "- probes: %s/%s ok via %s (%s), temperature %s, max_tokens %s"
            % (
                probes.get("succeeded"),
                probes.get("requests"),
                report["access"].get("mode", "?"),
                probes.get("url"),
                req.get("temperature"),
                req.get("max_tokens"),
            )
        )
    return lines


def _at(values, i):
    return values[i] if i < len(values) else None


def _md_positions(met, log):
    """The per-position acceptance of /metrics and of the log side by side (none when neither has one)."""
    k = max(len(met["per_position_acceptance"]), len(log["per_position_acceptance"]))
    if not k:
        return []
    rows = [
        (
            "%d" % (i + 1),
            _fmt(_at(met["per_position_acceptance"], i), 3),
            _fmt(_at(log["per_position_acceptance"], i), 3),
        )
        for i in range(k)
    ]
    return [""] + markdown_table(("position", "/metrics", "log"), rows)


def _md_acceptance(report):
    """The acceptance figures of /metrics and the log, per position, the thresholds and the band."""
    fig = report["figures"]
    met, log = fig["metrics"], fig["log"]
    rows = [
        ("draft acceptance rate", _fmt(met["acceptance_rate"], 3), _fmt(log["acceptance_rate"], 3)),
        ("mean acceptance length", _fmt(met["mean_acceptance_length"]), _fmt(log["mean_acceptance_length"])),
        ("drafted tokens", met["num_draft_tokens"], log["drafted_tokens"]),
        ("accepted tokens", met["num_accepted_tokens"], log["accepted_tokens"]),
        ("drafts", met["num_drafts"], ""),
        ("log windows", "", log["windows"]),
    ]
    lines = ["", "## Acceptance", ""]
    lines += markdown_table(("figure", "/metrics (probe window)", "engine log (after the probes)"), rows)
    lines += _md_positions(met, log)
    th = report["thresholds"]
    lines += [
        "",
        "Thresholds: fail below %s, warn below %s%s."
        % (
            _fmt(th["min_acceptance_rate"]),
            _fmt(th["warn_acceptance_rate"]),
            (
                (", mean acceptance length at least %s" % _fmt(th["min_mean_acceptance_length"]))
                if th.get("min_mean_acceptance_length")
                else ""
            ),
        ),
    ]
    if report.get("acceptance_band"):
        lines += ["", "Band: %s" % report["acceptance_band"]["line"]]
    return lines


def _md_latency(latency):
    if not latency:
        return []
    rows = [
        ("%s (`%s`)" % (key, lat.get("metric")), "%.1f" % (lat["mean_s"] * 1000.0), lat.get("count"))
        for key, lat in sorted(latency.items())
    ]
    lines = ["", "## Latency in the probe window (/metrics)", ""]
    return lines + markdown_table(("histogram", "mean (ms)", "observations"), rows)


def _md_list(title, items):
    """A section of bullet points, none without items."""
    return ["", "## %s" % title, ""] + ["- %s" % item for item in items] if items else []


def render_markdown(report):
    """The report as Markdown (one page per service)."""
    lines = _md_header(report)
    lines += ["", "## Checks", ""]
    rows = [(c["title"], _status_mark(c["status"]), _md_escape(c["message"])) for c in report["checks"]]
    lines += markdown_table(("check", "status", "detail"), rows)
    if report["expect"] == "on":
        lines += _md_acceptance(report)
    lines += _md_latency(report["figures"].get("latency"))
    lines += _md_list("Reading", report["interpretation"])
    warnings = report["engine"].get("warnings")
    lines += _md_list(
        "Engine warnings",
        ["`%s` (line %s): %s" % (w.get("code"), w.get("line"), w.get("message")) for w in warnings or []],
    )
    if report.get("plots"):
        lines += [""] + plot_links(report)[:-1]
    lines += _md_list("Notes", report.get("notes"))
    return "\n".join(lines) + "\n"


# the thresholds drawn on acceptance.png: (threshold, colour, line style, legend)
_THRESHOLD_LINES = (
    ("min_acceptance_rate", "#c44e52", "--", "fail below %.2f"),
    ("warn_acceptance_rate", "#dd8452", ":", "warn below %.2f"),
    ("collapse_threshold", "#8c8c8c", "-.", "collapse %.2f"),
)


def render_plot(report, path):
    """acceptance.png: per-position acceptance (/metrics and log) against the thresholds.
    Returns False (nothing written) without data or without matplotlib."""
    plt = pyplot()[0]
    if plt is None:
        return False
    fig_data = report["figures"]
    met = [v if v is not None else 0.0 for v in fig_data["metrics"]["per_position_acceptance"]]
    log = [v if v is not None else 0.0 for v in fig_data["log"]["per_position_acceptance"]]
    if not met and not log:
        return False
    th = report["thresholds"]
    k = max(len(met), len(log))
    series = [
        (s, label, colour)
        for s, label, colour in (
            (met, "/metrics (probe window)", "#4c72b0"),
            (log, "engine log windows", "#dd8452"),
        )
        if s
    ]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (values, label, colour) in enumerate(series):
        xs = [p + 1 + (i - (len(series) - 1) / 2.0) * width for p in range(len(values))]
        ax.bar(xs, values, width, label=label, color=colour)
        for x, v in zip(xs, values):
            ax.text(x, v + 0.01, "%.2f" % v, ha="center", va="bottom", fontsize=8)
    rate = fig_data.get("acceptance_rate")
    if rate is not None:
        ax.axhline(rate, color="#333333", linewidth=1.2, label="overall acceptance %.2f" % rate)
    for key, colour, style, label in _THRESHOLD_LINES:
        ax.axhline(th[key], color=colour, linestyle=style, linewidth=1, label=label % th[key])
    ax.set_xticks(list(range(1, k + 1)))
    ax.set_xlabel("draft position (slot)")
    ax.set_ylabel("acceptance (accepted at position / drafts)")
    ax.set_ylim(0, 1.35)
    mal = fig_data.get("mean_acceptance_length")
    ax.set_title(
        "%s: %s - acceptance %s, mean acceptance length %s"
        % (report["service"], report["verdict"].upper(), _fmt(rate), _fmt(mal)),
        fontsize=10,
    )
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png", metadata={"Software": None})
    plt.close(fig)
    return True


def write_report(report, out_dir, basename="smoke", plot=True):
    """Write <basename>.json, <basename>.md and (with per-position data) acceptance.png.

    Returns {json, markdown, plot, changed}."""
    os.makedirs(out_dir, exist_ok=True)
    plot_path = os.path.join(out_dir, "%s-acceptance.png" % basename)
    report["plots"] = []
    drawn = False
    if plot:
        missing = pyplot()[1]
        if missing:
            report["notes"].append("plot skipped: matplotlib is not installed (%s)" % missing)
        else:
            drawn = render_plot(report, plot_path + ".new")
            if drawn:
                report["plots"].append(
                    {"file": os.path.basename(plot_path), "title": "Per-position acceptance"}
                )
    changed = False
    if drawn:
        with open(plot_path + ".new", "rb") as fh:
            changed = write_if_changed(plot_path, fh.read()) or changed
        os.remove(plot_path + ".new")
    paths, written = write_json_and_markdown(out_dir, basename, report, render_markdown(report))
    paths.update(plot=plot_path if drawn else None, changed=written or changed)
    return paths


def stats(result, files=None):
    """The compact figures for set_stats (AWX shows them on the job)."""
    fig = result["figures"]
    out = {
        "verdict": result["verdict"],
        "expect": result["expect"],
        "message": result["message"],
        "acceptance_rate": fig.get("acceptance_rate"),
        "acceptance_rate_log": fig["log"].get("acceptance_rate"),
        "mean_acceptance_length": fig.get("mean_acceptance_length"),
        "per_position_acceptance": fig.get("per_position_acceptance"),
        "num_draft_tokens": fig["metrics"].get("num_draft_tokens"),
        "num_accepted_tokens": fig["metrics"].get("num_accepted_tokens"),
        "acceptance_band": (result.get("acceptance_band") or {}).get("band"),
        "failed_checks": [c["id"] for c in result["checks"] if c["status"] == "fail"],
        "warned_checks": [c["id"] for c in result["checks"] if c["status"] == "warn"],
    }
    if files:
        out["report"] = {
            "json": files.get("json"),
            "markdown": files.get("markdown"),
            "plot": files.get("plot"),
        }
    return out
