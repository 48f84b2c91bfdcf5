"""A stalled API server fails a kubernetes.core task cleanly at its timeout instead of hanging it (issue 19).

kubernetes.core passes the kubernetes client no request timeout; the roles bound each kubernetes.core task
with the task keyword ``timeout`` (``specpilot_<role>_api_timeout``; tests/unit/test_api_timeouts.py checks
that every task has one). Here the emulator holds the read for far longer than that timeout.
"""

from __future__ import annotations

import time

import pytest
from test_kubernetes_core import playbook_proc

STALL_S = 120  # the emulator's delay: the run must end long before it
TIMEOUT_S = 2

pytestmark = pytest.mark.slow


def test_a_stalled_read_fails_at_the_task_timeout(emulator, tmp_path):
    ns = "stalled"
    rule = emulator.control.add_fault(verb="get", resource="configmaps", namespace=ns, delay_ms=STALL_S * 1000, count=1)
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
