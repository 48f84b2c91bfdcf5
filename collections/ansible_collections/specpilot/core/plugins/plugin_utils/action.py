# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""The base of specpilot's action plugins.

They run on the controller (in the Ansible worker process): nothing is transferred, check mode is
supported, and most need no connection (an action that runs modules sets
``_requires_connection = True``).  A subclass names its ``ARGUMENT_SPEC`` (the same dict its
module documents) and implements ``act(params, task_vars, result)``; ``run`` validates the task's
arguments against the spec first, so every action fails the same way on bad input.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase


class ControllerAction(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    ARGUMENT_SPEC = {}

    def run(self, tmp=None, task_vars=None):
        result = super(ControllerAction, self).run(tmp, task_vars)
        del tmp
        _validation, params = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        return self.act(params, task_vars or {}, result)

    def act(self, params, task_vars, result):  # pragma: no cover - every action implements it
        raise NotImplementedError
