"""The preload callback (plugins/callback/preload.py): what ansible-playbook imports once, before the
tasks' worker processes are forked from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ansible_collections.specpilot.core.plugins.callback import preload

ROOT = Path(__file__).resolve().parents[2]


def test_it_imports_the_client_and_every_controller_plugin_and_names_what_is_missing():
    missing = preload.preload(
        modules=("json", "no_such_module_here"),
        packages=(
            "ansible_collections.specpilot.core.plugins.filter",
            "ansible_collections.nowhere.x.plugins",
        ),
    )
    assert missing == ["no_such_module_here", "ansible_collections.nowhere.x.plugins"]
    assert "ansible_collections.specpilot.core.plugins.filter.canary" in sys.modules


def test_the_project_config_enables_it_and_a_playbook_runs_with_it():
    """ansible.cfg enables it; a playbook's worker then finds the kubernetes client already imported."""
    assert "callbacks_enabled = specpilot.core.preload" in (ROOT / "ansible.cfg").read_text()
    play = (
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug:\n"
        "        msg: \"{{ lookup('ansible.builtin.pipe', 'true') }}\"\n"
    )
    path = ROOT / ".cache" / "preload-play.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(play)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "preload" not in proc.stderr  # no warning about the callback
