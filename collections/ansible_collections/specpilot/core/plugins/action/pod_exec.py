# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.pod_exec: run a command that reads in a pod's container, over the
pods/exec API, from the Ansible worker process.

kubernetes.core.k8s_exec does the same as a module, in a new Python process; with the kubernetes client
37 its ``from kubernetes.client.apis import core_v1_api`` imports every API class of the client (about
2.5 s of CPU a task). Here the client is plugin_utils/k8s_api.py's (kubernetes.core's ``get_api_client``,
so the connection options and the K8S_AUTH_* variables mean what they mean there); the exec itself is
the kubernetes client's public ``kubernetes.stream.stream`` over ``CoreV1Api.connect_get_namespaced_pod_exec``,
as in k8s_exec.
"""

from __future__ import annotations

import shlex

from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action


class ActionModule(Action):
    ARGUMENT_SPEC = deploy_args.POD_EXEC
    WORKER_IMPORTS = k8s_api.CORE_V1_IMPORTS

    def act(self, params, task_vars, result):
        auth = k8s_api.auth_of(params)
        command = params["command"]
        argv = shlex.split(command) if isinstance(command, str) else [str(word) for word in command or []]
        result["changed"] = False
        if not argv:
            result.update(failed=True, msg="command is empty: give the program and its arguments")
            return result
        target = "%s/%s" % (params["namespace"], params["pod"])
        try:
            ran = run(auth, params["namespace"], params["pod"], params["container"], argv, params["timeout"])
        except Exception as exc:  # noqa: BLE001 - refused (403), no such pod (404), no connection, ...
            result.update(
                failed=True, msg="cannot exec in pod %s: %s" % (target, k8s_api.failure(exc)["msg"])
            )
            return result
        result.update(ran)
        if ran["rc"] is None:
            result.update(
                failed=True, msg="no exit status from pod %s within %d s" % (target, params["timeout"])
            )
        elif ran["rc"] != 0:
            result.update(failed=True, msg="the command exited with %d in pod %s" % (ran["rc"], target))
        return result


def run(auth, namespace, pod, container, argv, timeout):
    """{rc, stdout, stderr, stdout_lines, stderr_lines} of argv run in the pod (rc None: no exit status
    within ``timeout`` seconds)."""
    import yaml
    from kubernetes.client.api.core_v1_api import CoreV1Api
    from kubernetes.stream import stream

    api = CoreV1Api(k8s_api.client(auth).client)
    kwargs = {"container": container} if container else {}
    ws = stream(
        api.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=argv,
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
        _request_timeout=timeout,
        **kwargs,
    )
    try:
        ws.run_forever(timeout=timeout)
        stdout, stderr = ws.read_stdout() or "", ws.read_stderr() or ""
        status = yaml.safe_load(ws.read_channel(3) or "null")
    finally:
        ws.close()
    return {
        "rc": exit_code(status),
        "stdout": stdout,
        "stderr": stderr,
        "stdout_lines": stdout.splitlines(),
        "stderr_lines": stderr.splitlines(),
    }


def exit_code(status):
    """The exit code in the v1 Status the API server sends on channel 3 when the command ends: 0 for
    Success, the ExitCode cause of NonZeroExitCode (as kubernetes.stream.ws_client.returncode reads it);
    None without a Status."""
    if not isinstance(status, dict):
        return None
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message"))
            except (TypeError, ValueError):
                break
    return -1
