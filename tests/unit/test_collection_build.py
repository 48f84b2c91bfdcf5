"""The specpilot.core collection as Galaxy and Automation Hub take it: `ansible-galaxy collection build`
makes a tarball with README and LICENSE, it installs from that tarball, and its modules load from the
installed copy; the README names every module and filter; every plugin file carries the license
header; runtime.yml claims the ansible-core the project tests."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "specpilot" / "core"
BIN = Path(sys.executable).parent


def _run(*cmd, env=None):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=300)


def test_build_install_and_load_from_the_tarball(tmp_path):
    built = _run(BIN / "ansible-galaxy", "collection", "build", COLLECTION, "--output-path", tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    version = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())["version"]
    tarball = tmp_path / f"specpilot-core-{version}.tar.gz"
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert {"README.md", "LICENSE", "CHANGELOG.rst", "MANIFEST.json", "FILES.json", "meta/runtime.yml"} <= names
    assert "plugins/modules/service_lock.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    cols = tmp_path / "cols"
    installed = _run(
        BIN / "ansible-galaxy",
        "collection",
        "install",
        tarball,
        "-p",
        cols,
        "--no-deps",
        "--offline",
        "--force",
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (cols / "ansible_collections" / "specpilot" / "core" / "LICENSE").is_file()
    env = {"ANSIBLE_COLLECTIONS_PATH": str(cols), "PATH": str(BIN), "HOME": str(tmp_path)}
    doc = _run(BIN / "ansible-doc", "-t", "module", "specpilot.core.service_lock", env=env)
    assert doc.returncode == 0, doc.stderr
    assert "(%s/ansible_collections/specpilot/core/plugins/modules/service_lock.py)" % cols in doc.stdout


def _plugin_names():
    modules = sorted(
        p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py") if not p.stem.startswith("_")
    )
    filters = []
    for path in (COLLECTION / "plugins" / "filter").glob("*.py"):
        mod = importlib.import_module("ansible_collections.specpilot.core.plugins.filter." + path.stem)
        filters += list(mod.FilterModule().filters())
    return modules, sorted(filters)


def test_the_readme_names_every_module_and_filter():
    readme = (COLLECTION / "README.md").read_text()
    modules, filters = _plugin_names()
    assert modules and filters
    missing = [n for n in modules + filters if "`specpilot.core.%s`" % n not in readme]
    assert missing == [], "add them to the collection README: %s" % missing


GPL_KINDS = ("modules", "lookup", "callback")  # they import ansible-core; the README's License says so
GPL_HEADER = "# SPDX-License-Identifier: GPL-3.0-or-later"


def test_every_plugin_file_carries_its_license_header():
    """Modules, lookups and callbacks: GPL-3.0-or-later (COPYING); every other file: Apache-2.0 (LICENSE)."""
    wrong = []
    for p in (COLLECTION / "plugins").rglob("*.py"):
        if not p.stat().st_size:
            continue
        head = "".join(p.read_text().splitlines(True)[:6])
        gpl = p.relative_to(COLLECTION / "plugins").parts[0] in GPL_KINDS
        if (GPL_HEADER in head) != gpl or ("Apache-2.0 (see LICENSE)" in head) == gpl:
            wrong.append(str(p.relative_to(COLLECTION)))
    assert wrong == []
    assert "GNU GENERAL PUBLIC LICENSE" in (COLLECTION / "COPYING").read_text()[:200]


def test_galaxy_metadata_claims_only_what_is_true():
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert (COLLECTION / galaxy["readme"]).is_file() and galaxy["license"] == ["Apache-2.0", "GPL-3.0-or-later"]
    assert galaxy[
        "repository"
    ]  # ansible-lint's production profile requires it (a placeholder until published)
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    import ansible.release

    tested = ".".join(ansible.release.__version__.split(".")[:2])
    assert runtime["requires_ansible"] == ">=%s.0" % tested  # claim only what make test runs
