# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Action plugin of specpilot.core.model_fetch: runs the module and shows its progress lines (bytes
done, rate) while it downloads (plugin_utils/progress_relay.py)."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action


class ActionModule(Action):
    _requires_connection = True  # it runs its module on the task's host
    MODULE = "specpilot.core.model_fetch"
