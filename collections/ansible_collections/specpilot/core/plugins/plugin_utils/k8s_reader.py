# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read Kubernetes objects from controller-side plugins through kubernetes.core's ``k8s`` lookup.

The deploy action plugins (``deploy_state``, ``rollout_wait``, ``kserve_detect``,
``crd_validate``) read what they need in the Ansible worker process itself: the lookup plugin
of kubernetes.core takes the same connection settings as its modules (``kubeconfig``,
``context``, ``host``, ``api_key``, ``validate_certs``, ``ca_cert``... and the ``K8S_AUTH_*``
environment variables AWX injects) and keeps one API client per configuration, so a poll costs
an HTTP request instead of a module run (a fresh Python process importing the kubernetes
client).  Transient API errors (429, 5xx, connection errors, no answer within the request timeout)
are retried with module_utils/k8s/deploy_retry.py's Backoff (full jitter, Retry-After honoured).

Each request is bounded by ``request_timeout`` seconds: kubernetes.core passes no
``_request_timeout`` to the kubernetes client (kubernetes.core 6.2 has no such option; its issue
#897 asks for one), whose RESTClientObject.request then gives urllib3 ``timeout=None`` and waits for
ever.  So the lookup runs in a daemon thread that the reader stops waiting for.
"""

from __future__ import annotations

import threading
import time

from ansible.errors import AnsibleError
from ansible.plugins.loader import lookup_loader
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import (
    Backoff,
    explained,
    retry_after_of,
    transient_status,
)

REQUEST_TIMEOUT = 30

# connection options of kubernetes.core (doc fragment k8s_auth_options) the lookup accepts
AUTH_KEYS = (
    "kubeconfig",
    "context",
    "host",
    "api_key",
    "username",
    "password",
    "validate_certs",
    "ca_cert",
    "client_cert",
    "client_key",
    "proxy",
    "no_proxy",
    "proxy_headers",
    "persist_config",
    "impersonate_user",
    "impersonate_groups",
)


class ReadError(AnsibleError):
    """A read failed for good (after the retries, or with a non-transient error)."""


def auth_options(params):
    """The connection settings among ``params`` (unset ones left out)."""
    return {k: params[k] for k in AUTH_KEYS if params.get(k) is not None}


class RequestTimeout(Exception):
    """No answer within the request timeout (transient: retried)."""


def bounded(call, timeout):
    """``call()``'s result, or RequestTimeout after ``timeout`` seconds without one (the call goes on
    in its daemon thread; its late answer is dropped)."""
    box = {}

    def target():
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="k8s-read", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RequestTimeout("no answer from the API server in %s s (request_timeout)" % timeout)
    if "error" in box:
        raise box["error"]
    return box.get("result")


def is_transient(exc):
    status = getattr(exc, "status", None)
    if (status is not None and transient_status(status)) or isinstance(exc, RequestTimeout):
        return True
    name = type(exc).__name__
    text = str(exc)
    return status is None and (
        "MaxRetryError" in name
        or "ProtocolError" in name
        or "Timeout" in name
        or "ConnectionError" in name
        or "Connection refused" in text
        or "Connection reset" in text
        or "RemoteDisconnected" in text
    )


def task_reader(loader, templar, task_vars, params):
    """The reader of an action's task: its connection options (auth_options), its ``retries`` and its
    ``request_timeout`` (REQUEST_TIMEOUT where the action has none)."""
    return K8sReader(
        loader,
        templar,
        task_vars or {},
        auth_options(params),
        attempts=params["retries"],
        request_timeout=params.get("request_timeout") or REQUEST_TIMEOUT,
    )


class K8sReader(object):
    """``get(kind, api_version, name=None, namespace=None, label_selector=None)``: the object (or
    None when absent) for a name, else the list of items."""

    def __init__(
        self,
        loader,
        templar,
        task_vars,
        auth=None,
        attempts=8,
        delay=0.5,
        sleep=time.sleep,
        request_timeout=REQUEST_TIMEOUT,
        rand=None,
    ):
        self._lookup = lookup_loader.get("kubernetes.core.k8s", loader=loader, templar=templar)
        if self._lookup is None:
            raise AnsibleError("the kubernetes.core collection (k8s lookup) is not installed")
        self._vars = task_vars
        self._auth = dict(auth or {})
        self._backoff = Backoff(
            attempts, base=delay, cap=5.0, sleep=sleep, **({"rand": rand} if rand else {})
        )
        self._timeout = float(request_timeout or REQUEST_TIMEOUT)
        self.requests = 0  # approximate when several threads share the reader

    def get(self, kind, api_version, name=None, namespace=None, label_selector=None):
        kwargs = dict(self._auth, kind=kind, api_version=api_version)
        if name:
            kwargs["resource_name"] = name
        if namespace:
            kwargs["namespace"] = namespace
        if label_selector:
            kwargs["label_selector"] = label_selector

        def once():
            self.requests += 1
            return bounded(lambda: self._lookup.run([], self._vars, **kwargs), self._timeout)

        try:
            found = self._backoff.run(once, _verdict)
        except Exception as exc:  # noqa: BLE001 - the kubernetes client raises many types
            raise ReadError(
                "reading %s %s%s failed: %s"
                % (
                    kind,
                    (namespace + "/") if namespace else "",
                    name or label_selector or "",
                    explained(_short(exc)),
                )
            ) from exc
        if name:
            return found[0] if found else None
        return list(found or [])


def _verdict(found, exc):
    """Retry a transient failure, after the Retry-After of a 429/503 when it names one."""
    if exc is None:
        return False, None
    return is_transient(exc), retry_after_of(getattr(exc, "status", None), getattr(exc, "headers", None))


def _short(exc):
    body = getattr(exc, "body", None)
    status = getattr(exc, "status", None)
    if body:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        return "%s %s" % (status or "", text[:500])
    return str(exc)[:500]
