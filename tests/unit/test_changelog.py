"""The collection's changelog: fragments antsibull-changelog accepts, and a CHANGELOG.rst it would write."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "specpilot" / "core"


def _changelog(cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "antsibull_changelog", *args], cwd=cwd, capture_output=True, text=True
    )


def test_every_fragment_passes_antsibull_changelog_lint():
    run = _changelog(COLLECTION, "lint")
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_a_broken_fragment_fails_the_lint(tmp_path):
    copy = tmp_path / "core"
    shutil.copytree(COLLECTION / "changelogs", copy / "changelogs")
    shutil.copy(COLLECTION / "galaxy.yml", copy / "galaxy.yml")
    (copy / "changelogs" / "fragments" / "broken.yml").write_text("minor_changes: not a list\n")
    run = _changelog(copy, "lint")
    assert "broken.yml" in run.stdout + run.stderr


def test_changelog_rst_is_what_antsibull_changelog_generates(tmp_path):
    copy = tmp_path / "core"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("__pycache__", "tests"))
    (copy / "CHANGELOG.rst").unlink()
    run = _changelog(copy, "generate")
    assert run.returncode == 0, run.stdout + run.stderr
    built = (copy / "CHANGELOG.rst").read_text()
    assert built == (COLLECTION / "CHANGELOG.rst").read_text(), "run `make changelog` and commit CHANGELOG.rst"
    assert "v0.1.0" in built and "v0.2.0" in built  # the release 0.2.0 (galaxy.yml), its fragments released


def test_the_galaxy_version_is_the_latest_release():
    """galaxy.yml's version is released (antsibull-changelog release --version X.Y.Z): its changes are in
    changelog.yaml, not left as fragments of a version already published."""
    import yaml
    from packaging.version import Version

    version = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())["version"]
    releases = yaml.safe_load((COLLECTION / "changelogs" / "changelog.yaml").read_text())["releases"]
    assert max(releases, key=Version) == version == "0.2.0"
    assert releases[version]["changes"]["release_summary"]
