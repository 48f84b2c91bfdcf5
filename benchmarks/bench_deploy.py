"""Benchmark of playbooks/deploy.yml: the no-op re-run of 10 services against 1 service.

Ten lab-like services are deployed once to a throw-away API emulator and brought to "rolled out"
(Deployment and InferenceService status written as KServe would, see
tests/emulator/deploy/deploy_helpers.FakeKServe).  Then ``deploy.yml`` runs again, with nothing to
change: once limited to one service, once for all ten (same inventory, same ansible-playbook
start-up), best of ``SPECPILOT_BENCH_DEPLOY_RUNS`` (default 3) runs each, the two kinds interleaved
so that a busy machine weighs on both alike.

A no-op re-run only reads: per service, the validation (on the controller) and one read of its
live objects through kubernetes.core's k8s lookup in the worker process; no module is shipped,
no lock is taken, nothing is written.  Target: 10 services <= 2.5x one service.

Contract for ``python -m benchmarks``: ``run() -> list[dict(name, value, unit, target, ok)]``.
Standalone: ``python benchmarks/bench_deploy.py``. Environment: ``SPECPILOT_BENCH_DEPLOY_SERVICES`` (10),
``SPECPILOT_BENCH_DEPLOY_RUNS`` (3). Quick mode: 2 services, one run each, no warm-up run.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "lab", ROOT / "collections", ROOT / "tests" / "emulator" / "deploy"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from deploy_helpers import NGRAM, FakeKServe, Run, create_namespace, write_inventory  # noqa: E402
from specpilot_lab.testing import Emulator  # noqa: E402

from benchmarks import quick, setting  # noqa: E402

SERVICES = setting("SPECPILOT_BENCH_DEPLOY_SERVICES", 10, 2)
RUNS = setting("SPECPILOT_BENCH_DEPLOY_RUNS", 3, 1)
RATIO_TARGET = 2.5
NAMESPACE = "bench-deploy"


def _run(emu, tmp: Path, inv: Path, *args: str) -> Run:
    run = Run(emu, tmp, inv, *args).wait(1800)
    if run.rc != 0:
        raise RuntimeError("deploy.yml %s failed:\n%s" % (" ".join(args), run.out[-4000:]))
    return run


def _noop_seconds(emu, tmp: Path, inv: Path, *args: str) -> float:
    run = _run(emu, tmp, inv, *args)
    changed = sum(r["changed"] for r in run.recap().values())
    if changed:
        raise RuntimeError("the re-run changed %d task(s): %s" % (changed, run.changed_tasks()))
    return run.seconds


def run():
    with tempfile.TemporaryDirectory(prefix="specpilot-bench-deploy-") as tmp_name:
        tmp = Path(tmp_name)
        emu = Emulator(tmp / "emulator").start()
        try:
            create_namespace(emu, NAMESPACE)
            services = {
                "svc-%02d" % i: {"specpilot_speculative": dict(NGRAM, num_speculative_tokens=2 + i % 3)}
                for i in range(SERVICES)
            }
            inv = write_inventory(tmp / "inv", NAMESPACE, services)
            started = time.perf_counter()
            _run(emu, tmp, inv, "-e", "specpilot_deploy_wait=false")
            first_s = time.perf_counter() - started
            FakeKServe(emu, NAMESPACE).reconcile_all()  # every service rolled out
            if not quick():
                _noop_seconds(emu, tmp, inv)  # warm-up (discovery cache, compiled files)
            ones, manys = [], []
            for _ in range(RUNS):
                ones.append(_noop_seconds(emu, tmp, inv, "--limit", "svc-00"))
                manys.append(_noop_seconds(emu, tmp, inv))
            one, many = min(ones), min(manys)
        finally:
            emu.stop()
    ratio = many / one
    return [
        {
            "name": "deploy.yml first run, %d services (no wait)" % SERVICES,
            "value": first_s,
            "unit": "s",
            "target": "",
            "ok": True,
        },
        {"name": "deploy.yml no-op re-run, 1 service", "value": one, "unit": "s", "target": "", "ok": True},
        {
            "name": "deploy.yml no-op re-run, %d services" % SERVICES,
            "value": many,
            "unit": "s",
            "target": "",
            "ok": True,
        },
        {
            "name": "deploy.yml no-op re-run, %d services / 1 service" % SERVICES,
            "value": ratio,
            "unit": "x",
            "target": "<= %g" % RATIO_TARGET,
            "ok": ratio <= RATIO_TARGET,
        },
    ]


if __name__ == "__main__":
    for row in run():
        print(
            "%-55s %10.3g %-3s %-8s %s"
            % (row["name"], row["value"], row["unit"], row["target"], "ok" if row["ok"] else "MISSED")
        )
