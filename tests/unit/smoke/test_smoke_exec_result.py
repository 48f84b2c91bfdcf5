"""The smoke probe's result read from specpilot.core.pod_exec (filter smoke_exec_result, roles/specpilot_smoke/tasks/probe.yml):
the probe's JSON when the command ran, else an error naming the pod, the exit code and the message."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError
from jinja2 import Environment

from ansible_collections.specpilot.core.plugins.filter.smoke import smoke_exec_result


def test_the_probe_json_when_the_command_ran():
    out = {"results": [{"ok": True}], "metrics_before": "x"}
    assert smoke_exec_result({"rc": 0, "stdout": "  " + json.dumps(out)}, "p") == out


def test_an_error_names_the_pod_the_rc_and_the_message():
    assert smoke_exec_result({"rc": 1, "stdout": "{}", "msg": "boom"}, "pod-1") == {
        "error": "exec in pod pod-1 failed (rc 1): boom"
    }
    assert smoke_exec_result({"rc": 0, "stdout": "Traceback", "stderr": "err"}, "p")["error"].endswith(
        "(rc 0): err"
    )
    assert smoke_exec_result({}, "p") == {"error": "exec in pod p failed (rc ?): "}
    assert smoke_exec_result(None, "p")["error"].startswith("exec in pod p failed (rc ?)")


def test_a_long_message_is_cut_as_jinja_truncate_cuts_it():
    jinja = Environment()
    for text in ("word " * 120, "x" * 503, "x" * 506, "a " * 300):
        expected = jinja.from_string("{{ t | truncate(500) }}").render(t=text)
        assert (
            smoke_exec_result({"rc": 2, "msg": text}, "p")["error"]
            == "exec in pod p failed (rc 2): " + expected
        )


def test_refuses_what_is_not_a_result():
    with pytest.raises(AnsibleFilterError, match="expects the result of specpilot.core.pod_exec"):
        smoke_exec_result(["x"], "p")


def test_the_verdict_lines_the_role_shows():
    from ansible_collections.specpilot.core.plugins.filter.smoke import smoke_verdict_lines

    result = {
        "message": "svc: PASS",
        "checks": [
            {"status": "pass", "title": "Engine start", "message": "ready"},
            {"status": "warn", "title": "Acceptance", "message": "0.6, in the 0.5-0.65 band"},
        ],
        "interpretation": ["acceptance is borderline"],
        "report_files": {"markdown": "/r/smoke.md"},
    }
    assert smoke_verdict_lines(result) == [
        "svc: PASS",
        "PASS | Engine start | ready",
        "WARN | Acceptance | 0.6, in the 0.5-0.65 band",
        "acceptance is borderline",
        "report: /r/smoke.md",
    ]
    assert smoke_verdict_lines(dict(result, report_files={}))[-1] == "report: not written"
    with pytest.raises(AnsibleFilterError):
        smoke_verdict_lines(None)
