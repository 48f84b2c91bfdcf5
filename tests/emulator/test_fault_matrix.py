"""The fault matrix (issue 19): deploy, rollback and the guard (auto-rollback through the rollback role)
against the API emulator injecting about 20% faults in the service's namespace - 500s, 409s, 429s with
Retry-After, and delays - with fixed seeds.  Each run either converges or fails cleanly (a summary, no
traceback) with the service whole: the previous spec, or the new one complete, never a mix of the
two.  Then a clean run converges.  The test plays KServe (deploy's FakeKServe)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "deploy"))
sys.path.insert(0, str(HERE.parents[0] / "unit" / "monitoring"))
import guard_support as gs  # noqa: E402
import vllm_pages as vp  # noqa: E402
from deploy_helpers import (
    NGRAM,
    FakeKServe,
    Run,
    create_namespace,
    get,
    run_deploy,
    write_inventory,
)  # noqa: E402

pytestmark = pytest.mark.slow

ISVC_API = "serving.kserve.io/v1beta1"
GROUP = {
    "specpilot_rollback_smoke": False,
    "specpilot_rollback_wait_delay": 0.5,
    "specpilot_rollback_wait_timeout": 60,
    "specpilot_rollback_api_retries": 8,
    "specpilot_guard_window_seconds": 1,
    "specpilot_guard_min_draft_tokens": 20,
    "specpilot_guard_consecutive_readings": 1,
    "specpilot_guard_auto_rollback": True,
}


def _inject(ctl, ns, seed):
    """About 20% of the namespace's requests fail (500, 409, 429 with Retry-After), 10% are slow."""
    for offset, (code, rate) in enumerate(((500, 0.07), (409, 0.07), (429, 0.06))):
        ctl.add_fault(
            verb="*", resource="*", namespace=ns, rate=rate, code=code, seed=seed + offset, retry_after=1
        )
    ctl.add_fault(verb="*", resource="*", namespace=ns, rate=0.1, delay_ms=200, seed=seed + 3)


def _state(emu, ns):
    """(InferenceService spec digest, runtime spec digest, speculative on): what serves."""
    isvc = get(emu, ISVC_API, "InferenceService", "svc", ns)
    runtime = get(emu, "serving.kserve.io/v1alpha1", "ServingRuntime", "svc-vllm", ns) or {"metadata": {}}
    args = isvc["spec"]["predictor"]["model"]["args"]
    return (
        isvc["metadata"]["annotations"]["specpilot.io/spec-digest"],
        (runtime["metadata"].get("annotations") or {}).get("specpilot.io/spec-digest"),
        any("speculative" in a for a in args),
    )


def _deploy(emu, tmp, inv, ns, metrics_url):
    # a new speculative config and a new runtime image: the runtime and the InferenceService change together
    host = {
        "specpilot_speculative": dict(NGRAM, num_speculative_tokens=5),
        "specpilot_runtime": {"image": "specpilot-lab/vllm-cpu:0.32.5", "shm_size": "1Gi"},
    }
    write_inventory(inv, ns, {"svc": host}, GROUP)
    return run_deploy(emu, tmp, inv)


def _rollback(emu, tmp, inv, ns, metrics_url):
    return Run(
        emu,
        tmp,
        inv,
        "-e",
        "specpilot_rollback_report_dir=%s" % (tmp / "reports"),
        playbook="playbooks/rollback.yml",
    ).wait(600)


def _guard(emu, tmp, inv, ns, metrics_url):
    extra = {"specpilot_guard_metrics_url": metrics_url, "specpilot_guard_report_dir": str(tmp / "guard")}
    return Run(emu, tmp, inv, "-e", json.dumps(extra), playbook="playbooks/guard.yml").wait(600)


@pytest.mark.parametrize(
    "operation, run, seed",
    [("deploy", _deploy, 101), ("rollback", _rollback, 202), ("guard", _guard, 303)],
)
def test_converges_or_fails_cleanly_under_api_faults(emulator, tmp_path, operation, run, seed):
    ns = f"faults-{operation}"
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {"svc": {"specpilot_speculative": NGRAM}}, GROUP)
    metrics = gs.MetricsServer()
    metrics_url = metrics.add("svc", vp.LOW) + "/metrics"  # low acceptance: the guard rolls back
    ctl = emulator.control
    try:
        with FakeKServe(emulator, ns):
            first = run_deploy(emulator, tmp_path, inv)
            assert first.rc == 0, first.out[-4000:]
            before = _state(emulator, ns)
            _inject(ctl, ns, seed)
            try:
                faulty = run(emulator, tmp_path, inv, ns, metrics_url)
                hits = sum(f["injected"] for f in ctl.faults())
            finally:
                ctl.clear_faults()
            during = _state(emulator, ns)
            clean = run(emulator, tmp_path, inv, ns, metrics_url)
            after = _state(emulator, ns)
    finally:
        metrics.close()
    assert hits > 0
    if faulty.rc != 0:  # a clean failure: the summary names it, no traceback, the service whole
        assert "Traceback" not in faulty.out and "MODULE FAILURE" not in faulty.out, faulty.out[-4000:]
        assert during in (before, after), (before, during, after)
        if operation == "deploy":  # as the deploy-only fault test asserted: the summary says which failed
            assert "FAILED" in faulty.out.split("TASK [Summary of every service]", 1)[-1], faulty.out[-4000:]
    else:
        assert during == after
    assert clean.rc == 0, clean.out[-4000:]
    assert after != before  # converged: the new config (deploy) or speculative decoding off
    assert after[2] == (operation == "deploy")
    if operation == "deploy":  # the runtime and the InferenceService carry the same digest
        assert before[0] == before[1] and during[0] == during[1] and after[0] == after[1]
    assert get(emulator, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", ns) is None
