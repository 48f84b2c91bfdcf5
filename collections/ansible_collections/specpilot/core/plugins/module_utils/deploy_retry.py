# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Is a failed kubernetes.core task worth retrying?

kubernetes.core puts the API server's Status in the failure message (``"code":500``) or in
``status`` / ``error``.  409 (conflict), 429 (throttled) and 5xx are transient; 400, 401, 403,
404 and 422 are answers that a retry will not change.  A failure that names no status (a
connection error, a discovery request that failed) is retried.  Pure standard library.
"""

from __future__ import annotations

import re

__all__ = ["TRANSIENT", "FINAL", "status_code", "retryable"]

TRANSIENT = (409, 429, 500, 502, 503, 504)
FINAL = (400, 401, 403, 404, 405, 410, 415, 422)
_CODE = re.compile(r'"code"\s*:\s*(\d{3})')
_REASON = {
    "Conflict": 409,
    "Too Many Requests": 429,
    "Internal Server Error": 500,
    "Service Unavailable": 503,
    "Not Found": 404,
    "Forbidden": 403,
    "Unauthorized": 401,
    "Unprocessable Entity": 422,
    "Bad Request": 400,
}


def status_code(result):
    """The HTTP status a failed kubernetes.core result carries, or None."""
    if not isinstance(result, dict):
        return None
    for key in ("status", "error"):
        value = result.get(key)
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            return int(value)
    match = _CODE.search(str(result.get("msg") or ""))
    if match:
        return int(match.group(1))
    reason = result.get("reason")
    if isinstance(reason, str) and reason in _REASON:
        return _REASON[reason]
    return None


def retryable(result):
    """True when the result failed and a retry may succeed."""
    if not isinstance(result, dict) or not result.get("failed"):
        return False
    code = status_code(result)
    if code is None:
        return True
    return code in TRANSIENT or (code >= 500 and code not in FINAL)
