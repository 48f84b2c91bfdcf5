"""The Modelcar base reference (issue 19, a pinned supply chain): the default base is busybox pinned by
digest, and a base given as repo:tag@sha256:<digest> is pulled by the digest alone - skopeo refuses a
reference with both ("Docker references with both a tag and digest are currently not supported")."""

from __future__ import annotations

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.staging import modelcar

DIGEST = "sha256:" + "0f" * 32


def test_the_default_base_is_pinned_by_digest():
    kind, ref, _tag = modelcar.parse_base(modelcar.DEFAULT_BASE)
    assert (
        kind == "docker"
        and ref.startswith("docker.io/library/busybox@sha256:")
        and len(ref.split(":")[-1]) == 64
    )


@pytest.mark.parametrize(
    "base,ref",
    [
        ("docker://registry:5000/lib/busybox:1.36.1@" + DIGEST, "registry:5000/lib/busybox@" + DIGEST),
        ("busybox:1.36.1@" + DIGEST, "busybox@" + DIGEST),
        ("docker://registry:5000/lib/busybox@" + DIGEST, "registry:5000/lib/busybox@" + DIGEST),
        ("docker://registry:5000/lib/busybox:1.36.1", "registry:5000/lib/busybox:1.36.1"),
    ],
)
def test_a_tag_beside_a_digest_is_dropped_for_skopeo(base, ref):
    assert modelcar.parse_base(base) == ("docker", ref, None)
