# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
"""Filters of the canary role: where each arm's pods answer, and whether the cluster can split
traffic at all.  The logic lives in module_utils/canary.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils import canary
from ansible_collections.specpilot.core.plugins.module_utils.versions import parse_version


def canary_arm_pods(pods, port=8080):
    """k8s_info resources | canary_arm_pods(port) -> [{pod, url}] of the ready pods' /metrics."""
    if not isinstance(pods, (list, tuple)):
        raise AnsibleFilterError(
            "canary_arm_pods expects the resources of k8s_info, got %s" % type(pods).__name__
        )
    return canary.arm_pods(list(pods), port)


def canary_support_problem(kserve_version, deployment_mode):
    """kserve_detect's version | canary_support_problem(deployment_mode) -> why no canary here, or ''."""
    try:
        version = parse_version(str(kserve_version))[:3] if kserve_version else None
    except ValueError as exc:
        raise AnsibleFilterError("canary_support_problem: %s" % exc)
    return canary.support_problem(version, deployment_mode)


class FilterModule(object):
    """specpilot canary filters."""

    def filters(self):
        return {"canary_arm_pods": canary_arm_pods, "canary_support_problem": canary_support_problem}
