"""``python -m specpilot_lab up|down|status``: manage the local lab's processes.

``up`` is idempotent (what runs already is left alone), ``down`` succeeds when nothing runs,
``status`` says what runs, where the kubeconfig is, and how to use it.
Environment: ``SPECPILOT_LAB_DIR`` (default ``.lab`` in the repository), ``SPECPILOT_LAB_CRDS``
(CRD files/directories to load instead of ``lab/crds``, separated by ':' or ','),
``SPECPILOT_LAB_PORT`` (emulator port; default: a free one).
"""

from __future__ import annotations

import argparse
import sys

from . import processes
from .processes import LabPaths


def cmd_up(paths: LabPaths) -> int:
    try:
        for spec in processes.ordered():
            processes.start(paths, spec)
    except RuntimeError as exc:
        print(f"lab up failed: {exc}", file=sys.stderr)
        return 1
    print(f"kubeconfig: {paths.kubeconfig}")
    print(f"export KUBECONFIG={paths.kubeconfig}")
    return 0


def cmd_down(paths: LabPaths) -> int:
    for spec in reversed(processes.ordered()):
        processes.stop(paths, spec)
    return 0


def cmd_status(paths: LabPaths) -> int:
    all_up = True
    for spec in processes.ordered():
        pid = processes.running_pid(paths, spec)
        if pid:
            info = processes.ready_info(paths, spec)
            print(f"{spec.name}: running (pid {pid})")
            for line in spec.describe(paths, info):
                print(f"  {line}")
        else:
            all_up = False
            print(f"{spec.name}: stopped")
    if all_up:
        print(f"kubeconfig: {paths.kubeconfig}")
        print(f"export KUBECONFIG={paths.kubeconfig}")
    else:
        print("the lab is not (fully) running: make lab-up")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specpilot_lab", description="Manage specpilot's local lab.")
    p.add_argument("command", choices=["up", "down", "status"])
    args = p.parse_args(argv)
    paths = LabPaths.default()
    return {"up": cmd_up, "down": cmd_down, "status": cmd_status}[args.command](paths)


if __name__ == "__main__":
    sys.exit(main())
