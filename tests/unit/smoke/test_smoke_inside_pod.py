"""The look inside the predictor pod (module_utils/verify/pod_view.py): the command specpilot.core.pod_exec runs, what the
verdict makes of its result, and of a look that could not be taken."""

from __future__ import annotations

import json
import subprocess

import pytest
import smoke_samples as s

from ansible_collections.specpilot.core.plugins.filter.smoke import smoke_inside_command
from ansible_collections.specpilot.core.plugins.module_utils.verify import pod_view, smoke

FORBIDDEN = (
    "Failed to execute on pod lab-draft-predictor-0 due to : (403)\nReason: Forbidden\n"
    'HTTP response body: {"kind":"Status","message":"pods \\"x\\" is forbidden"}'
)


@pytest.fixture(scope="module")
def draft_plan():
    return s.plan_for("lab-draft")


def exec_result(stdout="", rc=0, stderr="", **more):
    return dict({"rc": rc, "stdout": stdout, "stderr": stderr, "changed": False}, **more)


def view(version="0.32.0", paths=None, **more):
    good = {"dir": True, "config_json": True, "entries": ["config.json", "model.safetensors"], "count": 2}
    paths = paths if paths is not None else {"/mnt/models/target": good, "/mnt/models/draft": good}
    return exec_result(json.dumps(dict({"vllm_version": version, "paths": paths}, **more)) + "\n")


def checks_for(plan, inside, mode="auto", expect="on"):
    data = s.data_for(plan, inside_pod=inside, inside_pod_mode=mode)
    data["expect"] = expect
    result = smoke.evaluate(data)
    return {c["id"]: c for c in result["checks"]}, result


def test_the_command_looks_at_the_paths_the_engine_loads(draft_plan, tmp_path):
    assert pod_view.expected_paths(draft_plan) == {
        "target": "/mnt/models/target",
        "draft": "/mnt/models/draft",
    }
    assert pod_view.expected_paths(draft_plan, "off") == {"target": "/mnt/models/target"}
    # the module path's --model too (a service specpilot rendered before it used vllm serve)
    legacy = dict(draft_plan, args=["--model=/mnt/models/t"] + draft_plan["args"][1:])
    assert pod_view.expected_paths(legacy)["target"] == "/mnt/models/t"
    # run it here, as a shell would split it, on directories standing in for the pod's
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text("{}")
    (tmp_path / "draft").mkdir()
    plan = dict(
        draft_plan, args=[str(tmp_path / "target")], speculative_config={"model": str(tmp_path / "draft")}
    )
    line = smoke_inside_command(plan, "python3")
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=False)
    got = pod_view.parse(exec_result(out.stdout, out.returncode, out.stderr))
    assert got["error"] is None and "vllm_error" in got  # no vllm on this machine's python3
    assert got["paths"][str(tmp_path / "target")] == {
        "dir": True,
        "config_json": True,
        "entries": ["config.json"],
        "count": 1,
    }
    assert got["paths"][str(tmp_path / "draft")]["config_json"] is False


def test_a_healthy_pod_passes(draft_plan):
    checks, result = checks_for(draft_plan, view())
    assert checks["pod_vllm_version"]["status"] == "pass"
    assert checks["pod_vllm_version"]["message"] == "the image holds vLLM 0.32.0"
    assert checks["pod_models"]["status"] == "pass"
    assert checks["pod_models"]["message"] == (
        "target /mnt/models/target, draft /mnt/models/draft hold config.json"
    )
    assert "pod_view" not in checks and result["verdict"] == "pass"


def test_another_release_in_the_image_warns(draft_plan):
    checks, result = checks_for(draft_plan, view(version="0.31.0"))
    assert checks["pod_vllm_version"]["status"] == "warn" and result["verdict"] == "warn"
    assert checks["pod_vllm_version"]["message"].startswith(
        "the image holds vLLM 0.31.0, the spec says 0.32.0"
    )
    no_vllm = exec_result(
        json.dumps({"vllm_error": "ModuleNotFoundError: No module named 'vllm'", "paths": {}})
    )
    checks, _ = checks_for(draft_plan, no_vllm)
    assert checks["pod_vllm_version"]["message"] == (
        "the pod's Python cannot import vllm: ModuleNotFoundError: No module named 'vllm'"
    )


def test_missing_model_files_fail(draft_plan):
    good = {"dir": True, "config_json": True, "entries": ["config.json"], "count": 1}
    empty = {"dir": True, "config_json": False, "entries": [], "count": 0}
    checks, result = checks_for(
        draft_plan, view(paths={"/mnt/models/target": good, "/mnt/models/draft": empty})
    )
    assert checks["pod_models"]["status"] == "fail" and result["verdict"] == "fail"
    assert checks["pod_models"]["message"] == "the draft /mnt/models/draft has no config.json (empty)"
    checks, _ = checks_for(
        draft_plan, view(paths={"/mnt/models/target": good, "/mnt/models/draft": {"dir": False}})
    )
    assert checks["pod_models"]["message"] == "the draft /mnt/models/draft is not a directory in the pod"
    # rolled back (expect off): the draft is not looked at
    checks, _ = checks_for(draft_plan, view(paths={"/mnt/models/target": good}), expect="off")
    assert checks["pod_models"]["message"] == "target /mnt/models/target hold config.json"


def test_a_look_that_could_not_be_taken_says_why(draft_plan):
    # as the smoke role registers it (failed_when: false): the msg, not failed
    forbidden = {"failed": False, "failed_when_result": False, "msg": FORBIDDEN, "changed": False}
    checks, result = checks_for(draft_plan, forbidden)
    c = checks["pod_view"]
    assert c["status"] == "skip" and result["verdict"] == "pass"
    assert c["message"] == (
        "could not look inside pod svc-predictor-abc-xyz: Failed to execute on pod lab-draft-predictor-0 due to"
        " : (403) Reason: Forbidden (exec needs create on pods/exec); skipped (specpilot_smoke_inside_pod:"
        " required makes it a failure)"
    ), c["message"]
    checks, result = checks_for(draft_plan, forbidden, mode="required")
    assert checks["pod_view"]["status"] == "fail" and result["verdict"] == "fail"
    checks, _ = checks_for(
        draft_plan, exec_result(rc=127, stderr="sh: python3: not found\n"), mode="required"
    )
    assert (
        checks["pod_view"]["message"]
        == "could not look inside pod svc-predictor-abc-xyz: exit code 127: sh: python3: not found"
    )
    checks, _ = checks_for(draft_plan, exec_result(stdout="Traceback?\n"))
    assert checks["pod_view"]["message"] == (
        "could not look inside pod svc-predictor-abc-xyz: the pod's Python printed no result: Traceback?;"
        " skipped (specpilot_smoke_inside_pod: required makes it a failure)"
    )
    checks, _ = checks_for(draft_plan, None)
    assert checks["pod_view"]["message"] == "not looked at: no predictor pod to exec into"
    checks, _ = checks_for(draft_plan, view(), mode="off")
    assert checks["pod_view"] == dict(checks["pod_view"], status="skip")
    assert checks["pod_view"]["message"] == "not looked at (specpilot_smoke_inside_pod: off)"
    assert pod_view.parse({"skipped": True, "changed": False}) is None
