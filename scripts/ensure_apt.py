#!/usr/bin/env python3
"""Make Debian packages available: install the missing ones, or unpack them.

Usage:
  ensure_apt.py PACKAGE [PACKAGE ...]          apt-get install what is missing
  ensure_apt.py --unpack DIR PACKAGE [...]     download the .deb and unpack it under DIR

Packages already present are left alone, so a machine that has them needs no
network and no root. ``apt-get update`` runs once, only when something is
missing. ``--unpack`` is for packages whose files clash with something already
on the machine (Debian's ``kubernetes-client`` owns /usr/bin/kubectl, which
some images take from another vendor's ``kubectl`` package): the project gets
exactly the Debian build without touching the system.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
SUDO = [] if os.geteuid() == 0 else ["sudo", "-n"]


def log(msg: str) -> None:
    print(f"[apt] {msg}", flush=True)


def not_installed(packages: list[str]) -> list[str]:
    out = []
    for pkg in packages:
        res = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if "install ok installed" not in res.stdout:
            out.append(pkg)
    return out


def apt_update() -> None:
    subprocess.run(SUDO + ["apt-get", "update", "-qq"], check=True, env=ENV)


def install(packages: list[str]) -> int:
    todo = not_installed(packages)
    if not todo:
        log(f"already installed: {' '.join(packages)}")
        return 0
    if not shutil.which("apt-get"):
        log(f"missing {todo} and no apt-get on this machine: install them by hand")
        return 1
    log(f"installing {' '.join(todo)}")
    apt_update()
    subprocess.run(SUDO + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *todo],
                   check=True, env=ENV)
    still = not_installed(todo)
    if still:
        log(f"still missing after install: {still}")
        return 1
    return 0


def unpack(dest: Path, packages: list[str]) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    for pkg in packages:
        marker = dest / f".{pkg}.unpacked"
        if marker.exists():
            log(f"{pkg} already unpacked under {dest}")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            res = subprocess.run(["apt-get", "download", pkg], cwd=tmp, env=ENV, capture_output=True, text=True)
            if res.returncode != 0:
                apt_update()
                subprocess.run(["apt-get", "download", pkg], cwd=tmp, env=ENV, check=True)
            debs = list(Path(tmp).glob("*.deb"))
            if not debs:
                log(f"apt-get download {pkg} produced no .deb")
                return 1
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(dest)], check=True)
            marker.write_text(debs[0].name + "\n")
            log(f"unpacked {debs[0].name} under {dest}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unpack", type=Path, metavar="DIR")
    parser.add_argument("packages", nargs="+")
    args = parser.parse_args()
    if args.unpack:
        return unpack(args.unpack, args.packages)
    return install(args.packages)


if __name__ == "__main__":
    sys.exit(main())
