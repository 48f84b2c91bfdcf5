"""The offline collection route: same versions as Galaxy, taken from the ansible wheel."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install_collections.py"


def make_bundle(cache: Path, version: str = "6.2.0") -> None:
    """A wheel laid out like the `ansible` package: collections under ansible_collections/."""
    cache.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(cache / "ansible-12.3.0-py3-none-any.whl", "w") as zf:
        manifest = {"collection_info": {"namespace": "kubernetes", "name": "core", "version": version}}
        zf.writestr("ansible_collections/kubernetes/core/MANIFEST.json", json.dumps(manifest))
        zf.writestr("ansible_collections/kubernetes/core/plugins/modules/k8s.py", "# module\n")
        zf.writestr("ansible_collections/community/general/MANIFEST.json", "{}")


def run(tmp_path: Path, req: str, *extra: str) -> subprocess.CompletedProcess:
    reqfile = tmp_path / "requirements.yml"
    reqfile.write_text(req)
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--offline", "--requirements", str(reqfile),
         "--dest", str(tmp_path / "dest"), "--wheel-cache", str(tmp_path / "cache"), *extra],
        capture_output=True, text=True, check=False,
    )


REQ = "---\ncollections:\n  - name: kubernetes.core\n    version: '>=6.0.0,<7.0.0'\n"


def test_extracts_only_the_requested_collection(tmp_path):
    make_bundle(tmp_path / "cache")
    proc = run(tmp_path, REQ)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    coll = tmp_path / "dest" / "ansible_collections"
    assert (coll / "kubernetes" / "core" / "plugins" / "modules" / "k8s.py").is_file()
    assert not (coll / "community").exists()
    import yaml

    # the keys ansible-galaxy writes (get_galaxy_artifact_source_info): namespace and name apart
    info = yaml.safe_load((coll / "kubernetes.core-6.2.0.info" / "GALAXY.yml").read_text())
    assert (info["namespace"], info["name"], info["version"]) == ("kubernetes", "core", "6.2.0")
    assert info["format_version"] == "1.0.0" and info["signatures"] == []
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-galaxy"), "collection", "list", "-p", str(tmp_path / "dest")],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )
    assert "Ignoring source metadata" not in listed.stdout + listed.stderr, listed.stderr
    assert "kubernetes.core 6.2.0 satisfies" in proc.stdout


def test_second_run_is_a_no_op(tmp_path):
    make_bundle(tmp_path / "cache")
    assert run(tmp_path, REQ).returncode == 0
    proc = run(tmp_path, REQ)
    assert proc.returncode == 0
    assert "already installed" in proc.stdout


def test_bundle_outside_the_range_is_refused(tmp_path):
    make_bundle(tmp_path / "cache", version="5.1.0")
    proc = run(tmp_path, REQ)
    assert proc.returncode != 0
    assert "outside '>=6.0.0,<7.0.0'" in proc.stdout + proc.stderr
    assert not (tmp_path / "dest" / "ansible_collections" / "kubernetes" / "core").exists()


def test_the_real_install_matches_requirements():
    """What make installed into .venv/collections is exactly what requirements.yml pins."""
    import yaml

    reqs = yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
    for req in reqs:
        assert re.fullmatch(r"\d+\.\d+\.\d+", req["version"]), f"pin {req['name']} to one version: {req}"
        ns, name = req["name"].split(".")
        manifest = ROOT / ".venv" / "collections" / "ansible_collections" / ns / name / "MANIFEST.json"
        if not manifest.is_file():
            pytest.skip("collections not installed: run make")
        version = json.loads(manifest.read_text())["collection_info"]["version"]
        assert version == req["version"], (req, version)


def test_an_exact_pin_is_read_as_ansible_galaxy_reads_it(tmp_path):
    make_bundle(tmp_path / "cache", version="6.2.0")
    assert run(tmp_path, REQ.replace(">=6.0.0,<7.0.0", "6.2.0")).returncode == 0
    proc = run(tmp_path, REQ.replace(">=6.0.0,<7.0.0", "6.1.0"), "--force")
    assert proc.returncode != 0 and "outside '6.1.0'" in proc.stdout + proc.stderr
