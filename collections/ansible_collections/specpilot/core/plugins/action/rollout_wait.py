# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.rollout_wait: wait for the new rollout, with progress output."""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_rollout
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import ReadError, task_reader
from ansible_collections.specpilot.core.plugins.plugin_utils.lease_client import renewer_for

display = Display()


class ActionModule(Action):
    ARGUMENT_SPEC = deploy_args.ROLLOUT_WAIT

    def act(self, params, task_vars, result):
        plan = params["plan"]
        for key in ("name", "namespace", "spec_digest"):
            if not plan.get(key):
                raise AnsibleActionFail(
                    "plan.%s is required (pass the plan from specpilot.core.spec_validate)" % key
                )
        if self._task.check_mode:
            result.update(
                changed=False, skipped=True, msg="check mode: nothing was applied, nothing to wait for"
            )
            return result
        timeout = params["timeout"] or int(plan.get("startup_timeout_seconds") or 900) + 300
        reader = task_reader(self._loader, self._templar, task_vars or {}, params)
        host = (task_vars or {}).get("inventory_hostname") or plan["name"]
        renewer = renewer_for(params, reader, plan["name"], plan["namespace"]) if params.get("lock") else None
        out = wait(
            reader,
            plan,
            params,
            timeout,
            lambda line: display.display("[%s] %s" % (host, line)),
            keep=renewer,
        )
        if renewer:
            out["lock"] = renewer.state()
        result.update(out)
        result["changed"] = False
        if not out["done"] and params["fail_on_error"]:
            result["failed"] = True
            result["msg"] = out["status"]["message"]
        return result


def read_workload(reader, plan):
    return deploy_rollout.read_workload(
        reader,
        plan["name"],
        plan["namespace"],
        plan.get("deployment_mode") or "Standard",
        plan.get("kind"),
        plan.get("api_version"),
    )


def _failed(cause, message):
    return {
        "done": False,
        "failed": True,
        "cause": cause,
        "phase": "failed",
        "message": message,
        "checks": {},
        "pods": [],
        "waiting_for": [],
        "progress": "",
    }


# the first pause between polls; each next one doubles, up to the task's delay
FIRST_PAUSE = 0.5


def pause(polls, delay):
    """Seconds to sleep after poll number ``polls`` (1, 2, ...): 0.5, 1, 2, 4, ... up to ``delay``.
    A rollout that is done in seconds (a restart of a small engine, a change the controller only
    records) is seen when it is done, not at the next multiple of ``delay``; a long one (a GPU engine
    loading its weights for minutes) is read every ``delay`` seconds as before."""
    return min(float(delay), FIRST_PAUSE * 2 ** max(0, polls - 1))


def wait(reader, plan, params, timeout, emit, clock=time.time, sleep=time.sleep, keep=None):
    """Poll until the rollout is done, has failed for good, or ``timeout`` seconds passed (pauses:
    :func:`pause`). ``keep(now)``, when given, runs every poll (the lock's renewal): a message stops
    the wait."""
    expected = deploy_rollout.expected_from_plan(plan)
    options = {k: params.get(k) for k in ("fail_fast_restarts", "pending_grace", "image_grace")}
    started = clock()
    last_line, last_emit, polls, read_errors = None, 0.0, 0, 0
    status = isvc = deployment = None
    pods = []
    emit(
        "waiting for the rollout of %s/%s (timeout %ds): digest %s"
        % (plan["namespace"], plan["name"], timeout, plan["spec_digest"][:12])
    )
    while True:
        now = clock()
        polls += 1
        try:
            isvc, deployment, pods = read_workload(reader, plan)
        except ReadError as exc:
            read_errors += 1
            if read_errors >= 5:
                status = _failed("api", "cannot read the rollout state: %s" % exc)
                break
            sleep(pause(polls, params["delay"]))
            continue
        status = deploy_rollout.rollout_status(
            expected,
            isvc,
            deployment,
            pods,
            params.get("baseline") or {},
            now=now,
            started=started,
            options=options,
        )
        elapsed = int(now - started)
        line = "%s [%ds/%ds] %s | %s" % (
            status["phase"],
            elapsed,
            timeout,
            status["message"],
            status["progress"],
        )
        if status["done"] or status["failed"]:
            emit("%s after %ds: %s" % (status["phase"], elapsed, status["message"]))
            break
        lost = keep(now) if keep else None
        if lost:
            status = _failed("lock", "stopped waiting, the service's lock: %s" % lost)
            emit(status["message"])
            break
        if status["progress"] != last_line or now - last_emit >= params["progress_interval"]:
            emit(line)
            last_line, last_emit = status["progress"], now
        if now - started >= timeout:
            break
        sleep(max(0.2, min(pause(polls, params["delay"]), timeout - (now - started))))
    elapsed = clock() - started
    timed_out = not status["done"] and not status["failed"]
    if timed_out:
        status = dict(
            status,
            phase="timeout",
            message="timed out after %ds: %s"
            % (
                int(elapsed),
                "; ".join(([status["activity"]] if status.get("activity") else []) + status["waiting_for"])
                or status["message"],
            ),
        )
        emit(status["message"])
    return {
        "done": bool(status["done"]),
        "timed_out": timed_out,
        "elapsed": round(elapsed, 1),
        "timeout": timeout,
        "polls": polls,
        "status": status,
        "inferenceservice": isvc,
        "deployment": deployment,
        "pods": pods,
    }
