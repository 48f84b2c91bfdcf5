#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: modelcar_build

short_description: Build a reproducible KServe Modelcar OCI image and push it with skopeo

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Builds an OCI image holding each artifact directory at C(/models/<subdir>) (one uncompressed layer per
    artifact) on top of a base image that provides C(sh), C(ln) and C(sleep) for KServe's modelcar sidecar, and
    pushes it with C(skopeo copy --preserve-digests). No container engine is needed.
  - Deterministic - sorted tar entries, mtime 0, uid/gid 0, fixed modes, canonical JSON - so the same inputs
    give the same manifest digest, and a draft-only change leaves the target layer digest unchanged (the
    registry already has that blob, so about the draft's bytes are uploaded).
  - Each artifact layer's descriptor in the manifest is annotated with C(io.specpilot.modelcar.artifact.role) and
    C(io.specpilot.modelcar.artifact.subdir) (layer digests are not affected), so that
    M(specpilot.core.modelcar_reclaim) can push the image without the draft layer, without reading any layer.
  - Skips the push when the tag already resolves to the built manifest digest (C(changed=false)).
  - After a push, reads the manifest back by digest and by tag and compares its layers with the built ones;
    checks that the base has C(sh)/C(ln)/C(sleep) and that every C(/models/<subdir>) holds non-empty files.
  - Returns RV(digest); reference the image as RV(image_ref) (C(repo@sha256:...)), e.g. in
    C(specpilot_modelcar.image_digest).
  - The base image is a local OCI layout (C(oci:PATH[:TAG]), e.g. the lab's busybox base) or a registry image
    (C(docker://REF)) pulled with skopeo into O(work_dir) (a reference pinned by digest is pulled once).
  - An unchanged artifact directory (same paths, sizes, mtimes, inodes) reuses its layer without reading the files.

options:
  image:
    description: Image to push, C(registry/repository:tag) (C(docker://) or C(oci://) prefixes are accepted).
    type: str
    required: true
  artifacts:
    description: Directories to bake in, in layer order - C(role), C(subdir) (-> C(/models/<subdir>)), C(path).
    type: list
    elements: dict
    required: true
  base:
    description:
      - Base image - C(oci:PATH[:TAG]) (local OCI layout) or C(docker://REF) / C(REF) (pulled with skopeo).
      - A C(REF) pinned as C(repo:tag@sha256:<digest>) is pulled by the digest (skopeo takes no tag beside it).
      - The default is busybox 1.36.1 pinned by digest.
    type: str
    default: docker://docker.io/library/busybox:1.36.1@sha256:73aaf090f3d85aa34ee199857f03fa3a95c8ede2ffd4cc2cdb5b94e566b11662
  base_tls_verify:
    description: Verify TLS when pulling a registry base.
    type: bool
    default: true
  base_authfile:
    description: Authfile (containers-auth.json) for pulling the base.
    type: path
  platform:
    description: os/architecture of the image (and of the base picked from a multi-platform index).
    type: str
    default: linux/amd64
  work_dir:
    description: Directory for the OCI layout, the pulled base and the layer cache (one sub-directory per repository).
    type: path
    default: ~/.cache/specpilot/modelcar
  push:
    description: Push the image (false - build the layout only and return the digest).
    type: bool
    default: true
  force:
    description:
      - Push even when the tag already has the digest.
      - Move a tag that names another image. Without it the build fails and says so - pods that pull
        by tag would change under their services, and the old image, left untagged, would be exposed
        to the registry's garbage collection.
    type: bool
    default: false
  verify:
    description: Read the pushed image back and check it.
    type: bool
    default: true
  tls_verify:
    description: Verify the destination registry's TLS certificate (false also allows plain HTTP).
    type: bool
    default: true
  authfile:
    description: Authfile (containers-auth.json) for the destination registry.
    type: path
  username:
    description: Registry user (with O(password); written to a temporary 0600 authfile, never on a command line).
    type: str
  password:
    description: Registry password or token. Not logged.
    type: str
  labels:
    description: Labels added to the image config.
    type: dict
  layer_cache:
    description: Reuse a layer when its directory is unchanged (paths, sizes, mtimes, inodes).
    type: bool
    default: true
  backend:
    description:
      - V(skopeo) - the OCI layout writer and skopeo (default, no container engine).
      - V(podman) - C(podman build --timestamp 0) and C(podman push); not layer-deterministic across machines.
    type: str
    choices: [skopeo, podman]
    default: skopeo
  podman_runtime:
    description: C(--runtime) for podman build (e.g. C(runc) where crun fails).
    type: str
  skopeo_path:
    description: The skopeo binary.
    type: str
    default: skopeo
  podman_path:
    description: The podman binary.
    type: str
    default: podman
  progress_file:
    description:
      - A file the module appends its progress lines to while it runs (each step, and the bytes of each layer written and hashed, every 10 s). The module's
        action plugin sets it and shows the new lines every few seconds, in ansible-playbook's output and in
        AWX's, over a local connection; not needed in a task.
    type: path

notes:
  - Check mode builds the layout (a local cache) and inspects the registry, but pushes nothing.

seealso:
  - module: specpilot.core.model_fetch
  - module: specpilot.core.modelcar_reclaim
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Builds the layout (a local cache) and inspects the registry, but pushes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Build and push the Modelcar image
  specpilot.core.modelcar_build:
    image: registry.example.com/models/chat:v1
    artifacts:
      - {role: target, subdir: target, path: /data/models/target}
      - {role: draft, subdir: draft, path: /data/models/draft}
    base: docker://docker.io/library/busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000
    username: robot
    password: "{{ vault_registry_token }}"
  register: modelcar

- name: Reference the image by digest
  ansible.builtin.debug:
    msg: "{{ modelcar.storage_uri }}"
"""

RETURN = r"""
log:
  description: The progress lines (each step; each layer's bytes written and hashed), the last 100.
  type: list
  elements: str
  returned: always
digest:
  description: The manifest digest (C(sha256:...)).
  type: str
  returned: success
image:
  description: C(repository:tag).
  type: str
  returned: always
image_ref:
  description: C(repository@digest).
  type: str
  returned: success
storage_uri:
  description: C(oci://repository@digest), for the InferenceService.
  type: str
  returned: success
pushed:
  description: Whether a push happened.
  type: bool
  returned: always
registry_had_digest:
  description: Whether the tag already resolved to the digest before this run.
  type: bool
  returned: when O(push)
bytes_uploaded:
  description: Bytes of the blobs the registry lacked before the push, plus the manifest.
  type: int
  returned: success
blobs_uploaded:
  description: Number of blobs the registry lacked.
  type: int
  returned: success
blobs_skipped:
  description: Number of blobs the registry already had.
  type: int
  returned: success
layers:
  description: The artifact layers - C(role), C(subdir), C(mount), C(digest), C(size), C(cached) (layer cache hit).
  type: list
  elements: dict
  returned: success
base:
  description: C(manifest_digest) and C(layers) of the base, C(source), C(pulled).
  type: dict
  returned: success
config_digest:
  description: Digest of the image config.
  type: str
  returned: success
content:
  description: C(base_has) (which of sh/ln/sleep the base provides) and C(models) (files and bytes per sub-directory).
  type: dict
  returned: success
verify:
  description: C(ok), C(manifest_digest), C(layers), C(tag_pinned), C(content), after the push.
  type: dict
  returned: when O(verify) and O(push)
layout:
  description: Path of the OCI layout on the host.
  type: str
  returned: success
timings:
  description: Seconds spent in C(base), C(build), C(push), C(verify), C(total).
  type: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specpilot.core.plugins.module_utils.staging import modelcar, oci_layout
from ansible_collections.specpilot.core.plugins.module_utils.report.progress import ProgressTee


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            artifacts=dict(type="list", elements="dict", required=True),
            base=dict(type="str", default=modelcar.DEFAULT_BASE),
            base_tls_verify=dict(type="bool", default=True),
            base_authfile=dict(type="path"),
            platform=dict(type="str", default="linux/amd64"),
            work_dir=dict(type="path", default="~/.cache/specpilot/modelcar"),
            push=dict(type="bool", default=True),
            force=dict(type="bool", default=False),
            verify=dict(type="bool", default=True),
            tls_verify=dict(type="bool", default=True),
            authfile=dict(type="path"),
            username=dict(type="str"),
            password=dict(type="str", no_log=True),
            labels=dict(type="dict"),
            layer_cache=dict(type="bool", default=True),
            backend=dict(type="str", choices=["skopeo", "podman"], default="skopeo"),
            podman_runtime=dict(type="str"),
            skopeo_path=dict(type="str", default="skopeo"),
            podman_path=dict(type="str", default="podman"),
            progress_file=dict(type="path"),
        ),
        required_together=[["username", "password"]],
        supports_check_mode=True,
    )
    progress = ProgressTee(module.params["progress_file"])
    try:
        result = modelcar.build_push(module.params, check_mode=module.check_mode, line=progress.line)
    except (modelcar.ModelcarError, oci_layout.LayoutError) as exc:
        module.fail_json(msg="modelcar_build: %s" % exc, log=progress.getvalue().splitlines()[-40:])
    finally:
        progress.close()
    module.exit_json(log=progress.getvalue().splitlines()[-100:], **result)


if __name__ == "__main__":
    main()
