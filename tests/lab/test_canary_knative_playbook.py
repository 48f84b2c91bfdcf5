"""playbooks/canary.yml on a Knative-mode lab-ngram (specpilot_deployment_mode: Knative; the lab controller's
Serverless mode: a revision per predictor template, canaryTrafficPercent splitting the address between the
latest revision and the one rolled out before it) on the stand-in engine, with live traffic - as
test_canary_playbook.py does for Standard mode, and sharing its helpers. One lab for the module: an impossible
acceptance floor aborts at the first step (canaryTrafficPercent 0, the stable spec written back as a new
revision that then takes all the traffic); a canary a killed run left (canaryTrafficPercent 25) is aborted with the
stable spec on record; then the healthy canary is promoted through [50, 100]
(canaryTrafficPercent removed: the canary's revision keeps all the traffic). A watcher records the service's
canaryTrafficPercent and traffic split while the playbook runs. Every run goes as the shipped ServiceAccount only.
"""

from __future__ import annotations

import json
import threading

import pytest

from test_canary_playbook import Stable, lab_under_traffic, run
from test_benchmark_playbook import ISVC_API, wait

pytestmark = [pytest.mark.lab, pytest.mark.slow]

KNATIVE = {"specpilot_deployment_mode": "Knative"}
REVISION = "serving.knative.dev/revision"


class KnativeStable(Stable):
    """lab-ngram's Knative-mode plan without the speculative config: the stable revision."""

    PLAN_VARS = KNATIVE

    def revisions_running(self):
        items = self.res("v1", "Pod").get(
            namespace=self.ns, label_selector="serving.kserve.io/inferenceservice=lab-ngram"
        )
        return sorted({p["metadata"]["labels"][REVISION] for p in items.items})


class Watch:
    """The service's canaryTrafficPercent and status traffic split, read every half second while a run goes."""

    def __init__(self, lab):
        self.lab, self.seen, self.stop_event = lab, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_event.wait(0.5):
            isvc = self.lab.isvc()
            comp = ((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}
            split = tuple((t["revisionName"], t["percent"]) for t in comp.get("traffic") or [])
            entry = (isvc["spec"]["predictor"].get("canaryTrafficPercent"), split)
            if not self.seen or self.seen[-1] != entry:
                self.seen.append(entry)

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=10)
        return self.seen


def revision_number(isvc):
    """The generation of the revision with all the traffic."""
    ((revision, percent),) = traffic_of(isvc)
    assert percent == 100
    return int(revision.rsplit("-", 1)[1])


def traffic_of(isvc):
    return [(t["revisionName"], t["percent"]) for t in isvc["status"]["components"]["predictor"]["traffic"]]


@pytest.fixture(scope="module")
def knative_lab(tmp_path_factory):
    yield from lab_under_traffic(tmp_path_factory.mktemp("canary-knative-lab"), KnativeStable)


def test_an_impossible_floor_aborts_the_knative_canary_and_the_stable_spec_takes_all_the_traffic(
    knative_lab, tmp_path
):
    lab = knative_lab
    first = "lab-ngram-predictor-00001"
    assert traffic_of(lab.isvc()) == [(first, 100)] and lab.revisions_running() == [first]
    stable_spec = lab.isvc()["spec"]["predictor"]

    watch = Watch(lab)
    proc, rep = run(lab, tmp_path, specpilot_canary_min_acceptance_rate=1.01, **KNATIVE)
    seen = watch.stop()
    assert "lab-ngram: canary ABORTED" in proc.stdout, proc.stdout[-5000:]
    assert rep["outcome"] == "aborted" and [s["traffic_percent"] for s in rep["steps"]] == [50]
    step = rep["steps"][0]
    assert step["decision"] == "abort" and "below the floor 1.01" in step["reasons"][0]
    assert step["arms"]["canary"]["acceptance"]["draft_acceptance_rate"] > 0.5
    assert step["arms"]["baseline"]["acceptance"] is None
    # the step split the traffic 50/50 between the canary's revision 2 and the stable revision 1, then the
    # abort pinned it all to revision 1 (canaryTrafficPercent 0) until the restored spec's revision 3 was ready
    second, third = "lab-ngram-predictor-00002", "lab-ngram-predictor-00003"
    assert (50, ((second, 50), (first, 50))) in seen, seen
    assert any(ctp == 0 and dict(split).get(first) == 100 for ctp, split in seen), seen
    # the stable spec runs again, as revision 3, with all the traffic; the canary's revision is scaled to zero
    isvc = lab.isvc()
    assert "canaryTrafficPercent" not in isvc["spec"]["predictor"]
    assert isvc["spec"]["predictor"] == stable_spec
    assert isvc["metadata"]["annotations"]["specpilot.io/spec-digest"] == "stable"
    assert traffic_of(isvc) == [(third, 100)]
    assert isvc["status"]["components"]["predictor"]["latestRolledoutRevision"] == third
    assert lab.revisions_running() in ([third], [first, third])  # revision 1 goes once unrouted
    # what the abort wrote back was on record before the first step
    record = lab.res("v1", "ConfigMap").get(name="specpilot-canary-lab-ngram", namespace=lab.ns).to_dict()
    assert json.loads(record["data"]["stable"])["predictor"] == stable_spec


def test_a_knative_canary_left_by_an_interrupted_run_is_aborted_with_the_stable_spec_on_record(
    knative_lab, tmp_path
):
    lab = knative_lab
    stable_spec, stable_rev = lab.isvc()["spec"]["predictor"], revision_number(lab.isvc())
    # what a run killed mid-step leaves: the plan's predictor at 25% beside the stable revision
    predictor = dict(lab.plan["inferenceservice"]["spec"]["predictor"], canaryTrafficPercent=25)
    lab.res(*ISVC_API).patch(
        name="lab-ngram",
        namespace=lab.ns,
        body={"metadata": lab.plan["inferenceservice"]["metadata"], "spec": {"predictor": predictor}},
        content_type="application/merge-patch+json",
    )
    left = "lab-ngram-predictor-%05d" % (stable_rev + 1)
    wait(lambda: dict(traffic_of(lab.isvc())).get(left) == 25, 60, "the left canary's revision at 25%")
    proc, rep = run(lab, tmp_path, **KNATIVE)
    assert "lab-ngram: canary ABORTED" in proc.stdout, proc.stdout[-5000:]
    assert "(canaryTrafficPercent at 25%) was found and aborted" in rep["steps"][0]["reasons"][0]
    isvc = lab.isvc()
    assert isvc["spec"]["predictor"] == stable_spec
    assert isvc["metadata"]["annotations"]["specpilot.io/spec-digest"] == "stable"
    assert traffic_of(isvc) == [("lab-ngram-predictor-%05d" % (stable_rev + 2), 100)]


def test_a_healthy_knative_canary_is_promoted_through_canary_traffic_percent(knative_lab, tmp_path):
    lab = knative_lab
    stable_number = revision_number(lab.isvc())
    watch = Watch(lab)
    proc, rep = run(lab, tmp_path, specpilot_canary_retry=True, **KNATIVE)
    seen = watch.stop()
    assert "lab-ngram: canary PROMOTED" in proc.stdout, proc.stdout[-5000:]
    assert [(s["traffic_percent"], s["decision"]) for s in rep["steps"]] == [
        (50, "promote-step"),
        (100, "promote-step"),
    ]
    step = rep["steps"][0]
    assert (
        step["arms"]["canary"]["figures"]["tpot"]["p50_ms"]
        < step["arms"]["baseline"]["figures"]["tpot"]["p50_ms"]
    )
    # during the first step: canaryTrafficPercent 50, the new revision and the stable one (restored by the
    # aborts) half each
    stable_rev = "lab-ngram-predictor-%05d" % stable_number
    canary_rev = "lab-ngram-predictor-%05d" % (stable_number + 1)
    assert rep["canary_name"] == canary_rev
    assert (50, ((canary_rev, 50), (stable_rev, 50))) in seen, seen
    assert (100, ((canary_rev, 100),)) in seen, seen
    # promoted: no canaryTrafficPercent, the speculative config, the canary's revision rolled out with all the traffic
    isvc = lab.isvc()
    assert "canaryTrafficPercent" not in isvc["spec"]["predictor"]
    assert isvc["spec"]["predictor"]["model"]["args"] == lab.plan["args"]
    assert isvc["metadata"]["annotations"]["specpilot.io/spec-digest"] == lab.plan["spec_digest"]
    assert traffic_of(isvc) == [(canary_rev, 100)]
    comp = isvc["status"]["components"]["predictor"]
    assert (comp["latestRolledoutRevision"], comp["previousRolledoutRevision"]) == (canary_rev, stable_rev)
    assert lab.revisions_running() == [canary_rev] and lab.ready()
    # the module's runs went as the shipped ServiceAccount, and it was refused nothing
    assert lab.automation.refused_since_start() == set()
