"""Shared pytest fixtures: throw-away Kubernetes API emulators (see specpilot_lab.testing)."""

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
    (@pytest.mark.real_engine and a docstring that says why): engines are the suite's budget."""
    import pytest

    from engine_budget import facts_of, violations

    found = violations(facts_of(item) for item in items)
    if found:
        raise pytest.UsageError(
            "tests that start a real engine must say so (CONTRIBUTING.md, 'The test budget'):\n  "
            + "\n  ".join(found)
        )
