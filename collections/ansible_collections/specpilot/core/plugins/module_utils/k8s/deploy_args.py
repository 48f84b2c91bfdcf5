# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Argument specs of the deploy modules (shared by each module and its action plugin), and the main() of
the modules whose work only their action plugin does."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

__all__ = [
    "action_only",
    "K8S_CONNECTION",
    "K8S_CONNECTION_AUTH",
    "K8S_AUTH",
    "KSERVE_DETECT",
    "DEPLOY_STATE",
    "CRD_VALIDATE",
    "ROLLOUT_WAIT",
    "SERVICE_LOCK",
    "K8S_JOB_WAIT",
    "K8S_JOB",
    "K8S_RETRY",
    "POD_EXEC",
    "POD_LOG",
    "K8S_READ",
]

# The connection options of kubernetes.core, all of them (its doc fragment kubernetes.core.k8s_auth_options and its
# module_utils/args_common.py AUTH_ARG_SPEC; tests/unit/test_connection.py compares the two), that every module of the
# action group specpilot.core.k8s (meta/runtime.yml) takes, so that one module_defaults entry sets them all.
K8S_CONNECTION = {
    "kubeconfig": {"type": "raw"},
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "username": {"type": "str"},
    "password": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"]},
    "client_cert": {"type": "path", "aliases": ["cert_file"]},
    "client_key": {"type": "path", "aliases": ["key_file"]},
    "proxy": {"type": "str"},
    "no_proxy": {"type": "str"},
    "proxy_headers": {
        "type": "dict",
        "options": {
            "proxy_basic_auth": {"type": "str", "no_log": True},
            "basic_auth": {"type": "str", "no_log": True},
            "user_agent": {"type": "str"},
        },
    },
    "persist_config": {"type": "bool"},
    "impersonate_user": {"type": "str"},
    "impersonate_groups": {"type": "list", "elements": "str"},
}

# ... and the ``auth`` dict of the actions that take more of kubernetes.core's options (client_cert, proxy, ...)
K8S_CONNECTION_AUTH = dict(K8S_CONNECTION, auth={"type": "dict", "default": {}, "no_log": True})

# ... and what the deploy modules that read through kubernetes.core's k8s lookup add (doc fragment k8s_read)
K8S_AUTH = dict(
    K8S_CONNECTION, retries={"type": "int", "default": 8}, request_timeout={"type": "int", "default": 30}
)

KSERVE_DETECT = dict(
    K8S_AUTH,
    crds={"type": "list", "elements": "dict"},
    declared={"type": "str"},
    given={"type": "str"},
    fail_on_error={"type": "bool", "default": True},
)

DEPLOY_STATE = dict(
    K8S_AUTH,
    name={"type": "str"},
    namespace={"type": "str"},
    services={"type": "list", "elements": "dict"},
    live={"type": "dict"},
    # the legacy names too (RawDeployment, Serverless): read as service/plan.py normalise_mode reads them
    deployment_mode={
        "type": "str",
        "default": "Standard",
        "choices": ["Standard", "Knative", "RawDeployment", "Serverless"],
    },
    runtime={"type": "dict"},
    # the plan's resource kind and its apiVersion (LLMInferenceService: its object, Deployments and pods)
    kind={"type": "str", "default": "InferenceService", "choices": ["InferenceService", "LLMInferenceService"]},
    api_version={"type": "str"},
    lease={"type": "bool", "default": True},
    history={"type": "bool", "default": True},
    workload={"type": "bool", "default": True},
    plan={"type": "dict"},
    # the rollback role's decision on what was read (mode off/restore, its options): in this process, as deploy's
    rollback={"type": "dict"},
    field_manager={"type": "str", "default": "specpilot"},
    history_limit={"type": "int", "default": 10},
    lock_holder={"type": "str", "default": ""},
    create_namespace={"type": "bool", "default": False},
    fail_on_problem={"type": "bool", "default": False},
    result_fact={"type": "str"},
    result_extra={"type": "dict", "default": {}},
)

CRD_VALIDATE = dict(
    K8S_AUTH,
    manifests={"type": "list", "elements": "dict", "required": True},
    crds={"type": "list", "elements": "dict"},
    fail_on_error={"type": "bool", "default": True},
)

# the service lock a run holds (what service_lock returned), for the actions that renew it while they wait
# (doc fragment specpilot.core.held_lock); name and namespace where the task has no plan to take them from
HELD_LOCK = {
    "holder": {"type": "str", "required": True},
    "resource_version": {"type": "str", "required": True},
    "duration": {"type": "int", "required": True},
    "name": {"type": "str"},
    "namespace": {"type": "str"},
}

ROLLOUT_WAIT = dict(
    K8S_AUTH,
    plan={"type": "dict", "required": True},
    baseline={"type": "dict", "default": {}},
    timeout={"type": "int", "default": 0},
    delay={"type": "float", "default": 5.0},
    fail_fast_restarts={"type": "int", "default": 2},
    pending_grace={"type": "int", "default": 300},
    image_grace={"type": "int", "default": 300},
    progress_interval={"type": "int", "default": 30},
    fail_on_error={"type": "bool", "default": False},
    lock={"type": "dict", "options": HELD_LOCK},
)

SERVICE_LOCK = dict(
    K8S_AUTH,
    state={"type": "str", "default": "acquired", "choices": ["acquired", "renewed", "released", "broken"]},
    name={"type": "str", "required": True},
    namespace={"type": "str", "required": True},
    confirm={"type": "bool", "default": False},
    purpose={"type": "str", "default": "deploy"},
    holder={"type": "str"},
    duration={"type": "int", "default": 1200},
    resource_version={"type": "str"},
    labels={"type": "dict", "default": {}},
)

K8S_JOB_WAIT = dict(
    K8S_CONNECTION_AUTH,
    name={"type": "str", "required": True},
    namespace={"type": "str", "required": True},
    container={"type": "str"},
    timeout={"type": "int", "default": 3600},
    poll_interval={"type": "float", "default": 5.0},
    pending_timeout={"type": "int", "default": 900},
    pull_timeout={"type": "int", "default": 300},
    log_tail_lines={"type": "int", "default": 40},
    show_progress={"type": "bool", "default": True},
    line_prefix={"type": "str", "default": "specpilot-stage: "},
    # the lock of the service the Job works for, renewed while it is waited for (with its name and namespace)
    lock={"type": "dict", "options": HELD_LOCK, "required_together": [("name", "namespace")]},
)

# specpilot.core.k8s_job: a Job's whole cycle (plugin_utils/job_runner.py): the wait's options, the objects
K8S_JOB = dict(
    {k: v for k, v in K8S_JOB_WAIT.items() if k not in ("name", "namespace")},
    definitions={"type": "list", "elements": "dict", "required": True},
    replace={"type": "str", "choices": ["finished", "always", "never"], "default": "finished"},
    delete={"type": "str", "choices": ["always", "success", "never"], "default": "always"},
    owned={"type": "bool", "default": False},
    log={"type": "bool", "default": False},
    retries={"type": "int", "default": 5},
)

# specpilot.core.k8s_retry: kubernetes.core.k8s run again, with backoff, while it fails with a transient error
K8S_RETRY = dict(
    K8S_CONNECTION,
    args={"type": "dict", "required": True},
    retries={"type": "int", "default": 5},
    conflict={"type": "bool", "default": True},
)

# specpilot.core.pod_exec: a command that reads, run in a pod's container over the exec API
POD_EXEC = dict(
    K8S_CONNECTION_AUTH,
    namespace={"type": "str", "required": True},
    pod={"type": "str", "required": True},
    container={"type": "str"},
    command={"type": "raw", "required": True},
    timeout={"type": "int", "default": 120},
)

# specpilot.core.pod_log: a pod's log, as kubernetes.core.k8s_log returns it
POD_LOG = dict(
    K8S_CONNECTION_AUTH,
    name={"type": "str", "required": True},
    namespace={"type": "str", "required": True},
    container={"type": "str"},
    previous={"type": "bool", "default": False},
    since_seconds={"type": "int"},
    tail_lines={"type": "int"},
    request_timeout={"type": "int", "default": 30},
)

# specpilot.core.k8s_read: objects, as kubernetes.core.k8s_info returns them
K8S_READ = dict(
    K8S_AUTH,
    api_version={"type": "str", "default": "v1"},
    kind={"type": "str", "required": True},
    name={"type": "str"},
    namespace={"type": "str"},
    label_selectors={"type": "list", "elements": "str", "default": []},
)


def action_only(name, argument_spec):
    """main() of the module ``name``, whose work its action plugin (plugins/action/<name>.py) does on the
    controller: the module file documents ``argument_spec`` (validate-modules compares the two); run as a
    module, it fails."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    module.fail_json(msg="specpilot.core.%s runs as an action plugin on the controller" % name)


# The variables that choose the cluster a host's tasks reach, in the order the playbooks' module_defaults read them
# (specpilot_k8s_*, then the deprecated specpilot_deploy_* / specpilot_rollback_* names); an empty value falls through.
CLUSTER_VARIABLES = (
    ("specpilot_k8s_kubeconfig", "specpilot_deploy_kubeconfig", "specpilot_rollback_kubeconfig"),
    ("specpilot_k8s_context", "specpilot_deploy_context", "specpilot_rollback_context"),
    ("specpilot_k8s_host",),
)


def cluster_key(variables):
    """Which cluster a host's tasks reach: its kubeconfig, context and API host as the playbooks' module_defaults
    take them (issue 40: a one-read step run once for a play reads only the services of its own host's cluster;
    the others read their own). Hosts with no such variable share the environment's cluster (K8S_AUTH_*)."""
    parts = []
    for names in CLUSTER_VARIABLES:
        value = next((variables.get(n) for n in names if variables.get(n) not in (None, "")), "")
        parts.append(str(value))
    return "|".join(parts)
