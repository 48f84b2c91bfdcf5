"""playbooks/stage.yml --check for a Modelcar service (issue 19): it reports what a run would do and
changes nothing - before the sources are fetched (the digest cannot be known: "would fetch ..., then
build and push"), and once they are (modelcar_build computes the digest: "would push"), against a
real registry on loopback; no cluster is needed."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

import staging_support as ss
from ansible_collections.specpilot.core.plugins.module_utils.staging import oci_registry
from specpilot_lab import registry as lab_registry

pytestmark = pytest.mark.skipif(
    not shutil.which("skopeo") or not shutil.which("docker-registry"),
    reason="skopeo and docker-registry are needed (make installs them)",
)


def _tag(ref):
    proc = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"], capture_output=True
    )
    return proc.stdout if proc.returncode == 0 else None


def test_stage_check_mode_reports_and_changes_nothing(tmp_path):
    src = tmp_path / "src"
    ss.make_model(src / "target", weight_bytes=256 * 1024, shards=1)
    ss.sha256sums(src / "target")
    ss.make_model(src / "draft", weight_bytes=64 * 1024, layers=1, seed=1)
    lab_registry.build_base_layout(tmp_path / "base", tag="busybox")
    with ss.ModelHTTPServer(src) as srv, lab_registry.Registry(tmp_path / "reg") as reg:
        image = f"{reg.addr}/models/svc"
        host = {
            "specpilot_delivery": "modelcar",
            "specpilot_modelcar": {"image": f"{image}:v1", "tls_verify": False},
            "specpilot_target": {"uri": srv.files_url("target/")},
            "specpilot_draft": {"hidden_size": 64, "local_path": str(src / "draft")},
        }
        group = {
            "specpilot_stage_modelcar_base": f"oci:{tmp_path / 'base'}:busybox",
            "specpilot_stage_modelcar_cache_dir": str(tmp_path / "cache"),
            "specpilot_pvc": None,
        }
        inv = ss.write_inventory(tmp_path, {"svc": host}, group)

        fresh = ss.run_playbook(inv, None, "--check")
        out = fresh.stdout + fresh.stderr
        assert fresh.returncode == 0, out[-4000:]
        assert f"check mode: would fetch target, then build and push {image}:v1" in out
        assert ss.recap(out)["svc"]["changed"] >= 1
        assert not (tmp_path / "cache" / "models").exists() and _tag(f"{image}:v1") is None

        real = ss.run_playbook(inv, None)
        out = real.stdout + real.stderr
        assert real.returncode == 0, out[-4000:]
        # the long steps' progress lines, shown by their action plugins (plugin_utils/progress_relay.py)
        for line in (
            "[svc] specpilot-stage: progress target 263239/263239 bytes (100.0%)",  # model_fetch
            "[svc] layer models/target: 257.1 KiB of 257.1 KiB (100%)",  # modelcar_build: each layer's bytes written and hashed
            f"[svc] pushing {image}:v1",
            "[svc] pushed ",
        ):
            assert line in out, line + "\n" + out[-4000:]
        pushed = _tag(f"{image}:v1")
        # every source fetched, a tag the registry lacks: the digest is computed, nothing pushed
        v2 = json.dumps({"specpilot_modelcar": {"image": f"{image}:v2", "tls_verify": False}})
        again = ss.run_playbook(inv, None, "--check", "-e", v2)
        out = again.stdout + again.stderr
        assert again.returncode == 0, out[-4000:]
        digest = out.split(f"check mode: would push: {image}@", 1)[1].split()[0].strip("'\"")
        assert digest == oci_registry.sha256_digest(pushed)  # the same sources: the image v1 names
        assert _tag(f"{image}:v2") is None
