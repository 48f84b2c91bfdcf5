"""The lab controller's Knative (Serverless) mode against the emulator, with the fake engine: a
revision per predictor template ({isvc}-predictor-0000N, its own Deployment and pods with Knative's
labels), canaryTrafficPercent splitting the service's address between the latest revision and the
last one rolled out, the tag routes (serving.kserve.io/enable-tag-routing), status.components.predictor
as KServe writes it, and the revision that loses its traffic scaled to zero."""

from __future__ import annotations

import urllib.request

import pytest

from test_controller import ISVC, NGRAM, assert_quiet

pytestmark = [pytest.mark.lab]

SERVERLESS = {
    "serving.kserve.io/deploymentMode": "Serverless",
    "serving.kserve.io/enable-tag-routing": "true",
}


def _served_by_canary(url: str) -> bool:
    """The fake server exports the spec-decode counters only with a speculative config."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return "spec_decode" in resp.read().decode()


def _component(lab, ns):
    return lab.get_isvc(ns, "tiny")["status"]["components"]["predictor"]


def _traffic(lab, ns):
    return [(t["revisionName"], t["percent"], t.get("tag")) for t in _component(lab, ns).get("traffic") or []]


def _running(lab, ns):
    return sorted(p["metadata"]["labels"]["serving.knative.dev/revision"] for p in lab.pods(ns, "tiny"))


def test_revisions_canary_traffic_percent_and_promotion(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    model = {
        "modelFormat": {"name": "vLLM"},
        "storageUri": "pvc://models/",
        "args": ["--model=/mnt/models/target"],
    }
    lab.create(
        {
            "apiVersion": ISVC[0],
            "kind": ISVC[1],
            "metadata": {"name": "tiny", "annotations": SERVERLESS},
            "spec": {"predictor": {"model": model}},
        },
        ns,
    )
    st = lab.wait_ready(ns, "tiny", 20)["status"]
    url = st["url"]
    assert st["deploymentMode"] == "Serverless"
    first = "tiny-predictor-00001"
    comp = st["components"]["predictor"]
    assert (comp["latestCreatedRevision"], comp["latestReadyRevision"], comp["latestRolledoutRevision"]) == (
        first,
        first,
        first,
    )
    assert _traffic(lab, ns) == [(first, 100, "latest")] and comp["traffic"][0]["latestRevision"] is True
    pod = lab.pods(ns, "tiny")[0]
    labels = pod["metadata"]["labels"]
    assert labels["serving.knative.dev/revision"] == first and labels["component"] == "predictor"
    assert (
        labels["serving.knative.dev/configuration"]
        == labels["serving.knative.dev/service"]
        == "tiny-predictor"
    )
    assert pod["metadata"]["name"].startswith(first + "-deployment-")
    assert {"PredictorReady", "PredictorRouteReady", "PredictorConfigurationReady"} <= set(
        lab.conditions(ns, "tiny")
    )

    # a new template with canaryTrafficPercent: revision 2 takes 50% once ready, revision 1 the rest (tag prev)
    second = "tiny-predictor-00002"
    spec = {"model": dict(model, args=["--model=/mnt/models/target", NGRAM]), "canaryTrafficPercent": 50}
    lab.patch(*ISVC, "tiny", ns, {"spec": {"predictor": spec}})
    lab.wait(
        lambda: _traffic(lab, ns) == [(second, 50, "latest"), (first, 50, "prev")], 20, "the 50/50 split"
    )
    comp = _component(lab, ns)
    assert comp["latestRolledoutRevision"] == first and comp["latestReadyRevision"] == second
    assert _running(lab, ns) == [first, second]
    hits = [_served_by_canary(url) for _ in range(60)]
    assert 10 <= sum(hits) <= 50, sum(hits)  # 50% by weight, per connection
    tags = {t["tag"]: t["url"] for t in comp["traffic"]}
    assert all(_served_by_canary(tags["latest"]) for _ in range(5))
    assert not any(_served_by_canary(tags["prev"]) for _ in range(5))
    # canaryTrafficPercent alone is the Route's: no new revision
    lab.patch(*ISVC, "tiny", ns, {"spec": {"predictor": {"canaryTrafficPercent": 80}}})
    lab.wait(
        lambda: _traffic(lab, ns) == [(second, 80, "latest"), (first, 20, "prev")], 20, "the 80/20 split"
    )
    assert _component(lab, ns)["latestCreatedRevision"] == second

    # promotion: canaryTrafficPercent removed, the latest revision takes it all and is rolled out; the
    # previous one is scaled to zero (its Deployment stays, at 0 replicas)
    lab.patch(*ISVC, "tiny", ns, {"spec": {"predictor": {"canaryTrafficPercent": None}}})
    lab.wait(lambda: _traffic(lab, ns) == [(second, 100, "latest")], 20, "100% on the latest revision")
    lab.wait(lambda: _component(lab, ns)["latestRolledoutRevision"] == second, 20, "the rollout recorded")
    assert _component(lab, ns)["previousRolledoutRevision"] == first
    lab.wait(lambda: _running(lab, ns) == [second], 20, "revision 1 scaled to zero")

    # its pods go first, then its Deployment is written at 0 replicas (the lab's _scale_to_zero): two writes,
    # a reader may come between them, so wait for the Deployment too
    def scaled_to_zero():
        dep = lab.get("apps/v1", "Deployment", first + "-deployment", ns)
        return dep if dep and dep["spec"]["replicas"] == 0 else None

    old = lab.wait(scaled_to_zero, 10, "revision 1's Deployment at 0 replicas")
    assert old["spec"]["replicas"] == 0
    assert all(_served_by_canary(url) for _ in range(10))
    lab.wait_ready(ns, "tiny", 20)
    assert_quiet(lab)
