# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.deploy_state: read a service's live objects on the controller.

Three uses: one service (``name``/``namespace``: read, then decide when ``plan`` is given); many
services at once (``services``: one API client for all of them, ``states`` keyed
``namespace/name``); or a decision from objects read before (``live``: nothing is read, so this
worker never imports the kubernetes client - the deploy role reads every service of the play in one
``run_once`` step and decides per service this way).
"""

from __future__ import annotations

import concurrent.futures
import time

from ansible.errors import AnsibleActionFail
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_rollout, deploy_state
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.operate import rollback
from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import (
    ReadError,
    task_reader,
)

ISVC = ("InferenceService", "serving.kserve.io/v1beta1")
RUNTIME_API = "serving.kserve.io/v1alpha1"


class ActionModule(Action):
    ARGUMENT_SPEC = deploy_args.DEPLOY_STATE

    def act(self, params, task_vars, result):
        result["changed"] = False
        if params.get("services") is not None:
            reader = self._reader(params, task_vars)
            result["states"] = read_many(reader, params)
            result["requests"] = reader.requests
            return result
        if params.get("live") is not None:
            live = dict(params["live"])
            if live.get("error"):
                raise AnsibleActionFail(live["error"])
            result.update(live)
            result["requests"] = 0
        else:
            if not params.get("name") or not params.get("namespace"):
                raise AnsibleActionFail("name and namespace are required (or services, or live)")
            reader = self._reader(params, task_vars)
            try:
                result.update(read_state(reader, params))
            except ReadError as exc:
                raise AnsibleActionFail(str(exc)) from exc
            result["requests"] = reader.requests
        if params.get("rollback") is not None:
            result["rollback_decision"] = rollback_decision(result, params["rollback"])
        if params.get("plan"):
            # the decision in this process: passing the objects through Jinja to the
            # deploy_decision filter costs far more than the comparison itself
            result["decision"] = deploy_state.decide(
                params["plan"], result, params["field_manager"], time.time(), params["history_limit"]
            )
            result["problem"] = deploy_state.problem(
                params["plan"], result, params["lock_holder"], time.time(), params["create_namespace"]
            )
            if params.get("result_fact"):
                exported = dict(result["decision"]["result"])
                exported.update(params.get("result_extra") or {})
                result["ansible_facts"] = {params["result_fact"]: exported}
            if result["problem"] and params["fail_on_problem"]:
                result["failed"] = True
                result["msg"] = "%s: %s" % (params["plan"]["name"], result["problem"])
        return result

    def _reader(self, params, task_vars):
        return task_reader(self._loader, self._templar, task_vars or {}, params)


def rollback_decision(live, args):
    """The rollback role's decision on ``live`` (``args``: mode, options), made here rather than by the filter
    rollback_decision in a set_fact: passing the read objects and the plan through Jinja to it cost the worker more
    than a second a service (issue 40: a fleet's rollback spent most of its time there, twice a service)."""
    mode = args.get("mode") or "off"
    if mode not in ("off", "restore"):
        raise AnsibleActionFail("rollback.mode must be off or restore, not %r" % (mode,))
    live = {k: v for k, v in live.items() if k not in ("changed", "requests")}
    return rollback.decide(live, mode, time.time(), dict(args.get("options") or {}))


def state_key(namespace, name):
    return "%s/%s" % (namespace, name)


def read_many(reader, params, threads=8):
    """{namespace/name: what read_state returns, or {"error": ...}} for every service, read by a few
    threads sharing one API client (the first service alone, which warms the client up)."""
    jobs = []
    for service in params["services"]:
        one = dict(params)
        one.update({k: v for k, v in service.items() if v is not None})
        jobs.append((state_key(one.get("namespace"), one.get("name")), one))

    def read(job):
        key, one = job
        try:
            return key, read_state(reader, one)
        except ReadError as exc:
            return key, {"error": str(exc)}

    states = dict(read(job) for job in jobs[:1])
    if len(jobs) > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(jobs) - 1)) as pool:
            states.update(pool.map(read, jobs[1:]))
    return states


def read_state(reader, params):
    name, ns = params["name"], params["namespace"]
    out = {
        "namespace_exists": reader.get("Namespace", "v1", name=ns) is not None,
        "inferenceservice": None,
        "servingruntime": None,
        "deployment": None,
        "pods": [],
        "lease": None,
        "history": None,
    }
    if not out["namespace_exists"]:
        return out
    llm = params.get("kind") == llmisvc.KIND
    if llm:  # the object, its decode Deployment and pods (kept under the InferenceService's keys)
        obj, deployment, pods = deploy_rollout.read_llm_workload(reader, name, ns, params.get("api_version"))
        out["inferenceservice"] = obj
    else:
        out["inferenceservice"] = reader.get(ISVC[0], ISVC[1], name=name, namespace=ns)
    runtime = params.get("runtime") or {}
    if runtime.get("name"):
        kind = runtime.get("kind") or "ServingRuntime"
        out["servingruntime"] = reader.get(
            kind, RUNTIME_API, name=runtime["name"], namespace=ns if kind == "ServingRuntime" else None
        )
    if params["lease"]:
        out["lease"] = reader.get(
            "Lease", "coordination.k8s.io/v1", name=deploy_state.lease_name(name), namespace=ns
        )
    if params["history"]:
        out["history"] = reader.get("ConfigMap", "v1", name=deploy_state.history_name(name), namespace=ns)
    if params["workload"] and llm and out["inferenceservice"] is not None:
        out["deployment"], out["pods"] = deployment, pods
    elif params["workload"] and out["inferenceservice"] is not None:
        if service_plan.normalise_mode(params["deployment_mode"]) == "Standard":
            out["deployment"] = reader.get(
                "Deployment",
                "apps/v1",
                name=deploy_rollout.predictor_deployment_name(name, out["inferenceservice"]),
                namespace=ns,
            )
        out["pods"] = reader.get(
            "Pod", "v1", namespace=ns, label_selector="serving.kserve.io/inferenceservice=%s" % name
        )
    return out
