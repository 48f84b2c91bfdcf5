"""AWX objects as code (playbooks/vars/awx/, applied by playbooks/awx_configure.yml): well-formed,
consistent, every template's playbook exists, every survey variable is a documented argument of a
role its playbook runs, and the configure playbook passes every data key to a real awx.awx option."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "playbooks" / "vars" / "awx"
CONFIGURE = ROOT / "playbooks" / "awx_configure.yml"
AWX_MODULES = ROOT / ".venv" / "collections" / "ansible_collections" / "awx" / "awx" / "plugins" / "modules"


class _Loader(yaml.SafeLoader):
    """YAML loader that reads Ansible's !unsafe tag as a plain string."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load(path: Path):
    return yaml.load(path.read_text(), Loader=_Loader)


DEFS: dict = {}
for _f in sorted(DATA.glob("*.yml")):
    DEFS.update(load(_f) or {})

TEMPLATES = {t["name"]: t for t in DEFS["controller_templates"]}
WORKFLOWS = {w["name"]: w for w in DEFS["controller_workflows"]}
# the templates that act on the cluster per service
MUTATING = {"specpilot canary", "specpilot deploy", "specpilot rollback", "specpilot benchmark", "specpilot guard",
            "specpilot monitoring", "specpilot tune"}
# issue 40: the templates a fleet runs, sliced across execution nodes
SLICED = {"specpilot guard", "specpilot smoke", "specpilot validate", "specpilot deploy", "specpilot rollback"}
# the templates that contact no cluster
CLUSTERLESS = {"specpilot validate", "specpilot fleet report"}
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def role_entry_points(path: Path) -> list[tuple[str, str]]:
    """(role, entry point) a playbook runs: play `roles:` (main) and include_role/import_role tasks (their
    tasks_from, default main), at any depth."""
    found: list[tuple[str, str]] = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "roles" and isinstance(value, list):
                    for r in value:
                        found.append((r if isinstance(r, str) else r.get("role") or r.get("name"), "main"))
                elif key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role",
                             "import_role") and isinstance(value, dict):
                    found.append((value.get("name"), value.get("tasks_from") or "main"))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(load(path))
    return [(r, e) for r, e in found if r]


def roles_of_playbook(path: Path) -> list[str]:
    """Roles a playbook runs: play `roles:` and include_role/import_role tasks (any depth)."""
    return list(dict.fromkeys(r for r, _ in role_entry_points(path)))


def role_arguments(role: str, entry: str = "main") -> dict | None:
    spec = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    if not spec.is_file():
        return None
    return load(spec)["argument_specs"][entry].get("options", {})


def survey_questions(obj: dict) -> list[dict]:
    return (obj.get("survey_spec") or {}).get("spec") or []


# ------------------------------------------------------------------ shape


def test_files_hold_only_infra_aap_configuration_variables_and_settings():
    known = {"controller_execution_environments", "controller_credential_types", "controller_credentials",
             "controller_projects", "controller_inventories", "controller_inventory_sources", "controller_templates",
             "controller_workflows", "controller_schedules"}
    for path in DATA.glob("*.yml"):
        for key in load(path):
            assert key in known or (path.name == "settings.yml" and key.startswith("specpilot_awx_")), (path, key)


def test_the_templates_the_issue_asks_for():
    playbooks = {t["playbook"] for t in TEMPLATES.values()}
    for name in ("validate", "deploy", "smoke", "rollback", "benchmark", "guard", "tune", "canary"):
        assert f"playbooks/{name}.yml" in playbooks


@pytest.mark.parametrize("name", sorted(TEMPLATES), ids=lambda n: n.split()[-1])
def test_template_playbook_exists(name):
    playbook = TEMPLATES[name]["playbook"]
    assert (ROOT / playbook).is_file(), f"{name}: {playbook} does not exist (yet)"


@pytest.mark.parametrize("name", sorted(TEMPLATES), ids=lambda n: n.split()[-1])
def test_survey_variables_are_documented_role_arguments(name):
    t = TEMPLATES[name]
    wanted = [q["variable"] for q in survey_questions(t)]
    playbook = ROOT / t["playbook"]
    assert playbook.is_file(), f"{name}: {t['playbook']} missing; survey variables pending: {wanted}"
    entries = role_entry_points(playbook)
    roles = [r for r, _ in entries]
    assert roles, f"{t['playbook']} runs no role"
    documented: dict = {}
    missing_roles = []
    for role, entry in entries:
        args = role_arguments(role, entry)
        if args is None:
            missing_roles.append(role)
        else:
            documented.update(args)
    undocumented = [v for v in wanted if v not in documented]
    assert not undocumented, (f"{name}: survey variables not in the argument_specs of {roles}"
                              f"{' (missing roles: %s)' % missing_roles if missing_roles else ''}: {undocumented}")
    for q in survey_questions(t):
        check_question_against_argument(name, q, documented[q["variable"]])


def check_question_against_argument(where: str, q: dict, arg: dict) -> None:
    typ = arg.get("type", "str")
    var = q["variable"]
    if typ == "bool":
        assert q["type"] == "multiplechoice" and set(q["choices"]) == {"false", "true"}, (where, var)
    elif typ == "int":
        assert q["type"] == "integer", (where, var)
    elif typ == "float":
        assert q["type"] in ("float", "integer"), (where, var)
    elif typ == "str" and arg.get("choices"):
        assert q["type"] == "multiplechoice" and set(q["choices"]) <= {str(c) for c in arg["choices"]}, (where, var)
    elif typ == "str":
        assert q["type"] in ("text", "textarea", "password", "multiplechoice"), (where, var)
    elif typ == "dict":
        # JSON text: the role reads it (from_json), and its argument validation accepts a JSON object string
        assert q["type"] == "textarea" and "JSON" in q["question_name"], (where, var)
    elif typ == "list" and arg.get("elements") in ("int", "str"):
        # AWX sends a multiselect answer as a list of the chosen strings (the role converts int elements)
        assert q["type"] == "multiselect", (where, var)
        if arg["elements"] == "int":
            assert all(c.isdigit() for c in q["choices"]), (where, var, q["choices"])
    else:
        pytest.fail(f"{where}: {var} is a {typ} argument; a survey cannot give one")
    # numeric thresholds: the survey offers the role's own default
    default = arg.get("default")
    if "default" in q and isinstance(default, (int, float)) and not isinstance(default, bool):
        assert float(q["default"]) == float(default), f"{where}: {var} survey default {q['default']} != role {default}"


@pytest.mark.parametrize("obj", list(TEMPLATES.values()) + list(WORKFLOWS.values()), ids=lambda o: o["name"])
def test_surveys_are_well_formed(obj):
    assert obj.get("survey_enabled") is True
    spec = obj["survey_spec"]
    assert spec["name"] and spec["description"] and spec["spec"]
    seen = set()
    for q in spec["spec"]:
        assert {"question_name", "question_description", "variable", "type", "required"} <= set(q), q
        assert q["type"] in SURVEY_TYPES
        assert re.fullmatch(r"[a-z][a-z0-9_]*", q["variable"]) and q["variable"] not in seen
        seen.add(q["variable"])
        if q["type"] == "multiplechoice":
            assert q["choices"] and all(isinstance(c, str) for c in q["choices"])
            assert "default" not in q or q["default"] in q["choices"], q
        if q["type"] in ("integer", "float"):
            assert "min" in q and "max" in q and q["min"] <= q["max"]
            if "default" in q:
                assert q["min"] <= q["default"] <= q["max"]
        if q["required"]:
            assert "default" in q, f"{q['variable']}: a required question needs a default (schedules use it)"


def test_no_overlapping_runs_where_they_must_not_overlap():
    for name, t in TEMPLATES.items():
        # the fleet report's play runs on localhost: a workflow's limit (services) would leave it no host
        assert t["ask_limit_on_launch"] is (name != "specpilot fleet report"), \
            f"{name}: the service limit is AWX's limit prompt"
        if name in MUTATING:
            assert t["allow_simultaneous"] is False, name
    for w in WORKFLOWS.values():
        assert w["allow_simultaneous"] is False and w["ask_limit_on_launch"] is True


def test_references_resolve():
    names = {kind: {o["name"] for o in DEFS[kind]} for kind in (
        "controller_projects", "controller_inventories", "controller_execution_environments", "controller_credentials",
        "controller_credential_types")}
    for cred in DEFS["controller_credentials"]:
        assert cred["credential_type"] in names["controller_credential_types"]
    for proj in DEFS["controller_projects"]:
        assert proj["default_environment"] in names["controller_execution_environments"]
    for src in DEFS["controller_inventory_sources"]:
        assert src["inventory"] in names["controller_inventories"]
        assert src["source_project"] in names["controller_projects"]
    for t in TEMPLATES.values():
        assert t["project"] in names["controller_projects"]
        assert t["inventory"] in names["controller_inventories"]
        assert t["execution_environment"] in names["controller_execution_environments"]
        assert set(t.get("credentials", [])) <= names["controller_credentials"]
        if t["name"] not in CLUSTERLESS:
            assert t.get("credentials"), f"{t['name']} needs the Kubernetes credential"


def test_inventory_source_points_at_a_project_inventory():
    settings = load(DATA / "settings.yml")
    path = ROOT / settings["specpilot_awx_inventory_source_path"]
    assert (path / "hosts.yml").is_file() or path.is_file()


def test_rollout_workflow():
    w = WORKFLOWS["specpilot rollout"]
    nodes = {n["identifier"]: n for n in w["simplified_workflow_nodes"]}
    assert set(nodes) == {"validate", "deploy", "smoke", "rollback-restore", "rollback-off", "fleet-report"}
    for node in nodes.values():
        assert node["unified_job_template"] in TEMPLATES
        for link in ("success_nodes", "failure_nodes", "always_nodes"):
            assert set(node.get(link, [])) <= set(nodes)
    edges = {(a, kind, b) for a, n in nodes.items() for kind in ("success_nodes", "failure_nodes", "always_nodes")
             for b in n.get(kind, [])}
    assert edges == {("validate", "success_nodes", "deploy"), ("deploy", "success_nodes", "smoke"),
                     ("deploy", "failure_nodes", "rollback-restore"), ("smoke", "failure_nodes", "rollback-off"),
                     ("smoke", "always_nodes", "fleet-report")}
    assert nodes["fleet-report"]["unified_job_template"] == "specpilot fleet report"
    assert nodes["validate"]["unified_job_template"] == "specpilot validate"
    assert nodes["deploy"]["unified_job_template"] == "specpilot deploy"
    assert nodes["smoke"]["unified_job_template"] == "specpilot smoke"
    assert {nodes[n]["extra_data"]["specpilot_rollback_mode"] for n in ("rollback-restore", "rollback-off")} == \
        {"restore", "off"}
    # AWX only accepts a node's extra_data for variables the template's survey asks for
    for node in nodes.values():
        asked = {q["variable"] for q in survey_questions(TEMPLATES[node["unified_job_template"]])}
        assert set(node.get("extra_data", {})) <= asked, node
    # the workflow's own survey: each variable is asked by one of its templates (and so documented)
    asked_by_nodes = {q["variable"] for n in nodes.values()
                      for q in survey_questions(TEMPLATES[n["unified_job_template"]])}
    assert {q["variable"] for q in survey_questions(w)} <= asked_by_nodes


def test_canary_workflow():
    """canary (an abort fails it, so nothing follows) -> a first guard reading, report only."""
    w = WORKFLOWS["specpilot canary rollout"]
    nodes = {n["identifier"]: n for n in w["simplified_workflow_nodes"]}
    assert set(nodes) == {"canary", "guard"}
    assert nodes["canary"]["unified_job_template"] == "specpilot canary"
    assert nodes["canary"]["success_nodes"] == ["guard"] and not nodes["canary"].get("failure_nodes")
    assert nodes["canary"]["extra_data"] == {"specpilot_canary_fail_on_abort": "true"}
    assert nodes["guard"]["unified_job_template"] == "specpilot guard"
    assert nodes["guard"]["extra_data"] == {"specpilot_guard_auto_rollback": "false"}
    for node in nodes.values():
        asked = {q["variable"] for q in survey_questions(TEMPLATES[node["unified_job_template"]])}
        assert set(node.get("extra_data", {})) <= asked, node
    canary = {q["variable"]: q for q in survey_questions(TEMPLATES["specpilot canary"])}
    for q in survey_questions(w):  # the workflow asks what the canary template asks, the same way
        assert q == canary[q["variable"]], q["variable"]
    assert {"specpilot_canary_steps", "specpilot_canary_window", "specpilot_canary_slo"} <= set(canary)


def test_schedules():
    by_name = {s["name"]: s for s in DEFS["controller_schedules"]}
    settings = load(DATA / "settings.yml")
    guard = by_name["specpilot guard hourly"]
    # issue 40: the sliced guard, then one fleet summary of every slice
    assert guard["unified_job_template"] == "specpilot guard fleet" and guard["enabled"] is True
    rrules = {"{{ specpilot_awx_guard_rrule }}": settings["specpilot_awx_guard_rrule"],
              "{{ specpilot_awx_smoke_rrule }}": settings["specpilot_awx_smoke_rrule"]}
    assert "FREQ=HOURLY;INTERVAL=1" in settings["specpilot_awx_guard_rrule"]
    for s in by_name.values():
        assert s["unified_job_template"] in TEMPLATES or s["unified_job_template"] in WORKFLOWS
        rrule = rrules.get(s["rrule"], s["rrule"])
        assert re.fullmatch(r"DTSTART:\d{8}T\d{6}Z RRULE:FREQ=(MINUTELY|HOURLY|DAILY|WEEKLY|MONTHLY)(;[A-Z]+=[A-Z0-9,]+)*",
                            rrule), rrule
        target = TEMPLATES.get(s["unified_job_template"]) or WORKFLOWS[s["unified_job_template"]]
        asked = {q["variable"] for q in survey_questions(target)}
        assert set(s.get("extra_data", {})) <= asked


def render_setting(name: str, **overrides):
    """A settings.yml value rendered as Ansible would (plain Jinja: its expressions use only builtin filters)."""
    import jinja2

    settings = dict(load(DATA / "settings.yml"), **overrides)
    value = settings[name]
    return jinja2.Environment().from_string(value).render(**settings) if isinstance(value, str) else value


@pytest.mark.parametrize("fleet, per_slice, most, slices", [(1, 50, 4, 1), (50, 50, 4, 1), (51, 50, 4, 2),
                                                            (200, 50, 4, 4), (1000, 50, 4, 4), (200, 25, 16, 8)])
def test_the_slice_count_is_sized_from_the_fleet(fleet, per_slice, most, slices):
    assert int(render_setting("specpilot_awx_job_slice_count", specpilot_awx_fleet_size=fleet,
                              specpilot_awx_services_per_slice=per_slice, specpilot_awx_max_slices=most)) == slices


def test_fleet_templates_are_sliced_with_their_instance_groups_and_the_workflows_merge_the_slices():
    """Issue 40: the guard, smoke, validate, deploy and rollback templates run as slices (a count sized in
    settings.yml, asked again at launch) on the instance groups of settings.yml; only the read-only ones run beside
    another job of the same template; a workflow node after each sliced guard or smoke merges the slices."""
    for name in SLICED:
        t = TEMPLATES[name]
        assert t["job_slice_count"] == "{{ specpilot_awx_job_slice_count }}", name
        assert t["ask_job_slice_count_on_launch"] is True, name
        assert t["instance_groups"] == "{{ specpilot_awx_instance_groups }}", name
    for name in set(TEMPLATES) - SLICED:
        assert "job_slice_count" not in TEMPLATES[name], f"{name} is not slice-safe (one service a run)"
    assert {n for n in TEMPLATES if TEMPLATES[n]["allow_simultaneous"]} == {
        "specpilot validate", "specpilot smoke", "specpilot fleet report"}
    fleet = TEMPLATES["specpilot fleet report"]
    assert fleet["playbook"] == "playbooks/fleet_report.yml" and not fleet.get("credentials")
    assert roles_of_playbook(ROOT / fleet["playbook"]) == ["specpilot_fleet"]
    merged_after = set()
    for w in WORKFLOWS.values():
        nodes = {n["identifier"]: n for n in w["simplified_workflow_nodes"]}
        for node in nodes.values():
            for child in node.get("always_nodes", []):
                if nodes[child]["unified_job_template"] == "specpilot fleet report":
                    merged_after.add(node["unified_job_template"])
    assert merged_after == {"specpilot guard", "specpilot smoke"}
    guard_fleet = {n["identifier"]: n for n in WORKFLOWS["specpilot guard fleet"]["simplified_workflow_nodes"]}
    assert guard_fleet["guard"]["always_nodes"] == ["fleet-report"]


def test_kubernetes_credential_injects_k8s_auth_and_no_kubeconfig():
    (ctype,) = DEFS["controller_credential_types"]
    fields = {f["id"]: f for f in ctype["inputs"]["fields"]}
    assert fields["bearer_token"]["secret"] is True
    env = ctype["injectors"]["env"]
    assert set(env) == {"K8S_AUTH_HOST", "K8S_AUTH_API_KEY", "K8S_AUTH_VERIFY_SSL", "K8S_AUTH_SSL_CA_CERT"}
    for template in list(env.values()) + list(ctype["injectors"].get("file", {}).values()):
        for ref in re.findall(r"\{[{%]\s*(?:if\s+)?([a-z_]+)", template):
            assert ref in fields or ref in ("tower", "endif"), f"injector uses {ref}, which is not an input"
    (cred,) = DEFS["controller_credentials"]
    assert set(cred["inputs"]) <= set(fields)
    assert "kubeconfig" not in json.dumps(DEFS).lower()
    # no role bakes a kubeconfig path in
    for defaults in ROOT.glob("roles/*/defaults/main.yml"):
        for key, value in (load(defaults) or {}).items():
            if "kubeconfig" in key:
                assert value in ("", None), f"{defaults}: {key} = {value!r}"


# ------------------------------------------------------------------ awx_configure.yml


def module_options(module: str) -> set[str]:
    path = AWX_MODULES / f"{module}.py"
    if not path.is_file():
        pytest.fail(f"awx.awx missing in .venv/collections: run `make collections` ({path})")
    doc = re.search(r"DOCUMENTATION = '''(.*?)'''", path.read_text(), re.S).group(1)
    options = set(yaml.safe_load(doc)["options"])
    # options every awx.awx module takes (doc fragment auth)
    return options | {"controller_host", "controller_username", "controller_password", "controller_oauthtoken",
                      "validate_certs", "request_timeout", "controller_config_file"}


def configure_tasks() -> list[dict]:
    (play,) = load(CONFIGURE)
    return play["tasks"]


def test_configure_passes_every_data_key_to_a_real_module_option():
    """No key of the data files is silently ignored, and every option the playbook sets exists."""
    ignored = {"organization"}  # used for lookups by some modules, passed where the module takes it
    for task in configure_tasks():
        module = next((k for k in task if k.startswith("awx.awx.")), None)
        if module is None:
            continue
        params = task[module]
        assert set(params) <= module_options(module.split(".")[-1]), (task["name"], set(params) - module_options(
            module.split(".")[-1]))
        loop = task.get("loop", "")
        var = re.search(r"(controller_[a-z_]+)", loop).group(1)
        text = yaml.safe_dump(params)
        used = set(re.findall(r"item(?:\.1)?\.([a-z_]+)", text))
        if "subelements" in loop:
            items = [n for w in DEFS[var] for n in w["simplified_workflow_nodes"]]
            keys = {k for n in items for k in n}
            if task["name"] == "Workflow nodes":
                keys -= {"success_nodes", "failure_nodes", "always_nodes"}
            else:
                keys -= {"extra_data"}
        else:
            keys = {k for item in DEFS[var] for k in item} - {"simplified_workflow_nodes"}
        assert keys - ignored <= used | ignored, (task["name"], sorted(keys - used - ignored))


def test_secrets_are_not_logged():
    for task in configure_tasks():
        if "awx.awx.credential" in task:
            assert task.get("no_log") is True
    assert "controller_oauthtoken" in yaml.safe_dump(load(CONFIGURE)[0]["module_defaults"])


def test_configure_playbook_syntax(tmp_path):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path))
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "--syntax-check", str(CONFIGURE)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_definitions_pass_yamllint():
    proc = subprocess.run([str(Path(sys.executable).with_name("yamllint")), "--strict", str(DATA), str(CONFIGURE)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------ run-time spec overrides

OVERRIDE_VARS = ("specpilot_override_method", "specpilot_override_num_speculative_tokens")


def validates_the_spec(template: dict) -> bool:
    """Whether the template's playbook runs a role that validates the spec: one that calls
    specpilot.core.spec_validate (only specpilot_validate does) or includes specpilot_validate for its plan."""
    for role in roles_of_playbook(ROOT / template["playbook"]):
        for path in (ROOT / "roles" / role / "tasks").rglob("*.yml"):
            text = path.read_text()
            if "specpilot.core.spec_validate" in text or re.search(r"name: specpilot_validate\b", text):
                return True
    return False


def test_rollout_workflow_asks_the_overrides_once_for_every_node():
    """The workflow's survey answers reach every node: each node that validates the spec (validate, deploy,
    smoke) asks the same questions, so the override is a documented argument of its roles and the nodes see one
    effective spec (specpilot.core.spec_validate applies it in each)."""
    w = WORKFLOWS["specpilot rollout"]
    asked = {q["variable"]: q for q in survey_questions(w)}
    assert set(OVERRIDE_VARS) <= set(asked)
    validating = set()
    for node in w["simplified_workflow_nodes"]:
        template = TEMPLATES[node["unified_job_template"]]
        assert not set(OVERRIDE_VARS) & set(node.get("extra_data", {})), node  # the workflow's answer, not a fixed one
        # rollback validates too (issue 34: its plan gives the name, namespace, mode and wait), but it takes the
        # speculative config off or restores the recorded revision: no override changes what it does
        if not validates_the_spec(template) or template["playbook"].endswith("rollback.yml"):
            continue
        validating.add(node["identifier"])
        theirs = {q["variable"]: q for q in survey_questions(template)}
        for var in OVERRIDE_VARS:
            assert var in theirs, f"{template['name']} validates the spec but does not ask {var}"
            for key in ("type", "choices", "min", "max", "default"):
                assert theirs[var].get(key) == asked[var].get(key), (template["name"], var, key)
    assert validating == {"validate", "deploy", "smoke"}


def test_override_questions_keep_by_default_and_offer_real_methods():
    from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
    from ansible_collections.specpilot.core.plugins.module_utils.service.spec_override import KEEP_METHOD

    newest = vp.all_profiles()[-1]["x-specpilot"]["methods"]
    for obj in list(TEMPLATES.values()) + list(WORKFLOWS.values()):
        questions = {q["variable"]: q for q in survey_questions(obj)}
        if "specpilot_override_method" not in questions:
            continue
        method = questions["specpilot_override_method"]
        assert method["type"] == "multiplechoice" and method["default"] in KEEP_METHOD
        assert set(method["choices"]) - set(KEEP_METHOD) <= set(newest), obj["name"]
        nst = questions["specpilot_override_num_speculative_tokens"]
        assert nst["type"] == "integer" and nst["default"] == 0 and nst["min"] == 0
