"""PVC staging copy throughput (issue 5): the staging program against ``cp``, side by side in one run.

The staging program (``module_utils/staging/stager.py``, what the staging Job runs) copies a model from a
``pvc://`` source directory: sha256 of every byte (the default ``verify``) or sizes only
(``verify: size``), fsync of every file it wrote, the layout check and the marker.  The baseline is
``cp -r`` of the same directory followed by ``sync <every copied file>`` (coreutils fsyncs each
named file): the same bytes made durable the same way.  ``sync -f`` (flush the whole filesystem)
would charge the baseline for every other dirty page on the machine, which the Job never pays.

Target: >= 0.8x cp's throughput, for both verify modes.  Runs are interleaved (cp, sha256, size),
the best of ``SPECPILOT_BENCH_STAGING_REPEAT`` + 1 counts: the machine is shared.

Environment: ``SPECPILOT_BENCH_STAGING_COPY_MIB`` (data copied, default 1024: below that the
program's start-up dominates), ``SPECPILOT_BENCH_STAGING_REPEAT`` (default 2). Quick mode: 2 MiB, one run.
Contract for ``python -m benchmarks``: ``run() -> list[dict(name, value, unit, target, ok)]``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "collections", ROOT / "lab", ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from benchmarks import quick, setting  # noqa: E402
from benchmarks.bench_staging import SYSTEM_PYTHON, _make_model, stager_program  # noqa: E402

COPY_MIB = setting("SPECPILOT_BENCH_STAGING_COPY_MIB", 1024, 2)
REPEAT = max(1, setting("SPECPILOT_BENCH_STAGING_REPEAT", 2, 1))
ROUNDS = 1 if quick() else REPEAT + 1


def stage_copy(src_root: Path, work: Path, verify: str) -> float:
    """Seconds the staging program takes to stage <src_root>/target into a fresh directory."""
    dest = Path(tempfile.mkdtemp(dir=work, prefix="pvc-"))
    req = {
        "format": 1,
        "dest_root": str(dest),
        "progress_interval": 60,
        "verify": verify,
        "artifacts": [
            {
                "role": "target",
                "uri": "pvc://src/target",
                "src_root": str(src_root),
                "dest": "target",
                "request_digest": "sha256:bench",
            }
        ],
    }
    reqf = dest / "request.json"
    reqf.write_text(json.dumps(req))
    t0 = time.perf_counter()
    subprocess.run(
        [SYSTEM_PYTHON, stager_program(work), "--request", str(reqf)], check=True, stdout=subprocess.DEVNULL
    )
    took = time.perf_counter() - t0
    shutil.rmtree(dest)
    return took


def cp_copy(src_root: Path, work: Path) -> float:
    """Seconds of ``cp -r`` + ``sync`` (fsync) of every copied file."""
    dest = Path(tempfile.mkdtemp(dir=work, prefix="cp-"))
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", str(src_root / "target"), str(dest / "target")], check=True)
    files = [str(p) for p in sorted((dest / "target").rglob("*")) if p.is_file()]
    subprocess.run(["sync", *files], check=True)
    took = time.perf_counter() - t0
    shutil.rmtree(dest)
    return took


def run():
    rows = []
    work = Path(tempfile.mkdtemp(prefix="specpilot-bench-copy-"))
    try:
        copy_bytes = _make_model(work / "src" / "target", COPY_MIB << 20, 3)
        best = {"cp": float("inf"), "sha256": float("inf"), "size": float("inf")}
        for _ in range(ROUNDS):
            best["cp"] = min(best["cp"], cp_copy(work / "src", work))
            for verify in ("sha256", "size"):
                best[verify] = min(best[verify], stage_copy(work / "src", work, verify))
        for verify, label in (("sha256", "sha256 of every byte"), ("size", "verify: size")):
            ratio = best["cp"] / best[verify]
            rows.append(
                {
                    "name": f"PVC staging copy throughput / cp -r + fsync, {COPY_MIB} MiB, {label}",
                    "value": round(ratio, 2),
                    "unit": "x (%.0f vs %.0f MiB/s)"
                    % (copy_bytes / best[verify] / 2**20, copy_bytes / best["cp"] / 2**20),
                    "target": ">= 0.8",
                    "ok": ratio >= 0.8,
                }
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
