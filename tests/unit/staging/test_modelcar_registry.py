"""modelcar_build against real registries on loopback (Debian's docker-registry): pushing with
credentials (never on a command line, never in the output at -vvv), skipping a push the registry
already has, counting uploaded bytes, a base pulled with skopeo, verification after the push,
check mode, and the optional podman backend."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import pytest

import staging_support as ss
from ansible_collections.specpilot.core.plugins.module_utils.staging import modelcar
from specpilot_lab import registry as lab_registry

pytestmark = pytest.mark.skipif(
    not shutil.which("skopeo") or not shutil.which("docker-registry"),
    reason="skopeo and docker-registry are needed (make installs them)",
)


@pytest.fixture
def models(tmp_path):
    return ss.modelcar_inputs(tmp_path, 512 * 1024, 128 * 1024)


params = ss.modelcar_params


@pytest.fixture
def calls(monkeypatch):
    """Every skopeo command line of the test."""
    return ss.record_skopeo_calls(monkeypatch, modelcar.Skopeo)


@pytest.mark.skipif(
    not ss.AuthRegistry.available(), reason="docker-registry, skopeo or bcrypt (crypt) missing"
)
def test_push_with_credentials_then_nothing_to_push(models, calls, tmp_path, monkeypatch):
    # a temp dir of this test's own: the machine's is shared with the other worker's registry tests
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    before = set(os.listdir(tempfile.gettempdir()))
    with ss.AuthRegistry(tmp_path / "reg") as reg:
        p = params(
            models, f"{reg.addr}/models/chat:v1", username=ss.REGISTRY_USER, password=ss.REGISTRY_PASSWORD
        )
        first = modelcar.build_push(p)
        assert first["pushed"] and first["verify"]["ok"] and first["verify"]["tag_pinned"]
        assert (
            first["blobs_uploaded"] == 4 and "upload_accounting" not in first
        )  # HEAD with Basic auth worked
        second = modelcar.build_push(p)
        assert not second["pushed"] and not second["changed"] and second["digest"] == first["digest"]
        assert second["registry_had_digest"]
        with pytest.raises(modelcar.ModelcarError) as err:
            modelcar.build_push(dict(p, password="wrong-password-xyz", force=True))
        assert "wrong-password-xyz" not in str(err.value)
        with pytest.raises(modelcar.ModelcarError):
            modelcar.build_push(dict(p, username=None, password=None, force=True))  # anonymous: refused
    flat = json.dumps(calls)
    assert ss.REGISTRY_PASSWORD not in flat and "wrong-password-xyz" not in flat
    assert any("--dest-authfile" in c for c in calls)
    leftovers = [
        d for d in set(os.listdir(tempfile.gettempdir())) - before if d.startswith("specpilot-auth-")
    ]
    assert leftovers == []  # the temporary authfile is gone


@pytest.mark.skipif(
    not ss.AuthRegistry.available(), reason="docker-registry, skopeo or bcrypt (crypt) missing"
)
def test_the_role_at_vvv_never_shows_the_registry_password(models, tmp_path):
    with ss.AuthRegistry(tmp_path / "reg") as reg, ss.ModelHTTPServer(models / "m") as srv:
        ss.sha256sums(models / "m" / "target")
        host = {
            "specpilot_namespace": "ml",
            "specpilot_delivery": "modelcar",
            "specpilot_modelcar": {"image": f"{reg.addr}/models/svc:v1", "tls_verify": False},
            "specpilot_target": {"uri": srv.files_url("target/")},
            "specpilot_draft": {
                # the lab draft's typed facts say 128; staging_support.make_model's draft has 64, and a typed
                # fact that contradicts local_path's config.json is an error
                "hidden_size": 64,
                "local_path": str(models / "m" / "draft"),
            },
        }
        group = {
            "specpilot_stage_modelcar_base": f"oci:{models / 'base'}:busybox",
            "specpilot_stage_modelcar_cache_dir": str(tmp_path / "cache"),
            "specpilot_pvc": None,
            "specpilot_stage_modelcar_registry_username": ss.REGISTRY_USER,
            "specpilot_stage_modelcar_registry_password": ss.REGISTRY_PASSWORD,
        }
        inv = ss.write_inventory(tmp_path, {"svc": host}, group)
        proc = ss.run_playbook(inv, None, "-vvv")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-5000:]
        assert "pushed: " in out and "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" in out  # arguments shown, masked
        assert ss.REGISTRY_PASSWORD not in out


def test_a_registry_base_pulled_with_skopeo(models, calls, tmp_path):
    with lab_registry.Registry(tmp_path / "reg") as reg:
        lab_registry.push(models / "base", f"{reg.addr}/library/busybox:1", tag="busybox")
        base_digest = lab_registry.inspect_digest(f"{reg.addr}/library/busybox:1")
        p = params(
            models,
            f"{reg.addr}/models/chat:v1",
            base=f"docker://{reg.addr}/library/busybox:1",
            base_tls_verify=False,
        )
        by_tag = modelcar.build_push(p)
        assert by_tag["base"]["pulled"] and by_tag["content"]["base_has"] == ["sh", "ln", "sleep"]
        pinned = dict(
            p, base=f"docker://{reg.addr}/library/busybox@{base_digest}", work_dir=str(tmp_path / "w2")
        )
        a = modelcar.build_push(pinned)
        n_copies = sum(1 for c in calls if c[0] == "copy")
        b = modelcar.build_push(pinned)
        assert a["base"]["pulled"] and not b["base"]["pulled"]  # a digest-pinned base is pulled once
        assert sum(1 for c in calls if c[0] == "copy") == n_copies
        assert a["digest"] == b["digest"] == by_tag["digest"]  # the same base bytes: the same image


def test_a_tag_moves_only_with_force_verify_notices_a_moved_tag_and_check_mode_pushes_nothing(
    models, tmp_path
):
    with lab_registry.Registry(tmp_path / "reg") as reg:
        image = f"{reg.addr}/models/chat"
        check = modelcar.build_push(params(models, f"{image}:v1"), check_mode=True)
        assert check["changed"] and not check["pushed"]
        assert (
            subprocess.run(
                ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{image}:v1"],
                capture_output=True,
            ).returncode
            != 0
        )
        a = modelcar.build_push(params(models, f"{image}:v1"))
        ss.make_model(models / "m" / "draft", weight_bytes=128 * 1024, layers=1, seed=5)
        # another image for the same tag: refused, the tag stays on a, unless force moves it
        with pytest.raises(modelcar.ModelcarError, match="already names another image .*force: true"):
            modelcar.build_push(params(models, f"{image}:v1"))
        raw_tag = modelcar.Skopeo().inspect_raw(f"{image}:v1", tls_verify=False)
        assert modelcar.manifest_digest(raw_tag) == a["digest"]  # not moved
        b = modelcar.build_push(dict(params(models, f"{image}:v1"), force=True))  # the tag now names b
        raw_a = subprocess.run(
            ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{image}@{a['digest']}"],
            capture_output=True,
            check=True,
        ).stdout
        with pytest.raises(modelcar.ModelcarError, match="does not resolve"):
            modelcar.verify_remote(
                modelcar.Skopeo(), image, "v1", a["digest"], json.loads(raw_a), False, None
            )
        assert b["digest"] != a["digest"]
    with pytest.raises(modelcar.ModelcarError, match="carries a digest"):
        modelcar.split_image("r.example/x@sha256:" + "0" * 64)
    assert modelcar.split_image("docker://r.example:5000/a/b:v2") == ("r.example:5000/a/b", "v2")
    assert modelcar.registry_host("busybox") == "docker.io" and modelcar.registry_host("r.io/x/y") == "r.io"


@pytest.mark.skipif(not shutil.which("podman"), reason="podman not installed (optional backend)")
def test_the_podman_backend(models, tmp_path):
    with lab_registry.Registry(tmp_path / "reg") as reg:
        image = f"{reg.addr}/models/podman:v1"
        p = params(models, image, backend="podman", podman_runtime="runc")
        try:
            first = modelcar.build_push(p)
            assert first["pushed"] and first["verify"]["ok"]
            assert first["content"]["models"]["target"]["files"] == 5
            raw = subprocess.run(
                ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{image}"],
                capture_output=True,
                check=True,
            ).stdout
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == first["digest"]
            second = modelcar.build_push(p)
            assert not second["pushed"] and second["digest"] == first["digest"]
        finally:
            subprocess.run(
                ["podman", "rmi", "-f", image, f"localhost{models / 'base'}:latest"], capture_output=True
            )
