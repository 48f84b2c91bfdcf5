# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""matplotlib for the reports' PNG plots (Agg backend: no display needed), imported the first time a
report draws, not when a module or plugin loads. ansible-playbook imports specpilot's plugins once
(callback/preload.py), and most playbooks draw nothing: matplotlib and numpy cost about 0.2 s of CPU
a playbook there. Reports that draw get the same matplotlib; without it they say why in a note."""

from __future__ import annotations

import os

__all__ = ["drawn", "plot_links", "pyplot", "saved"]

_LOADED = {}


def pyplot():
    """(matplotlib.pyplot, None), or (None, why) when matplotlib cannot be imported."""
    if not _LOADED:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            _LOADED.update(plt=plt, error=None)
        except ImportError as exc:  # the reports skip their plots with a note naming this
            _LOADED.update(plt=None, error=str(exc))
    return _LOADED["plt"], _LOADED["error"]


def drawn(report, render, wanted=True):
    """Sets ``report["plots"]`` to the plots ``render()`` drew ([{file, title, ...}]), each entry kept
    to its file and title, and returns what render returned. Nothing is drawn when not ``wanted``;
    without matplotlib the report's notes say why there is no plot."""
    report["plots"] = []
    if not wanted:
        return []
    missing = pyplot()[1]
    if missing:
        report.setdefault("notes", []).append("plots skipped: matplotlib is not installed (%s)" % missing)
        return []
    out = render()
    report["plots"] = [{"file": p["file"], "title": p["title"]} for p in out]
    return out


def plot_links(report):
    """The Markdown lines that show a report's plots (files beside the .md), each followed by a blank line."""
    return [line for p in report.get("plots") or [] for line in ("![%s](%s)" % (p["title"], p["file"]), "")]


def saved(fig, out_dir, name, title):
    """Lays ``fig`` out, writes it to out_dir/name (PNG, 90 dpi) and closes it; returns the plot's
    {file, title, path}."""
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=90)
    pyplot()[0].close(fig)
    return {"file": name, "title": title, "path": path}
