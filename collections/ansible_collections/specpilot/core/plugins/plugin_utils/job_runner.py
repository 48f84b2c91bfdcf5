# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one Job runner of the collection: a batch/v1 Job's cycle from a controller-side action.

``create`` writes the Job and what it mounts (its ConfigMap) and ``delete`` removes them, both through
kubernetes.core.k8s (``state: present`` / ``absent``, what the roles' tasks ran before, so the same
verbs of the shipped Role apply); ``wait`` polls the Job and its newest pod through the reader
(plugin_utils/k8s_reader.py), prints new log lines as they come (module_utils/k8s/job_watch.py
decides what a state means), renews the service's lock with ``keep(now)`` (plugin_utils/lease_client.py
``renewer_for``) and stops early on a pod that cannot start; ``log`` reads the pod's log with
kubernetes.core's client (plugin_utils/k8s_api.py); ``run`` is the whole cycle. Used by
specpilot.core.k8s_job (the staging Job, the PVC reclaim Job, the benchmark's load and ``vllm bench``
Jobs), specpilot.core.k8s_job_wait and specpilot.core.cluster_probe (its probe Job).
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

from ansible_collections.specpilot.core.plugins.module_utils.k8s import job_watch
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import Backoff
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import ReadError
from ansible_collections.specpilot.core.plugins.plugin_utils.module_retry import retried

__all__ = ["JobRunner", "task_runner"]

display = Display()

# what wait() reads of its params, with the defaults of specpilot.core.k8s_job_wait
WAIT_DEFAULTS = {
    "container": None,
    "timeout": 3600,
    "poll_interval": 5.0,
    "pending_timeout": 900,
    "pull_timeout": 300,
    "log_tail_lines": 40,
    "show_progress": True,
    "line_prefix": "specpilot-stage: ",
}


class JobRunner(object):
    """One Job (``name`` in ``namespace``) of an action. ``action`` runs kubernetes.core modules
    (``_execute_module``) with ``task_vars``; ``auth`` holds the connection options; ``reader`` is a
    K8sReader with them; ``show(line)`` prints a progress line; ``clock``/``sleep`` for the tests."""

    def __init__(
        self, action, task_vars, auth, reader, show, clock=time.monotonic, sleep=time.sleep, retries=1
    ):
        self._action = action
        self._vars = task_vars
        self._auth = dict(auth or {})
        self._reader = reader
        self._show = show
        self._clock = clock
        self._sleep = sleep
        self._api = None
        self._backoff = Backoff(max(1, retries), base=0.5, cap=5.0, sleep=sleep)
        self.last_pod = None  # the newest pod of the Job at the last poll (the object)

    # ------------------------------------------------------------ writes
    def module(self, module, **params):
        """kubernetes.core.<module> with ``params`` and the connection options: its result, run again while
        it fails with a transient error (``retries``; plugin_utils/module_retry.py)."""
        params.update(self._auth)
        return retried(
            lambda: self._action._execute_module(
                module_name="kubernetes.core." + module, module_args=params, task_vars=self._vars
            ),
            self._backoff,
        )

    def create(self, manifests):
        """The objects of ``manifests`` (the Job and what it mounts), present (created, or patched when
        they exist): kubernetes.core.k8s's result."""
        return self.module("k8s", state="present", definition=list(manifests))

    def delete(self, manifests, wait=False, wait_timeout=120):
        """The objects of ``manifests`` absent, the Job's pods with it (propagationPolicy Background);
        ``wait``: until they are gone."""
        extra = {"wait": True, "wait_timeout": wait_timeout} if wait else {}
        return self.module(
            "k8s",
            state="absent",
            definition=[_ref(m) for m in manifests],
            delete_options={"propagationPolicy": "Background"},
            **extra,
        )

    # ------------------------------------------------------------ reads
    def get(self, kind, api_version, **where):
        try:
            return self._reader.get(kind, api_version, **where)
        except ReadError as exc:
            raise AnsibleActionFail(str(exc)) from exc

    def job(self, name, namespace):
        """The Job, or None."""
        return self.get("Job", "batch/v1", name=name, namespace=namespace)

    def log(self, pod, namespace, container=None, tail_lines=None):
        """The pod's log lines (the last ``tail_lines``), or None (not started yet, or already gone)."""
        try:
            self._api = self._api or k8s_api.client(self._auth).client
        except Exception as exc:  # noqa: BLE001 - the reads made a client with the same settings
            raise AnsibleActionFail("cannot read the log of pod %s/%s: %s" % (namespace, pod, exc)) from exc
        try:
            return k8s_api.pod_log(self._api, pod, namespace, container, tail_lines=tail_lines).splitlines()
        except Exception:  # noqa: BLE001 - not started yet, or already gone: the next poll reads again
            return None

    # ------------------------------------------------------------ the wait
    def wait(self, name, namespace, params, keep=None):
        """Poll until the Job completed or failed, its pod is stuck (job_watch.stuck_reason), the
        timeout passed, or ``keep(now)`` says why to stop (the lock). The result is
        specpilot.core.k8s_job_wait's: job, pod, succeeded, result, error, progress, log_tail, elapsed;
        ``failed`` and ``msg`` when it did not complete."""
        params = dict(WAIT_DEFAULTS, **{k: v for k, v in params.items() if v is not None})
        started = self._clock()
        watch = {"shown": [], "tail": [], "waits": {}}
        while True:
            job = self.job(name, namespace)
            state, reason, message = job_watch.job_state(job)
            if state == "missing":
                raise AnsibleActionFail("Job %s/%s does not exist" % (namespace, name))
            pods = self.get("Pod", "v1", namespace=namespace, label_selector="job-name=%s" % name)
            self.last_pod = job_watch.newest_pod(pods)
            summary = job_watch.pod_summary(self.last_pod)
            if summary["started"] and summary["name"]:
                self._follow(
                    summary["name"], namespace, params, watch, 400 if state in ("complete", "failed") else 60
                )
            if state in ("complete", "failed"):
                return self._ended(job, state, reason, message, summary, watch, started, params)
            now = self._clock()
            stuck = job_watch.stuck_reason(summary, now, started, watch["waits"], params)
            lost = None if stuck else (keep(now) if keep else None)
            if stuck or lost:
                why, timed_out = stuck or ("stopped waiting, the lock: %s" % lost, False)
                return {
                    "failed": True,
                    "timed_out": timed_out,
                    "elapsed": round(self._clock() - started, 1),
                    "pod": summary,
                    "msg": "Job %s/%s: %s" % (namespace, name, why),
                }
            self._sleep(params["poll_interval"])

    def _follow(self, pod, namespace, params, watch, tail_lines):
        """Show the log lines that are new since the last poll."""
        tail = self.log(pod, namespace, params["container"], tail_lines)
        if tail is None:
            return
        fresh = job_watch.new_lines(watch["tail"], tail)
        watch["tail"] = tail
        if params["show_progress"]:
            for line in job_watch.displayable(fresh, params["line_prefix"]):
                self._show(line)
        watch["shown"].extend(fresh)

    def _ended(self, job, state, reason, message, summary, watch, started, params):
        lines = watch["tail"] or watch["shown"]
        parsed = job_watch.parse_log("\n".join(lines))
        out = {
            "job": job,
            "pod": summary,
            "succeeded": state == "complete",
            "result": parsed["result"],
            "error": parsed["error"],
            "progress": parsed["progress"],
            "log_tail": lines[-params["log_tail_lines"] :],
            "elapsed": round(self._clock() - started, 1),
        }
        if state == "failed":
            name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
            out.update(
                failed=True,
                reason=reason,
                msg=job_watch.failure_message(
                    name, namespace, reason, message, parsed["error"], out["log_tail"], summary
                ),
            )
        return out

    # ------------------------------------------------------------ the cycle
    def run(
        self, manifests, params, keep=None, delete="always", replace="finished", full_log=False, owned=False
    ):
        """The whole cycle of the Job in ``manifests`` (with the objects it mounts): an earlier Job of the
        same name removed first (``replace``: "finished" (once it ended; a running one is waited for),
        "always", or "never" (an earlier one is waited for, not created again)), the objects written
        (``owned``: the others then name the Job as their owner, so they go with it), the Job waited for
        (wait), its pod's whole log read (``full_log``: ``log``), and the objects deleted (``delete``:
        "always", "success" or "never"). The result is wait's, with ``created`` and ``deleted``."""
        job = next(m for m in manifests if m.get("kind") == "Job")
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        out, created = {}, False
        try:
            created = self._replace(manifests, name, namespace, replace)
            if owned:
                self._own([m for m in manifests if m is not job], name, namespace)
            out = self.wait(name, namespace, params, keep=keep)
            if full_log and out.get("pod", {}).get("name"):
                out["log"] = "\n".join(self.log(out["pod"]["name"], namespace, params.get("container")) or [])
        finally:
            gone = delete == "always" or (delete == "success" and out.get("succeeded"))
            if gone:
                self.delete(manifests)
            out.update(created=created, deleted=bool(gone))
        return out

    def _kept(self, name, namespace, replace):
        """(the earlier Job or None, whether it stays): it stays with replace "never", and with "finished"
        while it runs."""
        old = self.job(name, namespace) if replace != "always" else None
        return old, old is not None and (replace == "never" or job_watch.job_state(old)[0] == "running")

    def would_create(self, name, namespace, replace):
        """Whether run() would create the Job (check mode)."""
        return not self._kept(name, namespace, replace)[1]

    def _replace(self, manifests, name, namespace, replace):
        """Write the Job's objects, the Job itself unless an earlier one stays: True when it was created."""
        jobs = [m for m in manifests if m.get("kind") == "Job"]
        old, keep_old = self._kept(name, namespace, replace)
        if not keep_old and (replace == "always" or old is not None):
            self._check("removing the earlier Job", name, namespace, self.delete(jobs, wait=True))
        written = [m for m in manifests if m.get("kind") != "Job"] if keep_old else manifests
        if written:
            self._check(
                "creating the Job" if not keep_old else "writing the objects of the Job",
                name,
                namespace,
                self.create(written),
            )
        return not keep_old

    def _own(self, others, name, namespace):
        """The Job as the owner of ``others`` (garbage-collected with it)."""
        uid = ((self.job(name, namespace) or {}).get("metadata") or {}).get("uid")
        for obj in others:
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}
            patch = dict(_ref(obj), metadata=dict(_ref(obj)["metadata"], ownerReferences=[owner]))
            self._check(
                "attaching %s to the Job" % obj["kind"],
                name,
                namespace,
                self.module("k8s", state="patched", definition=patch),
            )

    @staticmethod
    def _check(what, name, namespace, res):
        if res.get("failed"):
            raise AnsibleActionFail("%s %s/%s failed: %s" % (what, namespace, name, res.get("msg")))


def task_runner(action, task_vars, auth, reader, retries=1):
    """The JobRunner of an action's task: its progress lines shown as ``  [host] line``."""
    host = task_vars.get("inventory_hostname", "localhost")
    return JobRunner(
        action,
        task_vars,
        auth,
        reader,
        lambda line: display.display("  [%s] %s" % (host, line)),
        retries=retries,
    )


def _ref(manifest):
    """What kubernetes.core.k8s needs to delete an object: its apiVersion, kind, name and namespace."""
    meta = manifest.get("metadata") or {}
    return {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
    }
