"""modelcar_reclaim without a registry: references, the default tag, telling the layers apart
(annotations, the label confirmed by the build history, the start of a layer), and the config
surgery (diff_ids, history with empty_layer entries, labels)."""

from __future__ import annotations

import io
import tarfile

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.staging import modelcar_reclaim as mr
from ansible_collections.specpilot.core.plugins.module_utils.staging import oci_layout

D = {c: "sha256:" + c * 64 for c in "abcdef"}


def _image(annotated=False, history=True, label="/models/target,/models/draft"):
    def desc(digest, sub=None, role=None):
        d = {"mediaType": oci_layout.MT_LAYER, "digest": digest, "size": 10}
        if annotated and sub:
            d["annotations"] = {oci_layout.ANN_ARTIFACT_SUBDIR: sub, oci_layout.ANN_ARTIFACT_ROLE: role}
        return d

    manifest = {
        "schemaVersion": 2,
        "mediaType": oci_layout.MT_MANIFEST,
        "config": {"mediaType": oci_layout.MT_CONFIG, "digest": D["f"], "size": 1},
        "layers": [desc(D["a"]), desc(D["b"], "target", "target"), desc(D["c"], "draft", "draft")],
    }
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": {oci_layout.LABEL_MODELS: label}} if label else {},
        "rootfs": {"type": "layers", "diff_ids": [D["a"], D["b"], D["c"]]},
    }
    if history:
        config["history"] = [
            {"created_by": "ADD busybox"},
            {"created_by": 'CMD ["sh"]', "empty_layer": True},
            {"created_by": "specpilot modelcar: target -> /models/target"},
            {"created_by": "specpilot modelcar: draft -> /models/draft"},
        ]
    return manifest, config


def test_references_and_the_default_tag():
    assert mr.parse_image("oci://r.io:5000/a/b:v1@" + D["a"]) == ("r.io:5000/a/b", "v1", D["a"])
    assert mr.parse_image("r.io/a/b@" + D["a"]) == ("r.io/a/b", None, D["a"])
    assert mr.parse_image("docker://r.io:5000/a/b") == ("r.io:5000/a/b", None, None)
    for bad in ("s3://x/y", "r.io/a@sha256:12", "r.io/a:b@c"):
        with pytest.raises(mr.ReclaimError):
            mr.parse_image(bad)
    assert mr.default_tag("v1", D["a"]) == "v1-nodraft"
    assert mr.default_tag(None, D["a"]) == "sha256-aaaaaaaaaaaa-nodraft"
    assert len(mr.default_tag("x" * 128, D["a"])) == 128


def test_annotations_then_the_label_confirmed_by_the_history():
    found, how = mr.artifact_layers(*_image(annotated=True))
    assert how == "annotation" and found == {
        1: {"subdir": "target", "role": "target"},
        2: {"subdir": "draft", "role": "draft"},
    }
    found, how = mr.artifact_layers(*_image())
    assert how == "label" and found[2] == {"subdir": "draft", "role": "draft"}
    # a derived image (a layer added on top): the label no longer names the last layers
    manifest, config = _image()
    manifest["layers"].append({"mediaType": oci_layout.MT_LAYER, "digest": D["d"], "size": 1})
    config["rootfs"]["diff_ids"].append(D["d"])
    config["history"].append({"created_by": "COPY app /app"})
    assert mr.artifact_layers(manifest, config) == ({}, None)
    assert mr.artifact_layers(*_image(history=False)) == ({}, None)  # no history: not trusted
    peeked = mr.artifact_layers(
        manifest, config, peek=lambda d: {D["c"]: "draft", D["b"]: "target"}.get(d["digest"])
    )
    assert peeked == (
        {2: {"subdir": "draft", "role": None}, 1: {"subdir": "target", "role": None}},
        "layer-content",
    )


def _tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            if data is None:
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            else:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_the_start_of_a_layer():
    draft = _tar([("models", None), ("models/draft", None), ("models/draft/w", b"x" * 200000)])
    assert mr._models_subdir(mr._tar_entries(draft[:65536])) == "draft"  # a prefix is enough
    assert mr._models_subdir(mr._tar_entries(_tar([("bin", None), ("models", None)]))) is None  # the base
    assert (
        mr._models_subdir(mr._tar_entries(_tar([("models/config.json", b"{}")]))) is None
    )  # files in /models
    both = _tar([("models/draft/a", b"1"), ("models/target/b", b"2")])
    assert mr._models_subdir(mr._tar_entries(both)) is None  # two sub-directories in one layer


def test_the_config_surgery_keeps_empty_layer_history_entries():
    manifest, config = _image(annotated=True)
    new_manifest, new_config, dropped, notes = mr.without_layer(manifest, config, 2, D["e"], "/models/draft")
    assert dropped["digest"] == D["c"] and notes == []
    assert [d["digest"] for d in new_manifest["layers"]] == [D["a"], D["b"]]
    assert new_manifest["layers"][1] == manifest["layers"][1]  # descriptor (and annotations) kept as is
    assert new_config["rootfs"]["diff_ids"] == [D["a"], D["b"]]
    history = new_config["history"]
    assert [h["created_by"] for h in history[:3]] == [
        "ADD busybox",
        'CMD ["sh"]',
        "specpilot modelcar: target -> /models/target",
    ]
    assert history[3]["empty_layer"] and "removed /models/draft" in history[3]["created_by"]
    assert len([h for h in history if not h.get("empty_layer")]) == len(new_manifest["layers"])
    labels = new_config["config"]["Labels"]
    assert labels[oci_layout.LABEL_MODELS] == "/models/target"
    assert labels[mr.LABEL_RECLAIMED] == "/models/draft" and labels[mr.LABEL_RECLAIMED_FROM] == D["e"]
    assert config["rootfs"]["diff_ids"] == [D["a"], D["b"], D["c"]]  # the source is not modified
    manifest["layers"].pop()
    with pytest.raises(mr.ReclaimError, match="diff_ids"):
        mr.without_layer(manifest, config, 1, D["e"], "/models/target")


class _Registry(object):
    """What _push asks of a registry: the tag's digest, and the writes it makes."""

    def __init__(self, tagged):
        self.tagged = tagged
        self.writes = []
        self.bytes_sent = 0

    def resolve(self, name, tag):
        return self.tagged

    def has_blob(self, name, digest):
        return True

    def put_manifest(self, name, tag, raw, media_type):
        self.writes.append(tag)


def _push(tagged, force=False, check_mode=False):
    reg = _Registry(tagged)
    result = {"repository": "reg/models/chat", "tag": "v1-nodraft", "digest": D["d"], "config_digest": D["e"]}
    result.update(upload_size=10, bytes_reclaimed=10)
    new = {"config_bytes": b"{}", "manifest_bytes": b"{}"}
    mr._push(
        reg, "models/chat", result, new, oci_layout.MT_MANIFEST, D["a"], "/models/draft", check_mode, force
    )
    return reg, result


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_nodraft_tag_is_not_moved_off_another_image_without_force(check_mode):
    with pytest.raises(mr.ReclaimError, match=r"v1-nodraft already names another image .*set force: true"):
        _push(D["c"], check_mode=check_mode)
    reg, result = _push(D["c"], force=True)
    assert reg.writes == ["v1-nodraft"] and result["tag_moved_from"] == D["c"]
    for tagged in (None, D["d"]):  # a new tag, or already this image: nothing to refuse
        reg, result = _push(tagged)
        assert reg.writes == ([] if tagged else ["v1-nodraft"]) and "tag_moved_from" not in result
