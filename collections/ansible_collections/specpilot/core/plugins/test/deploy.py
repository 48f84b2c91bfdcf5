# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Jinja tests of the deploy role."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import retryable


def k8s_retryable(result):
    """result is specpilot.core.k8s_retryable: a failed kubernetes.core task a retry may fix
    (409, 429, 5xx, or no status at all)."""
    return retryable(dict(result) if hasattr(result, "keys") else result)


class TestModule(object):
    """specpilot deploy tests."""

    def tests(self):
        return {"k8s_retryable": k8s_retryable}
