"""Fixtures of the smoke-role lab tests (helpers in smoke_lab.py)."""

from __future__ import annotations

import pytest
from smoke_lab import SmokeLab, fake_python


@pytest.fixture(scope="module")
def fake_smoke_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke-fake")
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
