"""The OCI image-layout writer of module_utils (oci_layout.py): determinism, one layer per
artifact, a draft-only change keeping the target layer, the layer cache, base images (the lab's
busybox layout, gzip layers, multi-platform indexes), content checks, and skopeo reading it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time

import pytest

import staging_support as ss
from ansible_collections.specpilot.core.plugins.module_utils.staging import oci_layout
from specpilot_lab import registry as lab_registry

BASE_APPLETS = ["sh", "ln", "sleep"]


def busybox_layer(applets=BASE_APPLETS) -> bytes:
    """A tiny stand-in base layer: bin/busybox (a few bytes) and applet symlinks, /models."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, kind in (("bin", tarfile.DIRTYPE), ("models", tarfile.DIRTYPE)):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode = kind, 0o775
            tf.addfile(ti)
        data = b"#!fake busybox\n"
        ti = tarfile.TarInfo("bin/busybox")
        ti.size, ti.mode = len(data), 0o755
        tf.addfile(ti, io.BytesIO(data))
        for applet in applets:
            ti = tarfile.TarInfo(f"bin/{applet}")
            ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
            tf.addfile(ti)
    return buf.getvalue()


def models_at(root, seed=0, draft_seed=1):
    ss.make_model(root / "target", weight_bytes=256 * 1024, seed=seed)
    ss.make_model(root / "draft", weight_bytes=64 * 1024, layers=1, seed=draft_seed)
    return [
        {"role": "target", "subdir": "target", "path": str(root / "target")},
        {"role": "draft", "subdir": "draft", "path": str(root / "draft")},
    ]


def build(layout, arts, **kw):
    kw.setdefault("base_layers", [busybox_layer()])
    return oci_layout.build_image(str(layout), "v1", arts, **kw)


def test_same_inputs_same_digests_whatever_the_file_metadata(tmp_path):
    a = build(tmp_path / "la", models_at(tmp_path / "a"))
    arts_b = models_at(tmp_path / "b")
    # same bytes, other metadata: mtimes, permissions, creation order, a stray marker
    for p in (tmp_path / "b").rglob("*"):
        os.utime(p, (time.time() - 86400 * 30, time.time() - 86400 * 30))
        if p.is_file():
            p.chmod(0o600)
    tok = tmp_path / "b" / "target" / "tokenizer.json"
    data = tok.read_bytes()
    tok.unlink()
    tok.write_bytes(data)
    (tmp_path / "b" / "target" / ".specpilot-staged.json").write_text(json.dumps({"staged_at": time.time()}))
    (tmp_path / "b" / "target" / ".specpilot-partial").mkdir()
    (tmp_path / "b" / "target" / ".specpilot-partial" / "x.part").write_text("partial")
    b = build(tmp_path / "lb", arts_b)
    assert a["digest"] == b["digest"] and a["config_digest"] == b["config_digest"]
    assert [x["digest"] for x in a["layers"]] == [x["digest"] for x in b["layers"]]
    index = json.loads((tmp_path / "la" / "index.json").read_text())
    assert index["manifests"][0]["digest"] == a["digest"]
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "v1"


def test_one_uncompressed_layer_per_artifact_and_a_draft_only_change(tmp_path):
    arts = models_at(tmp_path / "m")
    first = build(tmp_path / "layout", arts)
    manifest = first["manifest"]
    assert [d["mediaType"] for d in manifest["layers"]] == [oci_layout.MT_LAYER] * 3
    assert manifest["config"]["mediaType"] == oci_layout.MT_CONFIG
    assert first["config"]["rootfs"]["diff_ids"] == [d["digest"] for d in manifest["layers"]]
    # each artifact layer says what it holds (the base layer does not), in the manifest only
    assert [d.get("annotations") for d in manifest["layers"]] == [
        None,
        {oci_layout.ANN_ARTIFACT_ROLE: "target", oci_layout.ANN_ARTIFACT_SUBDIR: "target"},
        {oci_layout.ANN_ARTIFACT_ROLE: "draft", oci_layout.ANN_ARTIFACT_SUBDIR: "draft"},
    ]
    assert first["config"]["config"]["Labels"][oci_layout.LABEL_MODELS] == "/models/target,/models/draft"
    target_layer, draft_layer = first["layers"][0]["digest"], first["layers"][1]["digest"]
    shutil.rmtree(tmp_path / "m" / "draft")
    ss.make_model(tmp_path / "m" / "draft", weight_bytes=64 * 1024, layers=1, seed=7)
    second = build(tmp_path / "layout", arts)
    assert second["layers"][0]["digest"] == target_layer and second["layers"][0]["cached"]
    assert second["layers"][1]["digest"] != draft_layer and not second["layers"][1]["cached"]
    assert second["digest"] != first["digest"]
    # the old draft layer is garbage-collected, the target layer kept
    layout = oci_layout.Layout(str(tmp_path / "layout"))
    assert layout.has_blob(target_layer) and not layout.has_blob(draft_layer)


def test_layer_tar_is_sorted_with_fixed_metadata(tmp_path):
    src = tmp_path / "m" / "target"
    ss.make_model(src, weight_bytes=1024)
    (src / "sub").mkdir()
    (src / "sub" / "b.txt").write_text("b")
    (src / "a_script.sh").write_text("#!/bin/sh\n")
    (src / "a_script.sh").chmod(0o750)
    (src / "link.json").symlink_to(src / "config.json")  # followed: stored as a file
    res = build(tmp_path / "layout", [{"role": "target", "subdir": "target", "path": str(src)}])
    blob = oci_layout.Layout(str(tmp_path / "layout")).blob_path(res["layers"][0]["digest"])
    assert os.path.getsize(blob) % 10240 == 0
    with tarfile.open(blob) as tf:
        members = tf.getmembers()
        names = [m.name for m in members]
        assert names[:2] == ["models", "models/target"]
        assert names == sorted(names, key=lambda n: n.split("/"))
        assert all(
            m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" and m.gname == "" for m in members
        )
        modes = {m.name: (m.type, m.mode) for m in members}
        assert modes["models/target/sub"] == (tarfile.DIRTYPE, 0o775)
        assert modes["models/target/config.json"] == (tarfile.REGTYPE, 0o644)
        assert modes["models/target/a_script.sh"] == (tarfile.REGTYPE, 0o755)
        assert modes["models/target/link.json"][0] == tarfile.REGTYPE
        assert tf.extractfile("models/target/link.json").read() == (src / "config.json").read_bytes()
    digest = "sha256:" + hashlib.sha256(open(blob, "rb").read()).hexdigest()
    assert digest == res["layers"][0]["digest"]


def test_the_layer_cache_skips_reading_unchanged_directories(tmp_path, monkeypatch):
    arts = models_at(tmp_path / "m")
    first = build(tmp_path / "layout", arts)
    monkeypatch.setattr(oci_layout, "write_tar", lambda *a, **k: pytest.fail("rebuilt an unchanged layer"))
    again = build(tmp_path / "layout", arts)
    assert again["digest"] == first["digest"] and all(x["cached"] for x in again["layers"])
    monkeypatch.undo()
    os.utime(tmp_path / "m" / "target" / "config.json", (1, 1))  # metadata only: rebuilt, same digest
    third = build(tmp_path / "layout", arts)
    assert not third["layers"][0]["cached"] and third["digest"] == first["digest"]
    fresh = build(tmp_path / "nocache", arts, layer_cache=False)
    assert fresh["digest"] == first["digest"]


def gzip_base_layout(path, platforms=(("linux", "amd64"),)):
    """An OCI layout like skopeo writes for a registry image: gzip layers, optionally an index of
    several platforms."""
    layout = oci_layout.Layout(str(path)).init()
    manifests = []
    for os_name, arch in platforms:
        raw = busybox_layer() if arch == "amd64" else busybox_layer(["sh"])
        gz = gzip.compress(raw, mtime=0)
        ldigest, lsize = layout.put_bytes(gz)
        config = {
            "architecture": arch,
            "os": os_name,
            "config": {"Env": ["PATH=/bin"], "Cmd": ["sh"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
            "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "busybox"}],
            "created": "2024-01-01T00:00:00Z",
        }
        cdesc = layout.put_json(config, oci_layout.MT_CONFIG)
        m = {
            "schemaVersion": 2,
            "mediaType": oci_layout.MT_MANIFEST,
            "config": cdesc,
            "layers": [{"mediaType": oci_layout.MT_LAYER_GZIP, "digest": ldigest, "size": lsize}],
        }
        mdesc = layout.put_json(m, oci_layout.MT_MANIFEST)
        mdesc["platform"] = {"os": os_name, "architecture": arch}
        manifests.append(mdesc)
    if len(manifests) == 1:
        layout.write_index(manifests[0], "base")
    else:
        idx = {"schemaVersion": 2, "mediaType": oci_layout.MT_INDEX, "manifests": manifests}
        idesc = layout.put_json(idx, oci_layout.MT_INDEX)
        layout.write_index(idesc, "base")
    return path


@pytest.mark.parametrize("platforms", [(("linux", "amd64"),), (("linux", "arm64"), ("linux", "amd64"))])
def test_registry_style_base_with_gzip_layers(tmp_path, platforms):
    base = gzip_base_layout(tmp_path / "base", platforms)
    arts = models_at(tmp_path / "m")
    res = oci_layout.build_image(str(tmp_path / "layout"), "v1", arts, base_layout=str(base), base_tag="base")
    layers = res["manifest"]["layers"]
    assert layers[0]["mediaType"] == oci_layout.MT_LAYER_GZIP and len(layers) == 3
    assert res["config"]["config"]["Cmd"] == ["sh"] and res["config"]["created"] == "2024-01-01T00:00:00Z"
    assert res["config"]["rootfs"]["diff_ids"][0] != layers[0]["digest"]  # the uncompressed diff_id
    problems, facts = oci_layout.check_image(str(tmp_path / "layout"), res["manifest"], arts)
    assert problems == [] and facts["base_has"] == BASE_APPLETS
    assert facts["models"]["target"]["files"] == 5 and facts["models"]["draft"]["bytes"] > 0
    with pytest.raises(oci_layout.LayoutError, match="platform"):
        oci_layout.build_image(
            str(tmp_path / "l2"),
            "v1",
            arts,
            base_layout=str(base),
            base_tag="base",
            platform=("linux", "s390x"),
        )


def test_the_lab_busybox_base_has_what_kserve_runs(tmp_path):
    lab_registry.build_base_layout(tmp_path / "base", tag="busybox")
    arts = models_at(tmp_path / "m")
    res = oci_layout.build_image(
        str(tmp_path / "layout"), "v1", arts, base_layout=str(tmp_path / "base"), base_tag="busybox"
    )
    problems, facts = oci_layout.check_image(str(tmp_path / "layout"), res["manifest"], arts)
    assert problems == [] and facts["base_has"] == BASE_APPLETS
    # the lab's own unpacker sees /models/target and /models/draft with the files
    root = lab_registry.unpack_layout(tmp_path / "layout", tmp_path / "rootfs", tag="v1")
    assert ss.tree_digest(root / "models" / "target") == ss.tree_digest(tmp_path / "m" / "target")
    assert (root / "bin" / "sleep").is_symlink()


def test_content_checks_catch_a_bad_base_and_empty_models(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "zero.bin").write_bytes(b"")
    arts = [{"role": "target", "subdir": "target", "path": str(tmp_path / "empty")}]
    res = build(tmp_path / "layout", arts, base_layers=[busybox_layer(["sh", "ln"])])
    problems, _facts = oci_layout.check_image(str(tmp_path / "layout"), res["manifest"], arts)
    assert any("no sleep" in p for p in problems) and any("/models/target is empty" in p for p in problems)
    with pytest.raises(oci_layout.LayoutError, match="same sub-directory"):
        build(tmp_path / "l2", arts + arts)
    with pytest.raises(oci_layout.LayoutError, match="bad sub-directory"):
        build(tmp_path / "l3", [dict(arts[0], subdir="a/b")])


@pytest.mark.skipif(not shutil.which("skopeo"), reason="skopeo not installed (make installs it)")
def test_skopeo_reads_the_layout_and_keeps_its_digests(tmp_path):
    lab_registry.build_base_layout(tmp_path / "base", tag="busybox")
    arts = models_at(tmp_path / "m")
    res = oci_layout.build_image(
        str(tmp_path / "layout"), "v1", arts, base_layout=str(tmp_path / "base"), base_tag="busybox"
    )
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci:{tmp_path / 'layout'}:v1"], check=True, capture_output=True
    ).stdout
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == res["digest"]
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--preserve-digests",
            f"oci:{tmp_path / 'layout'}:v1",
            f"oci:{tmp_path / 'copy'}:v1",
        ],
        check=True,
        capture_output=True,
    )
    raw2 = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci:{tmp_path / 'copy'}:v1"], check=True, capture_output=True
    ).stdout
    assert raw2 == raw
