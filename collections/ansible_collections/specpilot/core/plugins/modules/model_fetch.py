#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: model_fetch

short_description: Fetch model artifacts into a local directory, resumably and verified

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Copies each artifact (C(hf://org/repo[@revision]), C(s3://bucket/prefix), C(https://...) files, directories
    with a checksum manifest, or archives) into O(dest)/<subdir> on the host it runs on, with the same code the
    PVC staging Job runs (C(stager) in C(specpilot.core) module_utils) - files already complete are skipped,
    partial downloads are continued, sizes and published digests are verified, the layout is checked
    (config.json, tokenizer, safetensors headers), and a marker file records source, revision and digests.
  - A second run whose marker matches reports C(changed=false) and transfers nothing.
  - The Modelcar role uses it to gather the files it bakes into the image.
  - C(pvc://) sources cannot be read from outside the cluster; use the PVC staging role for those.

options:
  artifacts:
    description:
      - C(plan.staging.artifacts) of M(specpilot.core.spec_validate) - C(role), C(uri), C(subdir), and optional
        C(revision), C(include), C(exclude). Entries without C(uri) are skipped.
    type: list
    elements: dict
    required: true
  dest:
    description: Directory that receives one sub-directory per artifact.
    type: path
    required: true
  speculative_method:
    description: The speculative method (a draft of EAGLE-style methods is checked as a head, tokenizer optional).
    type: str
  artifact_options:
    description: Per role - C(checksums), C(checksum_manifest), C(files), C(archive_sha256), C(unpack), C(insecure_tls).
    type: dict
    default: {}
  source_env:
    description:
      - Per role, the source credentials and settings as environment names (C(HF_TOKEN), C(AWS_ACCESS_KEY_ID),
        C(AWS_SECRET_ACCESS_KEY), C(AWS_ENDPOINT_URL), C(HTTP_AUTHORIZATION), ...). Not logged. Without them the
        module's own environment is used.
    type: dict
    default: {}
  force:
    description: Overwrite local files that differ from the source.
    type: bool
    default: false
  verify:
    description: How files already fetched under a matching marker are verified - V(size) or V(sha256) (re-hash).
    type: str
    choices: [sha256, size]
    default: size
  layout_check:
    description: Check config.json, tokenizer files and safetensors headers.
    type: bool
    default: true
  progress_file:
    description:
      - A file the module appends its progress lines to while it runs (bytes done and rate per artifact, every 10 s). The module's
        action plugin sets it and shows the new lines every few seconds, in ansible-playbook's output and in
        AWX's, over a local connection; not needed in a task.
    type: path

notes:
  - s3:// needs boto3 and hf:// needs huggingface_hub on the host that runs the module.

seealso:
  - module: specpilot.core.modelcar_build
  - module: specpilot.core.stage_pvc_plan
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Says whether a run would fetch the artifact (from its marker); fetches nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Fetch target and draft for the Modelcar image
  specpilot.core.model_fetch:
    artifacts: "{{ specpilot_validate_result.plan.staging.artifacts }}"
    dest: "{{ lookup('ansible.builtin.env', 'HOME') }}/.cache/specpilot/models/chat"
  register: fetched
"""

RETURN = r"""
artifacts:
  description: Per artifact - C(role), C(subdir), C(path), C(changed), C(files), C(bytes), C(bytes_downloaded),
    C(bytes_reused), C(bytes_resumed), C(revision), C(resolved_revision), C(layout). In check mode C(role), C(subdir),
    C(path) and C(changed) (whether a run would fetch it; nothing is fetched or written).
  type: list
  elements: dict
  returned: always
log:
  description: The staging program's log lines (progress, notes, warnings).
  type: list
  elements: str
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specpilot.core.plugins.module_utils.staging import stager
from ansible_collections.specpilot.core.plugins.module_utils.report.progress import ProgressTee
from ansible_collections.specpilot.core.plugins.module_utils.staging.pvc_staging import (
    PlanError,
    artifact_request,
)


def _would_fetch(p, entry):
    """Check mode: whether a run would fetch the artifact (read from its marker only)."""
    path = os.path.join(p["dest"], entry["dest"])
    staged = not p["force"] and stager.already_staged(path, entry)
    return {"role": entry["role"], "subdir": entry["dest"], "path": path, "changed": not staged}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            artifacts=dict(type="list", elements="dict", required=True),
            dest=dict(type="path", required=True),
            speculative_method=dict(type="str"),
            artifact_options=dict(type="dict", default={}),
            source_env=dict(type="dict", default={}, no_log=True),
            force=dict(type="bool", default=False),
            verify=dict(type="str", choices=["sha256", "size"], default="size"),
            layout_check=dict(type="bool", default=True),
            progress_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    entries = []
    try:
        for art in p["artifacts"]:
            if not art.get("uri"):
                continue
            if art["uri"].startswith("pvc://"):
                module.fail_json(
                    msg="%s: pvc:// sources cannot be fetched outside the cluster; give an hf://, "
                    "s3:// or https:// source, or a local_path" % art.get("role")
                )
            entry = artifact_request(
                dict(art, secret_name=None), "", p["speculative_method"], p["artifact_options"]
            )
            env = (p["source_env"] or {}).get(art.get("role")) or {}
            entry["env"] = dict((k, str(v)) for k, v in env.items() if v is not None)
            entries.append(entry)
    except PlanError as exc:
        module.fail_json(msg="model_fetch: %s" % exc)
    if module.check_mode:
        arts = [_would_fetch(p, entry) for entry in entries]
        module.exit_json(changed=any(a["changed"] for a in arts), artifacts=arts, log=[])
    os.makedirs(p["dest"], exist_ok=True)
    out = ProgressTee(p["progress_file"])
    request = {
        "format": stager.FORMAT,
        "dest_root": p["dest"],
        "force": p["force"],
        "verify": p["verify"],
        "layout_check": p["layout_check"],
        "progress_interval": 10.0,
        "artifacts": entries,
    }
    try:
        res = stager.run_request(request, out=out)
    except stager.StageError as exc:
        module.fail_json(
            msg="model_fetch: %s" % exc,
            path=exc.path,
            role=exc.role,
            permanent=exc.permanent,
            log=out.getvalue().splitlines()[-40:],
        )
    arts = []
    for r, entry in zip(res["artifacts"], entries):
        st = r["status"]
        arts.append(
            {
                "role": r["role"],
                "subdir": entry["dest"],
                "path": os.path.join(p["dest"], entry["dest"]),
                "changed": r["changed"],
                "files": r["files"],
                "bytes": r["bytes"],
                "bytes_downloaded": r["bytes_downloaded"],
                "bytes_reused": r["bytes_reused"],
                "bytes_resumed": r["bytes_resumed"],
                "revision": st.get("revision"),
                "resolved_revision": st.get("resolved_revision"),
                "request_digest": st.get("request_digest"),
                "layout": r.get("layout"),
            }
        )
    module.exit_json(changed=res["changed"], artifacts=arts, log=out.getvalue().splitlines()[-100:])


if __name__ == "__main__":
    main()
