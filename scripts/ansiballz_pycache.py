"""A bytecode cache for the module_utils inside Ansible's module payloads (AnsiballZ), for .venv only.

Every module run unpacks a zip of sources (``ansible_<module>_payload.zip``) and imports ansible's and the
collections' module_utils from it. Python's zipimport never writes bytecode, and on Python 3.11 it compiles
each module twice (``zipimporter.get_filename`` compiles, then ``exec_module`` compiles again), so about 40%
of a playbook's CPU went to compiling the same sources again and again (py-spy on 40 ping tasks).

This path hook takes the payload zips only, and compiles each source once per content: the code object is
kept under ``<venv>/ansiballz-pycache`` keyed by the sha256 of the source, its path inside the zip and the
interpreter's bytecode magic. The code's file names are set to this run's payload path, so tracebacks
name the file as zipimport would. Anything else (another zip, a source-less entry) goes to zipimport.

Installed by ``make venv`` (``python scripts/ansiballz_pycache.py --install``: this file plus a ``.pth``
line into .venv's site-packages). It changes how fast modules import, never what they do; remove the
``.pth`` file to turn it off, or set ``SPECPILOT_ANSIBALLZ_PYCACHE=off`` in the environment of a run
(modules inherit it): ``make test`` runs the molecule scenarios so, as an execution environment or a
user's own Ansible runs modules (plain zipimport), and everything else with the hook.
"""

import marshal
import os
import sys
import zipimport

_PAYLOAD_SUFFIX = "_payload.zip"
_CACHE = os.path.join(sys.prefix, "ansiballz-pycache")


def _renamed(code, filename):
    """The code object with co_filename set to filename, nested code objects included."""
    consts = tuple(_renamed(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _is_payload(path):
    """True for the zip AnsiballZ writes, <tmp>/ansible_<module>_payload_<random>/ansible_<module>_payload.zip,
    and for a package inside it (<zip>/ansible/module_utils)."""
    archive, sep, _inner = path.partition(_PAYLOAD_SUFFIX + os.sep)
    archive = archive + _PAYLOAD_SUFFIX if sep else path
    return archive.endswith(_PAYLOAD_SUFFIX) and os.path.basename(archive).startswith("ansible_")


class PayloadImporter(zipimport.zipimporter):
    """zipimport for AnsiballZ payloads, with compiled code kept between runs."""

    def __init__(self, path):
        if not _is_payload(path):
            raise ImportError("not an AnsiballZ payload")
        super().__init__(path)

    def _inner_path(self, fullname):
        tail = fullname.rpartition(".")[2]
        name = os.path.join(tail, "__init__.py") if self.is_package(fullname) else tail + ".py"
        return os.path.join(self.prefix, name)

    def get_filename(self, fullname):
        if self.get_source(fullname) is None:
            return super().get_filename(fullname)
        return os.path.join(self.archive, self._inner_path(fullname))

    def get_code(self, fullname):
        source = self.get_source(fullname)
        if source is None:
            return super().get_code(fullname)
        inner = self._inner_path(fullname)
        filename = os.path.join(self.archive, inner)
        import hashlib
        import importlib.util

        key = hashlib.sha256(b"\0".join([importlib.util.MAGIC_NUMBER, inner.encode(), source.encode()])).hexdigest()
        cached = os.path.join(_CACHE, key[:2], key)
        try:
            with open(cached, "rb") as handle:
                return _renamed(marshal.load(handle), filename)
        except (OSError, EOFError, ValueError, TypeError):
            pass
        code = compile(source, filename, "exec", dont_inherit=True)
        _store(cached, code)
        return code


def _store(path, code):
    """Writes the code object atomically (another module run may write the same entry at once)."""
    import tempfile

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(tmp, path)
    except OSError:
        pass


OFF_VAR = "SPECPILOT_ANSIBALLZ_PYCACHE"


def activate(environ=os.environ):
    """Puts the hook first among the path hooks, unless ``SPECPILOT_ANSIBALLZ_PYCACHE`` is off (0, off,
    false, no)."""
    if environ.get(OFF_VAR, "").strip().lower() in ("0", "off", "false", "no"):
        return
    if PayloadImporter not in sys.path_hooks:
        sys.path_hooks.insert(0, PayloadImporter)


def _install(site_packages):
    import shutil

    shutil.copyfile(__file__, os.path.join(site_packages, "specpilot_ansiballz_pycache.py"))
    with open(os.path.join(site_packages, "specpilot_ansiballz_pycache.pth"), "w", encoding="utf-8") as handle:
        handle.write("import specpilot_ansiballz_pycache; specpilot_ansiballz_pycache.activate()\n")


if __name__ == "__main__":
    import sysconfig

    if sys.argv[1:] != ["--install"]:
        sys.exit("usage: python scripts/ansiballz_pycache.py --install  (run with the venv's python)")
    _install(sysconfig.get_paths()["purelib"])
