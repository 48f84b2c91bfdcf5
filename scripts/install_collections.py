#!/usr/bin/env python3
"""Install the collections named in requirements.yml, with or without Galaxy.

Galaxy is tried first (a quick reachability probe, then ``ansible-galaxy``).
When it does not answer, the same collection versions are taken from the
``ansible`` community package on PyPI, which bundles them: the wheel is
downloaded once (``pip download --no-deps``) and only the requested
collections are extracted. Either way the result is a normal collections
tree that ``ansible-galaxy collection list`` understands.

Usage: install_collections.py [--requirements requirements.yml] [--dest DIR]
                              [--wheel-cache DIR] [--offline] [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

# The `ansible` PyPI release whose bundled collections are used offline.
# ansible 12.3.0 is the newest release that installs on Python 3.11 and
# bundles kubernetes.core 6.2.0.
ANSIBLE_BUNDLE = os.environ.get("SPECPILOT_ANSIBLE_BUNDLE", "ansible==12.3.0")
GALAXY_HOST = ("galaxy.ansible.com", 443)


def log(msg: str) -> None:
    print(f"[collections] {msg}", flush=True)


def galaxy_reachable(timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(GALAXY_HOST, timeout=timeout):
            return True
    except OSError:
        return False


def read_requirements(path: Path) -> list[dict]:
    data = yaml.safe_load(path.read_text()) or {}
    out = []
    for item in data.get("collections", []):
        if isinstance(item, str):
            item = {"name": item}
        out.append({"name": item["name"], "version": str(item.get("version", "*"))})
    return out


def spec_of(version: str) -> SpecifierSet:
    """requirements.yml's version as ansible-galaxy reads it: a bare version is that exact version."""
    if version in ("*", ""):
        return SpecifierSet("")
    return SpecifierSet("==" + version if version[0].isdigit() else version)


def installed_version(dest: Path, name: str) -> str | None:
    ns, coll = name.split(".", 1)
    manifest = dest / "ansible_collections" / ns / coll / "MANIFEST.json"
    if not manifest.is_file():
        return None
    return json.loads(manifest.read_text())["collection_info"]["version"]


def all_satisfied(dest: Path, reqs: list[dict]) -> bool:
    for req in reqs:
        ver = installed_version(dest, req["name"])
        if ver is None or Version(ver) not in spec_of(req["version"]):
            return False
    return True


def install_from_galaxy(req_file: Path, dest: Path) -> bool:
    cmd = [
        shutil.which("ansible-galaxy") or str(Path(sys.executable).with_name("ansible-galaxy")),
        "collection", "install", "--force", "-r", str(req_file), "-p", str(dest),
        "--timeout", "20",
    ]
    log("Galaxy answers: " + " ".join(cmd))
    return subprocess.run(cmd, check=False).returncode == 0


def fetch_bundle(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    name, _, version = ANSIBLE_BUNDLE.partition("==")
    wheels = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if wheels:
        return wheels[0]
    log(f"downloading the {ANSIBLE_BUNDLE} wheel from PyPI (bundled collections)")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--dest", str(cache), ANSIBLE_BUNDLE],
        check=True,
    )
    wheels = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"pip download of {ANSIBLE_BUNDLE} produced no wheel in {cache}")
    return wheels[0]


def install_from_bundle(reqs: list[dict], dest: Path, cache: Path) -> None:
    wheel = fetch_bundle(cache)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        for req in reqs:
            ns, coll = req["name"].split(".", 1)
            prefix = f"ansible_collections/{ns}/{coll}/"
            members = [n for n in names if n.startswith(prefix)]
            if not members:
                raise SystemExit(f"{req['name']} is not bundled in {wheel.name}; install it from Galaxy")
            manifest = json.loads(zf.read(prefix + "MANIFEST.json"))
            version = manifest["collection_info"]["version"]
            if Version(version) not in spec_of(req["version"]):
                raise SystemExit(
                    f"{wheel.name} bundles {req['name']} {version}, outside '{req['version']}' "
                    f"from requirements.yml; set SPECPILOT_ANSIBLE_BUNDLE to a release that fits"
                )
            target = dest / "ansible_collections" / ns / coll
            if target.exists():
                shutil.rmtree(target)
            for member in members:
                if member.endswith("/"):
                    continue
                out = dest / member
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(zf.read(member))
            # The same marker ansible-galaxy leaves, so `collection list` and
            # later `collection install` see an ordinary installation: its keys as
            # ConcreteArtifactsManager.get_galaxy_artifact_source_info writes them
            # (ansible/galaxy/collection/concrete_artifact_manager.py), namespace and
            # name apart (`name: kubernetes.core` made `ansible-doc -t role -l` warn).
            info = dest / "ansible_collections" / f"{ns}.{coll}-{version}.info"
            info.mkdir(parents=True, exist_ok=True)
            (info / "GALAXY.yml").write_text(yaml.safe_dump(galaxy_info(ns, coll, version)))
            log(f"installed {req['name']} {version} from {wheel.name}")


def galaxy_info(namespace: str, name: str, version: str) -> dict:
    """The GALAXY.yml of a collection installed from the offline bundle."""
    return {
        "format_version": "1.0.0",
        "namespace": namespace,
        "name": name,
        "version": version,
        "server": "offline",
        "version_url": None,
        "download_url": f"pypi:{ANSIBLE_BUNDLE}",
        "signatures": [],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requirements", default="requirements.yml", type=Path)
    parser.add_argument("--dest", default=".venv/collections", type=Path)
    parser.add_argument("--wheel-cache", default=".cache/wheels", type=Path)
    parser.add_argument("--offline", action="store_true", help="do not try Galaxy")
    parser.add_argument("--force", action="store_true", help="reinstall even when satisfied")
    args = parser.parse_args()

    reqs = read_requirements(args.requirements)
    if not args.force and all_satisfied(args.dest, reqs):
        log("all collections from requirements.yml already installed")
        return 0
    args.dest.mkdir(parents=True, exist_ok=True)
    if not args.offline and galaxy_reachable() and install_from_galaxy(args.requirements, args.dest):
        pass
    else:
        log("Galaxy unreachable: using the offline route (collections bundled in the ansible wheel)")
        install_from_bundle(reqs, args.dest, args.wheel_cache)
    if not all_satisfied(args.dest, reqs):
        log("collections installed do not satisfy requirements.yml")
        return 1
    for req in reqs:
        log(f"{req['name']} {installed_version(args.dest, req['name'])} satisfies '{req['version']}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
