# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Is a failed API call worth retrying, and how long to wait before it: the one retry helper of the
collection (the Kubernetes reads and Lease writes of plugin_utils, the OCI registry client, the staging
program's HTTP downloads).

kubernetes.core puts the API server's Status in the failure message (``"code":500``) or in
``status`` / ``error``.  429 (throttled) and 500/502/503/504 are transient; 409 (conflict) is
transient only where the caller says so (a write that re-reads before it writes again); 400, 401,
403, 404 and 422 are answers that a retry will not change.  A failure that names no status (a
connection error, a discovery request that failed) is retried.

:class:`Backoff` waits between attempts: exponential backoff with full jitter, capped
(``random(0, min(cap, base * 2**attempt))``), or what the server's ``Retry-After`` asks on a 429 or
503 (delta-seconds or an HTTP-date, RFC 9110 section 10.2.3), itself capped; with ``total``, no attempt
starts more than that many seconds after the first (the time a retried call may take is bounded).

Pure standard library, Python 3.8+: the staging program (``staging/stager.py``) runs it in a pod, where
this file is shipped beside it in the Job's ConfigMap (``staging/pvc_staging.py`` ``program_files``).
"""

from __future__ import annotations

import email.utils
import random
import re
import time

__all__ = [
    "TRANSIENT",
    "RETRY_STATUS",
    "HTTP_RETRY_STATUS",
    "HTTP_FINAL",
    "FINAL",
    "status_code",
    "transient_status",
    "retryable",
    "retry_after_seconds",
    "retry_after_of",
    "Backoff",
    "likely_cause",
    "explained",
]

RETRY_STATUS = (429, 500, 502, 503, 504)
TRANSIENT = (409,) + RETRY_STATUS
FINAL = (400, 401, 403, 404, 405, 410, 415, 422)
# a plain HTTP download (the staging program's sources): a request timeout (408) and Too Early (425) are
# worth a retry too; a missing or forbidden file, or a server that cannot do the method, is an answer
HTTP_RETRY_STATUS = (408, 425) + RETRY_STATUS
HTTP_FINAL = (401, 403, 404, 405, 410, 501)
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


def transient_status(code):
    """True for an HTTP status a retry may get past: 429 and every 5xx (an API server restarting, a
    proxy in front of it); the reads and the writes classify by this one rule."""
    return code in RETRY_STATUS or (code is not None and code >= 500 and code not in FINAL)


def retryable(result, conflict=True):
    """True when the result failed and a retry may succeed (a 409 only with ``conflict``)."""
    if not isinstance(result, dict) or not result.get("failed"):
        return False
    code = status_code(result)
    if code is None:
        return True
    if code == 409:
        return bool(conflict)
    return transient_status(code)


def retry_after_seconds(value, now=None):
    """The seconds a ``Retry-After`` header value asks for (delta-seconds or an HTTP-date), or None
    when it is absent or unreadable.  A date in the past asks for 0."""
    if value is None:
        return None
    text = str(value).strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_of(code, headers):
    """The ``Retry-After`` header of a 429 or 503 answer (the statuses that carry it), else None."""
    if code not in (429, 503) or headers is None:
        return None
    try:
        return headers.get("Retry-After")
    except AttributeError:
        return None


class Backoff(object):
    """Attempts of one call, with waits between them.

    ``attempts``: how many calls in all; ``base``/``cap``: the exponential backoff with full jitter;
    ``max_retry_after``: the longest a ``Retry-After`` is honoured (a longer one waits this long);
    ``total``: seconds after the first attempt's start past which no attempt starts (None: no bound), so a
    wait that would end later gives up at once with the last outcome.
    ``sleep``, ``rand`` and ``clock`` are there for tests (a fake clock)."""

    def __init__(
        self,
        attempts=5,
        base=0.5,
        cap=10.0,
        max_retry_after=60.0,
        sleep=time.sleep,
        rand=random.random,
        clock=time.time,
        total=None,
    ):
        self.attempts = max(1, int(attempts))
        self.total = None if total is None else float(total)
        self.base = float(base)
        self.cap = float(cap)
        self.max_retry_after = float(max_retry_after)
        self._sleep = sleep
        self._rand = rand
        self._clock = clock

    def delay(self, attempt, retry_after=None):
        """Seconds to wait after failed attempt ``attempt`` (0-based)."""
        asked = retry_after_seconds(retry_after, self._clock())
        if asked is not None:
            return min(asked, self.max_retry_after)
        return self._rand() * min(self.cap, self.base * (2 ** min(attempt, 62)))

    def run(self, call, verdict):
        """``call()`` until ``verdict(outcome, exc)`` says it is final or the attempts are spent; the
        last outcome is returned (or its exception raised).  ``verdict`` returns ``(retry, retry_after)``:
        whether to try again, and the answer's ``Retry-After`` value (None without one)."""
        started = self._clock()
        for attempt in range(self.attempts):
            outcome = exc = None
            try:
                outcome = call()
            except Exception as error:  # noqa: BLE001 - the verdict decides; unknown ones are raised
                exc = error
            again, retry_after = verdict(outcome, exc)
            wait = self.delay(attempt, retry_after) if again and attempt + 1 < self.attempts else None
            if wait is None or not self._within_total(started, wait):
                if exc is not None:
                    raise exc
                return outcome
            self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _within_total(self, started, wait):
        """True when an attempt after ``wait`` more seconds still starts within ``total`` of ``started``."""
        return self.total is None or self._clock() - started + wait <= self.total


# What a failed call's message says about its cause, and what the user runs next (issue 39: deploy with the
# lab down printed a cut-off connection error). First match wins.
_CAUSES = (
    (
        re.compile(
            r"Invalid kube-config file|No configuration found|kubeconfig.*(not found|does not exist)"
            r"|Could not create API client",
            re.I,
        ),
        "no usable kubeconfig",
        "set KUBECONFIG or specpilot_k8s_kubeconfig (and specpilot_k8s_context); for the lab: `make lab-up`, "
        "then the KUBECONFIG line `make lab-status` prints",
    ),
    (
        re.compile(
            r"Connection refused|Failed to establish a new connection|Max retries exceeded|Name or service not known"
            r"|Temporary failure in name resolution|nodename nor servname|No route to host|Connection reset"
            r"|timed out|no answer from the API server|RemoteDisconnected",
            re.I,
        ),
        "the cluster's API server did not answer",
        "is the cluster reachable? check KUBECONFIG / specpilot_k8s_kubeconfig and specpilot_k8s_context; "
        "for the lab: `make lab-up` (`make lab-status` says whether it runs)",
    ),
    (
        re.compile(r'"code"\s*:\s*401|\b401\b.*Unauthorized|Unauthorized', re.I),
        "the API server refused the credentials (401)",
        "is the token expired? create a new one (README, \"Against a real cluster\") or check specpilot_k8s_api_key",
    ),
    (
        re.compile(r"the server could not find the requested resource|no matches for kind|"
                   r"Failed to find exact match for|could not find the resource", re.I),
        "the cluster does not know this kind: its CRD is not installed",
        "install the operator that owns the CRD, or check the apiVersion",
    ),
)


def likely_cause(text):
    """``(cause, next step)`` for a failed call's message (a kubeconfig that is missing, an API server that
    does not answer, credentials refused, a kind the cluster does not know), or None."""
    for pattern, cause, step in _CAUSES:
        if pattern.search(str(text or "")):
            return cause, step
    return None


def explained(text):
    """``text`` with its likely cause and the next step first (so a cut-off message keeps them):
    ``<cause>: <next step>. <text>``; ``text`` as it is when the cause is not known."""
    found = likely_cause(text)
    if not found:
        return text
    return "%s - %s. Details: %s" % (found[0], found[1], text)
