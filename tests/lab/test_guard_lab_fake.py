"""playbooks/guard.yml as a schedule runs it in the lab (emulator + lab controller: real pods and
rollouts) with the smoke tests' stand-in engine, under traffic, with auto-rollback on and the real
specpilot_rollback role.

Two n-gram services deployed with playbooks/deploy.yml from the lab inventory's n-gram spec: one
whose engine accepts 20% of its drafted tokens, one that accepts ~80%. The guard runs K times, one
ansible-playbook invocation per "minute": the low service is watched (streak 1..K-1, nothing
touched), then at the K-th reading rolled back (no --speculative-config, a new pod whose engine runs
speculative_config=None and exports no spec_decode series); the healthy service is never touched; one
more run finds the low service off and changes nothing."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml
from automation import Automation
from smoke_lab import INVENTORY, NAMESPACE, ROOT, VENV_BIN, fake_env

pytestmark = [pytest.mark.lab, pytest.mark.slow]

GUARD = ROOT / "playbooks" / "guard.yml"
LOW, OK = "lab-guard-low", "lab-guard-ok"
K = 2  # specpilot_guard_consecutive_readings (each more reading: one more guard run, ~30 s)
WINDOW = 2  # seconds between the guard's two scrapes (a schedule would use 60)


def _inventory(path: Path) -> Path:
    """Two more hosts for the lab inventory, each the lab's n-gram service (inventories/lab/host_vars/
    lab-ngram.yml), told its acceptance (the fake engine reads FAKE_ACCEPTANCE from the pod env)."""
    ngram = yaml.safe_load((INVENTORY / "host_vars" / "lab-ngram.yml").read_text())
    hosts = {
        LOW: dict(ngram, **fake_env(FAKE_ACCEPTANCE="0.2")),
        OK: dict(ngram, **fake_env(FAKE_ACCEPTANCE="0.9,0.8,0.7")),
    }
    path.write_text(yaml.safe_dump({"specpilot_services": {"hosts": hosts}}))
    return path


class Traffic:
    """Completions sent to every service, one after the other, all the time the guard runs (the
    guard reads what was drafted between its two scrapes). Failures (a pod being replaced) are counted
    and ignored."""

    def __init__(self, lab, services: list[str]):
        self.urls = {s: lab.isvc(s)["status"]["url"] for s in services}
        self.ok = dict.fromkeys(services, 0)
        self.failed = dict.fromkeys(services, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="guard-traffic", daemon=True)

    def _send(self, name: str) -> None:
        body = {"model": name, "prompt": "the model predicts the next token quickly.", "max_tokens": 64}
        req = urllib.request.Request(
            self.urls[name] + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
            self.ok[name] += 1
        except OSError:
            self.failed[name] += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            for name in self.urls:
                self._send(name)
            self._stop.wait(0.1)

    def __enter__(self) -> "Traffic":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


def _guard(lab, inv: Path, out: Path, automation):
    """One scheduled run of guard.yml over both services (its own ansible-playbook process), as the shipped
    ServiceAccount only."""
    extra = {
        **automation.extra,
        "specpilot_guard_auto_rollback": True,
        "specpilot_guard_consecutive_readings": K,
        "specpilot_guard_window_seconds": WINDOW,
        "specpilot_guard_report_dir": str(out / "guard"),
        "specpilot_rollback_report_dir": str(out / "rollback"),
        "specpilot_smoke_report_dir": str(out / "smoke"),
        "specpilot_rollback_wait_delay": 1,
    }
    run = lab.playbook(GUARD, f"{LOW},{OK}", "-i", str(inv), extra=extra, env=automation.env(lab.env()))
    assert run.rc == 0, run.output[-6000:]
    report = json.loads((out / "guard" / "guard.json").read_text())
    run.by = {s["name"]: s for s in report["services"]}
    run.report = report
    return run


def _history(lab, name: str) -> tuple[list[str], str]:
    cm = lab.get("v1", "ConfigMap", f"{name}-specpilot-guard", "specpilot-lab")
    return [h["status"] for h in json.loads(cm["data"]["history"])], cm["metadata"]["resourceVersion"]


def _args(isvc: dict) -> list[str]:
    return isvc["spec"]["predictor"]["model"]["args"]


def _metrics(lab, name: str) -> str:
    with urllib.request.urlopen(lab.isvc(name)["status"]["url"] + "/metrics", timeout=10) as resp:
        return resp.read().decode()


def test_scheduled_guard_rolls_back_the_low_service_after_k_readings(fake_spec_lab, tmp_path):
    lab = fake_spec_lab
    inv = _inventory(tmp_path / "guard-lab.yml")
    lab.deploy(f"{LOW},{OK}", "-i", str(inv))
    pods = {s: lab.wait_single_ready_pod(s, 120)["metadata"]["name"] for s in (LOW, OK)}
    low_before, ok_before = lab.isvc(LOW), lab.isvc(OK)
    # every guard run (and the rollback it runs) as the shipped ServiceAccount only (playbooks/rbac.yml)
    automation = Automation(lab.emu, tmp_path, VENV_BIN / "ansible-playbook", INVENTORY, lab.env(), NAMESPACE)
    assert any(a.startswith("--speculative-config=") and '"ngram"' in a for a in _args(low_before))
    # the same n-gram config: only the engines' acceptance differs
    assert _args(ok_before) == _args(low_before)
    assert "SpeculativeConfig(method='ngram'" in lab.engine_log(pods[LOW])

    def ok_untouched():
        now = lab.isvc(OK)
        assert now["metadata"]["resourceVersion"] == ok_before["metadata"]["resourceVersion"]
        assert now["metadata"]["generation"] == ok_before["metadata"]["generation"]
        assert _args(now) == _args(ok_before)
        assert lab.live_pods(OK) == [pods[OK]]

    runs = []
    with Traffic(lab, [LOW, OK]) as traffic:
        # readings 1..K-1: watched, untouched
        for n in range(1, K):
            run = _guard(lab, inv, tmp_path / f"run{n}", automation)
            runs.append(run)
            low = run.by[LOW]
            assert (low["status"], low["action"], low["streak"]) == ("low", "watch", n), low
            assert low["acceptance_rate"] == pytest.approx(0.2, abs=0.01) and low["drafted"] >= 100
            assert not low["rolled_back"] and run.report["rolled_back"] == []
            assert lab.isvc(LOW)["metadata"]["resourceVersion"] == low_before["metadata"]["resourceVersion"]
            assert lab.live_pods(LOW) == [pods[LOW]]
            assert run.recap()[LOW]["changed"] == 1  # the guard history, nothing else
            ok_untouched()

        # reading K: the real rollback role turns speculative decoding off
        run = _guard(lab, inv, tmp_path / f"run{K}", automation)
        runs.append(run)
        low = run.by[LOW]
        assert (low["status"], low["action"], low["streak"]) == ("low", "rollback", K), low
        assert low["rolled_back"] and run.report["rolled_back"] == [LOW]
        assert f"{K}/{K} low readings in a row; rolling speculative decoding back" in low["message"]
        ok_untouched()
        off, new, off_history = lab.isvc(LOW), lab.live_pods(LOW), _history(lab, LOW)

        # one more scheduled run: nothing to do for the rolled-back service
        again = _guard(lab, inv, tmp_path / "again", automation)
        runs.append(again)
        ok_untouched()
    assert traffic.failed[OK] == 0, traffic.failed

    for r in runs:
        ok = r.by[OK]
        assert (ok["status"], ok["action"], ok["streak"]) == ("healthy", "none", 0), ok
        assert ok["acceptance_rate"] == pytest.approx(0.79, abs=0.02) and ok["drafted"] >= 100
        assert not ok["rolled_back"]

    # the low service: no speculative flag, a new pod whose engine runs without speculative decoding
    assert not [a for a in _args(off) if "speculative" in a]
    assert _args(off) == [a for a in _args(low_before) if not a.startswith("--speculative-config")]
    assert len(new) == 1 and new[0] != pods[LOW]
    assert "speculative_config=None" in lab.engine_log(new[0])
    assert "vllm:spec_decode" not in _metrics(lab, LOW)
    assert "vllm:spec_decode_num_drafts_total" in _metrics(lab, OK)
    rep = json.loads((tmp_path / f"run{K}" / "rollback" / f"{LOW}.json").read_text())
    assert rep["changed"] and rep["verification"]["ok"] and rep["smoke"]["verdict"] == "pass", rep
    assert not (tmp_path / f"run{K}" / "rollback" / f"{OK}.json").exists()

    low = again.by[LOW]
    assert (low["status"], low["action"], low["rolled_back"]) == ("off", "none", False), low
    assert again.report["rolled_back"] == [] and again.report["needs_action"] == []
    assert again.recap()[LOW]["changed"] == 0
    now = lab.isvc(LOW)  # not written again, not restarted, no reading recorded
    assert now["spec"] == off["spec"] and now["metadata"]["generation"] == off["metadata"]["generation"]
    assert lab.live_pods(LOW) == new
    assert _history(lab, LOW) == off_history and off_history[0] == ["low"] * K
    assert _history(lab, OK)[0] == ["healthy"] * (K + 1)
    # nothing the guard and its rollback asked for was refused but the look inside the pod (pods/exec)
    assert automation.refused_since_start() <= {("pods", "exec")}
