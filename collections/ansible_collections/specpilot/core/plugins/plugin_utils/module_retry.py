# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Run a write from an action plugin (a kubernetes.core module, or a k8s_api.Writer call: both answer
with a module's result), again while it fails with a transient error (module_utils/k8s/deploy_retry.py:
``retryable`` decides, ``Backoff`` waits - exponential backoff with full jitter).  The result carries
no Retry-After header, so only the backoff applies.  Used by the service lock's writes
(lease_client.py) and by ``specpilot.core.k8s_retry``."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import retryable

__all__ = ["retried"]


def retried(call, backoff, conflict=True):
    """``call()``'s result, called again (``backoff.run``) while it failed with 429, 5xx, no status
    (a connection error), or 409 when ``conflict`` (a write that is not a compare-and-swap: sent again
    as it is, it may pass)."""

    def verdict(out, exc):
        return exc is None and retryable(out, conflict=conflict), None

    return backoff.run(call, verdict)
