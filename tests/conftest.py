"""Shared pytest fixtures: throw-away Kubernetes API emulators (see specpilot_lab.testing)."""

import os

# Validation reads model facts at the artifacts' sources (module_utils/model_facts.py) unless
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
    (@pytest.mark.real_engine and a docstring that says why): engines are the suite's budget."""
    import pytest

    from engine_budget import facts_of, violations

    found = violations(facts_of(item) for item in items)
    if found:
        raise pytest.UsageError(
            "tests that start a real engine must say so (CONTRIBUTING.md, 'The test budget'):\n  "
            + "\n  ".join(found)
        )
