# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
"""matplotlib for the reports' PNG plots (Agg backend: no display needed), imported the first time a
report draws, not when a module or plugin loads. ansible-playbook imports specpilot's plugins once
(callback/preload.py), and most playbooks draw nothing: matplotlib and numpy cost about 0.2 s of CPU
a playbook there. Reports that draw get the same matplotlib; without it they say why in a note."""

from __future__ import annotations

__all__ = ["pyplot"]

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
