# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.k8s_job_wait: wait for a batch/v1 Job and show its progress.

It runs on the controller and polls the cluster in the worker process - the Job and its pods through
kubernetes.core's k8s lookup (plugin_utils/k8s_reader.py), the pod's log with kubernetes.core's client
(plugin_utils/k8s_api.py) - so authentication works exactly as for kubernetes.core: the connection options
kubeconfig, context, host, api_key, validate_certs and ca_cert (module_defaults group/specpilot.core.k8s),
the ``auth`` option, else KUBECONFIG and K8S_AUTH_*. New log lines of the Job's pod are printed as they
arrive, which a module cannot do; the documented module in plugins/modules/k8s_job_wait.py holds the
options. With ``lock`` it renews that lock at every poll while it waits (plugin_utils/lease_client.py
``renewer_for``, as rollout_wait does): a lost lock stops the wait.
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args, job_watch
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api
from ansible_collections.specpilot.core.plugins.plugin_utils.action import ControllerAction
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import (
    REQUEST_TIMEOUT,
    K8sReader,
    ReadError,
)
from ansible_collections.specpilot.core.plugins.plugin_utils.lease_client import renewer_for

display = Display()


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = deploy_args.K8S_JOB_WAIT

    def act(self, params, task_vars, result):
        self._task_vars = task_vars or {}
        # the connection options (module_defaults group/specpilot.core.k8s sets them), then what auth adds
        self._auth = k8s_api.auth_of(params)
        self._reader = K8sReader(self._loader, self._templar, self._task_vars, self._auth)
        self._api = None
        host = self._task_vars.get("inventory_hostname", "localhost")
        name, ns = params["name"], params["namespace"]
        result["changed"] = False
        if self._task.check_mode:
            result["skipped"] = True
            result["msg"] = "check mode: not waiting for Job %s/%s" % (ns, name)
            return result

        renewer = self._renewer(params) if params["lock"] else None
        out = self._wait(params, name, ns, host, result, renewer)
        if renewer:
            out["lock"] = renewer.state()
        return out

    def _wait(self, params, name, ns, host, result, keep):
        started = time.monotonic()
        shown: list[str] = []
        last_tail: list[str] = []
        # since when the pod has been pulling its image, and pending (job_watch.stuck_reason)
        waits: dict = {}
        while True:
            job = self._get("Job", "batch/v1", name=name, namespace=ns)
            state, reason, message = job_watch.job_state(job)
            if state == "missing":
                raise AnsibleActionFail("Job %s/%s does not exist" % (ns, name))
            pods = self._get("Pod", "v1", namespace=ns, label_selector="job-name=%s" % name)
            pod = job_watch.newest_pod(pods)
            summary = job_watch.pod_summary(pod)
            done = state in ("complete", "failed")
            if summary["started"] and summary["name"]:
                tail = self._log(summary["name"], ns, params["container"], 400 if done else 60)
                if tail is not None:
                    fresh = job_watch.new_lines(last_tail, tail)
                    last_tail = tail
                    if params["show_progress"]:
                        for line in job_watch.displayable(fresh, params["line_prefix"]):
                            display.display("  [%s] %s" % (host, line))
                    shown.extend(fresh)
            if state == "complete":
                parsed = job_watch.parse_log("\n".join(last_tail or shown))
                result.update(self._out(job, summary, parsed, last_tail or shown, started, params))
                return result
            if state == "failed":
                parsed = job_watch.parse_log("\n".join(last_tail or shown))
                tail = (last_tail or shown)[-params["log_tail_lines"] :]
                result.update(self._out(job, summary, parsed, last_tail or shown, started, params))
                result["failed"] = True
                result["reason"] = reason
                result["msg"] = job_watch.failure_message(
                    name, ns, reason, message, parsed["error"], tail, summary
                )
                return result
            now = time.monotonic()
            stuck = job_watch.stuck_reason(summary, now, started, waits, params)
            if stuck:
                return self._stuck(result, name, ns, summary, started, *stuck)
            lost = keep(now) if keep else None
            if lost:
                return self._stuck(result, name, ns, summary, started, "stopped waiting, the lock: %s" % lost)
            time.sleep(params["poll_interval"])

    # ------------------------------------------------------------ helpers
    def _renewer(self, params):
        lock = params["lock"]
        if not lock["name"]:
            raise AnsibleActionFail("lock.name and lock.namespace: the service whose lock to renew")
        conn = dict(self._auth, retries=8, request_timeout=REQUEST_TIMEOUT, lock=lock)
        # renewed at the first poll (an earlier task renewed it last), then every third of its duration
        return renewer_for(
            conn, self._reader, lock["name"], lock["namespace"], clock=time.monotonic, renew_first=True
        )

    def _stuck(self, result, name, ns, summary, started, why, timeout=False):
        result["failed"] = True
        result["timed_out"] = timeout
        result["elapsed"] = round(time.monotonic() - started, 1)
        result["pod"] = summary
        result["msg"] = "Job %s/%s: %s" % (ns, name, why)
        return result

    def _out(self, job, summary, parsed, lines, started, args):
        return {
            "job": job,
            "pod": summary,
            "succeeded": job_watch.job_state(job)[0] == "complete",
            "result": parsed["result"],
            "error": parsed["error"],
            "progress": parsed["progress"],
            "log_tail": lines[-args["log_tail_lines"] :],
            "elapsed": round(time.monotonic() - started, 1),
        }

    def _get(self, kind, api_version, **where):
        try:
            return self._reader.get(kind, api_version, **where)
        except ReadError as exc:
            raise AnsibleActionFail(str(exc)) from exc

    def _log(self, pod, ns, container, tail_lines):
        """The last ``tail_lines`` lines of the pod's log, or None (not started yet, or already gone)."""
        try:
            self._api = self._api or k8s_api.client(self._auth).client
        except Exception as exc:  # noqa: BLE001 - the reads above made a client with the same settings
            raise AnsibleActionFail("cannot read the log of pod %s/%s: %s" % (ns, pod, exc)) from exc
        try:
            return k8s_api.pod_log(self._api, pod, ns, container, tail_lines=tail_lines).splitlines()
        except Exception:  # noqa: BLE001 - not started yet, or already gone: the next poll reads again
            return None
