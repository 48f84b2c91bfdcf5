# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """Read options of the deploy modules that read through kubernetes.core's k8s lookup (their
    connection options: the k8s_auth fragment)."""

    DOCUMENTATION = r"""
options:
  retries:
    description:
      - Attempts per API read on transient errors (429, 5xx, connection errors, no answer within
        O(request_timeout)), with exponential back-off and full jitter from 0.5 s (at most 5 s), or the
        C(Retry-After) of a 429 or 503 (at most 60 s).
    type: int
    default: 8
  request_timeout:
    description:
      - Seconds each API read may take before it counts as failed (and is retried).
    type: int
    default: 30
notes:
  - Runs on the controller as an action plugin; reads go through the C(kubernetes.core.k8s) lookup in the Ansible
    worker process (one API client per configuration, no module transfer), so polling is cheap.
requirements:
  - kubernetes.core >= 6.0 and the kubernetes Python client on the controller
"""
