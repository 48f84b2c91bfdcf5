# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Action plugin of specpilot.core.report_write: the module's work (fact_tasks.report_write) in the worker."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action


class ActionModule(Action):
    ARGUMENT_SPEC = fact_tasks.REPORT_WRITE_ARGS
    TASK = staticmethod(fact_tasks.report_write)
