"""`make sanity` (ansible-test sanity on specpilot.core) as make test runs it: the ignore file holds only
findings that cannot be fixed, each with its reason, for files that exist; make test runs the sanity
stage and the stage fails on any finding; the pip bootstrap that lets ansible-test make its
virtualenvs without ci-files.testing.ansible.com passes ansible-test's pins on to pip."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "specpilot" / "core"
IGNORE = COLLECTION / "tests" / "sanity" / "ignore-2.19.txt"


def _entries():
    lines = IGNORE.read_text().splitlines()
    return [re.match(r"^(\S+) (\S+?)(?:  # (.*))?$", line) for line in lines]


def test_every_ignore_entry_names_an_existing_file_and_says_why():
    entries = _entries()
    assert entries and all(
        entries
    ), "each line: PATH TEST[:CODE]  # reason (ansible-test allows no comment-only line)"
    missing = [m[1] for m in entries if not (COLLECTION / m[1]).is_file()]
    unexplained = [m[0] for m in entries if len(m[3] or "") < 40]
    assert missing == [] and unexplained == []
    assert [m[0] for m in entries] == sorted(m[0] for m in entries)


def test_only_the_license_header_is_ignored_across_modules():
    """Everything else a module or plugin file trips is fixed, not ignored: the one finding
    ignored per module is the GPLv3 header check, which an Apache-2.0 collection cannot pass."""
    codes = {}
    for m in _entries():
        codes.setdefault(m[2], []).append(m[1])
    license_ignored = set(codes.pop("validate-modules:missing-gplv3-license", []))
    modules = {str(p.relative_to(COLLECTION)) for p in (COLLECTION / "plugins" / "modules").glob("*.py")}
    # and the plugins validate-modules reads DOCUMENTATION of like a module's (lookups, callbacks)
    assert license_ignored <= modules | {
        str(p.relative_to(COLLECTION))
        for kind in ("lookup", "callback")
        for p in COLLECTION.glob(f"plugins/{kind}/*.py")
    }
    # and nothing else: ansible-lint's production profile refuses every other ignore (sanity[cannot-ignore]),
    # so sys.exit in a __main__ guard is `raise SystemExit` and the pod's HTTP client an opener
    assert codes == {}


def test_make_test_runs_sanity_and_sanity_fails_on_findings():
    makefile = (ROOT / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:\n", 1)[1].split("\n\n", 1)[0]
    assert '"sanity=$(SUBMAKE) sanity"' in test_recipe
    sanity_recipe = makefile.split("\nsanity: ", 1)[1].split("\n\n", 1)[0]
    assert "$(ANSIBLE_TEST)" in sanity_recipe and "--failure-ok" not in makefile
    assert "sanity-venvs" in makefile.split("\ninstall:", 1)[1].split("\n", 1)[0]


def test_the_pip_bootstrap_passes_ansible_tests_pins_to_pip(monkeypatch):
    spec = importlib.util.spec_from_file_location("get_pip", ROOT / "scripts" / "ansible_test_get_pip.py")
    get_pip = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(get_pip)
    calls = []

    class Done:
        returncode = 0

    monkeypatch.setattr(get_pip.subprocess, "run", lambda cmd, **kw: calls.append(cmd[1:]) or Done())
    assert get_pip.main(["--disable-pip-version-check", "pip==24.2", "--no-setuptools", "--no-wheel"]) == 0
    assert calls == [
        ["-m", "ensurepip", "--default-pip"],
        ["-m", "pip", "install", "--disable-pip-version-check", "pip==24.2"],
    ]
