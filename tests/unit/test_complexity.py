"""The collection's size limits (issue 34): few complex functions, no collection file over 1,000 lines.

Measured with radon (requirements-test.txt), as the issue counted them: every function and method of
the collection's plugins with its cyclomatic complexity.  The programs that run inside a pod as one
file (stager.py, model_dir.py, bench_client.py: shipped whole in a ConfigMap or by a lookup) may stay
over the line limit, but only while each of their functions stays under the complexity limit.
"""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "collections" / "ansible_collections" / "specpilot" / "core" / "plugins"
COMPLEX = 20  # a function at this cyclomatic complexity or more is complex
MAX_COMPLEX = 15  # how many complex functions the collection may hold
MAX_LINES = 1000
# Programs run inside a pod as a single file: exempt from MAX_LINES while none of their functions is complex.
POD_PROGRAMS = {
    "module_utils/staging/stager.py",
    "module_utils/staging/model_dir.py",
    "module_utils/benchmark/bench_client.py",
}


def _sources():
    return sorted(p for p in PLUGINS.rglob("*.py"))


def _functions(path: Path):
    """(name, complexity) of every function and method of the file, closures included."""

    def walk(blocks, prefix=""):
        for block in blocks:
            if isinstance(block, Class):  # radon lists each method again as a function of its own
                continue
            name = prefix + block.fullname
            yield name, block.complexity
            yield from walk(block.closures, name + ".")

    return list(walk(cc_visit(path.read_text(encoding="utf-8"))))


def _complex():
    return sorted(
        (cc, "%s:%s" % (path.relative_to(PLUGINS), name))
        for path in _sources()
        for name, cc in _functions(path)
        if cc >= COMPLEX
    )


def test_at_most_15_complex_functions():
    found = _complex()
    assert len(found) <= MAX_COMPLEX, "%d functions at cyclomatic complexity >= %d (at most %d):\n%s" % (
        len(found),
        COMPLEX,
        MAX_COMPLEX,
        "\n".join("%3d %s" % row for row in reversed(found)),
    )


def test_no_collection_file_over_1000_lines():
    over = []
    for path in _sources():
        rel = str(path.relative_to(PLUGINS))
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES and rel not in POD_PROGRAMS:
            over.append("%s: %d lines" % (rel, lines))
    assert not over, "files over %d lines (split them by meaning):\n%s" % (MAX_LINES, "\n".join(over))


def test_pod_programs_have_small_functions():
    """A pod program may stay one file only while its functions are small."""
    for rel in sorted(POD_PROGRAMS):
        path = PLUGINS / rel
        assert path.is_file(), rel  # the exemption names a file that exists
        big = ["%s (%d)" % (name, cc) for name, cc in _functions(path) if cc >= COMPLEX]
        assert not big, "%s runs in a pod as one file, so its functions must stay under %d: %s" % (
            rel,
            COMPLEX,
            ", ".join(big),
        )


def test_the_measure_counts_what_it_should(tmp_path):
    """The walker sees methods and closures, so a complex one cannot hide inside a class or function."""
    branches = "\n".join("        if x == %d:\n            x += 1" % i for i in range(COMPLEX))
    src = tmp_path / "m.py"
    src.write_text("class C:\n    def m(self, x):\n%s\n        return x\n" % branches)
    assert _functions(src) == [("C.m", COMPLEX + 1)]
    src.write_text("def outer():\n    def inner(x):\n%s\n        return x\n    return inner\n" % branches)
    assert ("outer.inner", COMPLEX + 1) in _functions(src)
