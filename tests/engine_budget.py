"""The real-engine budget of the tests (CONTRIBUTING.md, "The test budget").

A real vLLM engine costs tens of seconds of CPU to start on a 2-core machine, so every test that
starts one declares it with ``@pytest.mark.real_engine`` and says in its docstring why the
stand-in engine (``specpilot_lab/fake_engine.py``) would not do. ``tests/lab/conftest.py`` refuses
a collection with a test that starts a real engine without both; the unit tests check this check.

A test starts a real engine when it uses a fixture of :data:`REAL_ENGINE_FIXTURES` (which start or
hand out engines), or when it asks for the engine's virtualenv (``vllm_venv``) in a module that
starts engines itself (calls ``engine.Engine(`` or ``engine.vllm_python(``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

MARKER = "real_engine"
REAL_ENGINE_FIXTURES = frozenset({"vllm_lab", "vllm_smoke_lab", "shared_engine"})
ENGINE_CALLS = ("engine.Engine(", "engine.vllm_python(")


@dataclass(frozen=True)
class CollectedTest:
    """What the check needs to know of one collected test."""

    nodeid: str
    fixturenames: tuple[str, ...]
    module_source: str
    marked: bool
    docstring: str | None


def starts_real_engine(facts: CollectedTest) -> bool:
    names = set(facts.fixturenames)
    if names & REAL_ENGINE_FIXTURES:
        return True
    return "vllm_venv" in names and any(call in facts.module_source for call in ENGINE_CALLS)


def violations(tests: Iterable[CollectedTest]) -> list[str]:
    """One line per test that starts a real engine without the marker or without a docstring."""
    out = []
    for facts in tests:
        if not starts_real_engine(facts):
            continue
        if not facts.marked:
            out.append(f"{facts.nodeid}: starts a real vLLM engine but is not marked @pytest.mark.{MARKER}")
        if not (facts.docstring or "").strip():
            out.append(
                f"{facts.nodeid}: starts a real vLLM engine but its docstring does not say why "
                "the stand-in engine would not do"
            )
    return out


def facts_of(item) -> CollectedTest:
    """CollectedTest of a pytest item (a test function)."""
    import inspect

    module = getattr(item, "module", None)
    try:
        source = inspect.getsource(module) if module else ""
    except (OSError, TypeError):
        source = ""
    function = getattr(item, "function", None)
    return CollectedTest(
        nodeid=item.nodeid,
        fixturenames=tuple(getattr(item, "fixturenames", ())),
        module_source=source,
        marked=item.get_closest_marker(MARKER) is not None,
        docstring=getattr(function, "__doc__", None),
    )
