"""playbooks/benchmark.yml against the lab (API emulator + controller), fast.

The controller runs benchmarks/stream_server.py as the "vLLM" of every predictor pod: it streams
like vLLM and, with a speculative config, emits 3.4 tokens per decode step and exports the
spec-decode counters. The test applies the validated plan of the lab's ngram service itself
(the deploy role is not needed), then runs the playbook: the twin InferenceService without the
speculative config comes up, both sides are measured from the controller, the report is written
with the five context fields, and the twin is gone afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from automation import Automation
from specpilot_lab.controller import Controller
from specpilot_lab.testing import LAB_CRDS, Emulator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "benchmark"))
from bench_helpers import BIN, ROOT, STREAM_SERVER, ansible_env  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.measures_latency]
ISVC_API = ("serving.kserve.io/v1beta1", "InferenceService")


@contextlib.contextmanager
def fake_engine_lab(tmp_path, *engine_args):
    """The emulator and the controller, with benchmarks/stream_server.py (engine_args) as every pod's vLLM."""
    exe = tmp_path / "python"
    exe.write_text(
        '#!/bin/sh\n[ "$1" = "-m" ] && shift 2\nexec %s %s %s "$@"\n'
        % (sys.executable, STREAM_SERVER, " ".join(engine_args))
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    emu = Emulator(tmp_path / "lab", [str(LAB_CRDS)]).start()
    ctl = Controller(
        emu.kubeconfig,
        tmp_path / "lab",
        vllm_python=exe,
        crash_backoff=1.0,
        job_backoff=0.5,
        node_labels={"nvidia.com/gpu.product": "NVIDIA-LAB-FAKE"},
    ).start()
    try:
        yield emu
    finally:
        ctl.stop()
        emu.stop()


@pytest.fixture
def stream_lab(tmp_path):
    """Steps of 8 ms, a speculative step 1.3x as dear as a plain one: the realised TPOT speedup
    (3.4 / 1.3 = 2.6x) stays well under the acceptance ceiling (3.3-3.4 tokens per step) even when
    the machine was busier while the baseline ran than while the speculative side did, so the
    verdict's ceiling check (a speedup above 1.1x the ceiling is invalid) does not trip on noise.
    (In a CI run with 4 ms steps and equal step costs, a busy moment gave 3.74x against 3.29.)"""
    with fake_engine_lab(tmp_path, "--step-ms", "8", "--spec-step-cost", "1.3") as emu:
        yield emu


def playbook(tmp_path, emu, *args, playbook_file="playbooks/benchmark.yml", check=True, automation=None):
    """ansible-playbook on lab-ngram of inventories/lab, as the lab admin, or with ``automation``
    (automation.Automation) as the shipped ServiceAccount only."""
    env = ansible_env(tmp_path)
    env["KUBECONFIG"] = str(emu.kubeconfig)
    if automation is not None:
        env = automation.env(env)
        args = (*args, "-e", json.dumps(automation.extra))
    cmd = [
        str(BIN / "ansible-playbook"),
        "-i",
        "inventories/lab",
        playbook_file,
        "--limit",
        "lab-ngram",
        *args,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if check:
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


_PLANS: dict[str, str] = {}


def plan_of_lab_ngram(tmp_path, emu, extra=None):
    """lab-ngram's validated plan (``extra``: extra vars, e.g. another deployment mode). Made once per test
    session and set of extra vars: the plan is a function of the inventory and the vars only (validation reads
    no cluster), and each ansible-playbook that made it cost seconds of CPU; each caller gets its own copy."""
    key = json.dumps(extra or {}, sort_keys=True)
    if key not in _PLANS:
        _PLANS[key] = json.dumps(_validated_plan(tmp_path, emu, extra))
    return json.loads(_PLANS[key])


def _validated_plan(tmp_path, emu, extra):
    out = tmp_path / "plan.json"
    play = tmp_path / "plan.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "lab-ngram",
                    "gather_facts": False,
                    "tasks": [
                        {"specpilot.core.spec_validate": {"display_warnings": False}, "register": "v"},
                        {"ansible.builtin.copy": {"content": "{{ v.plan | to_json }}", "dest": str(out)}},
                    ],
                }
            ]
        )
    )
    playbook(tmp_path, emu, *(("-e", json.dumps(extra)) if extra else ()), playbook_file=str(play))
    return json.loads(out.read_text())


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        val = pred()
        if val:
            return val
        time.sleep(0.3)
    raise AssertionError("timed out waiting for " + what)


# short, CPU-friendly runs on the stand-in engine (the benchmark and tune lab tests)
FAST_BENCHMARK = {
    "specpilot_benchmark_runs_per_prompt": 2,
    "specpilot_benchmark_warmup_requests": 2,
    "specpilot_benchmark_max_tokens": 24,
    "specpilot_benchmark_wait_timeout": 120,
    # TTFT may be anything on a busy machine: up to 10x worse is inside the allowance; TPOT decides
    "specpilot_benchmark_slo": {"ttft_max_regression": 10},
}


def as_automation(tmp_path, lab):
    """The shipped ServiceAccount of lab-ngram's namespace (playbooks/rbac.yml on inventories/lab)."""
    return Automation(
        lab.emu,
        tmp_path,
        BIN / "ansible-playbook",
        ROOT / "inventories" / "lab",
        ansible_env(tmp_path),
        lab.ns,
    )


class Deployed:
    """The lab's ngram service applied from its validated plan (what the deploy role would apply)."""

    PLAN_VARS: dict = {}  # extra vars of the plan (a subclass: another deployment mode)

    def __init__(self, tmp_path, emu):
        self.emu = emu
        self.dyn = emu.dynamic_client()
        self.plan = plan_of_lab_ngram(tmp_path, emu, self.PLAN_VARS)
        self.ns = ns = self.plan["namespace"]
        self.res("v1", "Namespace").create(
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        self.res("v1", "PersistentVolumeClaim").create(
            namespace=ns,
            body={
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": self.plan["delivery"]["pvc"]},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            },
        )
        sr = self.plan["servingruntime"]
        self.res(sr["apiVersion"], sr["kind"]).create(body=sr, namespace=ns)
        self.res(*ISVC_API).create(body=self.inferenceservice(), namespace=ns)
        wait(lambda: self.ready("lab-ngram"), 60, "lab-ngram Ready")

    def inferenceservice(self):
        """The InferenceService to apply: the plan's."""
        return self.plan["inferenceservice"]

    def res(self, api, kind):
        return self.dyn.resources.get(api_version=api, kind=kind)

    def isvc(self, name="lab-ngram"):
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            return self.res(*ISVC_API).get(name=name, namespace=self.ns).to_dict()
        except NotFoundError:
            return None

    def ready(self, name="lab-ngram"):
        st = (self.isvc(name) or {}).get("status") or {}
        return any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])

    def args(self):
        return self.isvc("lab-ngram")["spec"]["predictor"]["model"]["args"]


def test_benchmark_playbook_side_by_side_in_the_lab(stream_lab, tmp_path):
    """As the shipped ServiceAccount only (playbooks/rbac.yml): keep; then an invalid measurement with auto
    rollback (nothing acted on); then a rollback verdict with auto rollback (the rollback role runs); then a
    service whose arguments drifted (refused before anything is created). Nothing the runs asked for was
    refused but the look inside the pod (pods/exec, which the shipped Role leaves out)."""
    emu = stream_lab
    lab = Deployed(tmp_path, emu)
    plan, ns, res, isvc, ready = lab.plan, lab.ns, lab.res, lab.isvc, lab.ready
    automation = as_automation(tmp_path, lab)

    reports = tmp_path / "reports"
    extra = dict(
        FAST_BENCHMARK,
        specpilot_benchmark_report_dir=str(reports),
        specpilot_benchmark_qps_levels=[5, 20],
        specpilot_benchmark_target_qps=20,
    )
    proc = playbook(tmp_path, emu, "-e", json.dumps(extra), automation=automation)
    out = proc.stdout
    assert "lab-ngram: KEEP at qps=20" in out, out[-4000:]
    assert "baseline qps=5" in out and "speculative qps=20" in out  # loop labels
    assert isvc("lab-ngram-baseline") is None  # the twin is cleaned up
    assert ready("lab-ngram")  # the service itself is untouched

    d = reports / "lab-ngram"
    data = json.loads((d / "report.json").read_text())
    assert data["decision"] == "keep" and data["context_missing"] == [], data["verdict"]["reasons"]
    assert (
        data["verdict"]["level"]["key"] == "qps=20" and data["verdict"]["policy"]["ttft_max_regression"] == 10
    )
    assert all(lv["valid"] for lv in data["levels"]) and data["levels"][1]["ratios"]["tpot"]["ci95"][0] > 1
    hw = data["context"]["hardware"]
    assert hw["gpu_product"] == "NVIDIA-LAB-FAKE" and hw["node"] == "lab-node"
    assert data["context"]["runtime"]["vllm_version"] == "0.32.0"
    assert data["context"]["runtime"]["engine_args_baseline"] == plan["args_without_speculative"]
    assert data["context"]["workload"]["name"] == "code-edit"
    for lv in data["levels"]:
        assert lv["baseline"]["ok"] == 12 and lv["speculative"]["ok"] == 12
        assert lv["acceptance"]["spec_decode_enabled"] and lv["acceptance"]["mean_acceptance_length"] > 2
        assert lv["comparison"]["speedups"]["tpot"] > 1.5
    raw = json.loads((d / "raw-baseline-0.json").read_text())
    assert "spec_decode" not in (raw["runs"][0]["metrics_after"] or "")  # the twin has no speculative config
    for f in ("report.md", "latency.png", "throughput.png", "acceptance.png", "progress.log"):
        assert (d / f).exists(), f

    # the verdicts below are decided at the target level: these runs measure only that level, without the
    # temperature sweep (both levels and the sweep are the run above's)
    extra.update(specpilot_benchmark_qps_levels=[20], specpilot_benchmark_sweep_enabled=False)
    # an invalid measurement (no warm-up) with auto rollback: no decision, so nothing is rolled back
    invalid = dict(extra, specpilot_benchmark_warmup_requests=0, specpilot_benchmark_auto_rollback=True)
    invalid["specpilot_benchmark_slo"] = {"ttft_max_regression": 10, "min_gain": 100}  # would be a rollback
    proc = playbook(tmp_path, emu, "-e", json.dumps(invalid), check=False, automation=automation)
    assert proc.returncode == 0 and "lab-ngram: INVALID at qps=20" in proc.stdout, proc.stdout[-4000:]
    assert "specpilot_rollback : " not in proc.stdout
    assert isvc("lab-ngram")["spec"]["predictor"]["model"]["args"] == plan["args"]
    data = json.loads((d / "report.json").read_text())
    assert data["decision"] == "invalid" and "warm-up not done" in data["reasons"][0]

    # a rollback verdict with auto rollback: the rollback role runs, or the run says it is missing
    extra.update(
        {
            "specpilot_benchmark_slo": {"ttft_max_regression": 10, "min_gain": 100},
            "specpilot_benchmark_auto_rollback": True,
        }
    )
    proc = playbook(tmp_path, emu, "-e", json.dumps(extra), check=False, automation=automation)
    assert "lab-ngram: ROLLBACK at qps=20" in proc.stdout, proc.stdout[-4000:]
    data = json.loads((d / "report.json").read_text())
    # the bound figure (TPOT) short of the required 101x: below it beyond the noise, or, when the stand-in's
    # speculative arm measured slower under a busy CI lane (2026-11-29: TPOT 0.37x, 95% CI 0.12-0.38x),
    # worse than baseline beyond the noise; either is this SLO's rollback
    short = r"at qps=20: TPOT (.* is below the required 101\.00x|is worse than baseline) beyond the noise"
    assert data["decision"] == "rollback" and re.match(short, data["reasons"][0]), data["reasons"]
    if not (ROOT / "roles" / "specpilot_rollback").exists():
        assert proc.returncode != 0
        assert "the rollback role (specpilot_rollback) is not installed" in proc.stdout
        assert "speculative decoding is still ON" in proc.stdout
    else:
        assert "specpilot_rollback : " in proc.stdout, proc.stdout[-4000:]
        args = wait(
            lambda: (lambda a: a if not any("--speculative-config" in x for x in a) else None)(
                isvc("lab-ngram")["spec"]["predictor"]["model"]["args"]
            ),
            120,
            "speculative decoding off",
        )
        assert args == plan["args_without_speculative"]
    assert isvc("lab-ngram-baseline") is None

    # a service whose arguments drifted from the plan is refused before anything is created
    body = isvc("lab-ngram")
    body["spec"]["predictor"]["model"]["args"] = plan["args_without_speculative"]
    res(*ISVC_API).replace(body=body, namespace=ns)
    proc = playbook(tmp_path, emu, "-e", json.dumps(extra), check=False, automation=automation)
    assert proc.returncode != 0 and "its arguments differ from the validated plan" in proc.stdout
    assert isvc("lab-ngram-baseline") is None
    assert os.path.exists(d / "report.json")
    assert automation.refused_since_start() <= {("pods", "exec")}
    assert "core/nodes" in automation.rules_needed_since_start()  # the predictor's Node, for the report


def test_benchmark_playbook_sequential_in_the_lab(stream_lab, tmp_path):
    """Sequential mode: the service itself, measured on, rolled off (rollback role), measured off,
    and deployed again (deploy role). At qps=1, the QPS lab-ngram's specpilot_workload names (the
    target level comes from the inventory): keep."""
    for role in ("specpilot_deploy", "specpilot_rollback"):
        if not (ROOT / "roles" / role / "tasks" / "main.yml").exists():
            pytest.skip("sequential mode needs the %s role" % role)
    lab = Deployed(tmp_path, stream_lab)
    reports = tmp_path / "reports"
    extra = {
        "specpilot_benchmark_mode": "sequential",
        # the stream stand-in serves no model files: nothing to look at inside its pod (pod_view is
        # tested on the lab's stand-in engine and on real vLLM)
        "specpilot_smoke_inside_pod": "off",
        # nor on its PVC: the deploy that turns speculation on again would have its probe refuse the missing
        # target directory (issue 39's check, proven in tests/lab/deploy/test_probe_lab_fake.py)
        "specpilot_deploy_probe": "never",
        "specpilot_benchmark_report_dir": str(reports),
        "specpilot_benchmark_qps_levels": [1],
        "specpilot_benchmark_runs_per_prompt": 1,
        "specpilot_benchmark_warmup_requests": 1,
        "specpilot_benchmark_max_tokens": 16,
        # TTFT and throughput may be anything (a busy machine, a service just restarted): they may be
        # up to 1000x worse without failing; TPOT has to improve beyond the noise
        "specpilot_benchmark_slo": {
            "ttft_max_regression": 1000,
            "throughput_max_regression": 0.999,
            "e2e_max_regression": 1000,
        },
    }
    proc = playbook(tmp_path, stream_lab, "-e", json.dumps(extra))
    assert lab.isvc("lab-ngram-baseline") is None  # no twin in sequential mode
    data = json.loads((reports / "lab-ngram" / "report.json").read_text())
    # the speculative side emits 3.4 tokens per step: its TPOT wins by far even on a busy machine
    assert data["decision"] == "keep", json.dumps(data["reasons"], indent=1)
    assert "lab-ngram: KEEP at qps=1" in proc.stdout, proc.stdout[-4000:]
    assert data["verdict"]["level"]["key"] == "qps=1" and data["verdict"]["level"]["qps"] == 1
    assert data["levels"][0]["ratios"]["tpot"]["ci95"][0] > 1  # beyond the noise
    lv = data["levels"][0]
    assert lv["baseline"]["ok"] == 6 and lv["speculative"]["ok"] == 6
    assert lv["acceptance"]["spec_decode_enabled"]
    # the baseline really ran without speculative decoding, and the service is back on afterwards
    raw = json.loads((reports / "lab-ngram" / "raw-baseline-0.json").read_text())
    assert "spec_decode" not in (raw["runs"][0]["metrics_after"] or "")
    assert lab.args() == lab.plan["args"]
    assert wait(lambda: lab.ready("lab-ngram"), 60, "lab-ngram Ready again")


def test_a_saturated_level_is_flagged_invalid_and_not_judged(tmp_path):
    """The stand-in engine plays an API server starved of CPU (--starve-above 1: a request that starts
    while more than one other is in flight gets its whole output in one burst, as the 2-core lab did at
    qps=4). The level at concurrency 1 is judged; the level at concurrency 4 is invalid, with why."""
    with fake_engine_lab(tmp_path, "--step-ms", "8", "--spec-step-cost", "1.3", "--starve-above", "1") as emu:
        Deployed(tmp_path, emu)
        reports = tmp_path / "reports"
        extra = {
            "specpilot_benchmark_report_dir": str(reports),
            "specpilot_benchmark_qps_levels": [],
            "specpilot_benchmark_concurrency_levels": [1, 4],
            "specpilot_benchmark_target_concurrency": 1,
            "specpilot_benchmark_runs_per_prompt": 2,
            "specpilot_benchmark_warmup_requests": 1,
            "specpilot_benchmark_max_tokens": 24,
            "specpilot_benchmark_wait_timeout": 120,
            "specpilot_benchmark_sweep_enabled": False,
            "specpilot_benchmark_slo": {"ttft_max_regression": 10},
        }
        proc = playbook(tmp_path, emu, "-e", json.dumps(extra))
    data = json.loads((reports / "lab-ngram" / "report.json").read_text())
    assert data["per_level"]["qps=inf,c=4"] == "invalid", data["per_level"]
    high = next(lv for lv in data["levels"] if lv["level"]["key"] == "qps=inf,c=4")
    assert high["valid"] is False
    assert any("arrived in one burst" in r for r in high["invalid_reasons"]), high["invalid_reasons"]
    assert data["per_level"]["qps=inf,c=1"] == "keep" and data["decision"] == "keep", data["reasons"]
    assert "invalid and not judged: qps=inf,c=4" in " ".join(data["notes"])
    assert "lab-ngram: KEEP at qps=inf,c=1" in proc.stdout
    assert "temperature sweep is turned off" in json.dumps(data["temperature_sweep_skipped"])
