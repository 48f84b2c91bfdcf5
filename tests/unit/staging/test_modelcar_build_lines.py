"""The lines roles/specpilot_stage_modelcar/tasks/build.yml shows after a Modelcar build (filter
modelcar_build_lines): the push state, the layers, the blobs, and the digest the spec should carry."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.filter.staging import modelcar_build_lines

LAYER = {"role": "target", "subdir": "target", "digest": "sha256:l1", "size": 2048, "cached": True}
BUILD = {
    "image_ref": "reg/chat:v1@sha256:abc",
    "digest": "sha256:abc",
    "layers": [LAYER],
    "pushed": True,
    "changed": True,
    "blobs_uploaded": 2,
    "blobs_skipped": 1,
    "bytes_uploaded": 4096,
}


def test_pushed_with_blobs_and_the_digest_to_set():
    lines = modelcar_build_lines(BUILD, None)
    assert lines[0] == "pushed: reg/chat:v1@sha256:abc"
    assert lines[1].startswith("target: /models/target layer sha256:l1 (") and lines[1].endswith(
        ", unchanged)"
    )
    assert lines[2] == "uploaded 2 of 3 blob(s), 4096 bytes"
    assert lines[3] == "set specpilot_modelcar.image_digest: sha256:abc (the spec has none)"


def test_already_there_or_check_mode_and_digest_in_the_spec():
    there = dict(BUILD, pushed=False, changed=False)
    assert modelcar_build_lines(there, "sha256:abc") == [
        "already in the registry: reg/chat:v1@sha256:abc",
        modelcar_build_lines(BUILD)[1],
    ]
    would = modelcar_build_lines(dict(there, changed=True, layers=[]), "sha256:old")
    assert would == [
        "check mode: would push: reg/chat:v1@sha256:abc",
        "set specpilot_modelcar.image_digest: sha256:abc (the spec has sha256:old)",
    ]


def test_refuses_what_is_not_a_build_result():
    with pytest.raises(AnsibleFilterError, match="expects the result of modelcar_build"):
        modelcar_build_lines("x")
