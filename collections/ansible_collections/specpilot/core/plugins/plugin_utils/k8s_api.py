# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Writes, execs and log reads from controller-side plugins, in the Ansible worker process, with the kubernetes
client ansible-playbook has already imported (callback/preload.py) instead of a kubernetes.core module
run (a new Python process that imports the client again: about a second of CPU a call).

The client is made by kubernetes.core's ``get_api_client`` (module_utils/k8s/client.py, what its modules
and its k8s lookup use, and what collections that build on kubernetes.core import), so the connection
options (``kubeconfig``, ``context``, ``host``, ``api_key``, ``validate_certs``, ``ca_cert``) and the
``K8S_AUTH_*`` variables mean what they mean for kubernetes.core; the calls are the kubernetes client's
public dynamic client (``resources.get(...).create/delete/patch``).

A write returns what a kubernetes.core module would have: ``{"changed": True, "result": object}``, or
``{"failed": True, "status": code, "msg": ...}``, which module_utils/k8s/deploy_retry.py's ``retryable``
classifies (429 and 5xx and no answer: transient; 409 on a conditional write: the answer).
"""

from __future__ import annotations

from ansible.module_utils.common.dict_transformations import recursive_diff

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import explained
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import auth_options

REQUEST_TIMEOUT = 30
# What reading a pod's log (pod_log, and job_runner's for a Job's pod) and an exec (pod_exec) import: with the
# kubernetes client 37, core_v1_api builds a pydantic validator for each of its methods (about 0.5 s of CPU, py-spy,
# issue 40). The actions that call them name these in WORKER_IMPORTS (plugin_utils/action.py): the preload callback
# imports them once in ansible-playbook's process, when such a task starts, not in every worker and not in a
# playbook that never reads a pod.
CORE_V1_IMPORTS = ("kubernetes.client.api.core_v1_api", "kubernetes.stream")


def auth_of(params):
    """The connection of an action's validated ``params``: its connection options (k8s_reader.auth_options),
    then what its ``auth`` option adds or overrides (unset ones left out, so that kubernetes.core's
    K8S_AUTH_* defaults apply)."""
    auth = auth_options(params)
    auth.update({k: v for k, v in (params.get("auth") or {}).items() if v is not None})
    return auth


def client(auth):
    """The dynamic client (kubernetes.dynamic.DynamicClient) for kubernetes.core connection options."""
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

    return get_api_client(**auth).client


def pod_log(api_client, name, namespace, container=None, timeout=REQUEST_TIMEOUT, **options):
    """The text of a pod's log (CoreV1Api.read_namespaced_pod_log; ``options``: previous, since_seconds,
    tail_lines, as kubernetes.core.k8s_log takes them). Raises the client's exception when it cannot be
    read (400: the container has not started; 404: no such pod; 403: pods/log refused)."""
    from kubernetes.client.api.core_v1_api import CoreV1Api

    kwargs = {k: v for k, v in dict(options, container=container).items() if v not in (None, False, 0)}
    return (
        CoreV1Api(api_client).read_namespaced_pod_log(name, namespace, _request_timeout=timeout, **kwargs)
        or ""
    )


class Writer(object):
    """create / delete / json_patch / apply of one object, each a module-like result (see above)."""

    def __init__(self, auth, request_timeout=REQUEST_TIMEOUT, make_client=client):
        self._auth = dict(auth or {})
        self._timeout = request_timeout or REQUEST_TIMEOUT
        self._make_client = make_client
        self._client = None

    def create(self, manifest):
        return self._call(
            manifest["apiVersion"],
            manifest["kind"],
            lambda res: res.create(body=manifest, namespace=manifest["metadata"].get("namespace")),
        )

    def delete(self, api_version, kind, name, namespace, resource_version):
        """Delete only while the object is at ``resource_version`` (a 409 otherwise)."""
        body = {"preconditions": {"resourceVersion": resource_version}}
        return self._call(
            api_version, kind, lambda res: res.delete(name=name, namespace=namespace, body=body)
        )

    def json_patch(self, api_version, kind, name, namespace, ops):
        """A JSON patch (RFC 6902): its ``test`` operations make it a compare-and-swap (a 422 otherwise)."""
        return self._call(
            api_version,
            kind,
            lambda res: res.patch(
                name=name, namespace=namespace, body=ops, content_type="application/json-patch+json"
            ),
        )

    def apply(self, manifest, field_manager, force_conflicts=False, dry_run=False, diff=False):
        """Server-side apply of ``manifest`` as kubernetes.core.k8s makes it with ``apply: true`` and
        ``server_side_apply`` (module_utils/k8s/runner.py ``perform_action``, service.py ``apply``,
        apply.py ``k8s_apply``): the object is read, then applied (``dryRun=All`` with ``dry_run``: check
        mode), and it changed when the answer differs from what was read beyond metadata.generation and
        metadata.resourceVersion (service.py ``diff_objects``). The result is that module's: ``changed``,
        ``method`` "apply", ``result``, ``diff`` when asked, and its warning when only those two changed."""
        meta = manifest.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace")
        try:
            resource = self._resource(manifest["apiVersion"], manifest["kind"])
            before = _read(resource, name, namespace)
        except Exception as exc:  # noqa: BLE001 - as in _call
            return _failed("retrieve requested", exc)
        try:
            after = resource.server_side_apply(
                body=manifest,
                name=name,
                namespace=namespace,
                field_manager=field_manager,
                force_conflicts=force_conflicts,
                dry_run="All" if dry_run else None,
            )
        except Exception as exc:  # noqa: BLE001 - as in _call
            return _failed("apply", exc)
        return _applied(before, after.to_dict(), diff=diff)

    def _resource(self, api_version, kind):
        """The kind's resource of the dynamic client (made at the first call), its calls timed."""
        if self._client is None:
            self._client = self._make_client(self._auth)
        return _Timed(self._client.resources.get(api_version=api_version, kind=kind), self._timeout)

    def _call(self, api_version, kind, do):
        try:
            obj = do(self._resource(api_version, kind))
        except Exception as exc:  # noqa: BLE001 - an API error, no connection, bad configuration
            return failure(exc)
        return {"changed": True, "result": obj.to_dict() if hasattr(obj, "to_dict") else obj}


def _read(resource, name, namespace):
    """The object as a dict, {} when there is none (a 404); any other error is raised."""
    try:
        return resource.get(name=name, namespace=namespace).to_dict()
    except Exception as exc:  # noqa: BLE001 - the client's ApiException subclasses carry .status
        if getattr(exc, "status", None) == 404:
            return {}
        raise


def _failed(what, exc):
    """failure(exc), its message worded as kubernetes.core.k8s words it (service.py: "Failed to apply
    object: ...", "Failed to retrieve requested object: ...")."""
    out = failure(exc)
    out["msg"] = "Failed to %s object: %s" % (what, out["msg"])
    return out


def _applied(before, after, diff=False):
    """kubernetes.core.k8s's result of an apply that read ``before`` ({} when absent) and got ``after``
    back (runner.py ``perform_action`` with service.py ``diff_objects``)."""
    delta = recursive_diff(before, after)
    result = {"changed": bool(delta), "method": "apply", "result": after}
    shown = {"before": delta[0], "after": delta[1]} if delta else {}
    if delta and set(delta[0]) == set(delta[1]) == {"metadata"}:
        if set(delta[0]["metadata"]) | set(delta[1]["metadata"]) <= {"generation", "resourceVersion"}:
            result["changed"] = False
            result["warnings"] = [
                "No meaningful diff was generated, but the API may not be idempotent "
                "(only metadata.generation or metadata.resourceVersion were changed)"
            ]
    if diff:
        result["diff"] = shown
    return result


class _Timed(object):
    """The resource's calls, each bounded by the request timeout (kubernetes.core passes none)."""

    def __init__(self, resource, timeout):
        self._resource, self._timeout = resource, timeout

    def __getattr__(self, name):
        method = getattr(self._resource, name)
        return lambda **kwargs: method(_request_timeout=self._timeout, **kwargs)


def failure(exc):
    """A failed module-like result for an exception of the kubernetes client."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or str(exc))
    out = {"failed": True, "msg": explained(" ".join(str(text).split())[:1000] or type(exc).__name__)}
    if isinstance(status, int) and status > 0:
        out["status"] = status
    reason = getattr(exc, "reason", None)
    if reason:
        out["reason"] = str(reason)
    return out
