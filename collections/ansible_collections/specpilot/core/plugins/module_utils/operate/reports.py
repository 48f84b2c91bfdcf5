# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The Markdown of the rollback and guard reports, from the results their roles assemble.

Every report of the collection is rendered in Python, beside the decisions it reports (smoke:
``verify/smoke.py``, benchmark: ``benchmark/bench_report.py``, canary: ``operate/canary.py``, these
two here) and written by ``report/files.py``; ``specpilot.core.report_write`` is the task that does it
for the rollback and guard roles.
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.common import get_path
from ansible_collections.specpilot.core.plugins.module_utils.operate.acceptance_guard import judged
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table

__all__ = ["rollback_markdown", "guard_markdown"]


def _code(values):
    return " ".join("`%s`" % v for v in values) or "nothing"


def _cell(args):
    return "<br>".join(args).replace("|", "\\|") or "none"


def _verification(v):
    if v is None:
        return "not run"
    if get_path(v, "ok"):
        return "passed"
    return "FAILED: " + "; ".join(get_path(v, "problems") or [])


def _reclaim_line(r):
    rc = r["reclaim"]
    dropped = rc.get("storage_uri_dropped")
    pvc = rc.get("pvc")
    mc = rc.get("modelcar")
    if mc:
        modelcar = "repointed" if mc.get("new_digest") else (get_path(mc, "result", "msg") or "not changed")
    else:
        modelcar = "n/a"
    job = " (job: %s)" % r["reclaim_job"] if r.get("reclaim_job") else ""
    return "- Draft reclaim: draft %s; storageUris entry dropped: %s; PVC: %s%s; Modelcar: %s" % (
        rc.get("draft_path") or "none found",
        (get_path(dropped, "uri") or "no") if dropped else "no",
        "%s/%s" % (pvc.get("claim"), pvc.get("subpath")) if pvc else "n/a",
        job,
        modelcar,
    )


def _modelcar_lines(r):
    mc = r["reclaim"]["modelcar"]
    res = mc.get("result") or {}
    rows = [
        ("before", "`%s`" % mc.get("digest"), "`%s`" % mc.get("storage_uri")),
        (
            "after",
            "`%s`" % (mc.get("new_digest") or mc.get("digest")),
            "`%s`" % (mc.get("new_storage_uri") or mc.get("storage_uri")),
        ),
    ]
    lines = [""] + markdown_table(("Modelcar image", "digest", "storageUri"), rows) + [""]
    if mc.get("new_digest"):
        layer = res.get("dropped_layer") or {}
        lines.append(
            "Image without the draft: `%s`; draft layer `%s` (%s, %s bytes) no longer referenced; found by %s; "
            "%s bytes uploaded%s. The old image stays in the registry (mode restore puts it back)."
            % (
                res.get("image", ""),
                layer.get("digest", "?"),
                layer.get("mount", "?"),
                res.get("bytes_reclaimed", 0),
                res.get("identified_by", "?"),
                res.get("bytes_uploaded", 0),
                " (check mode: nothing pushed)" if r.get("check_mode") else "",
            )
        )
    return lines


def _rollback_summary(r):
    smoke = r.get("smoke") or {}
    lines = [
        "- Result: %s%s"
        % (
            "changed" if r.get("changed") else "nothing to change",
            " (check mode: nothing written)" if r.get("check_mode") else "",
        ),
        "- Rollout: %s - %s"
        % (
            "ready" if get_path(r, "rollout", "done") else "not ready",
            get_path(r, "rollout", "message") or "",
        ),
        "- Verification: " + _verification(r.get("verification")),
        "- Engine (smoke): %s%s"
        % (smoke.get("verdict") or "not run", " - %s" % smoke["message"] if smoke.get("message") else ""),
    ]
    note = get_path(r, "gpu_memory_utilization", "note")
    if note:
        lines.append("- gpu_memory_utilization: %s" % note)
    if r.get("reclaim"):
        lines.append(_reclaim_line(r))
        if r["reclaim"].get("modelcar"):
            lines += _modelcar_lines(r)
    return lines


def rollback_markdown(r):
    """The rollback report of one service (``specpilot_rollback_result``) as Markdown."""
    lines = ["# Rollback of %s/%s (mode %s)" % (r["namespace"], r["name"], r["mode"]), ""]
    if r.get("skipped"):
        return "\n".join(lines + ["Skipped: the InferenceService does not exist."]) + "\n"
    before, after = r.get("before") or {}, r.get("after") or {}
    lines += _rollback_summary(r)
    rows = [
        ("spec digest", "`%s`" % before.get("digest"), "`%s`" % after.get("digest")),
        ("speculative args", _cell(before.get("speculative") or []), _cell(after.get("speculative") or [])),
    ]
    lines += [""] + markdown_table(("", "before", "after"), rows)
    lines += [
        "",
        "Removed: " + _code(r.get("removed_args") or []),
        "",
        "Added: " + _code(r.get("added_args") or []),
        "",
        "## Args before",
    ]
    lines += ["- `%s`" % a for a in before.get("args") or []]
    lines += ["", "## Args after"] + ["- `%s`" % a for a in after.get("args") or []]
    return "\n".join(lines) + "\n"


def _number(value, fmt):
    return fmt % value if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


_GUARD_COLUMNS = (
    "service",
    "judged",
    "acceptance",
    "mean acceptance length",
    "per position",
    "drafted",
    "low in a row",
    "action",
    "latest benchmark/canary verdict",
)


def _guard_row(s):
    per = " / ".join(str(round(p, 3)) for p in s.get("per_position") or []) or "-"
    return (
        "%s/%s" % (s.get("namespace"), s.get("name")),
        judged(s.get("status")),
        _number(s.get("acceptance_rate"), "%.3f"),
        _number(s.get("mean_acceptance_length"), "%.2f"),
        per,
        s["drafted"] if s.get("drafted") is not None else "-",
        "%s/%s" % (s.get("streak"), s.get("consecutive_readings")),
        "%s%s" % (s.get("action"), " (rolled back)" if s.get("rolled_back") else ""),
        _verdict_cell(s.get("latest_verdict")),
    )


def _verdict_cell(verdict):
    """The latest benchmark or canary verdict in the guard's table: ``canary aborted (at)``, else ``-``."""
    if not verdict:
        return "-"
    return "%s %s (%s)" % (verdict.get("kind"), verdict.get("verdict") or "no verdict", verdict.get("at"))


def _guard_section(s):
    lines = ["", "## %s/%s" % (s.get("namespace"), s.get("name")), "", str(s.get("message"))]
    if s.get("acceptance_band"):
        lines += ["", "Band: %s" % s["acceptance_band"]["line"]]
    if (s.get("recorded") or {}).get("text"):
        lines += ["", "Recorded (smoke, the same vLLM release): %s" % s["recorded"]["text"]]
    if s.get("findings"):
        lines += [""] + ["- %s" % f for f in s["findings"]]
    if s.get("history"):
        readings = ", ".join(
            "%s%s" % (h.get("status"), " %s" % h["rate"] if h.get("rate") is not None else "")
            for h in s["history"]
        )
        lines += ["", "Last readings, oldest first: %s." % readings]
    return lines


def guard_markdown(report):
    """The guard's report over every service of the play (``specpilot_guard_report``) as Markdown."""
    t = report["thresholds"]
    lines = [
        "# specpilot acceptance guard",
        "",
        "%s, mode %s, auto-rollback %s:"
        % (report["generated_at"], report["mode"], "on" if report.get("auto_rollback") else "off"),
        "low below %s, borderline below %s," % (t["min_acceptance_rate"], t["warn_acceptance_rate"]),
        "judged from %s draft tokens per window," % t["min_draft_tokens"],
        "action after %s low readings in a row." % t["consecutive_readings"],
        "The guard judges acceptance only: whether speculative decoding pays off in latency is the benchmark's",
        "and the canary's verdict (the last column: the latest of their reports, when one exists).",
        "",
    ]
    lines += markdown_table(_GUARD_COLUMNS, [_guard_row(s) for s in report["services"]])
    for s in report["services"]:
        lines += _guard_section(s)
    return "\n".join(lines) + "\n"
