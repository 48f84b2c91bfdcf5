"""A stalled API server fails a kubernetes.core task cleanly at its timeout instead of hanging it (issue 19).

kubernetes.core passes the kubernetes client no request timeout; the roles bound each kubernetes.core task
with the task keyword ``timeout`` (``specpilot_<role>_api_timeout``; tests/unit/test_api_timeouts.py checks
that every task has one). Here the emulator holds the read for far longer than that timeout.
"""

from __future__ import annotations

import time

import pytest
from test_kubernetes_core import playbook_proc

from specpilot_lab import podlogs

STALL_S = 120  # the emulator's delay: the run must end long before it
TIMEOUT_S = 2
DIAG_TIMEOUT_S = 10  # the diagnosis's reads: a module run (k8s_log) on a busy machine needs a few seconds

pytestmark = pytest.mark.slow


def test_a_stalled_read_fails_at_the_task_timeout(emulator, tmp_path):
    ns = "stalled"
    rule = emulator.control.add_fault(
        verb="get", resource="configmaps", namespace=ns, delay_ms=STALL_S * 1000, count=1
    )
    started = time.monotonic()
    proc = playbook_proc(
        emulator, tmp_path, "stalled_read.yml", {"ns": ns, "api_timeout": TIMEOUT_S}, timeout=STALL_S - 30
    )
    elapsed = time.monotonic() - started
    out = proc.stdout + proc.stderr
    # the read reached the server and was held there
    injected = [f for f in emulator.control.faults() if f["id"] == rule["id"]][0]["injected"]
    assert injected == 1, out
    # the run failed at the read, with Ansible's timeout message, and did not wait out the stall
    assert proc.returncode == 2, out
    assert f"Task failed: Timed out after {TIMEOUT_S} second(s)" in out, out
    assert "Never reached" not in out, out
    assert "failed=1" in out, out
    assert elapsed < STALL_S / 4, f"the run took {elapsed:.1f}s: it waited for the stalled API server"


def test_a_stalled_read_during_the_diagnosis_is_named_and_the_diagnosis_still_fails_the_run(
    emulator, tmp_path
):
    """The deploy role's diagnosis of a rollout that timed out, while the API server stalls its list of Events:
    the read times out (the task keyword timeout, which failed_when cannot catch), and the run fails with the
    diagnosis - the rollout's failure, what could be read (the engine log), and "could not read the Events of
    namespace ...: Timed out after 2 second(s)" - not with the timeout message of the read."""
    ns, pod = "diag-stalled", "svc-predictor-x1"
    client = emulator.dynamic_client()
    client.resources.get(api_version="v1", kind="Namespace").create(
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    client.resources.get(api_version="v1", kind="Pod").create(
        namespace=ns,
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod},
            "spec": {"containers": [{"name": "kserve-container", "image": "vllm/vllm-openai:v0.32.0"}]},
        },
    )
    podlogs.append(
        emulator.state_dir, ns, pod, "kserve-container", ["INFO engine starting", "INFO loading weights"]
    )
    rule = emulator.control.add_fault(
        verb="list", resource="events", namespace=ns, delay_ms=STALL_S * 1000, count=1
    )
    started = time.monotonic()
    proc = playbook_proc(
        emulator,
        tmp_path,
        "diagnose_stalled.yml",
        {"ns": ns, "api_timeout": DIAG_TIMEOUT_S, "pod": pod},
        timeout=STALL_S - 30,
    )
    elapsed = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert [f for f in emulator.control.faults() if f["id"] == rule["id"]][0]["injected"] == 1, out
    assert proc.returncode == 2 and "reached" not in out.split("Never reached")[-1], out
    failure = out.split("Diagnose | Fail with the diagnosis")[-1]
    assert "specpilot deploy: svc (namespace %s) is not ready: the rollout timed out" % ns in failure, out
    assert "timed out after 900s: pod %s is not ready" % pod in failure, out
    assert "INFO loading weights" in failure, out  # what could be read is there
    assert (
        "could not read the Events of namespace %s: Timed out after %d second(s)" % (ns, DIAG_TIMEOUT_S)
        in failure
    )
    assert "could not read the kserve-container log" not in failure, out
    assert "failed=1" in out and "ignored=1" in out, out
    assert elapsed < STALL_S / 4, f"the run took {elapsed:.1f}s: it waited for the stalled API server"
