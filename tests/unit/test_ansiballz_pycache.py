"""scripts/ansiballz_pycache.py: module_utils in AnsiballZ payloads compiled once per content, and
imported exactly as zipimport would import them."""

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ansiballz_pycache.py"

# run with -S: no site-packages, so an installed copy of the hook (.venv's .pth) stays out of the way
PROBE = """
import importlib.util, json, sys, traceback
spec = importlib.util.spec_from_file_location("hook", sys.argv[1])
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
hook._CACHE = sys.argv[2]
hook.activate()
sys.path.insert(0, sys.argv[3])
import pkg.mod
try:
    pkg.mod.fail()
except ValueError:
    frame = traceback.extract_tb(sys.exc_info()[2])[-1]
print(json.dumps({"value": pkg.mod.VALUE, "file": pkg.mod.__file__, "pkg_file": pkg.__file__,
                  "loader": type(pkg.mod.__loader__).__name__, "tb_file": frame.filename, "tb_line": frame.lineno}))
"""

MOD = "VALUE = %d\n\n\ndef fail():\n    raise ValueError('boom')\n"


def payload(directory, value=1, name="ansible_ping_payload.zip"):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/mod.py", MOD % value)
    return path


def probe(cache, zip_path, env=None):
    proc = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, str(SCRIPT), str(cache), str(zip_path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def entries(cache):
    return sorted(p for p in cache.rglob("*") if p.is_file())


def test_a_payload_is_compiled_once_and_imported_as_zipimport_would(tmp_path):
    cache = tmp_path / "cache"
    first = payload(tmp_path / "ansible_ping_payload_abc")
    got = probe(cache, first)
    assert got["value"] == 1 and got["loader"] == "PayloadImporter"
    assert got["file"] == str(first / "pkg" / "mod.py") and got["pkg_file"] == str(first / "pkg" / "__init__.py")
    assert got["tb_file"] == got["file"] and got["tb_line"] == 5
    stored = entries(cache)
    assert len(stored) == 2  # pkg/__init__.py and pkg/mod.py
    stamps = [p.stat().st_mtime_ns for p in stored]

    # the next module run: another temporary directory, the same sources -> read back, named after this run
    second = payload(tmp_path / "ansible_ping_payload_def")
    got = probe(cache, second)
    assert got["value"] == 1 and got["tb_file"] == str(second / "pkg" / "mod.py")
    assert entries(cache) == stored and [p.stat().st_mtime_ns for p in stored] == stamps


def test_the_cache_is_keyed_by_content(tmp_path):
    cache = tmp_path / "cache"
    probe(cache, payload(tmp_path / "ansible_ping_payload_a", value=1))
    got = probe(cache, payload(tmp_path / "ansible_ping_payload_b", value=2))
    assert got["value"] == 2 and len(entries(cache)) == 3  # one more: the changed pkg/mod.py


def test_a_broken_entry_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    probe(cache, payload(tmp_path / "ansible_ping_payload_a"))
    for entry in entries(cache):
        entry.write_bytes(b"not marshal data")
    got = probe(cache, payload(tmp_path / "ansible_ping_payload_b"))
    assert got["value"] == 1 and got["tb_line"] == 5


def test_other_zips_are_left_to_zipimport(tmp_path):
    cache = tmp_path / "cache"
    got = probe(cache, payload(tmp_path / "lib", name="library.zip"))
    assert got["value"] == 1 and got["loader"] == "zipimporter"
    assert not cache.exists()


@pytest.mark.parametrize("value", ["off", "0", "False"])
def test_the_environment_turns_the_hook_off(tmp_path, value):
    """SPECPILOT_ANSIBALLZ_PYCACHE=off (make test's molecule scenarios): payloads are imported by plain
    zipimport, as an execution environment or a user's own Ansible imports them, and nothing is cached."""
    cache = tmp_path / "cache"
    env = dict(os.environ, SPECPILOT_ANSIBALLZ_PYCACHE=value)
    got = probe(cache, payload(tmp_path / "p1"), env=env)
    assert got["value"] == 1 and got["loader"] == "zipimporter"
    assert not cache.exists()
    on = probe(cache, payload(tmp_path / "p2"), env=dict(env, SPECPILOT_ANSIBALLZ_PYCACHE="on"))
    assert on["loader"] == "PayloadImporter" and entries(cache)


def test_install_puts_the_hook_and_its_pth_line_into_site_packages(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir()
    spec = importlib.util.spec_from_file_location("hook", SCRIPT)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    hook._install(str(site))
    assert (site / "specpilot_ansiballz_pycache.py").read_text() == SCRIPT.read_text()
    line = (site / "specpilot_ansiballz_pycache.pth").read_text()
    assert line.startswith("import specpilot_ansiballz_pycache;") and line.count("\n") == 1
