"""The deploy decision: sync with server-side apply semantics, the revision record, history, lock."""

from __future__ import annotations

import copy
import json

from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_state as ds
from deploy_unit_helpers import applied, deployment, plan, ready_status

NOW = 1_800_000_000.0


def test_subset_diff_follows_apply_semantics():
    assert ds.subset_diff({"a": 1, "b": {"c": [1, 2]}}, {"a": 1, "b": {"c": [1, 2], "d": 0}, "e": 3}) == []
    assert (
        ds.subset_diff({"l": [{"x": 1}]}, {"l": [{"x": 1, "default": "y"}]}) == []
    )  # defaulted keys are fine
    assert ds.subset_diff({"l": [1, 2]}, {"l": [1, 2, 3]}) == ["l"]  # lists must match in length
    assert ds.subset_diff({"a": {"b": 1}}, {"a": {"b": 2}}) == ["a.b"]
    assert ds.subset_diff({"a": True}, {"a": 1}) == ["a"]
    assert ds.subset_diff({"a": [{"b": 1}]}, {"a": [{"b": 2}]}) == ["a[0].b"]


def test_sync_status_needs_the_field_manager():
    p = plan()
    live = applied(p["inferenceservice"])
    assert ds.sync_status(p["inferenceservice"], live, "specpilot") == {"in_sync": True, "reasons": []}
    other = applied(p["inferenceservice"], manager="kubectl")
    assert ds.sync_status(p["inferenceservice"], other, "specpilot")["reasons"] == [
        "not applied by field manager specpilot"
    ]
    drift = copy.deepcopy(live)
    drift["spec"]["predictor"]["model"]["args"].append("--enforce-eager")
    assert ds.sync_status(p["inferenceservice"], drift, "specpilot")["reasons"] == [
        "spec.predictor.model.args"
    ]
    assert ds.sync_status(p["inferenceservice"], None, "specpilot")["reasons"] == ["absent"]
    assert ds.sync_status(None, live, "specpilot")["in_sync"]


def _live(p, ready=True, runtime=True, history=None):
    isvc = applied(p["inferenceservice"], extra_status=ready_status(ready))
    return {
        "inferenceservice": isvc,
        "servingruntime": applied(p["servingruntime"]) if runtime else None,
        "deployment": deployment(
            isvc, available=1 if ready else 0, updated=1 if ready else 0, observed=1 if ready else 0
        ),
        "pods": [],
        "lease": None,
        "history": history,
    }


def test_first_deploy_records_nothing():
    d = ds.decide(plan(), {}, now=NOW)
    assert d["first_deploy"] and d["needs_apply"] and d["rollout_expected"]
    assert d["record"]["annotation"] is None and d["history"] is None
    assert ds.ANN_PREVIOUS not in d["inferenceservice"]["metadata"]["annotations"]


def test_rerun_is_in_sync_and_ready():
    p = plan()
    d = ds.decide(p, _live(p), now=NOW)
    assert d["in_sync"] and not d["needs_apply"] and d["ready"]
    assert d["history"] is None


def test_change_records_the_live_revision_atomically_with_the_new_spec():
    old = plan()
    new = plan(speculative={"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4})
    live = _live(old)
    d = ds.decide(new, live, now=NOW)
    assert d["needs_apply"] and not d["in_sync"] and d["rollout_expected"]
    record = json.loads(d["inferenceservice"]["metadata"]["annotations"][ds.ANN_PREVIOUS])
    assert record["digest"] == old["spec_digest"]
    assert record["predictor"] == live["inferenceservice"]["spec"]["predictor"]
    assert record["ready"] is True
    assert record["runtime"]["spec"] == old["servingruntime"]["spec"]
    assert record["recorded_at"].startswith("2027-01-15T")
    assert ds.ANN_PREVIOUS not in record["annotations"]
    revisions = json.loads(d["history"]["data"][ds.HISTORY_KEY])
    assert [r["digest"] for r in revisions] == [old["spec_digest"]]
    assert revisions[0]["replaced_by"] == new["spec_digest"]
    assert d["record"]["previous_digest"] == old["spec_digest"]

    # applied: a re-run keeps the record exactly (no rewrite, no new history entry)
    live2 = _live(new)
    live2["inferenceservice"] = applied(d["inferenceservice"], extra_status=ready_status())
    live2["history"] = {"data": d["history"]["data"]}
    d2 = ds.decide(new, live2, now=NOW + 100)
    assert d2["in_sync"] and d2["history"] is None
    assert (
        d2["inferenceservice"]["metadata"]["annotations"][ds.ANN_PREVIOUS]
        == d["inferenceservice"]["metadata"]["annotations"][ds.ANN_PREVIOUS]
    )


def test_a_revision_that_never_became_ready_does_not_replace_the_record():
    good, bad, fixed = (
        plan(),
        plan(speculative={"method": "ngram", "num_speculative_tokens": 9, "prompt_lookup_max": 4}),
        plan(speculative={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}),
    )
    to_bad = ds.decide(bad, _live(good), now=NOW)
    live_bad = _live(bad, ready=False)
    live_bad["inferenceservice"] = applied(to_bad["inferenceservice"], extra_status=ready_status(False))
    to_fixed = ds.decide(fixed, live_bad, now=NOW + 60)
    record = json.loads(to_fixed["inferenceservice"]["metadata"]["annotations"][ds.ANN_PREVIOUS])
    assert record["digest"] == good["spec_digest"]  # still the last revision that worked
    assert "never became ready" in to_fixed["record"]["reason"]
    entry = json.loads(to_fixed["history"]["data"][ds.HISTORY_KEY])[-1]
    assert (entry["digest"], entry["ready"]) == (bad["spec_digest"], False)  # logged all the same


def test_history_is_bounded_and_deduplicated():
    cm = None
    for i in range(13):
        data = ds.history_data(cm, {"digest": "d%d" % i, "predictor": {"i": i}}, "d%d" % (i + 1), limit=10)
        cm = {"data": data}
    revisions = ds.history_revisions(cm)
    assert len(revisions) == 10 and revisions[0]["digest"] == "d3" and revisions[-1]["digest"] == "d12"
    assert ds.history_data(cm, {"digest": "d12", "predictor": {"i": 12}}, "x") is None
    assert ds.history_revisions({"data": {ds.HISTORY_KEY: "not json"}}) == []


def test_lease_status():
    assert ds.lease_status(None, "me", NOW)["free"]
    spec = ds.lease_spec("alice", 600, NOW - 100)
    held = ds.lease_status({"metadata": {"resourceVersion": "5"}, "spec": spec}, "me", NOW)
    assert held["held"] and not held["free"] and held["holder"] == "alice"
    assert held["expires_in"] == 500 and "held by alice" in held["message"]
    assert ds.lease_status({"spec": spec}, "alice", NOW)["free"]  # mine
    expired = ds.lease_status({"spec": ds.lease_spec("alice", 60, NOW - 100)}, "me", NOW)
    assert expired["expired"] and expired["free"]
    assert ds.lease_status({"spec": {}}, "me", NOW)["free"]  # created, never held


def test_micro_time_round_trip():
    assert ds.micro_time(NOW) == "2027-01-15T08:00:00.000000Z"
    assert ds.parse_time(ds.micro_time(NOW + 0.25)) == NOW + 0.25
    assert ds.parse_time("2027-01-15T08:00:00Z") == NOW
    assert ds.parse_time("garbage") is None


def test_runtime_manifest_round_trip():
    p = plan()
    snap = ds.revision_snapshot(applied(p["inferenceservice"]), applied(p["servingruntime"]))["runtime"]
    manifest = ds.runtime_manifest(snap)
    assert manifest["spec"] == p["servingruntime"]["spec"]
    assert manifest["metadata"]["namespace"] == "ml" and manifest["kind"] == "ServingRuntime"
