"""playbooks/awx_configure.yml run for real, with the awx.awx modules, against a stand-in of the AWX
API (fake_awx) that makes AWX's own checks: every object is created as the data files say, secrets
are not logged, and a second run changes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fake_awx

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = ROOT / "playbooks" / "awx_configure.yml"
SECRET = "k8s-bearer-token-not-for-logs"
RECAP = re.compile(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def awx():
    server = fake_awx.FakeAWX()
    yield server
    server.close()


def configure(awx, tmp_path, *args):
    # The stand-in speaks plain HTTP, yet awx.awx's modules build an SSL context for every request, and
    # each one loads the system's CA bundle (ssl.create_default_context: about 20 ms, a fifth of this
    # test's CPU). An empty bundle makes that cheap; no TLS is spoken here, so nothing else changes.
    (tmp_path / "no-cas.pem").write_text("")
    env = dict(os.environ)
    for key in list(env):
        if key.startswith(("CONTROLLER_", "TOWER_", "K8S_AUTH_", "SPECPILOT_AWX_")):
            env.pop(key)
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_NOCOLOR="1", CONTROLLER_HOST=awx.url, CONTROLLER_OAUTH_TOKEN=fake_awx.TOKEN,
               CONTROLLER_VERIFY_SSL="false", SPECPILOT_AWX_SCM_URL="https://git.example.com/ml/specpilot.git",
               SPECPILOT_AWX_EE_IMAGE="registry.example.com/ml/specpilot-ee:1.0",
               K8S_AUTH_HOST="https://api.cluster.example.com:6443", K8S_AUTH_API_KEY=SECRET,
               SSL_CERT_FILE=str(tmp_path / "no-cas.pem"))
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), str(PLAYBOOK), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


FLEET = ("-e", '{"specpilot_awx_fleet_size": 200, "specpilot_awx_instance_groups": ["gpu-east"]}')


def test_configure_creates_everything_then_changes_nothing(awx, tmp_path):
    east = awx._create("instance_groups", {"name": "gpu-east"})  # AWX's instance groups exist before (operators)
    first = configure(awx, tmp_path, *FLEET)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    assert awx.authorized
    assert SECRET not in first.stdout + first.stderr

    ee = awx.find("execution_environments", name="specpilot-ee")
    assert ee["image"] == "registry.example.com/ml/specpilot-ee:1.0"
    ctype = awx.find("credential_types", name="specpilot Kubernetes bearer token")
    assert ctype["kind"] == "cloud"
    # the injector templates reach AWX as written (Ansible did not render them)
    assert ctype["injectors"]["env"]["K8S_AUTH_API_KEY"] == "{{ bearer_token }}"
    cred = awx.find("credentials", name="specpilot kubernetes")
    assert cred["credential_type"] == ctype["id"]
    assert cred["inputs"] == {"host": "https://api.cluster.example.com:6443", "bearer_token": SECRET,
                              "verify_ssl": True, "ssl_ca_cert": ""}
    project = awx.find("projects", name="specpilot")
    assert project["scm_url"] == "https://git.example.com/ml/specpilot.git" and project["default_environment"] == ee["id"]
    inventory = awx.find("inventories", name="specpilot services")
    source = awx.find("inventory_sources", name="specpilot services from the project")
    assert (source["inventory"], source["source_project"], source["source_path"]) == \
        (inventory["id"], project["id"], "inventories/example")

    templates = {t["name"]: t for t in awx.objects("job_templates")}
    assert set(templates) == {"specpilot validate", "specpilot deploy", "specpilot smoke", "specpilot rollback",
                              "specpilot benchmark", "specpilot tune", "specpilot canary", "specpilot guard",
                              "specpilot monitoring", "specpilot fleet report"}
    # issue 40: a fleet of 200 runs the fleet's templates as 4 slices, on the instance group near its cluster
    for name in ("specpilot guard", "specpilot smoke", "specpilot validate", "specpilot deploy", "specpilot rollback"):
        assert templates[name]["job_slice_count"] == 4 and templates[name]["ask_job_slice_count_on_launch"] is True
        assert [g["id"] for g in awx.associated("job_templates", templates[name]["id"], "instance_groups")] == \
            [east["id"]], name
    assert templates["specpilot canary"].get("job_slice_count", 1) == 1
    tune = awx.survey("job_templates", templates["specpilot tune"]["id"])
    assert {q["variable"]: q["type"] for q in tune["spec"]}["specpilot_benchmark_tune_num_speculative_tokens"] == "multiselect"
    guard = templates["specpilot guard"]
    assert guard["playbook"] == "playbooks/guard.yml" and guard["allow_simultaneous"] is False
    assert guard["ask_limit_on_launch"] is True and guard["survey_enabled"] is True
    assert [c["id"] for c in awx.associated("job_templates", guard["id"], "credentials")] == [cred["id"]]
    assert awx.associated("job_templates", templates["specpilot validate"]["id"], "credentials") == []
    survey = awx.survey("job_templates", guard["id"])
    assert [q["variable"] for q in survey["spec"]][:3] == [
        "specpilot_guard_auto_rollback", "specpilot_guard_min_acceptance_rate", "specpilot_guard_consecutive_readings"]

    wf = awx.find("workflow_job_templates", name="specpilot rollout")
    assert wf["allow_simultaneous"] is False and awx.survey("workflow_job_templates", wf["id"])["spec"]
    all_nodes = awx.objects("workflow_job_template_nodes")
    nodes = {n["identifier"]: n for n in all_nodes if n["workflow_job_template"] == wf["id"]}
    ujt = {v["id"]: v["name"] for c in fake_awx.UNIFIED for v in awx.objects(c)}
    assert {i: ujt[n["unified_job_template"]] for i, n in nodes.items()} == {
        "validate": "specpilot validate", "deploy": "specpilot deploy", "smoke": "specpilot smoke",
        "rollback-restore": "specpilot rollback", "rollback-off": "specpilot rollback",
        "fleet-report": "specpilot fleet report"}

    def links(identifier, kind):
        return [n["identifier"] for n in awx.associated("workflow_job_template_nodes", nodes[identifier]["id"], kind)]

    assert links("validate", "success_nodes") == ["deploy"]
    assert links("deploy", "success_nodes") == ["smoke"] and links("deploy", "failure_nodes") == ["rollback-restore"]
    assert links("smoke", "failure_nodes") == ["rollback-off"] and links("smoke", "success_nodes") == []
    assert nodes["rollback-off"]["extra_data"] == {"specpilot_rollback_mode": "off"}
    canary_wf = awx.find("workflow_job_templates", name="specpilot canary rollout")
    canary_nodes = {n["identifier"]: n for n in all_nodes if n["workflow_job_template"] == canary_wf["id"]}
    assert {i: ujt[n["unified_job_template"]] for i, n in canary_nodes.items()} == {
        "canary": "specpilot canary", "guard": "specpilot guard"}
    assert [n["identifier"] for n in awx.associated(
        "workflow_job_template_nodes", canary_nodes["canary"]["id"], "success_nodes")] == ["guard"]

    assert links("smoke", "always_nodes") == ["fleet-report"]
    guard_wf = awx.find("workflow_job_templates", name="specpilot guard fleet")
    guard_nodes = {n["identifier"]: n for n in all_nodes if n["workflow_job_template"] == guard_wf["id"]}
    assert {i: ujt[n["unified_job_template"]] for i, n in guard_nodes.items()} == {
        "guard": "specpilot guard", "fleet-report": "specpilot fleet report"}
    assert [n["identifier"] for n in awx.associated(
        "workflow_job_template_nodes", guard_nodes["guard"]["id"], "always_nodes")] == ["fleet-report"]

    schedule = awx.find("schedules", name="specpilot guard hourly")
    assert schedule["unified_job_template"] == guard_wf["id"]
    assert schedule["rrule"] == "DTSTART:20260101T000000Z RRULE:FREQ=HOURLY;INTERVAL=1"

    writes = len([r for r in awx.requests if r[0] != "GET"])
    second = configure(awx, tmp_path, *FLEET)
    assert second.returncode == 0, second.stdout[-4000:]
    ok, changed, _unreachable, failed = map(int, RECAP.search(second.stdout).groups())
    assert (changed, failed) == (0, 0), second.stdout[-4000:]
    assert len([r for r in awx.requests if r[0] != "GET"]) == writes  # nothing written the second time


def test_missing_settings_fail_before_contacting_awx(tmp_path):
    server = fake_awx.FakeAWX()
    try:
        env_less = configure(server, tmp_path, "-e", "specpilot_awx_scm_url=")
        assert env_less.returncode != 0 and "Set SPECPILOT_AWX_SCM_URL" in env_less.stdout
        assert server.requests == []
    finally:
        server.close()


def test_the_stand_in_refuses_what_awx_refuses():
    bad_default = {"name": "s", "description": "", "spec": [
        {"question_name": "q", "variable": "v", "type": "multiplechoice", "choices": ["a"], "default": "b",
         "required": True}]}
    assert fake_awx.survey_errors(bad_default) == ["Default choice must be answered from the choices listed "
                                                   "(Survey question 0)."]
    assert fake_awx.survey_errors({"name": "s", "description": "", "spec": [
        {"question_name": "q", "variable": "v", "type": "integer", "default": "3", "required": True}]})
    server = fake_awx.FakeAWX()
    try:
        jt = server._create("job_templates", {"name": "j", "survey_enabled": True})
        server.surveys[("job_templates", jt["id"])] = {"spec": [{"variable": "asked"}]}
        server._launch_vars(jt["id"], {"asked": 1}, "extra_data")
        with pytest.raises(fake_awx.ApiError, match="cannot accept"):
            server._launch_vars(jt["id"], {"not_asked": 1}, "extra_data")
    finally:
        server.close()
