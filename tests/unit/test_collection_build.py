"""The specpilot.core collection as Galaxy and Automation Hub take it: `ansible-galaxy collection build`
makes a tarball with README and LICENSE, it installs from that tarball, and its modules load from the
installed copy; the README names every module and filter; every plugin file carries the license
header; runtime.yml claims the ansible-core the project tests."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "specpilot" / "core"
BIN = Path(sys.executable).parent


def _run(*cmd, env=None, cwd=None):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Built once for the tests of this file (about 3 s)."""
    tmp_path = tmp_path_factory.mktemp("collection")
    names, cols, env = _build_and_install(tmp_path)
    return tmp_path, names, cols, env


def _build_and_install(tmp_path):
    """The tarball scripts/build_collection.py makes (make collection), installed offline into a clean path
    beside kubernetes.core (its dependency, from .venv's collections); (tarball names, collections path)."""
    built = _run(BIN / "python", ROOT / "scripts" / "build_collection.py", "--out", tmp_path / "dist")
    assert built.returncode == 0, built.stdout + built.stderr
    version = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())["version"]
    tarball = tmp_path / "dist" / f"specpilot-core-{version}.tar.gz"
    assert built.stdout.strip() == str(tarball)
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    cols = tmp_path / "cols"
    env = _clean_env(tmp_path, cols)
    installed = _run(BIN / "ansible-galaxy", "collection", "install", tarball, "-p", cols, "--offline", env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "kubernetes.core:6" in installed.stdout  # the dependency is resolved, from what is installed
    return names, cols, env


def _clean_env(tmp_path, cols):
    """No checkout: no ansible.cfg, no roles_path, no PYTHONPATH onto collections/; the installed copy first."""
    return {
        "ANSIBLE_COLLECTIONS_PATH": "%s:%s" % (cols, ROOT / ".venv" / "collections"),
        "ANSIBLE_ROLES_PATH": str(tmp_path / "no-roles"),
        "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": "%s:/usr/bin:/bin" % BIN,
        "HOME": str(tmp_path),
    }


def test_build_install_and_use_the_roles_from_the_tarball(installed):
    tmp_path, names, cols, env = installed
    assert {"README.md", "LICENSE", "CHANGELOG.rst", "MANIFEST.json", "FILES.json", "meta/runtime.yml"} <= names
    assert "plugins/modules/service_lock.py" in names
    assert {"roles/%s/meta/argument_specs.yml" % r for r in ROLES} <= names
    assert "roles/specpilot_deploy/tasks/main.yml" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not (COLLECTION / "roles").exists()  # the build wrote nothing into the source tree
    installed = cols / "ansible_collections" / "specpilot" / "core"
    assert (installed / "LICENSE").is_file()
    doc = _run(BIN / "ansible-doc", "-t", "module", "specpilot.core.service_lock", env=env)
    assert doc.returncode == 0, doc.stderr
    assert "(%s/plugins/modules/service_lock.py)" % installed in doc.stdout

    # every role documented from its argument_specs, from the installed copy
    listed = _run(BIN / "ansible-doc", "-t", "role", "-l", "specpilot.core", env=env)
    assert listed.returncode == 0, listed.stderr
    assert len(ROLES) == 12  # issue 40 added specpilot_fleet
    assert sorted(line[:-1] for line in listed.stdout.splitlines() if line.startswith("specpilot.core.")) == [
        "specpilot.core." + r for r in ROLES
    ]
    role_doc = _run(BIN / "ansible-doc", "-t", "role", "specpilot.core.specpilot_validate", env=env)
    assert role_doc.returncode == 0, role_doc.stderr
    assert "ROLE: *specpilot.core.specpilot_validate* (%s)" % installed in role_doc.stdout

    # a playbook that names only FQCN roles of the installed collection validates a lab spec and renders it
    (tmp_path / "site.yml").write_text(
        "- name: Validate with the installed collection\n"
        "  hosts: specpilot_services\n"
        "  gather_facts: false\n"
        "  roles:\n"
        "    - role: specpilot.core.specpilot_validate\n"
        "      vars:\n"
        "        specpilot_validate_default_name: '{{ inventory_hostname }}'\n"
        "        specpilot_validate_render_dir: %s\n" % (tmp_path / "rendered")
    )
    play = _run(
        BIN / "ansible-playbook", "-i", ROOT / "inventories" / "lab", "--limit", "lab-ngram", tmp_path / "site.yml",
        env=env, cwd=tmp_path,
    )
    assert play.returncode == 0, play.stdout + play.stderr
    assert "specpilot.core.specpilot_validate : Validate the service spec" in play.stdout
    assert "ok=" in play.stdout and "failed=0" in play.stdout
    rendered = sorted(p.name for p in (tmp_path / "rendered").rglob("*.yaml")) + sorted(
        p.name for p in (tmp_path / "rendered").rglob("*.yml")
    )
    assert rendered, "nothing rendered under %s" % (tmp_path / "rendered")


def test_the_installed_collection_describes_its_execution_environment(installed):
    """ansible-builder reads meta/execution-environment.yml of every collection it installs into an EE."""
    tmp_path, names, cols, env = installed
    assert {"meta/execution-environment.yml", "requirements.txt", "bindep.txt"} <= names
    run = _run(BIN / "ansible-builder", "introspect", cols, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    deps = yaml.safe_load(run.stdout.split("\n", 1)[1])
    python = [line.split("#")[0].strip() for line in deps["python"] if line.endswith("from collection specpilot.core")]
    system = [line.split("#")[0].strip() for line in deps["system"] if line.endswith("from collection specpilot.core")]
    for package in ("kubernetes", "jsonschema", "prometheus-client", "matplotlib", "aiohttp", "numpy"):
        assert [p for p in python if re.match(re.escape(package) + r"[<>=]", p)], (package, python)
    assert "skopeo [platform:rpm]" in system and "skopeo [platform:dpkg]" in system


def test_the_collection_requirements_admit_the_pins_the_project_tests():
    """The collection's ranges (what an EE gets) hold every pin of requirements.txt (what make test runs), and
    name every third-party package the plugins import but the fetch tools (their own virtualenv)."""
    ranges = {}
    for line in (COLLECTION / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            ranges[canonicalize_name(req.name)] = req.specifier
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            pins[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    del pins["ansible-core"]  # the EE's ansible_core, not a collection requirement
    assert set(ranges) == set(pins)
    assert [name for name, version in pins.items() if version not in ranges[name]] == []
    imported = set()
    for path in (COLLECTION / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = {"aiohttp", "jsonschema", "kubernetes", "matplotlib", "numpy", "prometheus_client", "tabulate"}
    third_party.add("yaml")
    fetch_tools = {"boto3", "botocore", "huggingface_hub"}  # requirements-fetch.txt
    engine = {"vllm"}  # the probe reads vllm.__version__ inside the runtime image
    beside = {"deploy_retry"}  # the staging Job's program imports the retry policy shipped beside it
    unknown = imported - set(sys.stdlib_module_names) - {"ansible", "ansible_collections"} - third_party
    assert unknown - fetch_tools - engine - beside == set()
    module_names = {"prometheus_client": "prometheus-client", "yaml": "pyyaml"}
    assert {module_names.get(m, m) for m in third_party} <= set(ranges)


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


GPL_HEADER = "# SPDX-License-Identifier: GPL-3.0-or-later"
APACHE_HEADER = "# SPDX-License-Identifier: Apache-2.0"
PREFIX = "ansible_collections.specpilot.core."


def _imports(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {node.module + "." + alias.name for alias in node.names}
    return names


def _gpl_files():
    """The collection README's rule: a file that imports ansible-core's GPL code (the ``ansible`` package but
    ``ansible.module_utils``, BSD-2-Clause) or a GPL file of this collection, and every module, lookup and
    callback, is GPL-3.0-or-later; every other file Apache-2.0."""
    files = {}
    for path in (COLLECTION / "plugins").rglob("*.py"):
        files[".".join(path.relative_to(COLLECTION).with_suffix("").parts)] = (path, _imports(path))
    gpl = {
        name
        for name, (path, imported) in files.items()
        if name.split(".")[1] in ("modules", "lookup", "callback")
        or any(m.split(".")[0] == "ansible" and not m.startswith("ansible.module_utils") for m in imported)
    }
    grew = True
    while grew:
        grew = False
        for name, (path, imported) in files.items():
            if name not in gpl and any(m.startswith(PREFIX) and m[len(PREFIX) :] in gpl for m in imported):
                gpl.add(name)
                grew = True
    return {files[name][0] for name in gpl}, {path for path, _ in files.values()}


def test_every_file_carries_its_spdx_license_identifier():
    """Python: GPL-3.0-or-later or Apache-2.0 by the rule above, in its header; YAML, text and Markdown of the
    collection and of the roles (the built collection carries them): Apache-2.0 on the first line."""
    gpl, python = _gpl_files()
    wrong = []
    for path in sorted(python):
        if not path.stat().st_size:
            continue  # an empty __init__.py (ansible-test empty-init)
        head = path.read_text().splitlines()[:8]
        expected = GPL_HEADER if path in gpl else APACHE_HEADER
        other = APACHE_HEADER if path in gpl else GPL_HEADER
        if expected not in head or other in head or (path in gpl) == ("# Apache-2.0 (see LICENSE)" in head):
            wrong.append("%s: %s" % (path.relative_to(ROOT), expected))
    exempt = {"LICENSE", "COPYING", "CHANGELOG.rst", "changelogs/changelog.yaml"}
    others = [p for p in COLLECTION.rglob("*") if p.is_file() and p.suffix != ".py"]
    others += [p for p in (ROOT / "roles").rglob("*") if p.is_file()]
    for path in sorted(others):
        rel = path.relative_to(COLLECTION).as_posix() if COLLECTION in path.parents else ""
        if rel in exempt or rel.startswith(("changelogs/fragments/", "tests/output/")) or path.suffix == ".jsonl":
            continue
        if "__pycache__" in path.parts:
            continue
        lines = path.read_text().splitlines()[:3]
        marker = "<!-- SPDX-License-Identifier: Apache-2.0 -->" if path.suffix == ".md" else APACHE_HEADER
        if marker not in lines:
            wrong.append("%s: %s" % (path.relative_to(ROOT), marker))
    assert wrong == []
    assert "GNU GENERAL PUBLIC LICENSE" in (COLLECTION / "COPYING").read_text()[:200]
    # the 22 plugin files that import ansible-core (ansible.errors, ansible.plugins ...) are among the GPL ones
    names = {p.relative_to(COLLECTION / "plugins").as_posix() for p in gpl}
    assert {"filter/deploy.py", "action/crd_validate.py", "plugin_utils/k8s_reader.py", "plugin_utils/action.py"} <= names
    assert not [n for n in names if n.startswith(("module_utils/", "doc_fragments/"))]


def test_galaxy_metadata_claims_only_what_is_true():
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert (COLLECTION / galaxy["readme"]).is_file() and galaxy["license"] == ["Apache-2.0", "GPL-3.0-or-later"]
    # no placeholder URL: unset until the project has a public home (ansible-lint skips galaxy[no-repository])
    assert not {"repository", "documentation", "issues", "homepage"} & set(galaxy)
    assert "example" not in (COLLECTION / "galaxy.yml").read_text()
    lint = yaml.safe_load((ROOT / ".ansible-lint").read_text())
    assert lint["skip_list"] == ["galaxy[no-repository]"] and lint["profile"] == "production"
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    import ansible.release

    tested = ".".join(ansible.release.__version__.split(".")[:2])
    assert runtime["requires_ansible"] == ">=%s.0" % tested  # claim only what make test runs
