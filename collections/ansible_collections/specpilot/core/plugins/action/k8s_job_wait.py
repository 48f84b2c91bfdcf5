# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.k8s_job_wait: wait for a batch/v1 Job and show its progress.

It runs on the controller and polls the cluster in the worker process - the Job and its pods through
kubernetes.core's k8s lookup (plugin_utils/k8s_reader.py), the pod's log with kubernetes.core's client
(plugin_utils/k8s_api.py) - so authentication works exactly as for kubernetes.core: the connection options
kubeconfig, context, host, api_key, validate_certs and ca_cert (module_defaults group/specpilot.core.k8s),
the ``auth`` option, else KUBECONFIG and K8S_AUTH_*. New log lines of the Job's pod are printed as they
arrive, which a module cannot do; the documented module in plugins/modules/k8s_job_wait.py holds the
options. With ``lock`` it renews that lock at every poll while it waits (plugin_utils/lease_client.py
``renewer_for``, as rollout_wait does): a lost lock stops the wait. The wait is plugin_utils/job_runner.py's,
the one every Job of the collection is run with.
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.job_runner import task_runner
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import K8sReader
from ansible_collections.specpilot.core.plugins.plugin_utils.lease_client import held_lock_renewer


class ActionModule(Action):
    ARGUMENT_SPEC = deploy_args.K8S_JOB_WAIT
    WORKER_IMPORTS = k8s_api.CORE_V1_IMPORTS

    def act(self, params, task_vars, result):
        # the connection options (module_defaults group/specpilot.core.k8s sets them), then what auth adds
        auth = k8s_api.auth_of(params)
        reader = K8sReader(self._loader, self._templar, task_vars, auth)
        name, ns = params["name"], params["namespace"]
        result["changed"] = False
        if self._task.check_mode:
            result["skipped"] = True
            result["msg"] = "check mode: not waiting for Job %s/%s" % (ns, name)
            return result
        runner = task_runner(self, task_vars, auth, reader)
        renewer = held_lock_renewer(params, auth, reader) if params["lock"] else None
        result.update(runner.wait(name, ns, params, keep=renewer))
        if renewer:
            result["lock"] = renewer.state()
        return result
