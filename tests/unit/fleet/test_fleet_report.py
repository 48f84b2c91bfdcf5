"""The fleet view (issue 40): the slices' set_stats parts merged as AWX hands them on (dict.update, the
last slice last), every slice kept, rows ordered by risk, the report written through the one writer."""

from __future__ import annotations

import json
import random

import pytest
from ansible_collections.specpilot.core.plugins.filter import fleet as fleet_filter
from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.module_utils.operate import fleet

THRESHOLDS = {"min_acceptance_rate": 0.5, "warn_acceptance_rate": 0.65, "min_draft_tokens": 100,
              "consecutive_readings": 3}


def guard_row(host, status="healthy", action="none", rate=0.8, **extra):
    return dict({"host": host, "name": host, "namespace": "ml", "status": status, "action": action,
                 "rolled_back": False, "streak": 0, "acceptance_rate": rate, "drafted": 300, "method": "ngram",
                 "num_speculative_tokens": 3, "message": "%s: %s" % (host, status), "latest_verdict": None},
                **extra)


def guard_part(rows):
    return {"generated_at": "2026-11-28T23:00:00Z", "thresholds": THRESHOLDS, "services": rows}


def awx_artifacts(*slices):
    """What the node after a sliced job sees: each slice's set_stats, merged with dict.update in the order
    the slices finished (awx/main/models/workflow.py WorkflowJob.get_effective_artifacts)."""
    merged = {}
    for artifacts in slices:
        merged.update(artifacts)
    return merged


def guard_slice(hosts, rows):
    report = guard_part(rows)
    # the role publishes both: the old key (the last slice wins it) and the slice's own
    return dict({"specpilot_guard": report}, **fleet_filter.fleet_slice(report, hosts, "guard"))


def cells(line):
    """The cells of one Markdown table line."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def awx_partition(hosts, count):
    """AWX's partition (awx/main/models/inventory.py Inventory.get_sliced_hosts): the hosts ordered by
    name, slice n (1-based) takes hosts[n-1::count]."""
    ordered = sorted(hosts)
    return [ordered[n - 1::count] for n in range(1, count + 1)]


def test_every_slice_survives_awxs_merge_and_equals_the_unsliced_run():
    hosts = ["svc-%03d" % i for i in range(200)]
    statuses = ["healthy", "low", "error", "off", "borderline", "idle", "missing"]
    rows = {h: guard_row(h, status=statuses[i % len(statuses)], rate=round((i * 37 % 100) / 100, 2))
            for i, h in enumerate(hosts)}
    whole = fleet.merge(fleet.slices_of(guard_slice(hosts, [rows[h] for h in hosts])), "t")
    parts = awx_partition(hosts, 3)
    assert [len(p) for p in parts] == [67, 67, 66]
    slices = [guard_slice(p, [rows[h] for h in p]) for p in parts]
    random.Random(4).shuffle(slices)  # any finishing order
    merged = awx_artifacts(*slices)
    # the shared key kept one slice only; the slice keys kept all three
    assert len(merged["specpilot_guard"]["services"]) < 200
    sliced = fleet.merge(fleet.slices_of(merged), "t")
    assert len(sliced["slices"]) == 3 and sliced["conflicts"] == [] and sliced["unreported"] == []
    assert sliced["services"] == whole["services"] and sliced["counts"] == whole["counts"]
    assert sum(sliced["counts"].values()) == 200


def test_risk_order_failing_first_then_lowest_acceptance():
    rows = [
        guard_row("healthy-a", rate=0.9),
        guard_row("off-a", status="off", rate=None),
        guard_row("low-watch", status="low", action="watch", rate=0.3),
        guard_row("low-report", status="low", action="report", rate=0.35),
        guard_row("broken", status="error", rate=None),
        guard_row("borderline", status="borderline", rate=0.6),
        guard_row("healthy-b", rate=0.7, latest_verdict={"kind": "canary", "verdict": "aborted", "at": "x"}),
        guard_row("healthy-c", rate=0.75, latest_verdict={"kind": "benchmark", "verdict": "inconclusive", "at": "x"}),
        guard_row("rolled", status="low", action="rollback", rate=0.1, rolled_back=True),
    ]
    smoke = {"healthy-a": {"verdict": "fail", "expect": "on", "acceptance_rate": 0.9}}
    variables = awx_artifacts(guard_slice([r["host"] for r in rows], rows),
                              fleet_filter.fleet_slice(smoke, ["healthy-a"], "smoke"))
    report = fleet_filter.fleet_summary(variables, "t")
    order = [(r["host"], r["risk"]) for r in report["services"]]
    assert order == [
        ("rolled", "fail"), ("low-report", "fail"), ("healthy-b", "fail"), ("healthy-a", "fail"), ("broken", "fail"),
        ("low-watch", "warn"), ("borderline", "warn"), ("healthy-c", "warn"),
        ("off-a", "off"),
    ]
    by = {r["host"]: r for r in report["services"]}
    assert by["healthy-a"]["reasons"] == ["smoke fail"] and by["healthy-a"]["smoke"] == "fail"
    assert by["healthy-b"]["reasons"] == ["canary aborted"]
    assert by["healthy-b"]["last_verdict"] == {"kind": "canary", "verdict": "aborted", "at": "x"}
    assert (by["low-watch"]["method"], by["low-watch"]["num_speculative_tokens"]) == ("ngram", 3)
    assert by["off-a"]["speculative"] == "off" and by["broken"]["speculative"] == "on"
    assert report["failing"] == ["rolled", "low-report", "healthy-b", "healthy-a", "broken"]
    assert report["counts"] == {"fail": 5, "warn": 3, "ok": 0, "off": 1}


def test_a_host_two_slices_report_is_a_conflict_and_a_lost_slice_shows_as_its_hosts():
    first = guard_slice(["a", "b"], [guard_row("a"), guard_row("b")])
    second = guard_slice(["b", "c"], [guard_row("b", status="low", action="watch", rate=0.2), guard_row("c")])
    report = fleet.merge(fleet.slices_of(awx_artifacts(first, second)), "t", expected=["a", "b", "c", "d"])
    assert len(report["conflicts"]) == 1 and report["conflicts"][0].startswith("b: guard reported by slices ")
    assert report["unreported"] == ["d"]
    by = {r["host"]: r for r in report["services"]}
    assert by["d"]["risk"] == "fail" and by["d"]["reasons"] == ["no slice reported it"]
    assert report["services"][0]["host"] == "d"


def test_smoke_only_slices_join_by_host():
    smoke = [fleet_filter.fleet_slice({"s1": {"verdict": "pass", "expect": "on", "acceptance_rate": 0.7}}, ["s1"],
                                      "smoke"),
             fleet_filter.fleet_slice({"s2": {"verdict": "warn", "expect": "off", "acceptance_rate": None}}, ["s2"],
                                      "smoke")]
    report = fleet_filter.fleet_summary(awx_artifacts(*smoke))
    by = {r["host"]: r for r in report["services"]}
    assert (by["s1"]["risk"], by["s1"]["acceptance_rate"], by["s1"]["acceptance_source"]) == ("ok", 0.7, "smoke")
    assert (by["s2"]["risk"], by["s2"]["speculative"]) == ("warn", "off")


def test_slice_keys_are_per_slice_and_valid_variable_names():
    one = fleet.slice_key("guard", ["b", "a"])
    assert one == fleet.slice_key("guard", ["a", "b"]) != fleet.slice_key("guard", ["a", "c"])
    assert one.isidentifier() and one.startswith("specpilot_guard_slice_")
    assert fleet.slice_key("smoke", ["a", "b"]) != one
    assert set(fleet.slices_of({one: {"kind": "guard"}, "specpilot_guard": {}, "other": 1})) == {one}
    with pytest.raises(Exception, match="guard, smoke"):
        fleet_filter.fleet_slice_key(["a"], "canary")


def test_the_fleet_report_is_readable_at_200_rows_and_written_with_its_plot(tmp_path):
    pytest.importorskip("matplotlib")
    hosts = ["svc-%03d" % i for i in range(200)]
    rows = [guard_row(h, status="low" if i % 10 == 0 else "healthy", action="report" if i % 20 == 0 else "none",
                      rate=(i % 100) / 100) for i, h in enumerate(hosts)]
    report = fleet.merge(fleet.slices_of(guard_slice(hosts, rows)), "2026-11-28T23:00:00Z")
    result = fact_tasks.report_write({"kind": "fleet", "report": report, "output_dir": str(tmp_path),
                                      "basename": "fleet", "plots": True})
    assert result["written"] and not result["changed"]
    md = (tmp_path / "fleet.md").read_text()
    table = [cells(line) for line in md.splitlines() if line.startswith("|")]
    assert table[0][:3] == ["risk", "service", "speculative"] and set(table[1][0]) <= {"-", ":"}
    assert len(table) == 202
    assert table[2][:2] == ["FAIL", "ml/svc-000"]  # failing first, the lowest acceptance first
    assert md.splitlines()[2].startswith("200 services in 1 slice(s): 10 fail, 10 warn, 180 ok, 0 off.")
    assert "![Acceptance of every service, by risk](fleet.png)" in md
    assert (tmp_path / "fleet.png").stat().st_size > 0
    saved = json.loads((tmp_path / "fleet.json").read_text())
    assert saved["failing"][:3] == ["svc-000", "svc-100", "svc-020"] and saved["plots"][0]["file"] == "fleet.png"
    assert (tmp_path / "history" / "fleet" / "latest").is_symlink()
    # the same merge again: nothing new, no new record
    again = fact_tasks.report_write({"kind": "fleet", "report": fleet.merge(fleet.slices_of(guard_slice(hosts, rows)),
                                                                          "2026-11-28T23:00:00Z"),
                                     "output_dir": str(tmp_path), "basename": "fleet", "plots": True})
    assert again["written"] is False


def test_a_limited_run_lists_no_host_outside_its_limit_as_unreported():
    limited = fleet_filter.fleet_slice(guard_part([guard_row("a")]), ["a"], "guard", "a")
    report = fleet_filter.fleet_summary(limited, "t", ["a", "b"])
    assert report["unreported"] == [] and [r["host"] for r in report["services"]] == ["a"]
    assert report["notes"] == ["the run was limited to a: hosts outside it are not listed as unreported"]
    assert "- the run was limited to a" in fleet.fleet_markdown(report)


def test_the_cluster_key_follows_the_connection_variables_the_playbooks_read():
    key = fleet_filter.k8s_cluster_key
    assert key({}) == key({"specpilot_k8s_kubeconfig": ""}) == "||"
    assert key({"specpilot_deploy_kubeconfig": "/a"}) == key({"specpilot_k8s_kubeconfig": "/a"}) == "/a||"
    assert key({"specpilot_k8s_kubeconfig": "/a", "specpilot_deploy_kubeconfig": "/b"}) == "/a||"
    assert key({"specpilot_k8s_context": "east", "specpilot_k8s_host": "https://api"}) == "|east|https://api"
    with pytest.raises(Exception, match="host's variables"):
        key(["a"])


def test_each_cluster_is_read_by_the_first_host_of_the_play_on_it():
    """Issue 40: a step that reads the cluster (the KServe CRDs) runs once per cluster, on its first host."""
    hostvars = {
        "a": {},
        "b": {"specpilot_k8s_kubeconfig": "/east"},
        "c": {},
        "d": {"specpilot_deploy_kubeconfig": "/east"},
        "e": {"specpilot_k8s_context": "west"},
    }
    readers = fleet_filter.k8s_cluster_readers(["b", "a", "c", "d", "e"], hostvars)
    assert readers == {"/east||": "b", "||": "a", "|west|": "e"}
    assert list(readers.values()) == ["b", "a", "e"]  # in the play's order
    assert fleet_filter.k8s_cluster_readers([], hostvars) == {}


def test_one_read_step_covers_the_services_with_a_plan_on_the_readers_cluster():
    """deploy's decide.yml and rollback's read steps (issue 40): one deploy_state read, run once, covers the services of
    the play that have a plan and reach the reader's cluster; the rest read their own."""
    def plan(name, **extra):
        return dict({"name": name, "namespace": "ns", "deployment_mode": "Standard", "runtime": {"name": "rt"}}, **extra)

    east = {"specpilot_k8s_kubeconfig": "/east"}
    hostvars = {
        "a": {"__specpilot_deploy_validation": {"plan": plan("a")}},
        # validated again with the Modelcar digest (stage.yml): that plan, not the first one
        "b": {"__specpilot_deploy_validation": {"plan": plan("old")}, "__specpilot_deploy_revalidated": {"plan": plan("b")}},
        "c": dict(east, __specpilot_deploy_validation={"plan": plan("c")}),  # another cluster
        "d": {"__specpilot_deploy_validation": {"plan": None}},  # the spec did not validate
        "e": {},
        "f": {"__specpilot_deploy_validation": {"plan": plan("f", kind="LLMInferenceService",
                                                                api_version="serving.kserve.io/v1alpha1")}},
    }
    services = fleet_filter.k8s_cluster_services
    deploy = services(["a", "b", "c", "d", "e", "f"], hostvars,
                      ["__specpilot_deploy_revalidated.plan", "__specpilot_deploy_validation.plan"], runtime=True)
    assert [s["name"] for s in deploy] == ["a", "b", "f"]
    assert deploy[0] == {"name": "a", "namespace": "ns", "deployment_mode": "Standard", "kind": "InferenceService",
                         "api_version": None, "runtime": {"name": "rt"}}
    assert (deploy[2]["kind"], deploy[2]["api_version"]) == ("LLMInferenceService", "serving.kserve.io/v1alpha1")
    # the reader is the first host by default: on c's cluster, c alone
    assert [s["name"] for s in services(["c", "a"], hostvars, "__specpilot_deploy_validation.plan")] == ["c"]
    assert services([], hostvars, "__specpilot_deploy_validation.plan") == []


def test_a_rollback_read_step_covers_the_services_it_locked_or_changed_only():
    def host(name, acquired, needs_apply, **connection):
        return dict(connection, __specpilot_rollback_plan={"name": name, "namespace": "ns", "deployment_mode": "Standard"},
                    __specpilot_rollback_lock={"acquired": acquired}, __specpilot_rollback_decision={"needs_apply": needs_apply})

    hostvars = {
        "a": host("a", True, False),
        "b": host("b", False, True),
        "c": host("c", True, True, specpilot_k8s_context="west"),
        "d": {"__specpilot_rollback_plan": {}, "__specpilot_rollback_lock": {"acquired": True}},  # no plan
        "e": {"__specpilot_rollback_plan": {"name": "e", "namespace": "ns"}, "__specpilot_rollback_lock": {"skipped": True}},
    }
    hosts = list(hostvars)

    def read(reader, only=""):
        found = fleet_filter.k8s_cluster_services(hosts, hostvars, "__specpilot_rollback_plan", reader, only,
                                                  "serving.kserve.io/v1beta1")
        return [s["name"] for s in found]

    assert read("a") == ["a", "b", "e"]
    assert read("a", "__specpilot_rollback_lock.acquired") == ["a"]  # e's lock step was skipped: not taken
    assert read("b", "__specpilot_rollback_decision.needs_apply") == ["b"]
    assert read("c", "__specpilot_rollback_decision.needs_apply") == ["c"]  # the reader's own cluster
    [entry] = fleet_filter.k8s_cluster_services(["a"], hostvars, "__specpilot_rollback_plan", "a", "",
                                                "serving.kserve.io/v1beta1")
    assert entry == {"name": "a", "namespace": "ns", "deployment_mode": "Standard", "kind": "InferenceService",
                     "api_version": "serving.kserve.io/v1beta1"}  # no runtime: the rollback reads none
    with pytest.raises(Exception, match="plan names no variable"):
        fleet_filter.k8s_cluster_services(hosts, hostvars, [])
