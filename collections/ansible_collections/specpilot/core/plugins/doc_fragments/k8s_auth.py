# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment(object):
    """The Kubernetes connection options of the specpilot.core modules that talk to a cluster (action
    group k8s)."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig, or its content as a dict, as in kubernetes.core.
      - Default - C(K8S_AUTH_KUBECONFIG), then C(KUBECONFIG), then C(~/.kube/config).
    type: raw
  context:
    description: kubeconfig context to use (C(K8S_AUTH_CONTEXT)).
    type: str
  host:
    description: API server URL (C(K8S_AUTH_HOST), set by AWX's Kubernetes credential).
    type: str
  api_key:
    description: Bearer token (C(K8S_AUTH_API_KEY)). Not logged.
    type: str
  validate_certs:
    description: Verify the API server's certificate (C(K8S_AUTH_VERIFY_SSL)).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: CA certificate of the API server (C(K8S_AUTH_SSL_CA_CERT)).
    type: path
    aliases: [ssl_ca_cert]
notes:
  - The module is in the action group C(specpilot.core.k8s) (C(meta/runtime.yml)), so one
    C(module_defaults) entry C(group/specpilot.core.k8s) sets these options for every task of a play,
    as C(group/kubernetes.core.k8s) does for kubernetes.core's modules. Options left out fall back to
    the C(K8S_AUTH_*) variables and C(KUBECONFIG).
"""

    # the ``auth`` option of the actions that take more of kubernetes.core's options (k8s_job_wait,
    # pod_exec, pod_log): extends_documentation_fragment specpilot.core.k8s_auth.more
    MORE = r"""
options:
  auth:
    description:
      - More kubernetes.core connection options passed to every call (C(client_cert), C(proxy), ...); a key that
        is also an option of this module (C(kubeconfig), C(context), ...) overrides it. Not logged.
    type: dict
    default: {}
"""
