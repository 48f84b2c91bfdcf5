# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter: is speculative decoding on in an InferenceService's engine arguments."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.operate.acceptance_guard import (
    isvc_speculative as _state,
)
from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import VersionError, parse_version


def isvc_speculative(isvc):
    """InferenceService (or null) -> {exists, on, config, flags, digest}."""
    if isvc is not None and not isinstance(isvc, Mapping):
        raise AnsibleFilterError("isvc_speculative expects an InferenceService mapping, got %s" % type(isvc).__name__)
    return _state(dict(isvc) if isvc else None)


def serving_api_version(kind, kserve_version=""):
    """specpilot_resource | serving_api_version(specpilot_kserve_version) -> the apiVersion to read a service of that
    kind with: an InferenceService's, or the LLMInferenceService version the KServe release stores (v1alpha2 when
    the release is not given)."""
    kind = kind or service_plan.KINDS[0]
    if kind != llmisvc.KIND:
        return service_plan.API_VERSIONS.get(kind) or service_plan.API_VERSIONS[service_plan.KINDS[0]]
    try:
        version = parse_version(str(kserve_version)) if kserve_version else None
    except VersionError as exc:
        raise AnsibleFilterError("serving_api_version: %s" % exc)
    return llmisvc.api_version(version)


def serving_pod_labels(kind, name):
    """specpilot_resource | serving_pod_labels(name) -> the label selectors of the pods that run the engine: an
    InferenceService's predictor pods, an LLMInferenceService's decode pods (service/llmisvc.py workload)."""
    if (kind or service_plan.KINDS[0]) == llmisvc.KIND:
        return list(llmisvc.workload(name)["pod_labels"])
    return ["serving.kserve.io/inferenceservice=%s" % name]


class FilterModule(object):
    """specpilot guard filters."""

    def filters(self):
        return {
            "isvc_speculative": isvc_speculative,
            "serving_api_version": serving_api_version,
            "serving_pod_labels": serving_pod_labels,
        }
