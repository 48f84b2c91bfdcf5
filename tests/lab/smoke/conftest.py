"""Fixtures of the smoke-role lab tests (helpers in smoke_lab.py; the lab itself: ../conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def fake_smoke_lab(fake_spec_lab):
    return fake_spec_lab
