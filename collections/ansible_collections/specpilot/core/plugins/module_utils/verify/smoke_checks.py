# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What every smoke check shares: the check entry itself and how its figures print."""

from __future__ import annotations

import math


def _number_or_none(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(out):
        return None
    return out


def _fmt(value, digits=2):
    value = _number_or_none(value)
    return "n/a" if value is None else ("%.*f" % (digits, value))


def _curve(values, digits=2):
    return " / ".join(_fmt(v, digits) for v in values)


def _check(cid, status, title, message, **details):
    out = {"id": cid, "status": status, "title": title, "message": message}
    if details:
        out["details"] = details
    return out
