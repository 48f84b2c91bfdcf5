#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: stage_pvc_plan

short_description: Plan a PVC staging run and render its ConfigMap and Job

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Computes, for each artifact of a service (target, draft), the staging request (source, revision,
    include/exclude, checksums, destination directory on the PVC) and its digest, and compares it with
    what the status ConfigMap recorded after the last successful staging Job (and with the PVC's uid).
  - When every artifact is up to date, RV(needed) is V(false) and no Job needs to run.
  - Otherwise it renders the ConfigMap holding the staging program (C(stager.py), Python standard library
    only) and the request, and the batch/v1 Job that runs it with the PVC mounted. Source credentials
    reach the Job only through C(envFrom) of the artifact's Secret (prefix C(SPECPILOT_SRC_<ROLE>_));
    no secret value passes through this module, the Job's arguments or its log.
  - Pure computation; it never contacts the cluster and never reports C(changed). Supports check mode.
  - Used by the C(specpilot_stage_pvc) role; see its README for the design.

options:
  name:
    description: Service name (used in the Job and ConfigMap names).
    type: str
    required: true
  namespace:
    description: Namespace of the PVC and the Job.
    type: str
    required: true
  pvc:
    description:
      - The service's C(specpilot_pvc) - C(name), C(path) (directory holding the sub-directories),
        C(size), C(storage_class), C(access_modes) (for RV(manifests.pvc)).
    type: dict
    required: true
  pvc_object:
    description: The PVC as read from the cluster (its C(metadata.uid) is recorded and compared), or null.
    type: dict
  artifacts:
    description:
      - C(plan.staging.artifacts) of M(specpilot.core.spec_validate) - each with C(role), C(uri), C(subdir),
        and optional C(revision), C(include), C(exclude), C(secret_name). Entries without C(uri) are skipped.
    type: list
    elements: dict
    required: true
  speculative_method:
    description:
      - The speculative method; a draft of an EAGLE/Medusa-style method is checked as a head (tokenizer
        optional), any other draft as a full model sharing the target's vocabulary.
    type: str
  artifact_options:
    description:
      - Per role (C(target), C(draft)) - C(checksums) (map of relative path to sha256), C(checksum_manifest)
        (file name in the source or URL, C(sha256sum) format), C(files) (file list of an https:// directory),
        C(archive_sha256), C(unpack) (default true), C(insecure_tls).
    type: dict
    default: {}
  status_data:
    description: C(data) of the status ConfigMap (RV(status_configmap_name)), or null when it does not exist.
    type: dict
  status_configmap_name:
    description: Name of the status ConfigMap (default C(specpilot-stage-<pvc name>)).
    type: str
  force:
    description:
      - Stage again and overwrite files on the PVC that differ from the source.
      - Refused (the plan fails, nothing changes) when a directory to stage is, contains or lies inside what
        O(live_inferenceservice) serves from this PVC (its C(--model), C(--tokenizer), draft, else its whole
        C(storageUri) directory).
    type: bool
    default: false
  live_inferenceservice:
    description:
      - The service's live InferenceService (as read from the cluster), or null when there is none. Only read
        with O(force).
    type: dict
  recheck:
    description: Run the Job even when the status ConfigMap says staged (it re-verifies every file).
    type: bool
    default: false
  verify:
    description: How a Job verifies files already staged under a matching marker - V(sha256) re-hashes them, V(size) checks sizes.
    type: str
    choices: [sha256, size]
    default: sha256
  layout_check:
    description: Check config.json, tokenizer files and safetensors headers after staging.
    type: bool
    default: true
  progress_interval:
    description: Seconds between progress lines in the Job log.
    type: float
    default: 5.0
  image:
    description: Image of the staging container; it needs C(python3) (and boto3 / huggingface_hub for s3:// / hf://).
    type: str
    required: true
  image_pull_policy:
    description: imagePullPolicy of the staging container.
    type: str
    default: IfNotPresent
  command:
    description: The interpreter command; the program path and C(--request FILE) are appended.
    type: list
    elements: str
    default: [python3]
  service_account:
    description: serviceAccountName of the Job's pod (the program needs no API access).
    type: str
  resources:
    description: resources of the staging container.
    type: dict
  security_context:
    description: securityContext of the staging container.
    type: dict
  pod_security_context:
    description: securityContext of the pod (e.g. fsGroup so that the PVC is writable).
    type: dict
  node_selector:
    description: nodeSelector of the pod.
    type: dict
  tolerations:
    description: tolerations of the pod.
    type: list
    elements: dict
  priority_class_name:
    description: priorityClassName of the pod.
    type: str
  image_pull_secrets:
    description: Names of imagePullSecrets.
    type: list
    elements: str
  extra_env:
    description: More C(env) entries of the container (no secret values - use C(valueFrom)).
    type: list
    elements: dict
  extra_volumes:
    description: More volumes of the pod.
    type: list
    elements: dict
  extra_volume_mounts:
    description: More volumeMounts of the container.
    type: list
    elements: dict
  labels:
    description: More labels of the Job, its pod and the ConfigMap.
    type: dict
  backoff_limit:
    description: backoffLimit of the Job (a retry resumes; exit code 2 - a permanent error - fails at once).
    type: int
    default: 2
  active_deadline_seconds:
    description: activeDeadlineSeconds of the Job.
    type: int
  ttl_seconds_after_finished:
    description: ttlSecondsAfterFinished of the Job.
    type: int

notes:
  - The status ConfigMap is keyed by destination directory, so services sharing one PVC keep separate
    entries. Run services that stage into the same directory of the same PVC one at a time.

seealso:
  - module: specpilot.core.k8s_job_wait
  - module: specpilot.core.spec_validate
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Plan the staging of a service onto its PVC
  specpilot.core.stage_pvc_plan:
    name: chat
    namespace: ml
    pvc: {name: models, path: chat}
    pvc_object: "{{ pvc_info.resources | first | default(omit) }}"
    artifacts: "{{ specpilot_validate_result.plan.staging.artifacts }}"
    speculative_method: draft_model
    status_data: "{{ (status_info.resources | first).data | default({}) if status_info.resources else omit }}"
    image: docker.io/library/python:3.12-slim@sha256:78387bc3881b8273120a12ebe6c1ab22b018ccc2c9adf565ae1ac9b536e184ea
  register: stage_plan
"""

RETURN = r"""
needed:
  description: Whether a staging Job must run.
  type: bool
  returned: always
artifacts:
  description: Per artifact - C(role), C(dest) (path on the PVC), C(uri) (credentials and query redacted),
    C(request_digest), C(up_to_date), C(reason), C(status_key), C(recorded) (the status entry or null).
  type: list
  elements: dict
  returned: always
pvc_uid:
  description: uid of the PVC (null when it does not exist yet).
  type: str
  returned: always
job_name:
  description: Name of the Job (and its ConfigMap); it depends on the request and the program, so a re-run of an
    interrupted staging finds its Job again.
  type: str
  returned: always
configmap_name:
  description: Name of the ConfigMap holding the program and the request.
  type: str
  returned: always
status_configmap_name:
  description: Name of the status ConfigMap of the PVC.
  type: str
  returned: always
program_sha256:
  description: sha256 of the staging program (its files, stager.py and deploy_retry.py, in name order).
  type: str
  returned: always
request:
  description: The staging program's request (artifacts that need staging only).
  type: dict
  returned: always
manifests:
  description: C(pvc) (for creating it), and when RV(needed), C(configmap) and C(job).
  type: dict
  returned: always
  contains:
    pvc:
      description: The PersistentVolumeClaim, to create when the cluster has none.
      type: dict
      returned: always
    configmap:
      description: The ConfigMap holding the staging program and its request.
      type: dict
      returned: when RV(needed)
    job:
      description: The staging Job.
      type: dict
      returned: when RV(needed)
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specpilot.core.plugins.module_utils.operate.rollback import pvc_served
from ansible_collections.specpilot.core.plugins.module_utils.staging.pvc_staging import PlanError, build_plan


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            namespace=dict(type="str", required=True),
            pvc=dict(type="dict", required=True),
            pvc_object=dict(type="dict"),
            artifacts=dict(type="list", elements="dict", required=True),
            speculative_method=dict(type="str"),
            artifact_options=dict(type="dict", default={}),
            status_data=dict(type="dict"),
            status_configmap_name=dict(type="str"),
            force=dict(type="bool", default=False),
            live_inferenceservice=dict(type="dict"),
            recheck=dict(type="bool", default=False),
            verify=dict(type="str", choices=["sha256", "size"], default="sha256"),
            layout_check=dict(type="bool", default=True),
            progress_interval=dict(type="float", default=5.0),
            image=dict(type="str", required=True),
            image_pull_policy=dict(type="str", default="IfNotPresent"),
            command=dict(type="list", elements="str", default=["python3"]),
            service_account=dict(type="str"),
            resources=dict(type="dict"),
            security_context=dict(type="dict"),
            pod_security_context=dict(type="dict"),
            node_selector=dict(type="dict"),
            tolerations=dict(type="list", elements="dict"),
            priority_class_name=dict(type="str"),
            image_pull_secrets=dict(type="list", elements="str", no_log=False),  # names, not Secret data
            extra_env=dict(type="list", elements="dict"),
            extra_volumes=dict(type="list", elements="dict"),
            extra_volume_mounts=dict(type="list", elements="dict"),
            labels=dict(type="dict"),
            backoff_limit=dict(type="int", default=2),
            active_deadline_seconds=dict(type="int"),
            ttl_seconds_after_finished=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    try:
        plan = build_plan(module.params, served_of=pvc_served)
    except PlanError as exc:
        module.fail_json(msg="stage_pvc_plan: %s" % exc)
    module.exit_json(changed=False, **plan)


if __name__ == "__main__":
    main()
