#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: service_lock
short_description: Take, renew or release the lock of one specpilot service
version_added: 0.2.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Every run that writes a service - deploy, rollback (also the acceptance guard's), the benchmark's twin - holds
    the service's lock while it writes, so two of them never interleave.
  - The lock is the coordination.k8s.io Lease C(specpilot-deploy-<name>) in the service's namespace, with a holder,
    C(acquireTime), C(renewTime) and C(leaseDurationSeconds), as Kubernetes leader election writes it.
  - I(state=acquired) takes it by compare-and-swap - a JSON patch whose first operation tests the C(resourceVersion)
    just read - so of two runs that race, one fails and is told who holds the lock. A lock whose holder died
    expires (C(renewTime) + C(leaseDurationSeconds)) and is taken over. A lock this holder already holds is taken
    again.
  - I(state=renewed) moves C(renewTime) to now, only while this holder still holds the lock at I(resource_version).
  - I(state=released) deletes the Lease with I(resource_version) as precondition, so a lock another run took over
    after this one's expired is left alone (C(released=false), not a failure). A release never fails - when the API
    keeps failing (after the retries) the lock is left to expire, C(released=false), with a warning that says so
    and how to break it sooner.
  - I(state=broken) is the operator's way out when a holder is known to be gone and its lock has not expired yet -
    it deletes the Lease whoever holds it, only with I(confirm=true), and returns the holder it broke
    (C(playbooks/break_lock.yml)). In check mode, or without I(confirm), it only says who holds the lock.
  - Runs on the controller as an action plugin; it reads through the C(kubernetes.core.k8s) lookup and writes
    (a create, a JSON patch whose C(test) operations make it a compare-and-swap, a delete with a C(resourceVersion)
    precondition) with the kubernetes client of kubernetes.core's C(get_api_client), in the worker process.
options:
  state:
    description: Take, renew, release or break the lock.
    type: str
    choices: [acquired, renewed, released, broken]
    default: acquired
  confirm:
    description: Required with I(state=broken) - the lock is deleted whoever holds it.
    type: bool
    default: false
  name:
    description: The service (InferenceService) name.
    type: str
    required: true
  namespace:
    description: Its namespace.
    type: str
    required: true
  purpose:
    description: What takes the lock (C(deploy), C(rollback), C(guard), C(benchmark)...), written into the holder id.
    type: str
    default: deploy
  holder:
    description:
      - The holder identity. Default - one formula for every caller,
        C(<USER>@<controller host>/<purpose>/<awx-job-N or pid-N>/<random 8>).
      - Pass the C(holder) a previous I(state=acquired) returned to renew the lock.
      - Pass it to I(state=released) too - after a conflict the Lease is read again, and released only while it
        is still this holder's. Without it, only a Lease still at I(resource_version) is released.
    type: str
  duration:
    description: Seconds the lock stays valid without renewal (its holder died, or forgot it).
    type: int
    default: 1200
  resource_version:
    description:
      - The C(resource_version) the lock was taken or last renewed at (returned by I(state=acquired) and
        I(state=renewed)). Required to renew; without it, I(state=released) releases nothing.
    type: str
  labels:
    description: Labels of the Lease besides C(app.kubernetes.io/managed-by) and C(specpilot.io/service).
    type: dict
    default: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_read
notes:
  - The lock is not managed state - the task never reports C(changed), except when I(state=broken) deletes it. In
    check mode nothing is written and I(state=acquired) and I(state=broken) report what they found.
  - I(retries) also applies to the writes (409, 429, 5xx and connection errors are retried). A conflict (409, 422)
    on a conditional write is not retried blindly - the Lease is read again and the step decided again
    (at most 4 times) - so a real race ends in a refusal that names the winner.
seealso:
  - module: specpilot.core.deploy_state
attributes:
  check_mode:
    support: full
    details: Nothing is written; it says who holds the lock.
  diff_mode:
    support: none
  platform:
    platforms: posix
  action_group:
    support: full
    membership:
      - specpilot.core.k8s
"""

EXAMPLES = r"""
- name: Take the lock of the service
  specpilot.core.service_lock:
    name: "{{ plan.name }}"
    namespace: "{{ plan.namespace }}"
    purpose: deploy
    duration: 1800
  register: lock

- name: Write under the lock
  block:
    - name: Apply
      kubernetes.core.k8s:
        definition: "{{ manifest }}"
        apply: true
  always:
    - name: Release the lock
      specpilot.core.service_lock:
        state: released
        name: "{{ plan.name }}"
        namespace: "{{ plan.namespace }}"
        resource_version: "{{ lock.resource_version }}"
      when: lock.acquired | default(false)
"""

RETURN = r"""
acquired:
  description: This run holds the lock now (I(state=acquired)).
  returned: state is acquired
  type: bool
renewed:
  description: The lock was renewed (I(state=renewed)).
  returned: state is renewed
  type: bool
released:
  description: The Lease was deleted (I(state=released)); false when it was not this run's any more, or when the
    API kept failing (then with a warning; the lock expires on its own).
  returned: state is released
  type: bool
broken:
  description: Whether I(state=broken) deleted the lock.
  returned: state=broken
  type: bool
broken_holder:
  description: Who held the lock I(state=broken) found (null when there was none).
  returned: state=broken
  type: str
holder:
  description: The holder identity written into the lock; with I(state=broken), the holder of the lock it broke
    (or would break), as C(broken_holder).
  returned: always
  type: str
resource_version:
  description: The Lease's C(resourceVersion) after this run wrote it - what renew and release need.
  returned: always (null when this run does not hold the lock)
  type: str
lease:
  description: The Lease name, C(specpilot-deploy-<name>).
  returned: always
  type: str
status:
  description:
    - What the Lease said before (C(present, held, mine, expired, free, holder, expires_at, expires_in, message)...),
      as the filter C(specpilot.core.lease_status) reads it.
  returned: state is acquired
  type: dict
message:
  description: What happened, in words.
  returned: success
  type: str
"""

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import SERVICE_LOCK, action_only


def main():
    action_only("service_lock", SERVICE_LOCK)


if __name__ == "__main__":
    main()
