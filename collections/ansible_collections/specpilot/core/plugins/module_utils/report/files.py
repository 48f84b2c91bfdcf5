# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The one way a report reaches the disk: ``<basename>.json`` and ``<basename>.md`` in a directory.

Every report of the collection (smoke, benchmark, tuning, canary, rollback, guard) is a dict and its
Markdown rendered in Python; this writes both, each only when its bytes change (so a rerun that
found the same leaves the files, and their times, as they were).
"""

from __future__ import annotations

import json
import os

from ansible_collections.specpilot.core.plugins.module_utils.common import write_if_changed
from ansible_collections.specpilot.core.plugins.module_utils.report.plots import drawn

__all__ = ["report_json", "write_json_and_markdown", "write_report"]


def report_json(report):
    """The JSON bytes of a report: sorted keys, two-space indent, a final newline; values JSON cannot
    hold (a datetime, a set) as their text."""
    return (json.dumps(report, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8")


def write_json_and_markdown(out_dir, basename, report, markdown):
    """Writes out_dir/<basename>.json and .md (out_dir is created when missing).

    Returns ({"json": path, "markdown": path}, written), written True when either file changed."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {
        "json": os.path.join(out_dir, basename + ".json"),
        "markdown": os.path.join(out_dir, basename + ".md"),
    }
    written = write_if_changed(paths["json"], report_json(report))
    written = write_if_changed(paths["markdown"], markdown.encode("utf-8")) or written
    return paths, written


def write_report(out_dir, basename, report, markdown, plots=None, wanted=True):
    """A report with its plots: draws them first (``plots(report, out_dir)``, when given and ``wanted``;
    :func:`plots.drawn`), then writes <basename>.json and the Markdown ``markdown(report)`` renders, which
    links them. Returns ({"json", "markdown", "plots": [paths]}, written)."""
    if plots is not None:
        os.makedirs(out_dir, exist_ok=True)  # the plots go there first
        drawn(report, lambda: plots(report, out_dir), wanted)
    paths, written = write_json_and_markdown(out_dir, basename, report, markdown(report))
    paths["plots"] = [os.path.join(out_dir, p["file"]) for p in report.get("plots") or []]
    return paths, written
