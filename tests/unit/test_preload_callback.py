"""The preload callback (plugins/callback/preload.py): what ansible-playbook imports once, before the
tasks' worker processes are forked from it."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
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


def _collectable(obj):
    """True while the garbage collector can visit obj (gc.get_objects leaves out the frozen ones)."""
    return any(o is obj for o in gc.get_objects())


def test_the_playbook_and_each_play_freeze_what_the_parent_holds_before_the_workers_fork(monkeypatch):
    """The workers' garbage collections must not visit (and so copy) the parent's objects: at the playbook's
    start, after the imports, and at each play's start, everything the parent holds is frozen."""
    monkeypatch.setattr(preload, "preload", lambda: [])
    callback = preload.CallbackModule()
    gc.unfreeze()
    try:
        imported = ["the imports"]  # a list: always tracked (a dict of strings is not)
        assert _collectable(imported)
        callback.v2_playbook_on_start(None)
        assert not _collectable(imported) and gc.get_freeze_count() > 0
        play = ["built since the playbook started"]
        assert _collectable(play)
        callback.v2_playbook_on_play_start(None)
        assert not _collectable(play)
    finally:
        gc.unfreeze()


class _Node:
    """A cycle's member: freed only by a garbage collection, never by reference counting."""

    def __init__(self):
        self.me = self


def test_each_task_collects_what_the_last_left_and_freezes_the_rest(monkeypatch):
    """Over a play the parent accumulates every host's registered results (a fleet's worth at the end): at each
    task's start they are frozen, so that the task's workers (one a host) no longer walk and copy them, and the
    cyclic garbage of the last task is collected first, so that freezing never keeps garbage alive."""
    monkeypatch.setattr(preload, "preload", lambda: [])
    callback = preload.CallbackModule()
    gc.unfreeze()
    try:
        callback.v2_playbook_on_start(None)
        registered = [{"host": "svc-%d" % i} for i in range(3)]  # what the last task kept for its hosts
        garbage = weakref.ref(_Node())  # unreachable, in a cycle
        assert _collectable(registered) and garbage() is not None
        callback.v2_playbook_on_task_start(None, False)
        assert garbage() is None
        assert not _collectable(registered)
        handler_result = ["a handler's result"]
        callback.v2_playbook_on_handler_task_start(None)
        assert not _collectable(handler_result)
    finally:
        gc.unfreeze()


def test_each_play_reads_the_projects_variable_names_once_for_its_workers(tmp_path):
    """spec_validate's typo check reads the specpilot_* names of the playbook's folder and the roles beside it;
    the play's start reads them in the parent, so the forked workers find them already read."""
    from ansible_collections.specpilot.core.plugins.plugin_utils import action

    (tmp_path / "playbooks").mkdir()
    (tmp_path / "roles" / "r" / "defaults").mkdir(parents=True)
    (tmp_path / "playbooks" / "site.yml").write_text("- hosts: all\n  vars: {specpilot_from_playbook: 1}\n")
    (tmp_path / "roles" / "r" / "defaults" / "main.yml").write_text("specpilot_from_role: 2\n")

    class Play:
        def get_path(self):
            return "%s:1" % (tmp_path / "playbooks" / "site.yml")

    preload.known_variables(Play())
    key = tuple(sorted(str((tmp_path / d).resolve()) for d in ("playbooks", "roles")))
    assert action._KNOWN[key] == ["specpilot_from_playbook", "specpilot_from_role"]
    # what a worker asks for (the playbook's folder, and the running role's parent) is that same read
    assert (
        action.known_variable_names(
            {"playbook_dir": str(tmp_path / "playbooks")}, str(tmp_path / "roles" / "r")
        )
        is action._KNOWN[key]
    )
    preload.known_variables(None)  # a play without a file (ad hoc): nothing to read


def test_a_play_of_a_role_that_draws_imports_matplotlib_once_for_its_workers(monkeypatch):
    """smoke's, the benchmark's and the canary's reports draw PNGs in each host's worker: a play running one
    of those roles imports matplotlib at its start, in the parent (issue 40); another play does not."""
    from ansible_collections.specpilot.core.plugins.module_utils.report import plots

    class Role:
        def __init__(self, name):
            self.name = name

        def get_name(self):
            return self.name

    class Play:
        def __init__(self, *roles):
            self.roles = [Role(r) for r in roles]

        def get_roles(self):
            return self.roles

        def get_path(self):
            return ""

    monkeypatch.setattr(plots, "_LOADED", {})
    callback = preload.CallbackModule()
    try:
        callback.v2_playbook_on_play_start(Play("specpilot_guard"))
        assert plots._LOADED == {}  # the guard draws nothing: no matplotlib
        callback.v2_playbook_on_play_start(Play("specpilot_smoke"))
    finally:
        gc.unfreeze()
    assert plots._LOADED and plots._LOADED["plt"] is not None and "matplotlib.pyplot" in sys.modules
    assert preload.plots_for(Play()) is False and preload.plots_for(None) is False


def test_a_task_of_an_action_that_reads_pods_imports_the_client_api_once_in_the_parent_and_no_other_does():
    """The controller-side code's ``from kubernetes... import`` (CoreV1Api for pod logs, execs and Job runs: about
    0.5 s of CPU a worker with the client 37, three a service in smoke.yml, issue 40) is what the actions that run
    it name in WORKER_IMPORTS: when a task of one starts, the callback imports it in ansible-playbook's process and
    that task's workers import nothing of the client again. A playbook with no such task does not import it at
    its start (about 0.5 s of every ansible-playbook run)."""
    plugins = ROOT / "collections" / "ansible_collections" / "specpilot" / "core" / "plugins"
    imports = sorted(
        {
            line.strip()
            for folder in ("action", "plugin_utils", "callback", "lookup", "filter")
            for path in (plugins / folder).glob("*.py")
            for line in path.read_text().splitlines()
            if line.strip().startswith(("from kubernetes", "import kubernetes"))
        }
    )
    assert any("core_v1_api" in line for line in imports) and any("stream" in line for line in imports)
    script = (
        "import sys, types\n"
        "from ansible_collections.specpilot.core.plugins.callback import preload\n"
        "assert preload.preload() == [], preload.preload()\n"
        "task = lambda action: types.SimpleNamespace(action=action)\n"
        "print(preload.worker_imports(task('ansible.builtin.debug')), preload.worker_imports(task('specpilot.core.k8s_read')))\n"
        "print('kubernetes.client.api.core_v1_api' in sys.modules)\n"
        "print(preload.worker_imports(task('specpilot.core.pod_log')), preload.worker_imports(task('specpilot.core.pod_exec')))\n"
        "before = set(sys.modules)\n"
        + "".join(line + "\n" for line in imports)
        + "print(sorted(m for m in set(sys.modules) - before if m.startswith('kubernetes')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": "%s:%s" % (ROOT / "collections", ROOT / ".venv" / "collections"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "[] []",
        "False",
        "['kubernetes.client.api.core_v1_api'] []",  # kubernetes.stream is the client's already
        "[]",
    ], "imported again in each worker, or at every playbook's start: " + proc.stdout[:400]
    for action in ("pod_log", "pod_exec", "k8s_job", "k8s_job_wait", "cluster_probe"):
        source = (plugins / "action" / (action + ".py")).read_text()
        assert "WORKER_IMPORTS = k8s_api.CORE_V1_IMPORTS" in source, action
