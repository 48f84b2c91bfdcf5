#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Build the specpilot.core collection tarball with its roles (`make collection`).

The project's top-level roles/ is the one source of the roles (CONTRIBUTING.md, Layout): playbooks, molecule
and AWX use them from a checkout. A collection installed from Galaxy or Automation Hub has no checkout, so
the tarball must carry them as `roles/`. ansible-galaxy does not follow a symbolic link to a directory
outside the collection (ansible-core's galaxy/collection/__init__.py `_build_files_manifest_walk`: "Skipping
... as it is a symbolic link to a directory outside the collection"), so a link in the collection would build
a tarball without roles. This script copies the collection and roles/ into a temporary tree and runs
`ansible-galaxy collection build` there; the source tree is never written.

Usage: scripts/build_collection.py [--out DIR]   (prints the tarball's path)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = ROOT / "collections" / "ansible_collections" / "specpilot" / "core"
ROLES = ROOT / "roles"
# what never goes into the tarball: caches, ansible-test's results, molecule's state
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "output", ".ansible", "molecule", "*.tar.gz")


def stage(tree: Path) -> Path:
    """The collection with roles/ copied in, under ``tree``; its path."""
    dest = tree / "ansible_collections" / "specpilot" / "core"
    shutil.copytree(COLLECTION, dest, ignore=IGNORE)
    if (dest / "roles").exists():
        raise SystemExit(f"{COLLECTION}/roles exists: the roles' one source is {ROLES}; remove it")
    shutil.copytree(ROLES, dest / "roles", ignore=IGNORE)
    return dest


def build(out: Path, galaxy: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specpilot-build-") as tmp:
        src = stage(Path(tmp))
        subprocess.run(
            [galaxy, "collection", "build", "--force", "--output-path", str(out.resolve()), str(src)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    version = _version()
    tarball = out.resolve() / f"specpilot-core-{version}.tar.gz"
    if not tarball.is_file():
        raise SystemExit(f"ansible-galaxy wrote no {tarball}")
    return tarball


def _version() -> str:
    for line in (COLLECTION / "galaxy.yml").read_text().splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip().strip("\"'")
    raise SystemExit("galaxy.yml has no version")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "collection", help="where the tarball goes")
    parser.add_argument(
        "--galaxy",
        default=str(Path(sys.executable).parent / "ansible-galaxy"),
        help="the ansible-galaxy to run (default: beside this Python)",
    )
    args = parser.parse_args(argv)
    print(build(args.out, args.galaxy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
