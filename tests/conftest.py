"""Shared pytest fixtures: throw-away Kubernetes API emulators (see specpilot_lab.testing)."""

import os

# Validation reads model facts at the artifacts' sources (module_utils/service/model_facts.py) unless
# specpilot_model_facts is off: the corpus and the inventories name hf:// repositories that a test
# machine must not depend on, so the tests run with it off (the variable passes on to the
# ansible-playbook runs they start); tests/unit/validate/test_model_facts.py turns it on against local
# servers.
os.environ.setdefault("SPECPILOT_MODEL_FACTS", "off")

from specpilot_lab.testing import (  # noqa: F401  (pytest finds fixtures by name)
    bare_emulator,
    emulator,
    emulator_any,
    emulator_factory,
    emulator_upstream,
    fresh_emulator,
)


def pytest_collection_modifyitems(config, items):
    """Refuse a collection in which a test starts a real vLLM engine without declaring it
    (@pytest.mark.real_engine and a docstring that says why): engines are the suite's budget.
    In a pytest-xdist worker, put the longest files first (longest_files_first)."""
    import pytest

    from engine_budget import facts_of, violations

    found = violations(facts_of(item) for item in items)
    if found:
        raise pytest.UsageError(
            "tests that start a real engine must say so (CONTRIBUTING.md, 'The test budget'):\n  "
            + "\n  ".join(found)
        )
    if os.environ.get("PYTEST_XDIST_WORKER"):
        longest_files_first(items)


FILE_DURATIONS = os.path.join(os.path.dirname(__file__), "file_durations.json")


def longest_files_first(items):
    """Order whole files by their seconds in tests/file_durations.json, longest first (the order
    within a file is kept; a file not listed goes last). make test runs pytest-xdist with
    --dist loadfile --no-loadscope-reorder, which hands files out in this order: the long ones
    start at once and the workers end together, instead of one worker finishing a long file
    alone. Refresh the list after a make test: scripts/test_times.py durations
    tests/file_durations.json."""
    import json

    try:
        with open(FILE_DURATIONS) as fh:
            seconds = json.load(fh)
    except (OSError, ValueError):
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def key(item):
        return -seconds.get(os.path.relpath(str(item.path), root).replace(os.sep, "/"), 0.0)

    items.sort(key=key)  # stable: a file's tests stay together and in order


def pytest_runtest_teardown(item):
    """ansible-core's open_url installs its opener as urllib's global one (urllib.request.install_opener, with
    the auth handlers of the URL it opened): a test that calls it in-process would change what
    urllib.request.urlopen does in the tests after it on the same worker (a digest handler that raises on a
    registry's Bearer challenge). Each test ends with urllib's default opener back."""
    import urllib.request

    urllib.request.install_opener(None)
