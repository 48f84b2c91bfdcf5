# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations


class ModuleDocFragment(object):
    """The Kubernetes connection options of the specpilot.core modules that talk to a cluster (action
    group k8s)."""

    # The options themselves are kubernetes.core's, all of them: modules extend kubernetes.core.k8s_auth_options
    # (proxy, client_cert, client_key, no_proxy, impersonate_user ...) and this fragment, which says how one
    # module_defaults entry sets them for the whole group.
    DOCUMENTATION = r"""
options: {}
notes:
  - The module takes all of kubernetes.core's connection options (C(kubernetes.core.k8s_auth_options)) and is in the
    action group C(specpilot.core.k8s) (C(meta/runtime.yml)), so one C(module_defaults) entry
    C(group/specpilot.core.k8s) sets them for every task of a play, as C(group/kubernetes.core.k8s) does for
    kubernetes.core's modules. Options left out fall back to the C(K8S_AUTH_*) variables and C(KUBECONFIG).
"""

    # the ``auth`` option of the actions that take more of kubernetes.core's options (k8s_job_wait,
    # pod_exec, pod_log): extends_documentation_fragment specpilot.core.k8s_auth.more
    MORE = r"""
options:
  auth:
    description:
      - Deprecated, the module takes every kubernetes.core connection option itself. kubernetes.core connection
        options passed to every call; a key set here overrides the option of the same name. Not logged.
    type: dict
    default: {}
"""
