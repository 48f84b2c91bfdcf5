#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_retry
short_description: Run kubernetes.core.k8s again, with backoff, while it fails with a transient error
version_added: 0.2.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Runs C(kubernetes.core.k8s) with O(args), and again while it fails with 429, 500, 502, 503, 504, a connection
    error, or 409 with O(conflict) - with exponential backoff and full jitter between attempts (0.5 s doubling, at
    most 10 s, a random share of it), where an C(until:) loop waits a fixed delay. A 400, 401, 403, 404 or 422 is
    returned at once.
  - Returns the last C(kubernetes.core.k8s) result as it is (C(changed), C(result), C(diff), C(msg)...), except
    that C(diff) leaves out what the API server manages itself (C(status), and metadata's C(managedFields),
    C(resourceVersion), C(uid), C(generation), C(creationTimestamp), C(selfLink)). Check mode and diff mode are
    passed on.
  - A server-side apply of one object (O(args) with only C(state=present), C(apply=true), C(server_side_apply) with
    C(field_manager) and C(force_conflicts), C(definition) as a dict, and the connection options) is made in the
    Ansible worker with the kubernetes client instead of a C(kubernetes.core.k8s) run, which starts a new Python
    process that imports the client again (about half a second of CPU a write). It makes the module's calls (the
    object is read, then applied with its field manager, in check mode as a server-side dry run) and returns the
    module's result (C(changed) when the answer differs from what was read beyond C(metadata.generation) and
    C(metadata.resourceVersion), C(method=apply), C(result), C(diff) in diff mode); a failure's C(msg) starts as
    the module's does (V(Failed to apply object:)) and carries the HTTP C(status). Any other O(args) (another
    state, C(wait), an alias, a definition as YAML text) go to C(kubernetes.core.k8s).
  - Runs on the controller as an action plugin.
options:
  args:
    description: The arguments of C(kubernetes.core.k8s).
    type: dict
    required: true
  retries:
    description: Attempts in all.
    type: int
    default: 5
  conflict:
    description: Retry a 409 Conflict too (a write sent again as it is, such as a server-side apply).
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
notes:
  - The connection options (module_defaults C(group/specpilot.core.k8s)) are passed to C(kubernetes.core.k8s) where
    O(args) does not set them. An apply made in the worker takes them the same way, and the C(K8S_AUTH_*)
    variables of the ansible-playbook process where they are unset (not a task's C(environment), which only
    modules see).
requirements:
  - kubernetes.core >= 6.0 and the kubernetes Python client on the controller
attributes:
  check_mode:
    support: full
    details: A server-side apply is a server-side dry run (C(dryRun=All)); other calls as C(kubernetes.core.k8s) makes them.
  diff_mode:
    support: full
    details: With C(--diff), the difference the apply makes (or would make, in check mode).
  platform:
    platforms: posix
  action_group:
    support: full
    membership:
      - specpilot.core.k8s
"""

EXAMPLES = r"""
- name: Apply the InferenceService, again on a transient API error
  specpilot.core.k8s_retry:
    retries: 5
    args:
      state: present
      apply: true
      server_side_apply:
        field_manager: specpilot
      definition: "{{ manifest }}"
"""

RETURN = r"""
changed:
  description: Whether kubernetes.core.k8s changed the object.
  type: bool
  returned: always
result:
  description: The object as kubernetes.core.k8s returns it.
  type: dict
  returned: success
method:
  description: What kubernetes.core.k8s did (V(apply) for a server-side apply).
  type: str
  returned: success
diff:
  description: The fields that differ before and after, in diff mode, without the fields the API server manages
    (C({}) when only those differ).
  type: dict
  returned: success, in diff mode
"""

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import K8S_RETRY, action_only


def main():
    action_only("k8s_retry", K8S_RETRY)


if __name__ == "__main__":
    main()
