"""One connection for every role (issue 18, item 3), statically: the action group specpilot.core.k8s holds the
modules that talk to Kubernetes and each takes all of kubernetes.core's connection options (issue 36: its
k8s_auth_options); every playbook that reaches a cluster sets the same module_defaults for group/kubernetes.core.k8s and group/specpilot.core.k8s from the
specpilot_k8s_* variables; no task of a role or playbook names a connection option itself. The run through
the lab with the kubeconfig only as a variable: tests/lab/test_rbac_least_privilege_fake.py."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
import yaml
from test_project_layout import _tasks

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "specpilot" / "core"
# all of kubernetes.core's connection options (its doc fragment k8s_auth_options), each from one variable
CONNECTION = (
    "kubeconfig",
    "context",
    "host",
    "api_key",
    "validate_certs",
    "ca_cert",
    "username",
    "password",
    "client_cert",
    "client_key",
    "proxy",
    "no_proxy",
    "proxy_headers",
    "persist_config",
    "impersonate_user",
    "impersonate_groups",
)
VARIABLES = {option: "specpilot_k8s_" + option for option in CONNECTION}
BOOLEANS = ("validate_certs", "persist_config")  # false is a value: default(omit), not default(omit, true)
# the playbooks that never contact a cluster
# validate.yml reads the cluster only with specpilot_validate_live (it has the connection for that)
OFFLINE_PLAYBOOKS = {"awx_configure.yml", "fleet_report.yml"}
PLAYBOOKS = sorted(p for p in (ROOT / "playbooks").glob("*.yml") if p.name not in OFFLINE_PLAYBOOKS)
GROUP = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())["action_groups"]["k8s"]


def _doc(module: str) -> dict:
    text = (COLLECTION / "plugins" / "modules" / f"{module}.py").read_text()
    return yaml.safe_load(text.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])


def test_the_group_is_every_module_with_the_connection_options():
    modules = sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py"))
    documented = [
        m for m in modules if "specpilot.core.k8s_auth" in _doc(m).get("extends_documentation_fragment", [])
    ]
    assert [
        m for m in documented if "kubernetes.core.k8s_auth_options" not in _doc(m)["extends_documentation_fragment"]
    ] == []
    assert sorted(GROUP) == documented
    assert set(documented) >= {
        "crd_validate",
        "deploy_state",
        "k8s_job_wait",
        "kserve_detect",
        "rollout_wait",
    }


def _kubernetes_core(path):
    """A file of the installed kubernetes.core (.venv/collections, requirements.yml), loaded as a module."""
    file = ROOT / ".venv" / "collections" / "ansible_collections" / "kubernetes" / "core" / "plugins" / path
    spec = importlib.util.spec_from_file_location("kubernetes_core_" + file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_connection_options_are_kubernetes_cores():
    """The group's options are kubernetes.core's, all of them, as its doc fragment documents and its modules take
    them (module_utils/args_common.py AUTH_ARG_SPEC); the modules document them with that fragment."""
    from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import K8S_CONNECTION
    from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import AUTH_KEYS

    AUTH_ARG_SPEC = _kubernetes_core("module_utils/args_common.py").AUTH_ARG_SPEC
    fragment = _kubernetes_core("doc_fragments/k8s_auth_options.py").ModuleDocFragment
    documented = yaml.safe_load(fragment.DOCUMENTATION)["options"]
    assert set(documented) == set(AUTH_ARG_SPEC) == set(K8S_CONNECTION) == set(AUTH_KEYS) == set(CONNECTION)
    assert {"proxy", "client_cert", "client_key", "no_proxy", "impersonate_user"} <= set(documented)
    for option, spec in AUTH_ARG_SPEC.items():
        ours = K8S_CONNECTION[option]
        assert ours.get("type", "str") == spec.get("type", "str") == documented[option].get("type", "str"), option
        assert ours.get("aliases", []) == spec.get("aliases", []) == documented[option].get("aliases", []), option
        assert ours.get("elements") == spec.get("elements"), option
    assert K8S_CONNECTION["proxy_headers"]["options"] == AUTH_ARG_SPEC["proxy_headers"]["options"]
    assert all(K8S_CONNECTION[k].get("no_log") for k in ("api_key", "password"))


@pytest.mark.parametrize("module", GROUP)
def test_each_module_of_the_group_takes_the_connection_options(module):
    action = importlib.import_module(f"ansible_collections.specpilot.core.plugins.action.{module}")
    spec = action.ActionModule.ARGUMENT_SPEC
    assert set(CONNECTION) <= set(spec), module
    assert spec["api_key"].get("no_log") is True
    assert "kubeconfig" not in _doc(module).get("options", {})  # documented once, by the fragment


def _expected_defaults() -> dict:
    expected = {
        option: "{{ %s | default(omit%s) }}" % (var, "" if option in BOOLEANS else ", true")
        for option, var in VARIABLES.items()
    }
    for option in ("kubeconfig", "context"):  # the roles' old names, deprecated (removed in 0.3.0)
        expected[option] = (
            "{{ specpilot_k8s_%s | default(specpilot_deploy_%s | default(specpilot_rollback_%s"
            " | default(omit, true), true), true) }}" % (option, option, option)
        )
    return expected


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: p.name)
def test_every_play_sets_the_one_connection(playbook):
    for play in yaml.safe_load(playbook.read_text()):
        if "import_playbook" in play:
            continue
        defaults = play.get("module_defaults") or {}
        assert defaults.get("group/kubernetes.core.k8s") == _expected_defaults(), play["name"]
        assert defaults.get("group/specpilot.core.k8s") == _expected_defaults(), play["name"]


@pytest.mark.parametrize("name", ["benchmark.yml", "tune.yml"])
def test_the_benchmark_playbooks_give_the_load_the_connection_that_renews_the_twin_lock(name):
    """vllm_load is not in the group (its validate_certs is the engine's): its lock_connection is set apart."""
    for play in yaml.safe_load((ROOT / "playbooks" / name).read_text()):
        defaults = play.get("module_defaults") or {}
        assert defaults.get("specpilot.core.vllm_load") == {"lock_connection": _expected_defaults()}, play[
            "name"
        ]


def _k8s_action(task: dict) -> str | None:
    for key in task:
        if key.startswith("kubernetes.core.") or key.removeprefix("specpilot.core.") in GROUP and "." in key:
            return key
    return None


def test_the_fleet_report_reaches_no_cluster():
    """fleet_report.yml is offline (OFFLINE_PLAYBOOKS): it merges the slices' set_stats on localhost, and its
    role calls no module of the connection group, so it needs no connection."""
    (play,) = yaml.safe_load((ROOT / "playbooks" / "fleet_report.yml").read_text())
    assert play["hosts"] == "localhost" and play["connection"] == "local"
    roles = [r["role"] if isinstance(r, dict) else r for r in play["roles"]]
    for role in roles:
        for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml")):
            assert [_k8s_action(t) for t in _tasks(yaml.safe_load(path.read_text())) if _k8s_action(t)] == [], path


def test_no_task_names_a_connection_option():
    files = sorted((ROOT / "roles").glob("*/tasks/*.yml")) + sorted((ROOT / "playbooks").glob("*.yml"))
    found = []
    for path in files:
        for task in _tasks(yaml.safe_load(path.read_text())):
            action = _k8s_action(task)
            args = task.get(action) if action else None
            if isinstance(args, dict):
                found += [
                    f"{path.relative_to(ROOT)}: {task.get('name')}: {k}" for k in CONNECTION if k in args
                ]
            for key in ("ansible.builtin.command", "ansible.builtin.shell"):
                text = str(task.get(key) or "")
                if "kubectl" in text and "specpilot_k8s_kubeconfig" not in text:
                    found.append(
                        f"{path.relative_to(ROOT)}: {task.get('name')}: kubectl without the kubeconfig"
                    )
    assert found == []


def test_the_variables_are_documented():
    readme = (ROOT / "README.md").read_text()
    for var in VARIABLES.values():
        assert var in readme, var
        for inventory in ("lab", "example"):
            assert (
                var
                in (ROOT / "inventories" / inventory / "group_vars" / "specpilot_services.yml").read_text()
            )
