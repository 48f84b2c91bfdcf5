"""The probe's /metrics pages come back as their facts (fact_tasks.probe_metrics_facts, issue 40): smoke_probe with
``metrics_facts`` (the route from the controller) and the smoke_exec_result filter with the served model (the route
through the pod) answer what the role's two vllm_metrics_facts tasks answered from the pages, and keep no page: the
smoke role over a fleet kept both pages of every service twice in ansible-playbook's variables, and parsed them in
two more tasks a service."""

from __future__ import annotations

import json

from smoke_samples import metrics_page

from ansible_collections.specpilot.core.plugins.filter.smoke import smoke_exec_result
from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks

BEFORE = metrics_page("svc", 10, 30, 20, [7, 7, 6])
AFTER = metrics_page("svc", 19, 57, 38, [13, 12, 13])


def probe_result(before=BEFORE, after=AFTER, error=None) -> dict:
    return {"ok": True, "requests": 2, "metrics_before": before, "metrics_after": after, "metrics_error": error,
            "metrics_before_at": 1795957000.0, "metrics_after_at": 1795957004.25}


def as_the_role_parsed(before, after, model):
    """What roles/specpilot_smoke/tasks/probe.yml did before: vllm_metrics_facts of each page, the second with
    the first as ``previous``."""
    page = dict(url=None, path=None, model_name=model)
    first = fact_tasks.metrics_facts(dict(page, content=before, previous=None))
    return first, fact_tasks.metrics_facts(dict(page, content=after, previous=first))


def without_times(facts: dict) -> dict:
    """The facts but when the page was read (the role's tasks parsed each page as of when they ran) and ``changed``."""
    out = {k: v for k, v in facts.items() if k not in ("scraped_at", "scraped_at_epoch", "changed")}
    out["derived"] = {k: v for k, v in out["derived"].items() if k != "interval_seconds"}
    return out


def test_the_pages_become_the_facts_the_role_parsed_and_are_not_kept():
    out = fact_tasks.probe_metrics_facts(probe_result(), "svc")
    first, second = as_the_role_parsed(BEFORE, AFTER, "svc")
    assert without_times(out["metrics_before_facts"]) == without_times(first)
    assert without_times(out["metrics_after_facts"]) == without_times(second)
    assert out["metrics_before"] is None and out["metrics_after"] is None and out["metrics_error"] is None
    derived = out["metrics_after_facts"]["derived"]
    assert (derived["num_drafts"], derived["num_draft_tokens"], derived["num_accepted_tokens"]) == (9, 27, 18)
    assert derived["accepted_per_position"] == [6, 5, 7]
    # the window is the probes' own: from the read of the first page to the read of the second
    assert derived["interval_seconds"] == 4.25 and out["metrics_after_facts"]["scraped_at_epoch"] == 1795957004.25
    assert out["ok"] and out["requests"] == 2  # the rest of the result is the probe's


def test_a_page_that_does_not_parse_is_the_metrics_error_not_a_failed_task():
    out = fact_tasks.probe_metrics_facts(probe_result(after="<html>503 Service Unavailable</html>\n"), "svc")
    assert out["metrics_before_facts"] and out["metrics_after_facts"] is None
    assert out["metrics_error"].startswith("metrics_after: not valid Prometheus text")
    assert out["metrics_after"] is None
    # a page that was not read stays unread, with the probe's own reason
    unread = fact_tasks.probe_metrics_facts(probe_result(before=None, after=None, error="connection refused"), "svc")
    assert (unread["metrics_before_facts"], unread["metrics_after_facts"]) == (None, None)
    assert unread["metrics_error"] == "connection refused"


def test_the_route_through_the_pod_answers_as_the_route_from_the_controller():
    printed = {"rc": 0, "stdout": json.dumps(probe_result())}
    assert smoke_exec_result(printed, "pod-1", "svc") == fact_tasks.probe_metrics_facts(probe_result(), "svc")
    # without the model, what the probe printed (its pages), as before
    assert smoke_exec_result(printed, "pod-1") == probe_result()
    assert smoke_exec_result({"rc": 1, "msg": "boom"}, "pod-1", "svc") == {
        "error": "exec in pod pod-1 failed (rc 1): boom"
    }
