"""``python -m specpilot_lab.apiserver``: run the Kubernetes API emulator in the foreground."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from . import KUBE_VERSION
from .server import (
    build,
    configure_logging,
    crd_paths_from_env,
    default_crd_dir,
    write_kubeconfig,
    write_ready_file,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m specpilot_lab.apiserver",
        description=f"Kubernetes API emulator (reports {KUBE_VERSION}) for specpilot's lab.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    p.add_argument("--state-dir", required=True, help="directory for the log, pod logs and the ready file")
    p.add_argument(
        "--crd",
        action="append",
        default=None,
        metavar="FILE_OR_DIR",
        help="CRD file or directory to install at boot (repeatable). Default: $SPECPILOT_LAB_CRDS "
        f"or {default_crd_dir()}",
    )
    p.add_argument("--no-crds", action="store_true", help="install no CRDs at boot")
    p.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    p.add_argument(
        "--ready-file",
        help="write JSON {port, url, pid, kubeconfig} here once serving "
        "(default STATE_DIR/apiserver.ready)",
    )
    p.add_argument(
        "--watch-history",
        type=int,
        default=4096,
        help="events kept for watches from an older resourceVersion (older ones get 410 Gone)",
    )
    p.add_argument(
        "--bookmark-interval",
        type=float,
        default=5.0,
        help="seconds between BOOKMARK events on idle watches that allow them",
    )
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()
    state = Path(args.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    configure_logging(state, args.log_level)
    if args.no_crds:
        crds: list = []
    elif args.crd:
        crds = args.crd
    else:
        crds = crd_paths_from_env(os.environ.get("SPECPILOT_LAB_CRDS")) or [str(default_crd_dir())]
    for c in crds:
        if not Path(c).exists():
            print(f"apiserver: CRD path {c} does not exist", file=sys.stderr)
            return 2
    server = build(state, crds, args.host, args.port, watch_history=args.watch_history)
    server.bookmark_interval = args.bookmark_interval
    ready_file = Path(args.ready_file) if args.ready_file else state / "apiserver.ready"
    kubeconfig = None
    if args.kubeconfig:
        kubeconfig = write_kubeconfig(args.kubeconfig, server.https_url, ca_file=server.ca_file)

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    write_ready_file(
        ready_file,
        {
            "port": server.port,
            "url": server.url,
            "https_url": server.https_url,
            "ca_file": str(server.ca_file),
            "pid": os.getpid(),
            "kubeconfig": str(kubeconfig) if kubeconfig else None,
            "startup_seconds": round(time.monotonic() - t0, 3),
        },
    )
    print(f"apiserver: serving {server.url} (ready in {time.monotonic() - t0:.2f}s)", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        try:
            ready_file.unlink()
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
