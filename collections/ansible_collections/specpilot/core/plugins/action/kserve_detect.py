# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.kserve_detect: read the KServe CRDs and date the release."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_kserve
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import (
    ReadError,
    task_reader,
)


class ActionModule(Action):
    ARGUMENT_SPEC = deploy_args.KSERVE_DETECT

    def act(self, params, task_vars, result):
        result["changed"] = False
        if params.get("given"):
            result.update(
                detection=None,
                **deploy_kserve.effective_version(None, params.get("declared"), params["given"]),
            )
            return result
        if params.get("crds") is not None:
            crds = {(c.get("metadata") or {}).get("name"): c for c in params["crds"]}
        else:
            reader = task_reader(self._loader, self._templar, task_vars or {}, params)
            crds = {}
            try:
                for name in (deploy_kserve.ISVC_CRD, deploy_kserve.LLMISVC_CRD):
                    crds[name] = reader.get("CustomResourceDefinition", "apiextensions.k8s.io/v1", name=name)
            except ReadError as exc:
                if params["fail_on_error"]:
                    raise AnsibleActionFail(
                        "cannot read the KServe CRDs to detect its version: %s "
                        "(set specpilot_deploy_kserve_version to skip detection)" % exc
                    ) from None  # the message holds the read's error: Ansible would print it twice
                result.update(
                    detection=None,
                    error=str(exc),
                    **deploy_kserve.effective_version(None, params.get("declared")),
                )
                return result
        try:
            detection = deploy_kserve.detect(crds)
        except deploy_kserve.DetectError as exc:
            if params["fail_on_error"]:
                raise AnsibleActionFail(str(exc)) from exc
            result.update(detection=None, error=str(exc), version=None, source=None, note=str(exc))
            return result
        result["detection"] = detection
        result.update(deploy_kserve.effective_version(detection, params.get("declared")))
        if result.get("note"):
            result["warnings"] = [result["note"]]
        return result
