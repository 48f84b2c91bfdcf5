# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """The ``lock`` option of the actions that renew the service's lock while they wait (rollout_wait,
    canary_step; module_utils/k8s/deploy_args.py HELD_LOCK)."""

    DOCUMENTATION = r"""
options:
  lock:
    description:
      - The service's lock (C(specpilot.core.service_lock)) this run holds, renewed every third of its I(duration)
        while the task waits - so that the lock can be short (a run that dies leaves the service locked for
        minutes, not for the whole wait) and still cover a long wait.
      - A renewal that fails (the lock expired and another run took it) stops the wait and says so. When
        ansible-playbook is gone (killed), the lock is released and the wait stops.
    type: dict
    suboptions:
      holder:
        description: The C(holder) C(service_lock) returned.
        type: str
        required: true
      resource_version:
        description: The C(resource_version) C(service_lock) returned.
        type: str
        required: true
      duration:
        description: The lock's C(duration) in seconds.
        type: int
        required: true
      name:
        description: The service the lock is of, where the task has no other (C(specpilot.core.canary_step)).
        type: str
      namespace:
        description: Its namespace, with I(name).
        type: str
"""
