#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: cluster_probe

short_description: Read the vLLM release of a service's runtime image, and its PVC's model facts, in the cluster

version_added: 0.2.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Runs a short-lived probe Job in the service's namespace, with the service's runtime image
    (C(specpilot_runtime.image), what the InferenceService will run). The Job runs a small standard-library
    program (C(model_dir.py), shipped in a ConfigMap) that prints C(vllm.__version__) (a failed C(import vllm)
    is reported, not fatal) and, with delivery C(pvc), the facts of the target and draft directories
    (C(config.json) and the tokenizer fingerprint, exactly as validation reads a local directory; never weights).
  - With delivery C(pvc) the service's claim is mounted read-only at C(/mnt/models), its C(pvc.path) as subPath,
    as KServe mounts a C(pvc://) storage URI into the predictor, so the directories are the predictor's.
  - The Job is restricted (non-root, no privilege escalation, all capabilities dropped, seccomp
    C(RuntimeDefault), read-only root filesystem, no ServiceAccount token), bounded by O(deadline_seconds) and
    O(ttl_seconds_after_finished), labelled C(app.kubernetes.io/managed-by=specpilot); the action waits at most
    O(timeout) seconds, reads the pod's log, and deletes the Job and its ConfigMap, also when it fails.
  - The pod prefers the node of the service's running pods (a ReadWriteOnce claim attaches to one node; the image
    is there) and takes the GPU node selector and tolerations of the spec; it requests no GPU.
  - The version is cached by image, in the ConfigMap C(specpilot-probe-cache) of the namespace and in a file on
    the controller (C(SPECPILOT_PROBE_CACHE), default C(~/.cache/specpilot/probe)) that validate-only runs read
    for C(vllm_version=auto). An image pinned by digest is cached for good, a tag for C(SPECPILOT_PROBE_TTL)
    seconds (default one day). With the version cached and no PVC to read, no Job is created.
  - PVC facts are not cached (the claim's content changes whenever anything writes to it); they are read on
    every probe. A claim that does not exist yet is reported as the facts' problem, without a Job mount.
  - Pass RV(probed) to M(specpilot.core.spec_validate) (its option O(specpilot.core.spec_validate#module:probed)).
  - In check mode no Job is created; RV(not_run) names what could not be read. Reports C(changed) only when it
    writes the cache ConfigMap.
  - Runs on the controller as an action plugin; the lab runs the Job in its engine environment.

options:
  spec:
    description:
      - The service spec (the keys of C(schemas/service.schema.json)). Default - assembled from the host's
        C(specpilot_*) variables, as M(specpilot.core.spec_validate) does.
    type: dict
  default_name:
    description: The service name when the spec has none (default - the inventory host name).
    type: str
  mode:
    description:
      - C(auto) creates a Job for what validation cannot do without - the version when the spec's C(vllm_version) is
        C(auto) or unset, and the PVC's directories whenever the models are on a PVC (typed facts or not; a directory
        the Job does not find is an error in C(specpilot.core.spec_validate)). The cached version is returned in any
        case, so a declared release is checked against it.
      - C(always) reads the version unless it is cached, and the PVC's facts whenever the models are on a PVC.
    type: str
    choices: [auto, always]
    default: auto
  read_version:
    description: Read the image's vLLM release (from the cache when it holds it).
    type: bool
    default: true
  read_models:
    description: Read the model facts of the directories on the service's PVC (delivery C(pvc)).
    type: bool
    default: true
  use_cache:
    description: Use and update the version caches (the ConfigMap and the controller's file).
    type: bool
    default: true
  timeout:
    description: Seconds to wait for the Job before failing.
    type: int
    default: 300
  poll_interval:
    description: Seconds between polls of the Job.
    type: float
    default: 1.0
  deadline_seconds:
    description: The Job's C(activeDeadlineSeconds) (1 to 1800).
    type: int
    default: 300
  ttl_seconds_after_finished:
    description: The Job's C(ttlSecondsAfterFinished) (1 to 3600), should the deletion fail.
    type: int
    default: 300
  run_as_user:
    description: The non-root user the probe runs as (it needs read access to the model files).
    type: int
    default: 1000
  image_pull_secrets:
    description: Pull secrets of the runtime image (names or C({name}) dicts).
    type: list
    elements: raw
    default: []
  python:
    description: The image's Python interpreter.
    type: str
    default: python3
  auth:
    description: More kubernetes.core connection options (for example C(client_cert)), added to the ones above.
    type: dict
    default: {}

extends_documentation_fragment:
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_read
"""

EXAMPLES = r"""
- name: Read the vLLM release of the image and the PVC's model facts
  specpilot.core.cluster_probe:
  register: probe

- name: Validate with what the probe read
  specpilot.core.spec_validate:
    probed: "{{ probe.probed }}"
"""

RETURN = r"""
probed:
  description:
    - What the probe read, for M(specpilot.core.spec_validate)'s option C(probed) - C(image), C(digest),
      C(source) (C(probe) or C(cache)), C(vllm_version) or C(vllm_error) (why C(import vllm) failed),
      C(unavailable) (check mode), and C(models) (per role C(uri), C(facts), C(problem)).
  returned: always
  type: dict
vllm_version:
  description: The image's vLLM release, or null when it could not be read.
  returned: always
  type: str
image:
  description: The runtime image probed.
  returned: always
  type: str
job:
  description: The name of the probe Job (deleted), or null when none ran.
  returned: always
  type: str
cached_version:
  description: True when the version came from the cache ConfigMap.
  returned: always
  type: bool
not_run:
  description: In check mode, what could not be read.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.specpilot.core.plugins.module_utils.service.cluster_probe import ARGUMENT_SPEC
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import action_only


def main():
    action_only("cluster_probe", ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
