# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment(object):
    """Connection options of the deploy modules that read through kubernetes.core's k8s lookup."""

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
    description: Bearer token (C(K8S_AUTH_API_KEY)).
    type: str
  validate_certs:
    description: Verify the API server's certificate (C(K8S_AUTH_VERIFY_SSL)).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: CA certificate of the API server (C(K8S_AUTH_SSL_CA_CERT)).
    type: path
    aliases: [ssl_ca_cert]
  retries:
    description:
      - Attempts per API read on transient errors (409, 429, 5xx, connection errors), with exponential
        back-off from 0.5 s (at most 5 s).
    type: int
    default: 8
notes:
  - Runs on the controller as an action plugin; reads go through the C(kubernetes.core.k8s) lookup in the Ansible
    worker process (one API client per configuration, no module transfer), so polling is cheap.
requirements:
  - kubernetes.core >= 6.0 and the kubernetes Python client on the controller
"""
