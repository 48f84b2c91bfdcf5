"""Reports in one place (issue 14): every role writes under one report root, specpilot_report_dir, which
defaults to `.reports/` at the project root (the directory of the project's ansible.cfg, found from
playbook_dir by specpilot.core.project_root), whatever the playbook's directory or the directory
ansible-playbook runs in. No role defaults a report directory relative to playbook_dir or to the working
directory. (That a real run leaves the checkout clean: tests/emulator/rollback/test_rollback_role.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.filter.project import project_root

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
ROOT_EXPR = "{{ specpilot_report_dir | default(playbook_dir | specpilot.core.project_root ~ '/.reports', true) }}"
# role -> (its report directory variable, the sub-directory of the report root)
REPORT_DIRS = {
    "specpilot_benchmark": ("specpilot_benchmark_report_dir", "benchmark"),
    "specpilot_canary": ("specpilot_canary_report_dir", "canary"),
    "specpilot_fleet": ("specpilot_fleet_report_dir", "fleet"),
    "specpilot_guard": ("specpilot_guard_report_dir", "guard"),
    "specpilot_monitoring": ("specpilot_monitoring_render_dir", "monitoring"),
    "specpilot_rollback": ("specpilot_rollback_report_dir", "rollback"),
    "specpilot_smoke": ("specpilot_smoke_report_dir", "smoke"),
}
# a role's further report directories: role -> {variable: sub-directory} (the benchmark role's tuning run)
MORE_REPORT_DIRS = {"specpilot_benchmark": {"specpilot_benchmark_tune_report_dir": "tune"}}
# a role variable that names where files go, by its name
DIR_VARIABLE = re.compile(r"_(report|render)_dir$")


# playbook_dir where it is no anchor of a written path: the project root's finder, and the guard looking for the
# rollback role where Ansible looks for roles (roles_path, then <playbook_dir>/roles)
NOT_A_PATH_ANCHOR = ("playbook_dir | specpilot.core.project_root", "[playbook_dir ~ '/roles']")


def _without(text: str, parts) -> str:
    for part in parts:
        text = text.replace(part, "")
    return text


def _defaults(role: Path) -> dict:
    path = role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def test_every_report_directory_is_under_the_one_report_root():
    """Each role's report directory defaults to <report root>/<area>, the report root being
    specpilot_report_dir or the project root's .reports (never '.reports' relative to anything)."""
    found = {
        role.name: {k: v for k, v in _defaults(role).items() if DIR_VARIABLE.search(k)}
        for role in sorted(ROLES.iterdir())
        if role.is_dir()
    }
    found = {role: dirs for role, dirs in found.items() if dirs}
    # specpilot_validate_render_dir renders manifests on request only (default empty): not a report
    found.pop("specpilot_validate", None)
    assert _defaults(ROLES / "specpilot_validate")["specpilot_validate_render_dir"] == (
        "{{ specpilot_render_dir | default('') }}"
    )
    expected = {role: {var: f"{ROOT_EXPR}/{area}"} for role, (var, area) in REPORT_DIRS.items()}
    for role, more in MORE_REPORT_DIRS.items():
        expected[role].update({var: f"{ROOT_EXPR}/{area}" for var, area in more.items()})
    assert found == expected


def test_no_role_anchors_a_path_on_playbook_dir_or_the_working_directory_by_default():
    """In every Jinja expression of the roles, playbook_dir appears only through specpilot.core.project_root
    (playbooks/ and molecule/<scenario>/ are not the project root); no argument spec documents a relative
    '.reports' default for a report directory (the defaults are the report root's, test above)."""
    offenders = []
    for path in sorted(ROLES.rglob("*")):
        if path.suffix not in (".yml", ".j2") or not path.is_file():
            continue
        for expr in re.findall(r"\{\{.*?\}\}|\{%.*?%\}", path.read_text(), re.S):
            if "playbook_dir" in _without(expr, NOT_A_PATH_ANCHOR):
                offenders.append(f"{path.relative_to(ROOT)}: {expr}")
    for role in sorted(ROLES.iterdir()):
        specs = role / "meta" / "argument_specs.yml"
        if not specs.is_file():
            continue
        for entry in yaml.safe_load(specs.read_text())["argument_specs"].values():
            for var, spec in (entry.get("options") or {}).items():
                if DIR_VARIABLE.search(var) and ".reports" in str(spec.get("default", "")):
                    offenders.append(f"{specs.relative_to(ROOT)}: {var} default {spec['default']}")
    assert offenders == []


def test_project_root_finds_the_checkout_from_any_playbook_directory(tmp_path, monkeypatch):
    for sub in ("playbooks", "molecule/rollback", "tests/emulator/playbooks", ""):
        assert project_root(str(ROOT / sub)) == str(ROOT), sub
    proj = tmp_path / "proj"
    (proj / "a" / "b").mkdir(parents=True)
    (proj / "ansible.cfg").write_text("[defaults]\n")
    assert project_root(str(proj / "a" / "b")) == str(proj)
    assert project_root(str(proj / "a" / "b" / "..")) == str(proj)  # normalised
    assert project_root(str(proj / "a"), "marker") != str(proj)
    (proj / "a" / "marker").write_text("")
    assert project_root(str(proj / "a" / "b"), "marker") == str(proj / "a")
    # no ansible.cfg up to / : the directory ansible-playbook runs in
    lone = tmp_path / "lone" / "x"
    lone.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert project_root(str(lone), "no-such-marker-file") == str(tmp_path)
    for bad in (None, "", 3):
        with pytest.raises(AnsibleFilterError):
            project_root(bad)
    with pytest.raises(AnsibleFilterError):
        project_root(str(proj), "a/b")


BOOK = """---
- name: The report directories as the roles' defaults render them here
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Read the defaults of the roles that write reports
      ansible.builtin.include_vars:
        file: "{{{{ item }}}}/defaults/main.yml"
        name: "{{{{ item | basename }}}}"
      loop: {roles}
    - name: Print them
      ansible.builtin.debug:
        msg: "DIRS {{{{ {dirs} | to_json }}}}"
"""


def _render_dirs(tmp_path: Path, *args: str) -> list[dict]:
    """Render every role's report directory default from a playbook in <proj>/playbooks and one in
    <proj>/molecule/scn (proj: a project with an ansible.cfg), started from an unrelated directory."""
    proj = tmp_path / "proj"
    roles = [str(ROLES / r) for r in REPORT_DIRS]
    dirs = "{%s}" % ", ".join(f"'{r}': {r}.{var}" for r, (var, _area) in REPORT_DIRS.items())
    books = [proj / "playbooks" / "render.yml", proj / "molecule" / "scn" / "converge.yml"]
    for book in books:
        book.parent.mkdir(parents=True, exist_ok=True)
        book.write_text(BOOK.format(roles=roles, dirs=dirs))
    (proj / "ansible.cfg").write_text("[defaults]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_STDOUT_CALLBACK="default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        PWD=str(elsewhere),
    )
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable, *args, *map(str, books)]
    proc = subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    found = [json.loads(m) for m in re.findall(r'"msg": "DIRS (\{.*\})"', proc.stdout.replace('\\"', '"'))]
    assert len(found) == len(books), proc.stdout[-4000:]
    return found


def test_defaults_render_to_the_project_roots_reports_from_any_playbook_directory(tmp_path):
    proj = tmp_path / "proj"
    expected = {r: str(proj / ".reports" / area) for r, (_var, area) in REPORT_DIRS.items()}
    assert _render_dirs(tmp_path) == [expected, expected]
    # an empty specpilot_report_dir (molecule's inventories pass an unset environment variable) is the default
    assert _render_dirs(tmp_path, "-e", "specpilot_report_dir=") == [expected, expected]
    moved = {r: f"/srv/out/{area}" for r, (_var, area) in REPORT_DIRS.items()}
    assert _render_dirs(tmp_path, "-e", "specpilot_report_dir=/srv/out") == [moved, moved]
