"""module_utils/engine/acceptance_record.py and its filters (issue 38): the acceptance smoke measured, recorded per
vLLM release in ConfigMap <service>-specpilot-acceptance, and a live reading compared with the record of the same
release only."""

from __future__ import annotations

import json

from ansible_collections.specpilot.core.plugins.filter import acceptance_record as flt
from ansible_collections.specpilot.core.plugins.module_utils.engine import acceptance_record as ar

PLAN = {"vllm_version": "0.32.0", "speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
        "spec_digest": "abc"}
# a smoke verdict's stats on the real engine (issue 39's walk: lab-ngram accepted everything)
STATS = {"acceptance_rate": 1.0, "mean_acceptance_length": 4.0, "per_position_acceptance": [1.0, 1.0, 1.0],
         "num_draft_tokens": 96, "verdict": "pass"}


def test_a_measurement_is_recorded_under_its_release_and_other_releases_stay():
    old = {"vllm-0.24.0": json.dumps({"vllm_version": "0.24.0", "acceptance_rate": 0.7})}
    data = flt.acceptance_record_data(old, STATS, PLAN, "smoke", 0.0, {"qps": 1}, "2026-11-28T23:50:00Z")
    assert set(data) == {"vllm-0.24.0", "vllm-0.32.0"} and data["vllm-0.24.0"] == old["vllm-0.24.0"]
    rec = json.loads(data["vllm-0.32.0"])
    assert rec == {
        "source": "smoke", "vllm_version": "0.32.0", "method": "ngram", "k": 3, "temperature": 0.0,
        "workload": {"qps": 1}, "acceptance_rate": 1.0, "mean_acceptance_length": 4.0, "per_position": [1.0, 1.0, 1.0],
        "num_drafts": None, "num_draft_tokens": 96, "spec_digest": "abc", "where": None, "at": "2026-11-28T23:50:00Z",
    }
    # nothing measured, nothing recorded
    assert flt.acceptance_record_data({}, {"acceptance_rate": None}, PLAN) == {}
    assert flt.acceptance_record_summary(data, "0.32.0").startswith(
        "vLLM 0.32.0, ngram k=3: acceptance 1.000 (per position 1.00 / 1.00 / 1.00), mean acceptance length 4.00")
    assert flt.acceptance_record_summary(data, "0.33.0") == "no acceptance recorded"


def test_the_live_acceptance_is_compared_with_the_record_of_the_same_release_only():
    data = flt.acceptance_record_data({}, STATS, PLAN, "smoke", 0.0, None, "t")
    same = flt.acceptance_record_compare(data, "0.32.0", 0.71, [0.95, 0.70, 0.48])
    assert [d["difference"] for d in same["differences"]] == [-0.05, -0.3, -0.52]
    assert same["lower"] == [1, 2]
    assert same["text"].endswith("lower than recorded by more than 0.10 at position 1, position 2")
    assert "against the record of vLLM 0.32.0 (smoke, t at temperature 0.0)" in same["text"]
    # another release: no record to compare with (acceptance moves across releases: vllm #26191, #33771)
    assert flt.acceptance_record_compare(data, "0.33.0", 0.71, [0.95]) == {}
    # a reading without positions falls back to the rate
    rate_only = ar.compare(0.5, None, json.loads(data["vllm-0.32.0"]))
    assert rate_only["lower"] == [None] and "the rate" in rate_only["text"]


def test_a_release_name_becomes_a_configmap_key():
    assert ar.key_of("0.32.0+cpu") == "vllm-0.32.0_cpu" and ar.key_of(None) == "vllm-unknown"
    assert ar.record_name("lab-ngram") == "lab-ngram-specpilot-acceptance"


def _live(version="0.31.0", image=None):
    """A live InferenceService deploy left: the release it records, the ServingRuntime it names (no image of its own)."""
    model = {"runtime": "svc-vllm", "args": ["/mnt/models", "--speculative-config={}"]}
    if image:
        model["image"] = image
    return {"kind": "InferenceService", "metadata": {"name": "svc", "annotations": {"specpilot.io/vllm-version": version}},
            "spec": {"predictor": {"model": model}}}


def _runtime(image):
    return {"kind": "ServingRuntime", "spec": {"containers": [{"name": "kserve-container", "image": image}]}}


NEW = dict(PLAN, name="svc", namespace="ns", args=["/mnt/models", "--speculative-config={}"],
           servingruntime=_runtime("vllm/vllm-openai:v0.32.0"))


def test_validate_shows_the_running_releases_record_when_the_spec_changes_the_release():
    """issue 38: validate.yml (specpilot_validate_live) - the spec moves the image from 0.31.0 to 0.32.0; the record of
    the running 0.31.0, written by the benchmark, is shown per position with k, method and version, and the new
    release is said to be unmeasured until smoke or canary.yml measures it."""
    figures = dict(STATS, per_position_acceptance=[0.9, 0.7, 0.5], acceptance_rate=0.7, where="the target level qps=1")
    data = flt.acceptance_record_data({}, figures, dict(PLAN, vllm_version="0.31.0"), "benchmark", 0.0, None, "t")
    lines = flt.acceptance_record_change(_live(), NEW, data, _runtime("vllm/vllm-openai:v0.31.0"))
    assert lines[0] == ("the spec changes the runtime: live vLLM 0.31.0 (image vllm/vllm-openai:v0.31.0) -> spec vLLM "
                        "0.32.0 (image vllm/vllm-openai:v0.32.0)")
    assert lines[1] == ("recorded acceptance of the running release: vLLM 0.31.0, ngram k=3: acceptance 0.700 (per "
                        "position 0.90 / 0.70 / 0.50), mean acceptance length 4.00, temperature 0.0, by benchmark (the "
                        "target level qps=1) at t")
    assert lines[2].startswith("the acceptance of vLLM 0.32.0 is unmeasured until smoke.yml or a canary measures it: "
                               "canary.yml with this spec")
    # nothing recorded for the running release: said, not skipped
    assert flt.acceptance_record_change(_live(), NEW, {}, _runtime("vllm/vllm-openai:v0.31.0"))[1] == (
        "no acceptance recorded for vLLM 0.31.0 (smoke.yml and benchmark.yml record it)")


def test_validate_says_when_there_is_no_release_change_or_no_service():
    same = flt.acceptance_record_change(_live("0.32.0"), NEW, {}, _runtime("vllm/vllm-openai:v0.32.0"))
    assert same == ["the spec keeps the running vLLM release (0.32.0) and runtime image: no release change to compare"]
    # the predictor's own image wins over its runtime's (KServe merges it over the runtime's container)
    own = flt.acceptance_record_change(_live("0.32.0", image="vllm/vllm-openai:v0.31.0"), NEW, {},
                                       _runtime("vllm/vllm-openai:v0.32.0"))
    assert own[0].startswith("the spec changes the runtime: live vLLM 0.32.0 (image vllm/vllm-openai:v0.31.0)")
    assert flt.acceptance_record_change({}, NEW, {}) == ["ns/svc is not deployed: no running vLLM release to compare with"]
