"""Fixtures for the lab tests: the engine's virtualenv and the tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot_lab import engine
from specpilot_lab.models import make_models_subprocess

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    """The lab engine's virtualenv (make vllm); tests that need it are skipped without it."""
    if not engine.vllm_available():
        pytest.skip(f"{engine.VLLM_VENV} is not installed: run `make vllm`")
    return engine.VLLM_VENV


@pytest.fixture(scope="session")
def tiny_models(vllm_venv, tmp_path_factory) -> Path:
    """target/, draft/, eagle3/ made once per session (seed 0)."""
    out = tmp_path_factory.mktemp("models")
    make_models_subprocess(out)
    return out
