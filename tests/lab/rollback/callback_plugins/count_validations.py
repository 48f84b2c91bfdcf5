# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Test callback: how many times specpilot.core.spec_validate ran, per play and host (skipped tasks do not count).

Enabled by tests/lab/rollback/test_rollback_modes_fake.py (ANSIBLE_CALLBACK_PLUGINS, ANSIBLE_CALLBACKS_ENABLED);
writes {play name: {host: count}} as JSON to $SPECPILOT_TEST_VALIDATIONS when the run ends."""

from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: count_validations
type: aggregate
short_description: count the specpilot.core.spec_validate tasks that ran, per play and host
description: Test helper of tests/lab/rollback; writes JSON to $SPECPILOT_TEST_VALIDATIONS.
requirements: [enable in the test run only]
"""

ACTIONS = ("specpilot.core.spec_validate", "spec_validate")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "count_validations"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.play = None
        self.counts = {}

    def v2_playbook_on_play_start(self, play):
        self.play = play.get_name()
        self.counts.setdefault(self.play, {})

    def _ran(self, result):
        task = result._task
        if (getattr(task, "resolved_action", None) or task.action) in ACTIONS:
            host = result._host.get_name()
            self.counts[self.play][host] = self.counts[self.play].get(host, 0) + 1

    def v2_runner_on_ok(self, result):
        self._ran(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._ran(result)

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["SPECPILOT_TEST_VALIDATIONS"], "w") as handle:
            json.dump(self.counts, handle, indent=1, sort_keys=True)
