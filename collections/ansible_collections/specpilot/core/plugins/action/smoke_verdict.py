# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.smoke_verdict: the module's work (fact_tasks.smoke_verdict) in the worker."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action


class ActionModule(Action):
    ARGUMENT_SPEC = fact_tasks.SMOKE_VERDICT_ARGS
    TASK = staticmethod(fact_tasks.smoke_verdict)
