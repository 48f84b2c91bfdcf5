# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.k8s_job: a batch/v1 Job's whole cycle (create, wait with progress and
the lock renewed, log, delete) with the collection's Job runner (plugin_utils/job_runner.py), the one the
cluster probe and specpilot.core.k8s_job_wait use too. The documented module in plugins/modules/k8s_job.py
holds the options."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail

from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.job_runner import task_runner
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import K8sReader
from ansible_collections.specpilot.core.plugins.plugin_utils.lease_client import held_lock_renewer


class ActionModule(Action):
    _requires_connection = True  # its writes are kubernetes.core.k8s runs
    ARGUMENT_SPEC = deploy_args.K8S_JOB
    WORKER_IMPORTS = k8s_api.CORE_V1_IMPORTS

    def act(self, params, task_vars, result):
        jobs = [m for m in params["definitions"] if (m or {}).get("kind") == "Job"]
        if len(jobs) != 1:
            raise AnsibleActionFail("definitions: exactly one Job (kind: Job), with the objects it mounts")
        meta = jobs[0].get("metadata") or {}
        if not meta.get("name") or not meta.get("namespace"):
            raise AnsibleActionFail("definitions: the Job needs metadata.name and metadata.namespace")
        result.update(changed=False, job_name=meta["name"])
        auth = k8s_api.auth_of(params)
        reader = K8sReader(self._loader, self._templar, task_vars, auth)
        runner = task_runner(self, task_vars, auth, reader, retries=params["retries"])
        if self._task.check_mode:
            # nothing is written: changed says whether a Job would be created
            created = runner.would_create(meta["name"], meta["namespace"], params["replace"])
            result.update(
                changed=created,
                created=created,
                msg="check mode: Job %s/%s not run" % (meta["namespace"], meta["name"]),
            )
            return result
        renewer = held_lock_renewer(params, auth, reader) if params["lock"] else None
        out = runner.run(
            params["definitions"],
            params,
            keep=renewer,
            delete=params["delete"],
            replace=params["replace"],
            full_log=params["log"],
            owned=params["owned"],
        )
        result.update(out, changed=bool(out.get("created") or out.get("deleted")))
        if renewer:
            result["lock"] = renewer.state()
        return result
