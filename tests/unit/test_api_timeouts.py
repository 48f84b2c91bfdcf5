"""Every kubernetes.core task of the roles and playbooks has a bounded timeout (issue 19, "no wedged services").

kubernetes.core passes the kubernetes client no request timeout: a stalled API server hangs such a task for
ever. The task keyword ``timeout`` bounds it: ``"{{ specpilot_<role>_api_timeout | int }}"`` for a plain call
(each attempt of an ``until`` loop, each item of a loop, gets it anew), and for a task that waits itself
(``wait: true``) its ``wait_timeout`` plus that margin, never less than its own wait.
The stalled API itself: tests/emulator/test_api_timeout_stall.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from test_project_layout import _tasks

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
TASK_FILES = sorted(
    p for d in ("tasks", "handlers") for p in ROLES.glob(f"*/{d}/**/*.yml")
) + sorted((ROOT / "playbooks").glob("*.yml"))
VARIABLE = re.compile(r"\b(?:__)?specpilot_\w+")
NUMBER = re.compile(r"\b\d+\b")


def _waits(args) -> bool:
    wait = args.get("wait", False) if isinstance(args, dict) else False
    return wait not in (False, None, "false", "False", "no", 0)


def _wait_terms(wait_timeout) -> list[str]:
    """What the timeout must mention to cover the wait: its variables, else its literal seconds."""
    text = str(wait_timeout)
    return VARIABLE.findall(text) or NUMBER.findall(text) or [text]


def timeout_problems(where: str, data, api_var: str) -> tuple[list[str], int]:
    """(problems, kubernetes.core tasks seen) of one parsed tasks file or playbook."""
    problems, seen = [], 0
    for task in _tasks(data):
        module = next((k for k in task if str(k).startswith("kubernetes.core.")), None)
        if module is None:
            continue
        seen += 1
        label = f"{where}: {task.get('name', module)!r} ({module})"
        timeout = task.get("timeout")
        if timeout in (None, "", 0):
            problems.append(f"{label} has no timeout: (a stalled API server would hang it)")
            continue
        text = str(timeout)
        if api_var not in text:
            problems.append(f"{label}: its timeout {text!r} does not use {api_var}")
        args = task[module]
        if not _waits(args):
            continue
        if args.get("wait_timeout") is None:
            problems.append(
                f"{label} waits with kubernetes.core's default wait_timeout: set it, and the timeout to cover it"
            )
            continue
        missing = [t for t in _wait_terms(args["wait_timeout"]) if not re.search(rf"\b{re.escape(t)}\b", text)]
        if missing:
            problems.append(
                f"{label} waits up to {args['wait_timeout']!r}, but its timeout {text!r} does not cover it "
                f"(it lacks {', '.join(missing)})"
            )
    return problems, seen


def _api_var(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return f"{rel.parts[1]}_api_timeout" if rel.parts[0] == "roles" else "_api_timeout"


def test_every_kubernetes_core_task_has_a_bounded_timeout():
    problems, seen = [], 0
    for path in TASK_FILES:
        found, count = timeout_problems(str(path.relative_to(ROOT)), yaml.safe_load(path.read_text()), _api_var(path))
        problems += found
        seen += count
    # 26 when written (the plain reads go through specpilot.core.k8s_read, bounded by its request_timeout); 13 since
    # every Job's create, wait and delete went to specpilot.core.k8s_job (issue 34's one Job runner)
    assert seen >= 10, f"only {seen} kubernetes.core tasks found: the test looks at too little"
    assert problems == []


def test_each_role_defines_the_timeout_its_tasks_use():
    """The variable is a public default of the role (argument_specs and README: test_project_layout)."""
    for role in sorted(p for p in ROLES.iterdir() if p.is_dir()):
        uses = any("kubernetes.core." in p.read_text() for p in role.glob("tasks/**/*.yml"))
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) if uses else {}
        if uses:
            assert defaults.get(f"{role.name}_api_timeout") == 120, f"{role.name}: no {role.name}_api_timeout: 120"


SYNTHETIC = """
- name: Read without a timeout
  kubernetes.core.k8s_info: {kind: Pod}
- name: A block
  block:
    - name: Read with a timeout
      kubernetes.core.k8s_info: {kind: Pod}
      timeout: "{{ specpilot_x_api_timeout | int }}"
    - name: Wait past the timeout
      kubernetes.core.k8s: {state: absent, kind: Job, name: j, wait: true, wait_timeout: "{{ specpilot_x_wait }}"}
      timeout: "{{ specpilot_x_api_timeout | int }}"
  rescue:
    - name: Wait with the default wait_timeout
      kubernetes.core.k8s: {state: absent, kind: Job, name: j, wait: true}
      timeout: "{{ 120 + specpilot_x_api_timeout | int }}"
  always:
    - name: Wait 300 s, timeout 120 + margin
      kubernetes.core.k8s: {state: absent, kind: Job, name: j, wait: true, wait_timeout: 300}
      timeout: "{{ 120 + specpilot_x_api_timeout | int }}"
    - name: Wait covered
      kubernetes.core.k8s: {state: absent, kind: Job, name: j, wait: true, wait_timeout: "{{ specpilot_x_wait | int }}"}
      timeout: "{{ specpilot_x_wait | int + specpilot_x_api_timeout | int }}"
    - name: A timeout without the variable
      kubernetes.core.k8s_log: {name: p}
      timeout: 60
    - name: Not Kubernetes
      ansible.builtin.debug: {msg: hi}
"""


def test_the_check_fails_naming_file_and_task():
    """The check above can fail: a synthetic tasks file, every kind of miss nested in block/rescue/always."""
    problems, seen = timeout_problems("synthetic.yml", yaml.safe_load(SYNTHETIC), "specpilot_x_api_timeout")
    assert seen == 7
    assert [p.split(" (kubernetes")[0] for p in problems] == [
        "synthetic.yml: 'Read without a timeout'",
        "synthetic.yml: 'Wait past the timeout'",
        "synthetic.yml: 'Wait with the default wait_timeout'",
        "synthetic.yml: 'Wait 300 s, timeout 120 + margin'",
        "synthetic.yml: 'A timeout without the variable'",
    ]
    assert "has no timeout" in problems[0]
    assert "lacks specpilot_x_wait" in problems[1]
    assert "default wait_timeout" in problems[2]
    assert "lacks 300" in problems[3]
    assert "does not use specpilot_x_api_timeout" in problems[4]
