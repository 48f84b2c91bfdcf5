# SPDX-License-Identifier: Apache-2.0
"""Per-task timings of one ansible-playbook run, for the fleet benchmarks' profile mode
(``SPECPILOT_BENCH_FLEET_PROFILE=DIR``): as ansible.posix's profile_tasks (not installed here), the
wall time from one task's start to the next (the linear strategy runs a task on every host before the
next one), and how many hosts ran, skipped or failed it; written as JSON to $FLEET_PROFILE_OUT."""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: fleet_profile
type: aggregate
short_description: per-task wall times and host counts, as JSON (benchmarks' profile mode)
description: Writes every task's wall time and result counts to the file named by FLEET_PROFILE_OUT.
requirements: [enable in callbacks_enabled]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fleet_profile"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.tasks = []
        self.current = None
        self.started = time.perf_counter()

    def _close(self):
        if self.current is not None:
            self.current["seconds"] = time.perf_counter() - self.current.pop("_t0")
            self.current = None

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close()
        role = task._role.get_name() if task._role else ""
        self.current = {
            "task": "%s : %s" % (role, task.get_name()) if role else task.get_name(),
            "path": task.get_path() or "",
            "ok": 0,
            "skipped": 0,
            "failed": 0,
            "_t0": time.perf_counter(),
        }
        self.tasks.append(self.current)

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start

    def _count(self, kind, result=None):
        if self.current is not None:
            self.current[kind] += 1
            if result is not None:  # what ansible-playbook's process copies, cleans and shows of each result
                self.current["result_bytes"] = self.current.get("result_bytes", 0) + len(
                    json.dumps(result._result, default=str)
                )

    def v2_runner_on_ok(self, result):
        self._count("ok", result)

    def v2_runner_on_skipped(self, result):
        self._count("skipped")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count("failed")

    def v2_playbook_on_stats(self, stats):
        self._close()
        out = os.environ.get("FLEET_PROFILE_OUT")
        if out:
            with open(out, "w") as handle:
                json.dump(
                    {"total_s": time.perf_counter() - self.started, "tasks": self.tasks}, handle, indent=1
                )
