"""Project-wide conventions that lint cannot see."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "specpilot" / "core"
MODULES = sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir()) if (ROOT / "roles").is_dir() else []
# Run-wide variables that are no role's own: specpilot.core.spec_validate applies them wherever a role validates the
# spec, and the roles whose AWX surveys ask for them document them as arguments (unprefixed, on purpose).
SHARED_ARGUMENTS = {"specpilot_override_method", "specpilot_override_num_speculative_tokens"}
# module_utils split out of a big file since the move to packages (issue 34): new names, no flat route
SPLIT_SINCE = {
    "smoke_report",
    "smoke_acceptance",
    "smoke_checks",
    "vllm_log_rules",
    "vllm_log_config",
    "vllm_log_windows",
    "validate_schema",
    "validate_delivery",
    "validate_images",
    "validate_report",
    "vllm_keys",
    "vllm_profile_rules",
}


def test_top_level_layout():
    for name in (
        "playbooks",
        "roles",
        "inventories",
        "schemas",
        "collections",
        "molecule",
        "requirements.yml",
        "lab",
        "tests",
        "benchmarks",
        "Makefile",
        "ansible.cfg",
        "README.md",
        ".ci/run",
    ):
        assert (ROOT / name).exists(), name


def test_readme_quickstart_has_exactly_two_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    assert [line.strip() for line in block.strip().splitlines()] == ["make demo", "make test"]


def test_every_make_target_the_docs_name_is_a_target_of_the_makefile():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    named = {
        (doc, t)
        for doc in ("README.md", "CONTRIBUTING.md")
        for t in re.findall(r"\bmake ([a-z][a-z-]*)", (ROOT / doc).read_text())
    }
    assert {"demo", "test", "test-canary-real", "test-quiet"} <= {t for _, t in named}
    assert sorted((doc, t) for doc, t in named if t not in targets) == []


def test_ci_runs_make_test():
    lines = [
        ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert "make test" in lines


def _ansible_doc(*modules: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-doc")), "-j", *(f"specpilot.core.{m}" for m in modules)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def module_docs() -> dict:
    """``ansible-doc -j`` of every module in one run (one ansible-doc start, about 0.8 s of CPU, instead
    of one a module); empty when that run fails, and each module's test then runs it on its own module."""
    proc = _ansible_doc(*MODULES)
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


@pytest.mark.parametrize("module", MODULES)
def test_module_documented_like_kubernetes_core(module, module_docs):
    doc = module_docs.get(f"specpilot.core.{module}")
    if doc is None:  # the shared run failed or left it out: this module's own run says why
        proc = _ansible_doc(module)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)[f"specpilot.core.{module}"]
    assert doc["doc"]["short_description"]
    assert doc["doc"].get("version_added")
    for opt, spec in doc["doc"].get("options", {}).items():
        assert spec.get("description"), f"{module}: option {opt} has no description"
    assert doc["examples"].strip()
    assert doc["return"], f"{module}: RETURN is empty"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_has_argument_specs_and_readme(role):
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    assert "main" in specs["argument_specs"]
    readme = (role / "README.md").read_text()
    prefix = role.name + "_"
    for entry, spec in specs["argument_specs"].items():
        assert (
            entry == "main" or (role / "tasks" / f"{entry}.yml").is_file()
        ), f"{role.name}: no tasks/{entry}.yml"
        for var in spec.get("options", {}):
            assert (
                var.startswith(prefix) or var in SHARED_ARGUMENTS
            ), f"{role.name}: {var} lacks the role prefix"
            assert var in readme, f"{role.name}: {var} ({entry}) is not documented in README.md"
    defaults = role / "defaults" / "main.yml"
    if defaults.is_file():
        for var in yaml.safe_load(defaults.read_text()) or {}:
            assert var.startswith(prefix), f"{role.name}: default {var} lacks the role prefix"
            assert var in specs["argument_specs"]["main"].get(
                "options", {}
            ), f"{role.name}: {var} not in argument_specs"


def test_shared_arguments_are_the_collections_override_variables():
    """The unprefixed role arguments are exactly the variables spec_validate reads (spec.OVERRIDE_VARS)."""
    from ansible_collections.specpilot.core.plugins.module_utils.service.spec import (
        CONTROL_VARS,
        OVERRIDE_VARS,
    )

    assert SHARED_ARGUMENTS == set(OVERRIDE_VARS.values())
    assert SHARED_ARGUMENTS <= set(CONTROL_VARS)  # never mistaken for (misspelt) spec keys


ROLE_FILES = [p for role in ROLES for p in sorted(role.rglob("*.yml"))]


def test_no_role_touches_another_roles_private_variables():
    """A role's `__<role>_` variables are its own: no other role reads or sets them."""
    names = [role.name for role in ROLES]
    found = []
    for path in ROLE_FILES:
        owner = path.relative_to(ROOT / "roles").parts[0]
        text = path.read_text()
        found += [
            f"{path.relative_to(ROOT)}: __{name}_" for name in names if name != owner and f"__{name}_" in text
        ]
    assert found == []


def _tasks(node):
    """Every task mapping in a parsed task file or playbook (inside blocks, rescue, always and plays too)."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(node.get(key))


def test_only_the_validate_role_runs_spec_validate():
    """The validate role owns the plan (issue 34): every other role and playbook takes it from its caller or includes
    the role's entry point plan, and never runs specpilot.core.spec_validate itself."""
    files = sorted(ROOT.glob("roles/*/tasks/*.yml")) + sorted(ROOT.glob("playbooks/*.yml"))
    runs = {}
    for path in files:
        for task in _tasks(yaml.safe_load(path.read_text())):
            if {"specpilot.core.spec_validate", "spec_validate"} & set(task):
                runs.setdefault(str(path.relative_to(ROOT)), 0)
                runs[str(path.relative_to(ROOT))] += 1
    assert runs == {"roles/specpilot_validate/tasks/main.yml": 1, "roles/specpilot_validate/tasks/plan.yml": 1}


def test_roles_call_each_other_only_through_declared_entry_points():
    """include_role/import_role with tasks_from names an entry point of the called role's argument_specs."""
    calls = []
    for path in ROLE_FILES + sorted((ROOT / "playbooks").glob("*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                call = task.get(key) or {}
                if call.get("tasks_from"):
                    calls.append((path, call["name"], Path(call["tasks_from"]).stem))
    assert calls, "no role calls another role's entry point: the test looks at nothing"
    for path, name, entry in calls:
        specs = yaml.safe_load((ROOT / "roles" / name / "meta" / "argument_specs.yml").read_text())
        assert (
            entry in specs["argument_specs"]
        ), f"{path.relative_to(ROOT)}: {name} has no entry point {entry}"


def _tasks(node):
    """Every task-like mapping in a parsed tasks file or playbook, blocks and plays included."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(node.get(key))


def test_renamed_modules_keep_their_old_names_for_one_release(tmp_path):
    """meta/runtime.yml routes spec_monitoring (and spec_guard) to the new names with a deprecation warning."""
    book = tmp_path / "old_name.yml"
    book.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "old name",
                            "specpilot.core.spec_monitoring": {
                                "name": "svc",
                                "namespace": "ml",
                                "vllm_version": "0.32.0",
                            },
                            "register": "rendered",
                        },
                        {
                            "name": "check",
                            "ansible.builtin.assert": {
                                "that": ["rendered.prometheus_rule.kind == 'PrometheusRule'"]
                            },
                        },
                    ],
                }
            ]
        )
    )
    out = _local_playbook(book)
    assert "specpilot.core.spec_monitoring is now specpilot.core.monitoring" in out
    routing = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())["plugin_routing"]
    assert routing["modules"]["spec_guard"]["redirect"] == "specpilot.core.acceptance_guard"
    assert routing["module_utils"]["spec_guard"]["redirect"] == "specpilot.core.operate.acceptance_guard"
    assert (COLLECTION / "plugins" / "modules" / "acceptance_guard.py").is_file()


def test_module_utils_are_packaged_by_capability_and_the_flat_names_still_import(tmp_path):
    """module_utils/<capability>/<name>.py, one folder a capability (issue 17); the flat import path of each file
    is routed to its new one for one release (meta/runtime.yml plugin_routing.module_utils, with a deprecation
    warning), so a user's own module that imported specpilot.core's module_utils keeps working."""
    utils = COLLECTION / "plugins" / "module_utils"
    flat = sorted(p.stem for p in utils.glob("*.py"))
    assert flat == ["common", "fact_tasks"], "only the shared helpers stay flat: " + repr(flat)
    packaged = {p.stem: p.parent.name for p in utils.glob("*/*.py") if p.stem != "__init__"}
    assert len(packaged) > 40
    routing = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())["plugin_routing"][
        "module_utils"
    ]
    # every flat name of before the move (all but the modules added since) goes where its file is now
    moved = {
        name: package
        for name, package in packaged.items()
        if name
        not in ("files", "reports", "prometheus_api", "canary_prometheus", "bench_load", "preflight_rules", "plan", "live", "spec_flags",
                     "bench_schedule", "bench_schedule_report", "tables", "fleet", "canary_change", "canary_report",
                     "acceptance_record", "llmisvc", "rollback_llm", "smoke_schedule", "canary_means")
        and name not in SPLIT_SINCE
    }
    for name, package in moved.items():
        assert routing[name]["redirect"] == f"specpilot.core.{package}.{name}", name
        assert routing[name]["deprecation"]["removal_version"] == "1.0.0", name
    for name, entry in routing.items():
        target = entry["redirect"].split(".", 2)[2].replace(".", "/")
        assert (utils / target).with_suffix(".py").is_file(), (name, entry["redirect"])
    for package in set(packaged.values()):
        assert (utils / package / "__init__.py").read_text() == "", package
    library = tmp_path / "library"
    library.mkdir()
    (library / "old_import.py").write_text(
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible_collections.specpilot.core.plugins.module_utils.spec import assemble_from_vars\n"
        # issue 34: deploy logic moved from k8s/ to deploy/
        "from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_state import decide\n"
        "AnsibleModule(argument_spec={}).exit_json(changed=False, found=callable(assemble_from_vars) and callable(decide))\n"
    )
    book = tmp_path / "old_import.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - old_import: {}\n      register: r\n"
        "    - ansible.builtin.assert: {that: [r.found]}\n"
    )
    out = _local_playbook(book, ANSIBLE_LIBRARY=str(library))
    assert "module_utils spec is now service.spec" in out
    assert "module_utils k8s.deploy_state is now deploy.deploy_state" in out


def _local_playbook(book, **env):
    """ansible-playbook BOOK on localhost with the project's ansible.cfg; its output (it must succeed)."""
    run = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local"]
        + ["-e", "ansible_python_interpreter=" + sys.executable, str(book)],
        cwd=ROOT,
        env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout + run.stderr


MAX_FUNCTION_LINES = 120


def test_no_collection_function_is_longer_than_a_reader_can_hold():
    """Every Python function of the collection fits in MAX_FUNCTION_LINES lines (CONTRIBUTING.md)."""
    import ast

    plugins = COLLECTION / "plugins"
    too_long = []
    for path in sorted(plugins.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    where = "%s:%d" % (path.relative_to(ROOT), node.lineno)
                    too_long.append("%s %s (%d lines)" % (where, node.name, lines))
    assert not too_long, "split these functions:\n" + "\n".join(too_long)


MAX_JINJA_CHARS = 200
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)


def test_no_jinja_expression_is_a_program():
    """Decisions in Python, wiring in YAML (issue 17): no Jinja expression in the roles and playbooks longer than
    about 200 characters (whitespace collapsed). A longer one is a decision: a filter or module with a unit test,
    or smaller named steps (task vars)."""
    long = []
    for path in sorted([*(ROOT / "roles").rglob("*.yml"), *(ROOT / "playbooks").rglob("*.yml")]):
        text = path.read_text()
        for m in JINJA.finditer(text):
            expr = " ".join(m.group(0).split())
            if len(expr) > MAX_JINJA_CHARS:
                line = text[: m.start()].count("\n") + 1
                long.append(f"{path.relative_to(ROOT)}:{line} ({len(expr)} chars): {expr[:80]}...")
    assert not long, "\n".join(long)


def test_the_contributing_map_names_files_that_exist():
    """CONTRIBUTING.md's map of one service's path through the code stays true: every file it names exists
    (MU/ is the collection's module_utils; action/, filter/, plugin_utils/ its plugins)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    plugins = COLLECTION / "plugins"
    bases = {
        "MU/": plugins / "module_utils",
        "action/": plugins / "action",
        "filter/": plugins / "filter",
        "plugin_utils/": plugins / "plugin_utils",
        "roles/": ROOT / "roles",
        "playbooks/": ROOT / "playbooks",
    }
    named = set(
        re.findall(
            r"(?<![\w/.])((?:MU|action|filter|plugin_utils|roles|playbooks)/[\w./-]+\.(?:py|yml))", text
        )
    )
    assert len(named) > 40
    missing = [
        n
        for n in sorted(named)
        if not next(b / n[len(k) :] for k, b in bases.items() if n.startswith(k)).is_file()
    ]
    assert not missing, missing
