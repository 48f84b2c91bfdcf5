# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.cluster_probe: run the probe Job that module_utils/service/cluster_probe.py
plans, and return what it read (the option ``probed`` of specpilot.core.spec_validate).

It runs on the controller: reads go through kubernetes.core's k8s lookup (plugin_utils/k8s_reader.py),
the Job through the collection's Job runner (plugin_utils/job_runner.py: kubernetes.core.k8s writes, the
log with kubernetes.core's client), with the connection options of the action group specpilot.core.k8s,
so the cluster is found as for every other k8s task.
The documented module in plugins/modules/cluster_probe.py holds the options.
"""

from __future__ import annotations

import secrets

from ansible.errors import AnsibleActionFail

from ansible_collections.specpilot.core.plugins.module_utils.service import cluster_probe as cp
from ansible_collections.specpilot.core.plugins.plugin_utils.action import (
    Action,
    spec_from_task_vars,
)
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api
from ansible_collections.specpilot.core.plugins.plugin_utils.job_runner import JobRunner
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import K8sReader, auth_options


class ActionModule(Action):
    _requires_connection = True  # it writes through kubernetes.core modules
    ARGUMENT_SPEC = cp.ARGUMENT_SPEC
    WORKER_IMPORTS = k8s_api.CORE_V1_IMPORTS

    def act(self, params, task_vars, result):
        self._vars = task_vars or {}
        self._auth = auth_options(params)
        self._auth.update({k: v for k, v in (params["auth"] or {}).items() if v is not None})
        spec = params.get("spec")
        if spec is None:
            spec, _names = spec_from_task_vars(self._templar, self._vars, params.get("default_name"))
        result.update(changed=False, job=None, cached_version=False, not_run=[], vllm_version=None)
        try:
            first = cp.plan(spec, options=params)
        except cp.ProbeError as exc:  # spec_validate names the spec's problem; the probe says it did not run
            return self._unavailable(result, "the probe was not run: %s" % exc)
        self._reader = K8sReader(
            self._loader, self._templar, self._vars, self._auth, attempts=params["retries"]
        )
        self._runner = JobRunner(self, self._vars, self._auth, self._reader, self._display.display)
        result["image"] = first["image"]
        if not self._namespace_exists(first["namespace"]):
            return self._unavailable(
                result, "the namespace %s does not exist yet, so no probe Job ran" % first["namespace"]
            )
        plan, cached, claim_problem = self._decide(spec, params, first)
        result["cached_version"] = bool(cached)
        probed = self._probe(plan, params, cached, result)
        if cached:
            probed.update(vllm_version=cached["vllm_version"], source="cache", digest=cached.get("digest"))
        for model in first["models"] if claim_problem else ():
            probed["models"][model["role"]] = {"uri": model["uri"], "facts": {}, "problem": claim_problem}
        result["probed"] = probed
        result["vllm_version"] = probed.get("vllm_version")
        return result

    def _decide(self, spec, params, first):
        """(the plan of the Job to run, the cached version entry, why the PVC cannot be read)."""
        want = cp.wanted(spec, params["mode"])
        cached = self._cached(params, first["image"], first["namespace"])
        claim_problem = (
            self._claim_problem(spec, first["namespace"]) if first["models"] and want["models"] else None
        )
        options = dict(
            params,
            suffix=secrets.token_hex(3),
            read_models=params["read_models"] and want["models"] and not claim_problem,
        )
        version = params["read_version"] and want["version"] and not cached
        return cp.plan(spec, version_needed=version, options=options), cached, claim_problem

    def _probe(self, plan, params, cached, result):
        """What the Job read (none in check mode, or when nothing is wanted)."""
        probed = cp.probed({}, plan, plan["image"], source="cache")
        if self._task.check_mode:
            probed["unavailable"] = "check mode: no probe Job was created"
            result["not_run"] = self._not_run(plan, cached)
            for model in plan["models"]:  # validation then names the checks that could not run
                probed["models"][model["role"]] = {
                    "uri": model["uri"],
                    "facts": {},
                    "problem": "check mode: no probe Job read %s" % model["uri"],
                }
        elif plan["needed"]:
            probed, result["job"] = self._run(plan, params), plan["job_name"]
            if probed.get("vllm_version") and params["use_cache"]:
                result["changed"] = self._remember(
                    probed["vllm_version"], probed.get("digest"), plan["image"], plan["namespace"]
                )
        return probed

    def _namespace_exists(self, ns):
        """Whether the namespace exists (true when it cannot be read: creating the Job then says)."""
        try:
            return bool(self._reader.get("Namespace", "v1", name=ns))
        except Exception:  # pylint: disable=broad-except
            return True

    def _unavailable(self, result, why):
        result.update(probed={"unavailable": why, "models": {}}, msg=why)
        return result

    # ------------------------------------------------------------ caches
    def _cached(self, params, image, ns):
        """The cache ConfigMap's entry of the image, or None (also when it cannot be read: a cache, not a
        requirement; a Job that is needed then meets the cluster's error itself)."""
        if not params["use_cache"] or not params["read_version"]:
            return None
        try:
            cm = self._reader.get("ConfigMap", "v1", name=cp.CACHE_CONFIGMAP, namespace=ns)
        except Exception as exc:  # pylint: disable=broad-except
            self._display.warning("the probe cache %s/%s was not read: %s" % (ns, cp.CACHE_CONFIGMAP, exc))
            return None
        return cp.cached_version((cm or {}).get("data"), image, ttl=cp.local_cache().ttl)

    def _remember(self, version, digest, image, ns):
        entry = cp.version_entry(image, version, digest)
        cp.remember_version(entry)
        res = self._runner.module(
            "k8s",
            state="present",
            merge_type="merge",
            definition=cp.cache_configmap(ns, cp.configmap_patch([entry])),
        )
        if res.get("failed"):
            self._display.warning("the probe cache ConfigMap was not written: %s" % res.get("msg"))
        return bool(res.get("changed"))

    # ------------------------------------------------------------ the Job
    def _run(self, plan, params):
        """What the probe Job read: it runs through plugin_utils/job_runner.py (created, waited for, its
        log read, deleted whatever happened)."""
        ns, name = plan["namespace"], plan["job_name"]
        runner = self._runner
        wait = {
            "container": cp.CONTAINER,
            "timeout": params["timeout"],
            "poll_interval": params["poll_interval"],
            "pull_timeout": -1,  # an image that cannot be pulled fails the probe at once
            "pending_timeout": params["timeout"],
            "show_progress": False,
        }
        manifests = [plan["manifests"]["configmap"], plan["manifests"]["job"]]
        try:
            out = runner.run(manifests, wait, delete="always", replace="never", full_log=True)
        except AnsibleActionFail as exc:
            raise AnsibleActionFail("the probe: %s" % exc) from exc
        if out.get("failed"):
            raise AnsibleActionFail(self._failure(ns, name, out, params))
        try:
            parsed = cp.parse_log(out.get("log") or "")
        except cp.ProbeError as exc:
            raise AnsibleActionFail("the probe Job %s/%s: %s" % (ns, name, exc))
        return cp.probed(parsed, plan, plan["image"], digest=_image_digest(runner.last_pod))

    @staticmethod
    def _failure(ns, name, out, params):
        if out.get("timed_out"):
            return (
                "the probe Job %s/%s: not finished after %d s (timeout; a ReadWriteOnce claim mounted on "
                "another node keeps the pod in ContainerCreating: see its events)"
                % (ns, name, params["timeout"])
            )
        if out.get("reason") is not None or out.get("succeeded") is False:
            return "the probe %s; its log ends: %s" % (
                out["msg"],
                " | ".join((out.get("log_tail") or [])[-8:]) or "(empty)",
            )
        return "the probe %s" % out["msg"]

    def _reader_get(self, plan, kind, api_version, **kw):
        return self._reader.get(kind, api_version, namespace=plan["namespace"], **kw)

    def _claim_problem(self, spec, ns):
        """Why the service's PVC cannot be probed (it does not exist yet), or None."""
        claim = (spec.get("pvc") or {}).get("name") if spec.get("delivery") == "pvc" else None
        if not claim or self._reader.get("PersistentVolumeClaim", "v1", name=claim, namespace=ns):
            return None
        return (
            "the PersistentVolumeClaim %s/%s does not exist yet (the deploy stages it after validation)"
            % (
                ns,
                claim,
            )
        )

    def _not_run(self, plan, cached):
        out = []
        if plan["request"]["version"] and not cached:
            out.append("the runtime image's vLLM release (no probe of %s is cached)" % plan["image"])
        for model in plan["models"]:
            out.append("the model facts of %s (%s)" % (model["role"], model["uri"]))
        return out


def _image_digest(pod):
    """The digest the kubelet reports for the probe container's image (imageID), or None."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        image_id = cs.get("imageID") or ""
        if "@sha256:" in image_id:
            return image_id.rsplit("@", 1)[1]
    return None
