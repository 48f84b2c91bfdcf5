# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.vllm_load.

Without ``lock`` it runs the module, as before (on the task's host). With ``lock`` (the benchmark's twin
lock) the load runs here, in the worker (module_utils/benchmark/bench_load.py ``run``), and the lock is
renewed while it runs, every third of its duration, as canary_step and rollout_wait renew the service's
lock while they wait (plugin_utils/lease_client.py ``renewer_for``): a lost lock, or ansible-playbook
gone, stops the load. ``lock_connection`` is the API connection of the renewal (this module is not in
the action group specpilot.core.k8s: its ``validate_certs`` is the engine's)."""

from __future__ import annotations

import time

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_load
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import REQUEST_TIMEOUT, task_reader
from ansible_collections.specpilot.core.plugins.plugin_utils.lease_client import renewer_for

MODULE = "specpilot.core.vllm_load"


class ActionModule(Action):
    _requires_connection = True  # without a lock it runs the module on the task's host
    ARGUMENT_SPEC = bench_load.ARGS
    VALIDATION = bench_load.VALIDATION

    def act(self, params, task_vars, result):
        if not params["lock"]:
            result.update(
                self._execute_module(module_name=MODULE, module_args=self._task.args, task_vars=task_vars)
            )
            return result
        problem = bench_load.lock_problem(params, keep=True)
        if problem:
            result.update(failed=True, msg=problem)
            return result
        renewer = self._renewer(params, task_vars)
        try:
            result.update(bench_load.run(params, bool(self._task.check_mode), keep=renewer))
        except bench_load.LoadFailure as exc:
            result.update(exc.fields, failed=True, msg=exc.msg)
        result["lock"] = renewer.state()
        return result

    def _renewer(self, params, task_vars):
        lock = params["lock"]
        conn = dict(
            {"retries": 8, "request_timeout": REQUEST_TIMEOUT}, **params["lock_connection"], lock=lock
        )
        reader = task_reader(self._loader, self._templar, task_vars, conn)
        # renewed at the load's start (the lock was last renewed by an earlier task), then every third of
        # its duration; bench_client.run_many calls it with time.monotonic
        return renewer_for(
            conn,
            reader,
            lock["name"],
            lock["namespace"],
            self._task.check_mode,
            clock=time.monotonic,
            renew_first=True,
        )
