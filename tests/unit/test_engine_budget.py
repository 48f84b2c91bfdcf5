"""The check that keeps real-engine tests declared (tests/engine_budget.py)."""

from __future__ import annotations

from engine_budget import CollectedTest, starts_real_engine, violations

ENGINE_MODULE = "from specpilot_lab import engine\neng = engine.Engine(args, run_dir)\n"


def facts(fixtures=(), source="", marked=False, doc=None, nodeid="tests/lab/test_x.py::test_x"):
    return CollectedTest(nodeid, tuple(fixtures), source, marked, doc)


def test_a_real_engine_fixture_counts_as_starting_an_engine():
    assert starts_real_engine(facts(["vllm_lab", "tmp_path"]))
    assert starts_real_engine(facts(["shared_engine"]))
    assert not starts_real_engine(facts(["fake_lab", "tmp_path"]))


def test_the_engines_venv_counts_only_where_the_module_starts_engines():
    assert starts_real_engine(facts(["vllm_venv"], ENGINE_MODULE))
    assert starts_real_engine(facts(["vllm_venv"], "python = engine.vllm_python()\n"))
    # the tiny-model tests need the venv's torch, not an engine
    assert not starts_real_engine(facts(["vllm_venv", "tiny_models"], "make_models_subprocess(out)\n"))


def test_an_undeclared_engine_test_is_named_with_what_it_lacks():
    found = violations([facts(["vllm_lab"], nodeid="tests/lab/test_new.py::test_new")])
    assert found == [
        "tests/lab/test_new.py::test_new: starts a real vLLM engine but is not marked @pytest.mark.real_engine",
        "tests/lab/test_new.py::test_new: starts a real vLLM engine but its docstring does not say why "
        "the stand-in engine would not do",
    ]
    only_doc = violations([facts(["vllm_lab"], marked=True, doc="  ")])
    assert len(only_doc) == 1 and "docstring" in only_doc[0]


def test_declared_engine_tests_and_fake_tests_pass():
    declared = facts(["vllm_venv"], ENGINE_MODULE, marked=True, doc="The engine's own error message.")
    fake = facts(["fake_lab"])
    assert violations([declared, fake]) == []


def test_every_collected_engine_test_of_this_suite_is_declared():
    """The suite itself: the collection hook in tests/conftest.py would refuse it otherwise, so
    here the lab tests are collected again and checked directly."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/lab"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode in (0, 5), res.stdout[-3000:] + res.stderr[-3000:]
    assert "must say so" not in res.stdout + res.stderr
