"""The lab registry (docker-registry on 127.0.0.1), skopeo, and Modelcar OCI layouts."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from specpilot_lab import registry

needs_tools = pytest.mark.skipif(
    not (shutil.which("docker-registry") and shutil.which("skopeo") and registry.BUSYBOX.exists()),
    reason="docker-registry, skopeo and busybox-static are installed by make (Debian packages)",
)

pytestmark = [pytest.mark.lab, needs_tools]


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (d / "sub" / "x.txt").write_text("x")
    return d


@pytest.fixture
def reg(tmp_path):
    r = registry.Registry(tmp_path / "lab")
    r.start()
    try:
        yield r
    finally:
        r.stop()


def layer_members(layout: Path, index: int) -> dict[str, tarfile.TarInfo]:
    idx = json.loads((layout / "index.json").read_text())
    man = json.loads((layout / "blobs" / "sha256" / idx["manifests"][0]["digest"][7:]).read_text())
    data = (layout / "blobs" / "sha256" / man["layers"][index]["digest"][7:]).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: m for m in tf.getmembers()}


def test_base_layout_is_deterministic_and_modelcar_ready(tmp_path):
    d1 = registry.build_base_layout(tmp_path / "a")
    d2 = registry.build_base_layout(tmp_path / "b")
    assert d1 == d2 and d1.startswith("sha256:")
    members = layer_members(tmp_path / "a", 0)
    assert members["bin/busybox"].isfile() and members["bin/busybox"].mode == 0o755
    for applet in ("sh", "ln", "sleep", "ls", "mkdir"):
        assert members[f"bin/{applet}"].issym() and members[f"bin/{applet}"].linkname == "busybox"
    assert members["models"].isdir() and members["models"].mode == 0o775
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    assert {m.mtime for m in members.values()} == {0}
    layout = json.loads((tmp_path / "a" / "oci-layout").read_text())
    assert layout == {"imageLayoutVersion": "1.0.0"}


def test_changing_one_model_keeps_the_other_layer(tmp_path, model_dir):
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    registry.build_modelcar_layout(tmp_path / "one", {"target": model_dir, "draft": other})
    (other / "config.json").write_text('{"changed": true}')
    registry.build_modelcar_layout(tmp_path / "two", {"target": model_dir, "draft": other})

    def layers(layout):
        idx = json.loads((layout / "index.json").read_text())
        man = json.loads((layout / "blobs" / "sha256" / idx["manifests"][0]["digest"][7:]).read_text())
        return [ly["digest"] for ly in man["layers"]]

    a, b = layers(tmp_path / "one"), layers(tmp_path / "two")
    assert len(a) == 3  # base, draft, target (sorted)
    assert a[0] == b[0] and a[2] == b[2] and a[1] != b[1]


def test_registry_push_pull_unpack(reg, tmp_path, model_dir):
    assert registry.healthy(reg.addr)
    assert registry.running_addr(reg.state_dir) == reg.addr
    cfg = (registry.registry_dir(reg.state_dir) / "config.yml").read_text()
    assert "127.0.0.1" in cfg and "htpasswd" not in cfg and "tls" not in cfg
    digest = registry.build_modelcar_layout(tmp_path / "img", {"": model_dir}, tag="v1")
    ref = f"{reg.addr}/models/tiny:v1"
    registry.push(tmp_path / "img", ref, tag="v1")
    assert registry.inspect_digest(ref) == digest  # --preserve-digests: same manifest
    models = registry.pull_and_unpack(ref, tmp_path / "unpacked")
    assert models == tmp_path / "unpacked" / "models"
    assert (models / "model.safetensors").read_bytes() == (model_dir / "model.safetensors").read_bytes()
    assert (models / "sub" / "x.txt").read_text() == "x"
    assert (tmp_path / "unpacked" / "bin" / "busybox").is_file()
    assert (registry.registry_dir(reg.state_dir) / "data").is_dir()


def test_stop_removes_the_address(tmp_path):
    r = registry.Registry(tmp_path / "lab").start()
    addr = r.addr
    r.stop()
    assert not registry.healthy(addr)
    assert registry.running_addr(tmp_path / "lab") is None
