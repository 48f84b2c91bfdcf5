"""Shared pytest fixtures: throw-away Kubernetes API emulators (see specpilot_lab.testing)."""

from specpilot_lab.testing import (  # noqa: F401  (pytest finds fixtures by name)
    bare_emulator,
    emulator,
    emulator_any,
    emulator_factory,
    emulator_upstream,
    fresh_emulator,
)
