# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Findings: every problem the validator reports is one of these."""

from __future__ import annotations

__all__ = ["Findings", "path_join"]

ERROR = "error"
WARNING = "warning"
NOTE = "note"


def path_join(base, *parts):
    """'speculative' + ('x', 0) -> 'speculative.x[0]'."""
    out = base or ""
    for part in parts:
        if isinstance(part, int):
            out += "[%d]" % part
        elif out:
            out += "." + str(part)
        else:
            out = str(part)
    return out


class Findings(object):
    """Collects errors, warnings and notes as {path, message, hint, code} dicts."""

    def __init__(self, acknowledged=()):
        self.errors = []
        self.warnings = []
        self.notes = []
        # only codes (strings) acknowledge a warning; anything else is the schema's error to report
        self._acknowledged = set(a for a in (acknowledged or ()) if isinstance(a, str))
        self._seen = set()

    def _add(self, bucket, path, message, hint, code):
        key = (path, message)
        if key in self._seen:
            return
        self._seen.add(key)
        bucket.append({"path": path, "message": message, "hint": hint, "code": code})

    def error(self, path, message, hint, code):
        self._add(self.errors, path, message, hint, code)

    def warning(self, path, message, hint, code):
        if code in self._acknowledged:
            self._add(self.notes, path, message + " (acknowledged)", hint, code)
        else:
            self._add(self.warnings, path, message, hint, code)

    def note(self, path, message, hint, code):
        self._add(self.notes, path, message, hint, code)

    def add(self, severity, path, message, hint, code):
        {ERROR: self.error, WARNING: self.warning, NOTE: self.note}[severity](path, message, hint, code)

    def has_errors_under(self, prefix):
        return any(
            e["path"] == prefix or e["path"].startswith(prefix + ".") or e["path"].startswith(prefix + "[")
            for e in self.errors
        )
