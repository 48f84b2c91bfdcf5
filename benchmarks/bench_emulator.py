"""Emulator start-to-ready time and memory, with the upstream KServe v0.20.0 CRDs loaded.

    .venv/bin/python benchmarks/bench_emulator.py [--runs 5] [--crds DIR] [--json]

Targets (issue 2): start to ready < 3 s, RSS < 150 MB.  "cold" runs disable the parsed-CRD
cache (SPECPILOT_LAB_CACHE=""), so they pay for parsing the 2 MB YAML; "warm" runs use it.
Memory is measured after boot and again after a workload (50 InferenceServices written,
listed, patched, and read back as a Table), which is what a lab session looks like.
Prints numbers; asserts nothing.  ``run()`` gives the rows for ``python -m benchmarks``.
Environment: ``SPECPILOT_BENCH_EMULATOR_RUNS`` (warm runs, 3), ``SPECPILOT_BENCH_EMULATOR_ISVCS`` (50);
quick mode: one cold and one warm run, 5 InferenceServices.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "lab"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from specpilot_lab.testing import UPSTREAM_CRDS, Emulator  # noqa: E402

from benchmarks import quick, setting  # noqa: E402

TARGET_START_S = 3.0
TARGET_RSS_MB = 150.0
RUNS = setting("SPECPILOT_BENCH_EMULATOR_RUNS", 3, 1)
WORKLOAD = setting("SPECPILOT_BENCH_EMULATOR_ISVCS", 50, 5)


def workload(emu: Emulator, count: int = WORKLOAD) -> None:
    base = "/apis/serving.kserve.io/v1beta1/namespaces/default/inferenceservices"
    for i in range(count):
        body = {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": f"bench-{i}", "labels": {"bench": "yes"}},
            "spec": {
                "predictor": {
                    "model": {
                        "modelFormat": {"name": "vLLM"},
                        "args": ["--model=/mnt/models", f"--seed={i}"],
                        "storageUri": "pvc://models/target",
                    }
                }
            },
        }
        r = emu.request("POST", base, body)
        assert r.status == 201, r
        r = emu.request(
            "PATCH",
            f"{base}/bench-{i}",
            {"spec": {"predictor": {"minReplicas": 1}}},
            content_type="application/merge-patch+json",
        )
        assert r.status == 200, r
    assert len(emu.request("GET", base + "?labelSelector=bench%3Dyes").json()["items"]) == count
    emu.request("GET", base, accept="application/json;as=Table;v=v1;g=meta.k8s.io")


def run_once(crds: list[str], cold: bool) -> dict:
    env_backup = os.environ.get("SPECPILOT_LAB_CACHE")
    if cold:
        os.environ["SPECPILOT_LAB_CACHE"] = ""
    try:
        with tempfile.TemporaryDirectory(prefix="bench-emulator-") as tmp:
            emu = Emulator(Path(tmp) / "state", crds, "bench")
            t0 = time.monotonic()
            emu.start(timeout=60)
            ready = time.monotonic() - t0
            try:
                rss_boot = emu.rss_kib() / 1024
                workload(emu)
                rss_work = emu.rss_kib() / 1024
            finally:
                emu.stop()
    finally:
        if env_backup is None:
            os.environ.pop("SPECPILOT_LAB_CACHE", None)
        else:
            os.environ["SPECPILOT_LAB_CACHE"] = env_backup
    return {"start_s": ready, "rss_boot_mb": rss_boot, "rss_after_workload_mb": rss_work}


def measure(crds: str, runs: int = 3) -> dict:
    results: dict[str, list[dict]] = {"cold": [run_once([crds], cold=True)], "warm": []}
    if not quick():
        run_once([crds], cold=False)  # fills the cache
    for _ in range(runs):
        results["warm"].append(run_once([crds], cold=False))
    return results


def run() -> list[dict]:
    """Rows for ``python -m benchmarks`` (name, value, unit, target, ok)."""
    crds = str(UPSTREAM_CRDS) if UPSTREAM_CRDS.is_dir() else str(ROOT / "lab" / "crds")
    label = "upstream v0.20.0 CRDs" if UPSTREAM_CRDS.is_dir() else "lab CRDs (upstream ones absent)"
    results = measure(crds, runs=RUNS)
    cold = max(r["start_s"] for r in results["cold"])
    warm = statistics.median(r["start_s"] for r in results["warm"])
    rss = max(r["rss_after_workload_mb"] for rs in results.values() for r in rs)
    boot = statistics.median(r["rss_boot_mb"] for r in results["warm"])
    return [
        {
            "name": f"emulator start-to-ready, cold ({label})",
            "value": cold,
            "unit": "s",
            "target": f"< {TARGET_START_S:g} s",
            "ok": cold < TARGET_START_S,
        },
        {
            "name": f"emulator start-to-ready, warm ({label})",
            "value": warm,
            "unit": "s",
            "target": f"< {TARGET_START_S:g} s",
            "ok": warm < TARGET_START_S,
        },
        {
            "name": f"emulator RSS after boot ({label})",
            "value": boot,
            "unit": "MB",
            "target": f"< {TARGET_RSS_MB:g} MB",
            "ok": boot < TARGET_RSS_MB,
        },
        {
            "name": f"emulator RSS after {WORKLOAD} InferenceServices ({label})",
            "value": rss,
            "unit": "MB",
            "target": f"< {TARGET_RSS_MB:g} MB",
            "ok": rss < TARGET_RSS_MB,
        },
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=RUNS)
    p.add_argument("--crds", default=str(UPSTREAM_CRDS), help="CRD dir (default: upstream v0.20.0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args()
    if not Path(args.crds).exists():
        print(f"CRDs not found at {args.crds}; nothing to measure", file=sys.stderr)
        return 2
    results = measure(args.crds, args.runs)
    summary = {}
    for mode, runs in results.items():
        summary[mode] = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
        summary[mode]["runs"] = len(runs)
    worst_start = max(r["start_s"] for rs in results.values() for r in rs)
    worst_rss = max(r["rss_after_workload_mb"] for rs in results.values() for r in rs)
    if args.json:
        print(
            json.dumps(
                {
                    "crds": args.crds,
                    "summary": summary,
                    "worst_start_s": worst_start,
                    "worst_rss_mb": worst_rss,
                }
            )
        )
        return 0
    print(f"emulator with CRDs from {args.crds}")
    print(f"{'mode':6} {'runs':>4} {'start-to-ready s':>17} {'RSS boot MB':>12} {'RSS after load MB':>18}")
    for mode, s in summary.items():
        print(
            f"{mode:6} {s['runs']:>4} {s['start_s']:>17.2f} {s['rss_boot_mb']:>12.1f} "
            f"{s['rss_after_workload_mb']:>18.1f}"
        )
    print(
        f"worst start {worst_start:.2f} s (target < {TARGET_START_S:.0f} s); "
        f"worst RSS {worst_rss:.1f} MB (target < {TARGET_RSS_MB:.0f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
