# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.smoke_probe: the module's work (fact_tasks.smoke_probe) in the worker.

The smoke role probes every service's engine from the controller; as a module each probe started a
Python process (about a quarter of a second of CPU before it sent anything: issue 40, smoke over a fleet).
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action


class ActionModule(Action):
    ARGUMENT_SPEC = fact_tasks.SMOKE_PROBE_ARGS
    TASK = staticmethod(fact_tasks.smoke_probe)
