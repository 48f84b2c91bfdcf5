"""The lab controller's spec.canary (KServe 0.20, Standard mode) against the emulator, with the
fake engine: the canary's own Deployment and Service, the traffic split at the service's address,
canaryStatuses and CanaryPredictorReady, abort by removing the entry, promotion by renaming."""

from __future__ import annotations

import urllib.request

import pytest

from test_controller import ISVC, NGRAM, assert_quiet

pytestmark = [pytest.mark.lab]

STANDARD = {"serving.kserve.io/deploymentMode": "Standard"}


def _served_by_canary(url: str) -> bool:
    """The fake server exports the spec-decode counters only with a speculative config."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return "spec_decode" in resp.read().decode()


def _deployments(lab, ns: str) -> dict[str, dict]:
    items = lab.list("apps/v1", "Deployment", ns, label_selector="serving.kserve.io/inferenceservice=tiny")
    return {d["metadata"]["name"]: d for d in items}


def _canary(percent: int) -> dict:
    args = ["--model=/mnt/models/target", NGRAM]
    # the v0.20.0 CRD requires the canary model's modelFormat and name (the container is kserve-container anyway)
    model = {"modelFormat": {"name": "vLLM"}, "name": "c", "args": args}
    return {"spec": {"canary": [{"trafficPercent": percent, "predictor": {"name": "spec", "model": model}}]}}


def test_canary_split_abort_and_promotion(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.create(
        {
            "apiVersion": ISVC[0],
            "kind": ISVC[1],
            "metadata": {"name": "tiny", "annotations": STANDARD},
            "spec": {
                "predictor": {
                    "model": {
                        "modelFormat": {"name": "vLLM"},
                        "storageUri": "pvc://models/",
                        "args": ["--model=/mnt/models/target"],
                    }
                }
            },
        },
        ns,
    )
    url = lab.wait_ready(ns, "tiny", 20)["status"]["url"]
    stable_pod = lab.pods(ns, "tiny")[0]["metadata"]["name"]
    # what the canary must never write: the stable Deployment's spec (its generation and pod template); its
    # status is the lab kubelet's and may still settle after the InferenceService reads Ready
    stable = _deployments(lab, ns)["tiny-predictor"]
    stable_spec = (stable["metadata"]["generation"], stable["spec"]["template"])

    # a canary: its own Deployment {isvc}-{name}-predictor and Service, half the traffic once ready
    lab.patch(*ISVC, "tiny", ns, _canary(50))
    lab.wait(
        lambda: lab.conditions(ns, "tiny").get("CanaryPredictorReady", {}).get("status") == "True",
        20,
        "CanaryPredictorReady",
    )
    st = lab.get_isvc(ns, "tiny")["status"]
    assert st["canaryStatuses"] == [{"name": "spec", "ready": True, "trafficPercent": 50}]
    assert lab.conditions(ns, "tiny")["CanaryPredictorReady"]["reason"] == "AllCanariesReady"
    assert set(_deployments(lab, ns)) == {"tiny-predictor", "tiny-spec-predictor"}
    svc = lab.get("v1", "Service", "tiny-spec-predictor", ns)
    assert svc["spec"]["selector"] == {"app": "isvc.tiny-spec-predictor"}
    hits = [_served_by_canary(url) for _ in range(60)]
    assert 10 <= sum(hits) <= 50, sum(hits)  # 50% by weight, per connection
    canary_pod = next(p for p in lab.pods(ns, "tiny") if p["metadata"]["name"] != stable_pod)
    assert canary_pod["metadata"]["labels"]["app"] == "isvc.tiny-spec-predictor"

    # abort: the entry goes, so do the canary's objects; the stable predictor was never touched
    lab.patch(*ISVC, "tiny", ns, {"spec": {"canary": None}})
    lab.wait(lambda: set(_deployments(lab, ns)) == {"tiny-predictor"}, 20, "canary Deployment deleted")
    lab.wait(lambda: len(lab.pods(ns, "tiny")) == 1, 20, "canary pod deleted")
    # the Service goes after the Deployment and its pods, as garbage collection takes them one by one: wait
    # for it rather than catch the controller between two deletes (a CI run did)
    lab.wait(lambda: lab.get("v1", "Service", "tiny-spec-predictor", ns) is None, 20, "canary Service deleted")
    assert lab.pods(ns, "tiny")[0]["metadata"]["name"] == stable_pod
    after = _deployments(lab, ns)["tiny-predictor"]
    assert (after["metadata"]["generation"], after["spec"]["template"]) == stable_spec
    lab.wait(lambda: "canaryStatuses" not in lab.get_isvc(ns, "tiny")["status"], 10, "canaryStatuses cleared")
    assert "CanaryPredictorReady" not in lab.conditions(ns, "tiny")
    assert not any(_served_by_canary(url) for _ in range(10))

    # promotion: predictor.name becomes the canary's, the entry goes; the canary's pod carries on
    lab.patch(*ISVC, "tiny", ns, _canary(100))
    lab.wait(
        lambda: (lab.get_isvc(ns, "tiny")["status"].get("canaryStatuses") or [{}])[0].get("ready"),
        20,
        "ready",
    )
    canary_pod = next(
        p["metadata"]["name"] for p in lab.pods(ns, "tiny") if p["metadata"]["name"] != stable_pod
    )
    assert all(_served_by_canary(url) for _ in range(10))  # 100%: the stable predictor gets nothing
    promoted = {"name": "spec", "model": {"args": ["--model=/mnt/models/target", NGRAM]}}
    lab.patch(*ISVC, "tiny", ns, {"spec": {"canary": None, "predictor": promoted}})
    lab.wait(
        lambda: set(_deployments(lab, ns)) == {"tiny-spec-predictor"}, 20, "old stable Deployment deleted"
    )
    lab.wait(lambda: [p["metadata"]["name"] for p in lab.pods(ns, "tiny")] == [canary_pod], 20, "one pod")
    lab.wait_ready(ns, "tiny", 20)
    lab.wait(lambda: lab.get("v1", "Service", "tiny-predictor", ns) is None, 20, "old stable Service deleted")
    assert all(_served_by_canary(url) for _ in range(10))
    assert lab.get_isvc(ns, "tiny")["status"]["url"] == url
    assert_quiet(lab)


def test_canary_webhook_rules(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(ns, "tiny", ["--model=/mnt/models/target"])  # no deploymentMode annotation
    lab.patch(*ISVC, "tiny", ns, _canary(10))
    lab.wait(
        lambda: "canary is only supported in Standard deployment mode"
        in lab.conditions(ns, "tiny").get("Ready", {}).get("message", ""),
        20,
        "the webhook's message",
    )
