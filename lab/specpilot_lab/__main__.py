"""``python -m specpilot_lab up|down|status``: manage the local lab's processes.

``up`` is idempotent (what runs already is left alone) and leaves the lab ready for
``inventories/lab``: what its services need before ``stage.yml`` (seed.py: the namespace, the PVCs
with the tiny models, the Modelcar base image and runtime; skipped with ``--only`` or
``--no-seed``). ``down`` succeeds when nothing runs, ``status`` says what runs, what the lab
inventory finds, where the kubeconfig is, and how to use it.
Options: ``--state-dir DIR`` (the lab directory), ``--only NAME`` (one managed process).
Environment: ``SPECPILOT_LAB_DIR`` (default ``.lab`` in the repository), ``SPECPILOT_LAB_CRDS``
(CRD files/directories to load instead of ``lab/crds``, separated by ':' or ','),
``SPECPILOT_LAB_PORT`` (emulator port; default: a free one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import processes, seed
from .processes import LabPaths


def _selected(only: list[str] | None) -> list[processes.ProcessSpec]:
    specs = processes.ordered()
    if only:
        unknown = set(only) - {s.name for s in specs}
        if unknown:
            raise SystemExit(
                f"unknown lab process(es): {', '.join(sorted(unknown))}; "
                f"known: {', '.join(s.name for s in specs)}"
            )
        specs = [s for s in specs if s.name in only]
    return specs


def cmd_up(paths: LabPaths, only: list[str] | None = None, no_seed: bool = False) -> int:
    try:
        for spec in _selected(only):
            processes.start(paths, spec)
        if not (only or no_seed):
            created = seed.seed(paths)
            print(
                "seeded: " + ", ".join(created)
                if created
                else "seed: what the lab inventory needs is there"
            )
    except RuntimeError as exc:
        print(f"lab up failed: {exc}", file=sys.stderr)
        return 1
    print(f"kubeconfig: {paths.kubeconfig}")
    print(f"export KUBECONFIG={paths.kubeconfig}")
    return 0


def cmd_down(paths: LabPaths, only: list[str] | None = None) -> int:
    for spec in reversed(_selected(only)):
        processes.stop(paths, spec)
    return 0


def cmd_status(paths: LabPaths, only: list[str] | None = None) -> int:
    all_up = True
    for spec in _selected(only):
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
        for line in seed.describe(paths):
            print(line)
        print(f"kubeconfig: {paths.kubeconfig}")
        print(f"export KUBECONFIG={paths.kubeconfig}")
        # the project's ansible-playbook and kubectl, to type them bare (README.md, "The local lab")
        print(f"export PATH={processes.REPO_ROOT / '.venv' / 'bin'}:$PATH")
    else:
        print("the lab is not (fully) running: make lab-up")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specpilot_lab", description="Manage specpilot's local lab.")
    p.add_argument("command", choices=["up", "down", "status"])
    p.add_argument(
        "--state-dir", help="lab directory (default: $SPECPILOT_LAB_DIR or .lab in the repository)"
    )
    p.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="act on this managed process only (repeatable), e.g. --only apiserver",
    )
    p.add_argument("--no-seed", action="store_true", help="up: start the processes only")
    args = p.parse_args(argv)
    paths = LabPaths(Path(args.state_dir).resolve()) if args.state_dir else LabPaths.default()
    if args.command == "up":
        return cmd_up(paths, args.only, args.no_seed)
    return {"down": cmd_down, "status": cmd_status}[args.command](paths, args.only)


if __name__ == "__main__":
    sys.exit(main())
