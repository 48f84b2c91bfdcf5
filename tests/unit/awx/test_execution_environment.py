"""execution-environment.yml: `ansible-builder create` works offline and the build context
installs exactly the project's own requirement files (no copy that could drift)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
EE_FILE = ROOT / "execution-environment.yml"
BUILDER = Path(sys.executable).with_name("ansible-builder")
VENV_COLLECTIONS = ROOT / ".venv" / "collections"


def requirement_lines(path: Path) -> list[str]:
    """Requirement lines of a pip or bindep file, comments and blanks dropped."""
    out = []
    for line in path.read_text().splitlines():
        line = re.sub(r"(^|\s+)#.*$", "", line).strip()
        if line:
            out.append(line)
    return out


def pins(path: Path) -> dict[str, Requirement]:
    return {Requirement(line).name.lower(): Requirement(line) for line in requirement_lines(path)}


@pytest.fixture(scope="module")
def ee() -> dict:
    return yaml.safe_load(EE_FILE.read_text())


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    if not BUILDER.exists():
        pytest.fail(f"{BUILDER} missing: ansible-builder is pinned in requirements-test.txt, run `make`")
    out = tmp_path_factory.mktemp("ee-context")
    proc = subprocess.run(
        [str(BUILDER), "create", "-f", str(EE_FILE), "-c", str(out), "--output-filename", "Containerfile"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Complete! The build context can be found at" in proc.stdout
    return out


def test_definition_is_v3_and_points_at_the_project_files(ee):
    assert ee["version"] == 3
    deps = ee["dependencies"]
    assert deps["python"] == "requirements.txt"
    assert deps["galaxy"] == "requirements.yml"
    assert deps["system"] == "bindep.txt"
    for name in ("requirements.txt", "requirements.yml", "bindep.txt"):
        assert (ROOT / name).is_file(), name


def test_context_holds_exactly_the_project_requirement_files(context):
    build = context / "_build"
    for name in ("requirements.txt", "requirements.yml", "bindep.txt"):
        assert (build / name).read_bytes() == (ROOT / name).read_bytes(), f"{name} differs in the EE context"
    containerfile = (context / "Containerfile").read_text()
    # the stages install those very files
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    assert "--user-pip=requirements.txt" in containerfile
    assert "--user-bindep=bindep.txt" in containerfile
    assert "COPY _build/requirements.txt requirements.txt" in containerfile


def test_ansible_core_and_runner_pins_agree_with_requirements_txt(ee, context):
    project = pins(ROOT / "requirements.txt")
    core = Requirement(ee["dependencies"]["ansible_core"]["package_pip"])
    assert core.name == "ansible-core"
    assert str(core.specifier) == str(project["ansible-core"].specifier), (
        "execution-environment.yml installs a different ansible-core than requirements.txt")
    runner = Requirement(ee["dependencies"]["ansible_runner"]["package_pip"])
    assert runner.name == "ansible-runner" and str(runner.specifier).startswith("==")
    containerfile = (context / "Containerfile").read_text()
    assert f'ARG ANSIBLE_INSTALL_REFS="{core} {runner}"' in containerfile


def test_collections_of_the_ee_are_the_ones_the_content_uses():
    """Every collection a playbook or role calls is in requirements.yml (or is ansible.builtin or
    the project's own specpilot.core), and every collection of requirements.yml is used."""
    required = {c["name"] for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]}
    fqcn = re.compile(r"^\s*-?\s*([a-z0-9_]+\.[a-z0-9_]+)\.[a-z0-9_]+:\s*(#.*)?$", re.M)
    group = re.compile(r"group/([a-z0-9_]+\.[a-z0-9_]+)\.")
    used = set()
    for path in list((ROOT / "playbooks").rglob("*.yml")) + list((ROOT / "roles").rglob("*.yml")):
        text = path.read_text()
        used |= {m.group(1) for m in fqcn.finditer(text)}
        used |= set(group.findall(text))
    used -= {"ansible.builtin", "specpilot.core"}
    assert used <= required, f"collections used but not in requirements.yml: {sorted(used - required)}"
    assert required <= used, f"collections in requirements.yml that no playbook or role uses: {sorted(required - used)}"


def test_introspection_combines_the_project_pins_with_the_collections(context):
    """What the builder stage installs: introspect (offline) over the installed collections,
    with the context's files, exactly as the Containerfile runs it."""
    if not (VENV_COLLECTIONS / "ansible_collections" / "kubernetes" / "core").is_dir():
        pytest.fail("collections not installed in .venv/collections: run `make collections`")
    build = context / "_build"
    out_pip, out_bindep = context / "pip.txt", context / "bindep.txt"
    proc = subprocess.run(
        [str(BUILDER), "introspect", "--user-pip", str(build / "requirements.txt"),
         "--exclude-pip-reqs", str(build / "exclude-requirements.txt"),
         "--user-bindep", str(build / "bindep.txt"),
         "--write-pip", str(out_pip), "--write-bindep", str(out_bindep), str(VENV_COLLECTIONS)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = out_pip.read_text().splitlines()
    user = [ln.split("  # from collection user")[0] for ln in lines if ln.endswith("# from collection user")]
    assert user == requirement_lines(ROOT / "requirements.txt")
    project = pins(ROOT / "requirements.txt")
    from_collections = [ln.split("  # from collection ")[0] for ln in lines if not ln.endswith("collection user")]
    assert from_collections, "no collection requirement found: introspection did not see the collections"
    for line in from_collections:
        req = Requirement(line)
        assert req.name.lower() != "awxkit", "awxkit should be excluded (export/import modules are unused)"
        pinned = project.get(req.name.lower())
        if pinned is not None:
            version = next(iter(pinned.specifier)).version
            assert req.specifier.contains(version), f"{line}: the project pins {pinned}"
    system = out_bindep.read_text()
    assert "skopeo [platform:rpm]  # from collection user" in system


FETCH_VENV = "/opt/specpilot-fetch"
FETCH_PACKAGES = {"boto3", "huggingface_hub"}


def test_the_fetch_packages_live_in_their_own_virtualenv(context):
    """model_fetch needs boto3 (s3://) and huggingface_hub (hf://): requirements-fetch.txt holds them, the EE
    builds a virtualenv from that very file, the Modelcar role runs the fetch with its interpreter, and
    neither requirements.txt nor the EE's main environment names them (botocore's python-dateutil < 3
    against the kubernetes client's >= 3)."""
    fetch = pins(ROOT / "requirements-fetch.txt")
    assert set(fetch) == FETCH_PACKAGES and all(str(r.specifier).startswith("==") for r in fetch.values())
    assert not FETCH_PACKAGES & set(pins(ROOT / "requirements.txt"))
    assert (context / "_build" / "fetch" / "requirements-fetch.txt").read_bytes() == (
        ROOT / "requirements-fetch.txt"
    ).read_bytes()
    containerfile = (context / "Containerfile").read_text()
    assert "COPY _build/fetch/requirements-fetch.txt /tmp/requirements-fetch.txt" in containerfile
    assert (
        f"RUN /usr/bin/python3.11 -m venv {FETCH_VENV} && {FETCH_VENV}/bin/python -m pip install"
        " --no-cache-dir -r /tmp/requirements-fetch.txt" in containerfile
    )
    role_vars = yaml.safe_load((ROOT / "roles/specpilot_stage_modelcar/vars/main.yml").read_text())
    assert role_vars["__specpilot_stage_modelcar_ee_fetch_python"] == f"{FETCH_VENV}/bin/python"
    # the lab and the tests get the same pins (.venv-staging)
    assert "-r requirements-fetch.txt" in requirement_lines(ROOT / "requirements-staging.txt")


def _pip_dry_run(*files):
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
           "--disable-pip-version-check"]
    for name in files:
        cmd += ["-r", str(ROOT / name)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.skipif(not os.environ.get("SPECPILOT_NETWORK_TESTS"),
                    reason="resolves against PyPI (network): SPECPILOT_NETWORK_TESTS=1; not part of make test")
def test_each_ee_environment_resolves_and_the_two_cannot_share_one():
    """pip's resolver against PyPI (about a minute): requirements.txt and requirements-fetch.txt each
    resolve; together they do not (python-dateutil), which is why the fetch has its own virtualenv."""
    for name in ("requirements.txt", "requirements-fetch.txt"):
        proc = _pip_dry_run(name)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    both = _pip_dry_run("requirements.txt", "requirements-fetch.txt")
    assert both.returncode != 0 and "ResolutionImpossible" in both.stderr


def test_the_ee_image_is_pinned_by_the_collection_version_never_latest(ee):
    """The build tags the image with the collection's version and AWX pulls that tag (pull: missing is only
    safe for a tag that never moves)."""
    galaxy = yaml.safe_load((ROOT / "collections/ansible_collections/specpilot/core/galaxy.yml").read_text())
    assert ee["options"]["tags"] == ["specpilot-ee:%s" % galaxy["version"]]
    settings = (ROOT / "playbooks" / "vars" / "awx" / "settings.yml").read_text()
    default = re.search(r"specpilot_awx_ee_image: .*default\('([^']+)'", settings).group(1)
    assert default.endswith("/specpilot-ee:%s" % galaxy["version"])
    awx_ees = yaml.safe_load((ROOT / "playbooks" / "vars" / "awx" / "execution_environments.yml").read_text())
    assert [e["pull"] for e in awx_ees["controller_execution_environments"]] == ["missing"]
    assert ":latest" not in EE_FILE.read_text() + settings


def test_ansible_navigator_runs_the_ee_the_build_tags(ee):
    navigator = yaml.safe_load((ROOT / "ansible-navigator.yml").read_text())["ansible-navigator"]
    assert navigator["execution-environment"]["image"] == ee["options"]["tags"][0]
    assert navigator["execution-environment"]["pull"]["policy"] == "missing"
    assert {"K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY"} <= set(
        navigator["execution-environment"]["environment-variables"]["pass"]
    )
