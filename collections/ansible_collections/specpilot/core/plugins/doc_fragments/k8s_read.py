# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment(object):
    """Read options of the deploy modules that read through kubernetes.core's k8s lookup (their
    connection options: the k8s_auth fragment)."""

    DOCUMENTATION = r"""
options:
  retries:
    description:
      - Attempts per API read on transient errors (409, 429, 5xx, connection errors), with exponential
        back-off from 0.5 s (at most 5 s).
    type: int
    default: 8
notes:
  - Runs on the controller as an action plugin; reads go through the C(kubernetes.core.k8s) lookup in the Ansible
    worker process (one API client per configuration, no module transfer), so polling is cheap.
requirements:
  - kubernetes.core >= 6.0 and the kubernetes Python client on the controller
"""
