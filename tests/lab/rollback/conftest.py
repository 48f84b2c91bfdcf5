"""Fixtures of the rollback lab tests: the smoke tests' lab (emulator + controller + stand-in engine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "smoke"))
from smoke_lab import SmokeLab, fake_python  # noqa: E402


@pytest.fixture(scope="module")
def fake_rollback_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("rollback-fake")
    lab = SmokeLab(root, fake_python(root))
    try:
        models = root / "fake-models"
        for sub in ("target", "draft"):
            (models / sub).mkdir(parents=True)
            (models / sub / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
        lab.models_pvc(models)
        yield lab
    finally:
        lab.close()
