"""The collection's Python is layered: no import cycle between module_utils packages (issue 34).

Each package of module_utils (``service/``, ``deploy/``, ``staging/``, ...; the flat ``common.py`` and
``fact_tasks.py`` count as one each) is a node; an import of another package's file, anywhere in a file
(also inside a function), is an edge. The graph must have no cycle: a package that needs one above it
takes what it needs as an argument instead (``staging/pvc_staging.py`` ``build_plan(..., served_of=)``).
module_utils never imports plugin_utils nor a Kubernetes client (modules run module_utils in their own
process; the clients are plugin_utils'), and plugin_utils never imports the action or filter plugins."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "collections" / "ansible_collections" / "specpilot" / "core" / "plugins"
PREFIX = "ansible_collections.specpilot.core.plugins."


def imported_modules(source):
    """Every absolute module path ``source`` imports (``from X import a, b`` gives X.a and X.b: a, b may
    be modules of package X)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update("%s.%s" % (node.module, alias.name) for alias in node.names)
    return out


def package_graph(module_utils):
    """{package: {packages it imports}} of a module_utils folder: its sub-folders and its flat files."""
    prefix = PREFIX + "module_utils."
    graph = {}
    for path in sorted(module_utils.rglob("*.py")):
        rel = path.relative_to(module_utils)
        package = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if package == "__init__":
            continue
        edges = graph.setdefault(package, set())
        for name in imported_modules(path.read_text(encoding="utf-8")):
            if name.startswith(prefix):
                target = name[len(prefix) :].split(".")[0]
                if target != package and (
                    (module_utils / target).is_dir() or (module_utils / (target + ".py")).is_file()
                ):
                    edges.add(target)
    return graph


def find_cycle(graph):
    """One cycle of ``graph`` as a list of nodes (first == last), or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_between_module_utils_packages():
    graph = package_graph(PLUGINS / "module_utils")
    assert {"service", "deploy", "k8s", "staging", "benchmark", "engine", "operate"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between module_utils packages: " + " -> ".join(cycle)


def test_deploy_logic_has_its_own_package_and_k8s_only_talks_to_kubernetes():
    """module_utils/k8s is the Kubernetes layer (connection arguments, retries, Job watching, the lock):
    it imports only the shared helpers; the deploy decisions live in module_utils/deploy."""
    graph = package_graph(PLUGINS / "module_utils")
    assert graph["k8s"] <= {"common"}, graph["k8s"]
    assert {p.stem for p in (PLUGINS / "module_utils" / "deploy").glob("deploy_*.py")} >= {
        "deploy_state",
        "deploy_rollout",
        "deploy_diagnose",
        "deploy_kserve",
    }


def test_module_utils_never_import_controller_plugins():
    for path in sorted((PLUGINS / "module_utils").rglob("*.py")):
        bad = [
            name
            for name in imported_modules(path.read_text(encoding="utf-8"))
            if (name.startswith(PREFIX) and not name.startswith(PREFIX + "module_utils"))
            or name.split(".")[0] == "kubernetes"
            or name.startswith("ansible_collections.kubernetes")
        ]
        # the clients that talk to the API live in plugin_utils (k8s_reader, k8s_api, lease_client, job_runner)
        assert not bad, "%s imports %s (module_utils run inside modules)" % (path.relative_to(PLUGINS), bad)
    for path in sorted((PLUGINS / "plugin_utils").glob("*.py")):
        bad = [
            name
            for name in imported_modules(path.read_text(encoding="utf-8"))
            if name.startswith((PREFIX + "action", PREFIX + "filter", PREFIX + "modules"))
        ]
        assert not bad, "%s imports %s" % (path.relative_to(PLUGINS), bad)


def _write(tree, files):
    for rel, text in files.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    "files, cycle, back",
    [
        (  # a -> b -> a through a function-level import
            {
                "a/__init__.py": "",
                "a/one.py": "from %smodule_utils.b import two\n" % PREFIX,
                "b/__init__.py": "",
                "b/two.py": "def f():\n    from %smodule_utils.a.one import x\n" % PREFIX,
            },
            ["a", "b", "a"],
            "b/two.py",
        ),
        (  # a -> b -> flat c -> a, with "import X" and "from package import module"
            {
                "a/__init__.py": "",
                "a/one.py": "import %smodule_utils.b.two\n" % PREFIX,
                "b/__init__.py": "",
                "b/two.py": "from %smodule_utils import c\n" % PREFIX,
                "c.py": "from %smodule_utils.a import one as o\n" % PREFIX,
            },
            ["a", "b", "c", "a"],
            "c.py",
        ),
    ],
)
def test_the_check_finds_a_constructed_cycle(tmp_path, files, cycle, back):
    """The graph check is real: a cycle written into a module_utils tree is found, and the same tree
    with the back edge removed passes."""
    _write(tmp_path, files)
    graph = package_graph(tmp_path)
    assert find_cycle(graph) == cycle
    (tmp_path / back).write_text("import json\n")
    assert find_cycle(package_graph(tmp_path)) is None
