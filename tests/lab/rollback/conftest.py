"""Fixtures of the rollback lab tests: the smoke tests' lab (emulator + controller + stand-in engine,
see ../conftest.py; smoke_lab is importable from there)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def fake_rollback_lab(fake_spec_lab):
    return fake_spec_lab
