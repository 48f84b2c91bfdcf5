"""requirements-lock.txt (issue 19, a pinned supply chain): every package .venv installs, with the sha256
of its file; `make` installs from it with --require-hashes. It must agree with the pins of
requirements.txt and requirements-test.txt, or the toolchain is not what they say."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
RELOCK = "run scripts/lock_requirements.py and commit requirements-lock.txt with the pin"


def _lock():
    text = (ROOT / "requirements-lock.txt").read_text()
    entries = re.findall(
        r"^([A-Za-z0-9_.\-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\\n)?)+)", text, re.M
    )
    return {canonicalize_name(name): version for name, version, _hashes in entries}, text


def _pins(name):
    out = {}
    for line in (ROOT / name).read_text().splitlines():
        line = re.sub(r"(^|\s+)#.*$", "", line).strip()
        if line and not line.startswith("-r"):
            req = Requirement(line)
            out[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    return out


def test_every_locked_package_carries_a_hash():
    locked, text = _lock()
    requirement_lines = [ln for ln in text.splitlines() if ln and not ln.startswith(("#", "    --hash="))]
    assert len(locked) == len(requirement_lines) > 50


def test_the_lock_agrees_with_every_pin():
    locked, _text = _lock()
    for name in ("requirements.txt", "requirements-test.txt"):
        for package, version in _pins(name).items():
            assert locked.get(package) == version, "%s pins %s==%s, the lock has %s: %s" % (
                name,
                package,
                version,
                locked.get(package),
                RELOCK,
            )


def test_make_installs_the_toolchain_from_the_lock_with_hashes():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\n$(STAMP_VENV):", 1)[1].split("\n\n", 1)[0]
    assert "requirements-lock.txt" in recipe.splitlines()[0]
    assert "--require-hashes -r requirements-lock.txt" in recipe
