# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.k8s_read: objects read through kubernetes.core's k8s lookup in the
Ansible worker process (plugin_utils/k8s_reader.py: bounded requests, transient errors retried), returned
as kubernetes.core.k8s_info returns them (``resources``), without a module process."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import ReadError, task_reader


class ActionModule(Action):
    ARGUMENT_SPEC = deploy_args.K8S_READ

    def act(self, params, task_vars, result):
        reader = task_reader(self._loader, self._templar, task_vars, params)
        result["changed"] = False
        try:
            found = reader.get(
                params["kind"],
                params["api_version"],
                name=params["name"],
                namespace=params["namespace"],
                label_selector=",".join(params["label_selectors"]) or None,
            )
        except ReadError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        if params["name"]:
            found = [found] if found else []
        result["resources"] = found
        return result
