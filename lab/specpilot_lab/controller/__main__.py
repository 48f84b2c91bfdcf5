"""``python -m specpilot_lab.controller``: run the lab controller in the foreground."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .. import engine
from . import scheduling
from .jobs import bwrap_problem
from .manager import Controller, lab_dir_default


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="python -m specpilot_lab.controller", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=lab_dir_default(),
        help="lab state (pvcs/, engines/, jobs/, oci/); default $SPECPILOT_LAB_DIR or .lab",
    )
    p.add_argument("--kubeconfig", type=Path, help="default STATE_DIR/kubeconfig")
    p.add_argument("--podlogs-dir", type=Path, help="the emulator's state dir (pod logs); default STATE_DIR")
    p.add_argument("--ready-file", type=Path, help="write JSON here once watching")
    p.add_argument("--node-name", default=env("SPECPILOT_LAB_NODE_NAME", "lab-node"))
    p.add_argument(
        "--node-gpus",
        type=int,
        default=int(env("SPECPILOT_LAB_NODE_GPUS", "1")),
        help="nvidia.com/gpu capacity of the lab node (counted, never used); env SPECPILOT_LAB_NODE_GPUS",
    )
    p.add_argument(
        "--node-labels",
        default=env("SPECPILOT_LAB_NODE_LABELS", ""),
        help="extra node labels k=v,k2=v2; env SPECPILOT_LAB_NODE_LABELS",
    )
    p.add_argument(
        "--node-taints",
        default=env("SPECPILOT_LAB_NODE_TAINTS", ""),
        help="node taints key=value:Effect,...; env SPECPILOT_LAB_NODE_TAINTS",
    )
    p.add_argument("--node-cpu", default=env("SPECPILOT_LAB_NODE_CPU", "32"))
    p.add_argument("--node-memory", default=env("SPECPILOT_LAB_NODE_MEMORY", "256Gi"))
    p.add_argument(
        "--registry-addr",
        default=env("SPECPILOT_LAB_REGISTRY"),
        help="lab registry host:port (default: STATE_DIR/registry/addr)",
    )
    p.add_argument(
        "--crash-backoff",
        type=float,
        default=float(env("SPECPILOT_LAB_CRASH_BACKOFF_S", "10")),
        help="first restart back-off of a crashed container, doubling up to 300 s (kubelet: 10)",
    )
    p.add_argument(
        "--job-backoff",
        type=float,
        default=float(env("SPECPILOT_LAB_JOB_BACKOFF_S", "10")),
        help="first retry back-off of a failed Job pod, doubling up to 360 s (job controller: 10)",
    )
    p.add_argument(
        "--engine",
        choices=["vllm", "fake"],
        default=env("SPECPILOT_LAB_ENGINE", "vllm"),
        help="what predictor pods run: the real vLLM engine from .venv-vllm (default), or the lab's "
        "stand-in (specpilot_lab/fake_engine.py: vLLM's log lines and /metrics, no model) for fast "
        "runs where the engine is not under test; env SPECPILOT_LAB_ENGINE",
    )
    p.add_argument("--log-level", default=env("SPECPILOT_LAB_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    t0 = time.monotonic()
    state = args.state_dir.resolve()
    kubeconfig = args.kubeconfig or state / "kubeconfig"
    deadline = time.monotonic() + 30
    while not kubeconfig.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not kubeconfig.exists():
        print(f"controller: no kubeconfig at {kubeconfig} (is the emulator running?)", file=sys.stderr)
        return 2
    ctl = Controller(
        kubeconfig,
        state,
        args.podlogs_dir or state,
        node_name=args.node_name,
        node_gpus=args.node_gpus,
        node_labels=scheduling.parse_labels(args.node_labels),
        node_taints=scheduling.parse_taints(args.node_taints),
        node_cpu=args.node_cpu,
        node_memory=args.node_memory,
        registry_addr=args.registry_addr,
        crash_backoff=args.crash_backoff,
        job_backoff=args.job_backoff,
        vllm_python=engine.fake_engine_python(state / "controller" / "fake-engine") if args.engine == "fake" else None,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    ctl.start()
    info = {
        "pid": os.getpid(),
        "node": args.node_name,
        "node_gpus": args.node_gpus,
        "engine": args.engine,
        "vllm_python": str(ctl.vllm_python),
        "vllm_installed": ctl.vllm_python.exists(),
        "bwrap": bwrap_problem() is None,
        "bwrap_problem": bwrap_problem(),
        "startup_seconds": round(time.monotonic() - t0, 3),
    }
    if args.ready_file:
        tmp = args.ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, args.ready_file)
    print(f"controller: watching ({json.dumps(info)})", flush=True)
    if bwrap_problem():
        print(f"controller: WARNING: {bwrap_problem()}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        print("controller: stopping engines and jobs", flush=True)
        ctl.stop()
        if args.ready_file:
            args.ready_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
