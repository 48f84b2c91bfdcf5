# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see galaxy.yml)
"""Action plugin of specpilot.core.spec_validate: run the validation on the controller.

Validation reads nothing from the managed host and changes nothing, so it runs in the
controller process (no module transfer, no remote Python): fifty services validate in
one play without fifty interpreter start-ups.  The documented module in
plugins/modules/spec_validate.py shares the argument spec and the code path.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.specpilot.core.plugins.module_utils import validator


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, params = self.validate_argument_spec(argument_spec=validator.ARGUMENT_SPEC)
        if not validator.HAS_JSONSCHEMA:
            raise AnsibleActionFail("specpilot.core.spec_validate needs the Python package jsonschema on the controller")
        out, failed = validator.module_result(params)
        result.update(out)
        if failed:
            result["failed"] = True
        return result
