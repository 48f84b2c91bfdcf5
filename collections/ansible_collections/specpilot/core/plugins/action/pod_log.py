# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.pod_log: a pod's log, read in the Ansible worker process with
plugin_utils/k8s_api.py's client (kubernetes.core's get_api_client), returned as kubernetes.core.k8s_log
returns it (``log``, ``log_lines``) without a module process (about a second of CPU a read; the smoke
role reads the engine's log three to six times a service). With ``vllm_facts`` it returns the log's facts
(fact_tasks.pod_log_facts, vllm_log_facts' parse) instead of its text: the smoke role keeps no engine log in
ansible-playbook's variables (issue 40)."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action


class ActionModule(Action):
    ARGUMENT_SPEC = fact_tasks.POD_LOG_ARGS
    WORKER_IMPORTS = k8s_api.CORE_V1_IMPORTS

    def act(self, params, task_vars, result):
        auth = k8s_api.auth_of(params)
        result["changed"] = False
        try:
            log = k8s_api.pod_log(
                k8s_api.client(auth).client,
                params["name"],
                params["namespace"],
                params["container"],
                timeout=params["request_timeout"],
                previous=params["previous"],
                since_seconds=params["since_seconds"],
                tail_lines=params["tail_lines"],
            )
        except Exception as exc:  # noqa: BLE001 - refused (403), not started (400), no such pod (404), ...
            result.update(
                failed=True,
                msg="cannot read the log of pod %s/%s: %s"
                % (params["namespace"], params["name"], k8s_api.failure(exc)["msg"]),
            )
            return result
        if params["vllm_facts"] is not None:
            return self.run_task(fact_tasks.pod_log_facts, dict(params["vllm_facts"], content=log), result)
        result.update(log=log, log_lines=log.split("\n"))
        return result
