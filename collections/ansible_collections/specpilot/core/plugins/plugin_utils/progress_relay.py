# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Run a long module and show its progress while it runs (module_utils/report/progress.py): the module
runs in a thread of the action; every few seconds the new lines of its progress file are shown, so
a multi-GB download or a Modelcar build reports bytes and rate in ansible-playbook's output and in
AWX's job output, not only at the end. Over a local connection only (the file is on this machine,
as for every specpilot service host); over another the module runs as usual. plugin_utils/action.py
``Action.run_module`` runs it for the actions that name a ``MODULE``."""

from __future__ import annotations

import os
import tempfile
import threading

LOCAL = ("local", "ansible.builtin.local")
INTERVAL = 5.0  # the modules write a progress line every 10 s at most


def execute_showing_progress(action, module_name, module_args, task_vars, show, interval=INTERVAL):
    """``action._execute_module(module_name, module_args)`` with ``progress_file`` added; each new line
    of that file goes to ``show(line)`` while the module runs and once it ended. Returns the module's
    result."""
    if getattr(action._connection, "transport", None) not in LOCAL:
        return action._execute_module(module_name=module_name, module_args=module_args, task_vars=task_vars)
    fd, path = tempfile.mkstemp(prefix="specpilot-progress-", suffix=".log")
    os.close(fd)
    box = {}

    def run():
        try:
            box["result"] = action._execute_module(
                module_name=module_name,
                module_args=dict(module_args, progress_file=path),
                task_vars=task_vars,
            )
        except BaseException as exc:  # noqa: BLE001 - raised again in the action's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="specpilot-progress", daemon=True)
    worker.start()
    offset = 0
    try:
        while worker.is_alive():
            worker.join(interval)
            offset = show_new_lines(path, offset, show)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if "error" in box:
        raise box["error"]
    return box["result"]


def show_new_lines(path, offset, show):
    """show(line) for each whole line of ``path`` after ``offset``; returns the new offset."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode("utf-8", "replace").splitlines():
        if line.strip():
            show(line)
    return offset + end
