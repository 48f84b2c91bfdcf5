# SPDX-License-Identifier: Apache-2.0
"""Test callback: what AWX keeps of a job's set_stats, written to $SPECPILOT_TEST_ARTIFACTS as JSON.

AWX stores a job's ``artifacts`` from the ``artifact_data`` of its playbook_on_stats event
(awx/main/tasks/callback.py), which ansible-runner's display callback takes from the play's custom stats
(``stats.custom['_run']``: set_stats with per_host false). Tests of sliced runs read them from here and
merge them as AWX hands them to the next workflow node."""

from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: awx_artifacts
type: aggregate
short_description: write the run's set_stats (AWX's job artifacts) to a JSON file
description: Test helper; the file is $SPECPILOT_TEST_ARTIFACTS.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "awx_artifacts"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("SPECPILOT_TEST_ARTIFACTS")
        if path:
            with open(path, "w", encoding="utf-8") as fh:
                json.dump((getattr(stats, "custom", {}) or {}).get("_run", {}), fh, sort_keys=True, default=str)
