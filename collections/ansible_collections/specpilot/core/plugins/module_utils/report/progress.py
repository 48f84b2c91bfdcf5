# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Progress of a long module while it runs. A module's output is its JSON result, at the end; so a
long module (model_fetch, modelcar_build) writes its progress lines through a ProgressTee, which
keeps them for the result and appends each to ``progress_file`` at once. The module's action plugin
(plugin_utils/progress_relay.py) shows the new lines of that file while the module runs."""

from __future__ import annotations

import io
import time

__all__ = ["ProgressTee", "ByteProgress", "human"]


class ProgressTee(io.TextIOBase):
    """A text stream: what is written is kept (``getvalue``) and, with a path, appended to that file
    and flushed at once. ``line(text)`` writes one line."""

    def __init__(self, path=None):
        super().__init__()
        self._kept = io.StringIO()
        self._file = open(path, "a", encoding="utf-8") if path else None

    def writable(self):
        return True

    def write(self, text):
        self._kept.write(text)
        if self._file is not None:
            self._file.write(text)
            self._file.flush()
        return len(text)

    def line(self, text):
        self.write(text + "\n")

    def getvalue(self):
        return self._kept.getvalue()

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


def human(n):
    """Bytes as ``512 B``, ``1.5 MiB``, ``2.0 GiB``."""
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return "%.1f %s" % (n, unit) if unit != "B" else "%d B" % n
        n /= 1024.0
    return "%.1f TiB" % n


class ByteProgress(object):
    """Bytes done of a known total: ``add(n)`` counts, and at most every ``every`` seconds
    ``line(text)`` gets ``<label>: 1.2 GiB of 5.0 GiB (24%), 85.3 MiB/s``; ``finish()`` says the
    total and the mean rate."""

    def __init__(self, label, total, line, every=10.0, clock=time.monotonic):
        self.label, self.total, self._line, self._every, self._clock = (
            label,
            int(total or 0),
            line,
            every,
            clock,
        )
        self.done = 0
        self._start = self._last = clock()

    def add(self, n):
        self.done += n
        now = self._clock()
        if now - self._last >= self._every:
            self._last = now
            self._line(self.text(now))

    def text(self, now=None):
        elapsed = max((self._clock() if now is None else now) - self._start, 1e-6)
        pct = " (%d%%)" % (100 * self.done // self.total) if self.total else ""
        return "%s: %s of %s%s, %s/s" % (
            self.label,
            human(self.done),
            human(self.total),
            pct,
            human(self.done / elapsed),
        )

    def finish(self):
        self._line(self.text())
