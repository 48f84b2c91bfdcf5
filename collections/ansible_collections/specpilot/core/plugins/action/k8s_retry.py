# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Action plugin of specpilot.core.k8s_retry: kubernetes.core.k8s, run again while it fails with a
transient error, with exponential backoff and full jitter (the retries an ``until:`` loop would make at
a fixed delay).  The connection options (module_defaults group/specpilot.core.k8s) are passed on to
kubernetes.core.k8s where its ``args`` do not set them."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import Backoff
from ansible_collections.specpilot.core.plugins.plugin_utils.action import ControllerAction
from ansible_collections.specpilot.core.plugins.plugin_utils.module_retry import retried

MODULE = "kubernetes.core.k8s"


class ActionModule(ControllerAction):
    _requires_connection = True  # it runs a kubernetes.core module
    ARGUMENT_SPEC = deploy_args.K8S_RETRY

    def act(self, params, task_vars, result):
        args = dict(params["args"])
        for key in deploy_args.K8S_CONNECTION:
            if params.get(key) is not None:
                args.setdefault(key, params[key])

        def execute():
            return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

        backoff = Backoff(max(1, params["retries"]), base=0.5, cap=10.0)
        result.update(retried(execute, backoff, conflict=params["conflict"]))
        return result
