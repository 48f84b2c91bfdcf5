"""The module files of vllm_log_facts, vllm_metrics_facts and smoke_verdict, run as modules (main() under
ansible's own test helper): they return what their action plugins return, and fail the same way.
Playbooks run the action plugins (module_utils/fact_tasks.py); a module is what ``ansible -m`` or a
tool that executes module files runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fact_task_support import as_task, run_main
from vllm_samples import DATA

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "smoke"))
import smoke_samples  # noqa: E402

METRICS = (DATA / "metrics_v0_0.6.3.txt").read_text()
LOG = (DATA / "v1_0.10.2_ansi_prefix.log").read_text()


@pytest.mark.parametrize(
    "module,func,spec,args",
    [
        ("vllm_log_facts", fact_tasks.log_facts, fact_tasks.LOG_FACTS_ARGS, {"content": LOG}),
        ("vllm_metrics_facts", fact_tasks.metrics_facts, fact_tasks.METRICS_FACTS_ARGS, {"content": METRICS}),
    ],
)
def test_the_module_returns_what_its_action_returns(module, func, spec, args):
    result, failed = run_main(module, args)
    assert not failed and result == as_task(func, args, spec)
    assert result["changed"] is False and len(result) > 5


def test_smoke_verdict_as_a_module_writes_nothing_in_check_mode(tmp_path):
    data = smoke_samples.data_for(smoke_samples.plan_for("lab-draft"), rate_counts=(1, 60, 20, (1, 0, 0)))
    args = {k: v for k, v in data.items() if v is not None and k in fact_tasks.SMOKE_VERDICT_ARGS}
    args.update(report_dir=str(tmp_path / "rep"), thresholds={"min_acceptance_rate": 0.5})
    result, failed = run_main("smoke_verdict", args, check_mode=True)
    assert not failed and result["verdict"] == "fail" and not result["changed"]
    assert "check mode: the report was not written" in result["report"]["notes"]
    assert not (tmp_path / "rep").exists()
    result, failed = run_main("smoke_verdict", dict(args, fail_on_verdict=True))
    assert failed and "below the minimum 0.50" in result["msg"] and result["verdict"] == "fail"
    assert (tmp_path / "rep" / "smoke.json").is_file() and result["changed"]


def test_a_module_fails_with_the_task_message(tmp_path):
    result, failed = run_main("vllm_log_facts", {"path": str(tmp_path / "missing.log")})
    assert failed and result["msg"] == "log file not found: %s" % (tmp_path / "missing.log")
    with pytest.raises(fact_tasks.TaskFailure, match="log file not found"):
        fact_tasks.log_facts(
            {
                "path": str(tmp_path / "missing.log"),
                "content": None,
                "since": None,
                "max_windows": 1,
                "max_issues": 1,
            }
        )
    result, failed = run_main("vllm_log_facts", {"content": "x", "max_issues": -1})
    assert failed and result["msg"] == "max_windows and max_issues must be >= 0"
    result, failed = run_main("vllm_metrics_facts", {"content": "x", "path": "y"})
    assert failed and "mutually exclusive" in result["msg"]


def test_the_canary_step_module_refuses_what_only_its_action_can_do_and_names_a_missing_arm():
    """canary_step as a module: no pods of an arm fails naming it, as the action does; a lock to renew
    is refused (renewing needs the worker's Kubernetes client: the action plugin, a playbook task)."""
    arms = {"baseline": [], "canary": [{"pod": "c-1", "url": "http://127.0.0.1:9/metrics"}]}
    result, failed = run_main("canary_step", {"arms": arms, "window": 1})
    assert failed and result["msg"] == "arms.baseline: no pod of the baseline arm to read (is it Running?)"
    with pytest.raises(fact_tasks.TaskFailure, match="arms.baseline"):
        as_task(fact_tasks.canary_step, {"arms": arms, "window": 1}, fact_tasks.CANARY_STEP_ARGS)
    lock = {"holder": "h", "resource_version": "1", "duration": 60, "name": "svc", "namespace": "ml"}
    result, failed = run_main("canary_step", {"arms": arms, "window": 1, "lock": lock})
    assert failed and "renewed by the action plugin" in result["msg"]
