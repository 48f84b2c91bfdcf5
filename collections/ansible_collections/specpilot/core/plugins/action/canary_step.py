# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.canary_step: the step (fact_tasks.canary_step) in the worker, renewing
the service's lock (``lock``) at every scrape as rollout_wait does while it waits."""

from __future__ import annotations

import time

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import task_reader
from ansible_collections.specpilot.core.plugins.plugin_utils.lease_client import renewer_for


class ActionModule(Action):
    ARGUMENT_SPEC = fact_tasks.CANARY_STEP_ARGS

    def act(self, params, task_vars, result):
        renewer = self._renewer(params, task_vars) if params.get("lock") else None
        self.run_task(fact_tasks.canary_step, params, result, keep=renewer)
        if renewer:
            result["lock"] = renewer.state()
        return result

    def _renewer(self, params, task_vars):
        lock = params["lock"]
        reader = task_reader(self._loader, self._templar, task_vars, params)
        # the step's clock (canary.run_step: time.monotonic) is the one the renewer counts with
        return renewer_for(
            params, reader, lock["name"], lock["namespace"], self._task.check_mode, clock=time.monotonic
        )
