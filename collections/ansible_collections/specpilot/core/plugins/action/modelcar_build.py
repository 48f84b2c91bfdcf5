# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.modelcar_build: runs the module and shows its progress lines (each
step, the layers' bytes hashed) while it builds and pushes (plugin_utils/progress_relay.py)."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action


class ActionModule(Action):
    _requires_connection = True  # it runs its module on the task's host
    MODULE = "specpilot.core.modelcar_build"
