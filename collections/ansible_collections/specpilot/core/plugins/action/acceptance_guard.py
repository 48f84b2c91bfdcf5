# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.acceptance_guard: the module's work (fact_tasks.acceptance_guard) in the
worker. The guard judges every service of the fleet each run; as a module each judgement started a Python
process (issue 40: guard.yml over 200 services)."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action


class ActionModule(Action):
    ARGUMENT_SPEC = fact_tasks.ACCEPTANCE_GUARD_ARGS
    TASK = staticmethod(fact_tasks.acceptance_guard)
