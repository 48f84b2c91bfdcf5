"""Issue 38 (must show): a canary of a change to a service that already speculates, whose arm accepts less at the
draft positions both arms share, aborts and its report names the drop. The lab's stand-in engine
(lab/specpilot_lab/fake_engine.py) is told its acceptance per position (FAKE_ACCEPTANCE in the pod env): lab-ngram
runs at k=3 accepting 0.95 / 0.90 / 0.85, the canary is the spec at k=2 told to accept 0.95 / 0.50, on another tag
of the runtime image (a change of the image is a change to canary: its predictor names the spec's image). The real
engine's k change is tests/lab/test_canary_real_engine.py; a change of the vLLM release is not run in the lab
(it runs one release): the report says the arms ran two images of one release, not an upgrade, and the comparison an
upgrade would make is the unit tests' on recorded figures (tests/unit/canary/test_canary_change.py).

A promoted image change leaves what deploy.yml of the same spec makes: a deploy.yml of that spec right after changes
nothing (check mode with --diff says so), and a later deploy.yml with another image runs that image,
with no spec.predictor.model.image left to pin the promoted one (tests/unit/canary/test_canary_promotion.py: the
promotion's objects)."""

from __future__ import annotations

import json
import re
import threading
import urllib.request

import pytest
from smoke_lab import DEPLOY, NAMESPACE, ROOT, fake_env

pytestmark = [pytest.mark.lab, pytest.mark.slow]

CANARY = ROOT / "playbooks" / "canary.yml"
CANARY_IMAGE = "specpilot-lab/vllm-cpu:0.32.0-canary"
LATER_IMAGE = "specpilot-lab/vllm-cpu:0.32.0-later"
SERVICE = "lab-ngram"


class Traffic:
    """Completions to the service's address, a new connection each (the lab's Service spreads them by weight)."""

    def __init__(self, url: str):
        self.url, self.ok, self.failed = url, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        body = json.dumps({"model": SERVICE, "prompt": "the model predicts the next token", "max_tokens": 64}).encode()
        while not self._stop.wait(0.05):
            req = urllib.request.Request(self.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    resp.read()
                self.ok += 1
            except OSError:  # the address may refuse while a predictor is replaced
                self.failed += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def _short_steps(reports) -> dict:
    """The canary settings both tests run with: steps 50 and 100 of a 20 s window, 10 requests an arm, one
    extension, no smoke of the promoted service, the reports under ``reports``."""
    return dict(
        specpilot_canary_steps=[50, 100],
        specpilot_canary_window=20,
        specpilot_canary_min_requests=10,
        specpilot_canary_max_extensions=1,
        # 10 scrape intervals an arm for a mean (E2E here): 0.5 s polls hold a step about 5 s, not 10
        specpilot_canary_poll=0.5,
        specpilot_canary_smoke=False,
        specpilot_canary_report_dir=str(reports),
    )


def test_a_canary_that_accepts_less_at_a_shared_position_aborts_naming_the_drop(fake_spec_lab, tmp_path):
    lab = fake_spec_lab
    lab.deploy(SERVICE, extra=fake_env(FAKE_ACCEPTANCE="0.95,0.9,0.85"))
    (stable_pod,) = [lab.wait_single_ready_pod(SERVICE, 120)["metadata"]["name"]]
    before = lab.isvc(SERVICE)
    assert any('"num_speculative_tokens":3' in a for a in before["spec"]["predictor"]["model"]["args"])
    # smoke records what it measured on the cluster, for the service's vLLM release (issue 38 item 3)
    smoke = lab.smoke(SERVICE, tmp_path / "smoke", extra=fake_env(FAKE_ACCEPTANCE="0.95,0.9,0.85"))
    assert smoke.rc == 0, smoke.output[-4000:]
    record = lab.get("v1", "ConfigMap", SERVICE + "-specpilot-acceptance", NAMESPACE)
    (key,) = record["data"]
    recorded = json.loads(record["data"][key])
    assert key == "vllm-" + recorded["vllm_version"] and (recorded["method"], recorded["k"]) == ("ngram", 3)
    assert recorded["source"] == "smoke" and recorded["temperature"] == 0.0
    assert [round(v, 1) for v in recorded["per_position"]] == [0.9, 0.9, 0.8], recorded  # the stand-in's rounding
    reports = tmp_path / "reports"
    traffic = Traffic(before["status"]["url"])
    try:
        run = lab.playbook(
            CANARY,
            SERVICE,
            extra=dict(
                fake_env(FAKE_ACCEPTANCE="0.95,0.5"),
                specpilot_override_num_speculative_tokens=2,
                # another tag of the lab's one release (the lab's pods run the same engine whatever the image)
                specpilot_runtime={"image": CANARY_IMAGE, "image_pull_policy": "IfNotPresent", "shm_size": "1Gi"},
                **_short_steps(reports),
            ),
        )
    finally:
        traffic.stop()
    assert run.rc == 0, run.output[-6000:]
    rep = json.loads((reports / SERVICE / "report.json").read_text())
    md = (reports / SERVICE / "report.md").read_text()
    assert rep["outcome"] == "aborted" and rep["change"] is True, md
    (step,) = rep["steps"]
    assert step["traffic_percent"] == 50 and step["decision"] == "abort", md
    comp = step["positions"]
    assert (comp["stable_k"], comp["canary_k"], comp["shared"]) == (3, 2, 2)
    assert [p["verdict"] for p in comp["positions"]] == ["holds", "drop"], comp
    # the stand-in rounds each request's accepted drafts: 0.90 is 15 of 17 drafts, 0.50 is 13 of 26
    assert re.match(r"acceptance drop at draft position 1: stable 0\.88\d -> canary 0\.50\d \(-0\.3\d\d, 95% CI", step["reasons"][0])
    assert "acceptance drop at draft position 1" in rep["summary"]
    assert re.search(r"\| 1 +\| 0\.88\d \(\d+ / \d+\) +\| 0\.50\d \(\d+ / \d+\) +\| -0\.3\d\d \(.*\) +\| drop +\|", md), md
    assert (reports / SERVICE / "acceptance_positions.png").exists()
    # the canary arm ran the spec's image, and the report does not call two tags of one release an upgrade
    assert rep["images"]["changed"] and rep["images"]["canary"] == CANARY_IMAGE, rep["images"]
    assert rep["images"]["stable"] == "specpilot-lab/vllm-cpu:0.32.0"
    assert "this canary compared two images of one release, not a vLLM upgrade" in md
    # aborted: the canary entry is gone, the stable predictor (k=3) untouched and still serving
    after = lab.isvc(SERVICE)
    assert "canary" not in after["spec"] and after["spec"]["predictor"] == before["spec"]["predictor"]
    assert lab.live_pods(SERVICE) == [stable_pod]
    assert traffic.ok > 0


def _runtime(image: str) -> dict:
    return {"specpilot_runtime": {"image": image, "image_pull_policy": "IfNotPresent", "shm_size": "1Gi"}}


def _pod_images(lab) -> dict[str, str]:
    """{pod: the engine container's image} of the service's pods that are not being deleted."""
    return {
        p["metadata"]["name"]: next(c["image"] for c in p["spec"]["containers"] if c["name"] == "kserve-container")
        for p in lab.pods(SERVICE)
        if not p["metadata"].get("deletionTimestamp")
    }


def test_a_promoted_image_change_is_what_deploy_makes_and_a_later_image_runs(fake_spec_lab, tmp_path):
    lab = fake_spec_lab
    stable_env = fake_env(FAKE_ACCEPTANCE="0.95,0.9,0.85")
    lab.deploy(SERVICE, extra=stable_env)  # k=3 on the inventory's image (as the test above leaves it)
    spec = dict(stable_env, **_runtime(CANARY_IMAGE))  # the same config on another image: only the image changes
    reports = tmp_path / "reports"
    traffic = Traffic(lab.isvc(SERVICE)["status"]["url"])
    try:
        run = lab.playbook(
            CANARY,
            SERVICE,
            extra=dict(
                spec,
                # both arms run the same stand-in engine: not latency, what the promotion leaves is tested here
                specpilot_canary_change_allowance=2.0,
                **_short_steps(reports),
            ),
        )
    finally:
        traffic.stop()
    assert run.rc == 0, run.output[-6000:]
    rep = json.loads((reports / SERVICE / "report.json").read_text())
    assert rep["outcome"] == "promoted" and rep["images"]["changed"], (reports / SERVICE / "report.md").read_text()
    assert "A promotion moves the image to the service's ServingRuntime" in rep["images"]["text"]
    # the runtime names the promoted image (deploy's field manager), the predictor none, and the pod runs it
    isvc = lab.isvc(SERVICE)
    model = isvc["spec"]["predictor"]["model"]
    runtime = lab.get("serving.kserve.io/v1alpha1", "ServingRuntime", model["runtime"], NAMESPACE)
    assert "image" not in model and "canary" not in isvc["spec"], isvc["spec"]
    assert [c["image"] for c in runtime["spec"]["containers"]] == [CANARY_IMAGE]
    appliers = {e["manager"] for e in runtime["metadata"]["managedFields"] if e["operation"] == "Apply"}
    assert "specpilot" in appliers, runtime["metadata"]["managedFields"]
    (promoted_pod,) = _pod_images(lab).items()
    assert promoted_pod[1] == CANARY_IMAGE

    # deploy.yml of the same spec right after (with its cluster probe, as users run it): nothing to change or show.
    # Check mode reports what a run would write (the same decision, deploy_state.decide), so one run in check mode
    # with --diff says it for the real one too, for half its cost
    checked = lab.playbook(DEPLOY, SERVICE, "--check", "--diff", extra=spec)
    assert checked.rc == 0 and checked.recap()[SERVICE]["changed"] == 0, checked.output[-6000:]
    assert "--- before" not in checked.output and "+++ after" not in checked.output, checked.output[-6000:]
    assert _pod_images(lab) == dict([promoted_pod])  # nothing restarted

    # a later deploy.yml with another image runs that image: nothing pins the promoted one (no probe: the release
    # is the same, and what runs is the point here)
    later = lab.deploy(SERVICE, "--diff", extra=dict(stable_env, specpilot_deploy_probe="never", **_runtime(LATER_IMAGE)))
    assert "+++ after" in later.output and LATER_IMAGE in later.output  # --diff shows a change (none above)
    lab.wait(lambda: list(_pod_images(lab).values()) == [LATER_IMAGE], 60 * 3, "the later image's pod alone")
    assert "image" not in lab.isvc(SERVICE)["spec"]["predictor"]["model"]
