"""`make sanity` (ansible-test sanity on specpilot.core) as make test runs it: nothing is ignored (no
ignore file: every finding is fixed); make test runs the sanity
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
    lines = IGNORE.read_text().splitlines() if IGNORE.exists() else []
    return [re.match(r"^(\S+) (\S+?)(?:  # (.*))?$", line) for line in lines]


def test_nothing_is_ignored_and_an_entry_would_name_its_file_and_why():
    """Every finding is fixed: there is no ignore file. The modules and the plugins validate-modules reads
    like modules (lookups, callbacks) carry the GPL-3.0-or-later header, as files that import ansible-core
    conventionally do (README, License); should an entry ever be needed, it names a file and its reason."""
    entries = _entries()
    assert all(entries), "each line: PATH TEST[:CODE]  # reason (ansible-test allows no comment-only line)"
    missing = [m[1] for m in entries if not (COLLECTION / m[1]).is_file()]
    unexplained = [m[0] for m in entries if len(m[3] or "") < 40]
    assert missing == [] and unexplained == []
    assert entries == []


def test_make_test_runs_sanity_and_sanity_fails_on_findings():
    makefile = (ROOT / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:\n", 1)[1].split("\n\n", 1)[0]
    assert '"checks=$(SUBMAKE) checks"' in test_recipe  # beside the unit tests
    checks_recipe = makefile.split("\nchecks: ", 1)[1].split("\n\n", 1)[0]
    assert "$(TIMES) run sanity -- $(SUBMAKE) sanity || s=1" in checks_recipe
    sanity_recipe = makefile.split("\nsanity: ", 1)[1].split("\n\n", 1)[0]
    assert "$(ANSIBLE_TEST_RUN)" in sanity_recipe and "--failure-ok" not in makefile
    # kubernetes.core beside the collection: its doc fragment k8s_auth_options is what the modules extend
    assert "collections/ansible_collections/kubernetes $(SANITY_ROOT)/kubernetes" in sanity_recipe
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
