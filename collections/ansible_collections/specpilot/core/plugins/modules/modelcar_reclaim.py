#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: modelcar_reclaim

short_description: Push a Modelcar image without its draft layer, by manifest surgery, and return its digest

version_added: 0.2.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Option B draft reclaim. From a Modelcar image in a registry (C(/models/<target>) and C(/models/<draft>) in
    separate layers, as built by M(specpilot.core.modelcar_build)), writes the same image without the draft layer
    under a new tag and returns its manifest digest, to repoint the InferenceService's C(storageUri) to
    C(oci://repository@digest).
  - Nothing is pulled and no layer is uploaded again - through the registry's HTTP API it reads the manifest and the
    image config, and writes a new config (the draft's C(rootfs.diff_ids) and C(history) entries removed, an
    C(empty_layer) history entry saying what was removed, the C(io.specpilot.modelcar.models) label updated, the
    labels C(io.specpilot.modelcar.reclaimed) and C(io.specpilot.modelcar.reclaimed-from) added) and a manifest that
    lists the same layer descriptors minus the draft's. Base and target layers keep their digests; the bytes uploaded
    are the config and the manifest (a few KiB).
  - The draft layer is found from the layer descriptors' annotations C(io.specpilot.modelcar.artifact.subdir) and
    C(io.specpilot.modelcar.artifact.role) (written by M(specpilot.core.modelcar_build)), else from the config label
    C(io.specpilot.modelcar.models) (images built before those annotations), else from the first bytes of the last
    layers (HTTP C(Range), O(peek_bytes) each; then O(target_subdir) is required and must begin another layer), or
    from O(draft_layer).
  - Deterministic - the same source gives the same digest; when the tag already resolves to it, nothing is written
    (C(changed=false)). An image without the draft layer (already reclaimed) changes nothing either.
  - The source image is not modified, deleted or untagged. Use O(tag) other than the source's own tag.
  - After the push, reads the manifest back by digest and by tag, checks its layers and config, that the draft layer
    is no longer referenced, and that the source still resolves.

options:
  image:
    description:
      - The source image - C([oci://|docker://]registry/repository[:tag][@sha256:...]), e.g. the InferenceService's
        C(storageUri). With a digest, the digest is used (the tag only names the default new tag).
    type: str
    required: true
  draft_subdir:
    description:
      - Sub-directory of the draft under C(/models) (C(draft) for C(/models/draft); the rollback role derives it from
        the draft path C(/mnt/models/<subdir>) of the speculative config).
      - Omitted - the layer whose role annotation (or build history) is O(draft_role).
    type: str
  draft_role:
    description: Role of the layer to drop when O(draft_subdir) is omitted.
    type: str
    default: draft
  target_subdir:
    description:
      - Sub-directory of the target under C(/models). When given, another layer must hold it (the draft layer is never
        the target's); required when the layers are told apart from their content.
    type: str
  draft_layer:
    description:
      - Digest of the layer to drop, for images whose layers cannot be told apart otherwise. Never the first layer.
    type: str
  tag:
    description: Tag of the new image. Default - the source tag plus O(tag_suffix), or C(sha256-<12 hex><tag_suffix>).
    type: str
  tag_suffix:
    description: Suffix of the default tag.
    type: str
    default: -nodraft
  force:
    description:
      - Move the tag when it already names another image (a different digest). Without it such a run fails
        and pushes nothing - pods pulling the tag would change under their services, and the image it named
        would be left untagged for the registry's garbage collection. Give O(tag) another value instead.
    type: bool
    default: false
  identify_by_content:
    description: Read the first O(peek_bytes) of the last layers when neither annotations nor the label tell them apart.
    type: bool
    default: true
  peek_bytes:
    description: Bytes read from the start of a layer when it is identified by its content.
    type: int
    default: 65536
  verify:
    description: Read the pushed manifest back (by digest and by tag) and check it.
    type: bool
    default: true
  tls_verify:
    description: Verify the registry's TLS certificate (false also allows plain HTTP).
    type: bool
    default: true
  authfile:
    description: Authfile (containers-auth.json) of the registry, as for M(specpilot.core.modelcar_build).
    type: path
  username:
    description: Registry user (with O(password)).
    type: str
  password:
    description: Registry password or token. Not logged.
    type: str
  timeout:
    description: Seconds for each HTTP request.
    type: int
    default: 60

notes:
  - Check mode reads the registry, computes the new manifest and digest, and uploads nothing.
  - The registry must accept manifest and blob pushes to the repository (the credentials need push permission); the new
    image stays in the same repository, so no layer is copied or mounted.
  - Registry storage is freed only when the source image is deleted and the registry garbage-collects; on the nodes,
    the new image shares the base and target layers, and kubelet's image garbage collection frees the draft layer
    once no pod uses the old image.

seealso:
  - module: specpilot.core.modelcar_build
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the registry, computes the new manifest and digest, and uploads nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: The Modelcar image without the draft layer
  specpilot.core.modelcar_reclaim:
    image: oci://registry.example.com/models/chat:v1@sha256:0000000000000000000000000000000000000000000000000000000000000000
    draft_subdir: draft
    target_subdir: target
    username: robot
    password: "{{ vault_registry_token }}"
  register: nodraft

- name: Repoint the InferenceService (by digest)
  ansible.builtin.debug:
    msg: "storageUri: {{ nodraft.storage_uri }}"
"""

RETURN = r"""
reclaimed:
  description: Whether a draft layer was found (the result is an image without it); false when the image has none.
  type: bool
  returned: always
digest:
  description: Manifest digest of the image without the draft (the source's when there was nothing to reclaim).
  type: str
  returned: always
  sample: sha256:6a3c...
storage_uri:
  description: C(oci://repository@digest) of the result, for the InferenceService.
  type: str
  returned: always
image_ref:
  description: C(repository@digest) of the result.
  type: str
  returned: always
image:
  description: C(repository:tag) of the new image.
  type: str
  returned: when RV(reclaimed)
tag:
  description: The new tag.
  type: str
  returned: when RV(reclaimed)
source:
  description: C(repository), C(tag), C(digest), C(image_ref), C(storage_uri), C(config_digest), C(layers) of the source.
  type: dict
  returned: always
identified_by:
  description: How the draft layer was found - C(annotation), C(label), C(layer-content), C(explicit).
  type: str
  returned: always
artifacts:
  description: The layers holding C(/models/<subdir>) - C(index), C(digest), C(size), C(subdir), C(role), C(mount).
  type: list
  elements: dict
  returned: always
dropped_layer:
  description: The draft layer dropped - C(index), C(digest), C(size), C(subdir), C(role), C(mount).
  type: dict
  returned: when RV(reclaimed)
kept_layers:
  description: The layers of the new image (same digests as in the source).
  type: list
  elements: dict
  returned: when RV(reclaimed)
config_digest:
  description: Digest of the new image config.
  type: str
  returned: when RV(reclaimed)
pushed:
  description: Whether the config and the manifest were pushed.
  type: bool
  returned: always
registry_had_digest:
  description: Whether the tag already resolved to the digest before this run.
  type: bool
  returned: when RV(reclaimed)
tag_moved_from:
  description: The digest the tag named before it was moved to the new image (only with O(force)).
  type: str
  returned: when the tag named another image
bytes_uploaded:
  description: Bytes sent to the registry (the new config, when it lacked it, and the manifest).
  type: int
  returned: always
blobs_uploaded:
  description: Number of blobs uploaded (0 or 1, the config).
  type: int
  returned: always
upload_size:
  description: Size of the new config plus the new manifest (what a push uploads at most).
  type: int
  returned: when RV(reclaimed)
bytes_reclaimed:
  description: Size of the draft layer that the new image no longer references.
  type: int
  returned: always
already_without_draft:
  description: The image has no draft layer (nothing to reclaim).
  type: bool
  returned: when the image has no draft layer
verify:
  description: C(ok), C(manifest_digest), C(layers), C(tag_pinned), C(draft_layer_referenced), C(source_kept).
  type: dict
  returned: when O(verify) and RV(reclaimed), not in check mode
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specpilot.core.plugins.module_utils.staging import modelcar_reclaim, oci_registry


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            draft_subdir=dict(type="str"),
            draft_role=dict(type="str", default="draft"),
            target_subdir=dict(type="str"),
            draft_layer=dict(type="str"),
            tag=dict(type="str"),
            tag_suffix=dict(type="str", default=modelcar_reclaim.DEFAULT_TAG_SUFFIX),
            force=dict(type="bool", default=False),
            identify_by_content=dict(type="bool", default=True),
            peek_bytes=dict(type="int", default=modelcar_reclaim.PEEK_BYTES),
            verify=dict(type="bool", default=True),
            tls_verify=dict(type="bool", default=True),
            authfile=dict(type="path"),
            username=dict(type="str"),
            password=dict(type="str", no_log=True),
            timeout=dict(type="int", default=60),
        ),
        required_together=[["username", "password"]],
        supports_check_mode=True,
    )
    try:
        result = modelcar_reclaim.reclaim(module.params, check_mode=module.check_mode, warn=module.warn)
    except (modelcar_reclaim.ReclaimError, oci_registry.RegistryError, ValueError) as exc:
        module.fail_json(msg="modelcar_reclaim: %s" % exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
