"""Progress of the long modules (model_fetch, modelcar_build) while they run: the module writes its
lines through module_utils/report/progress.py into a progress file, and its action plugin
(plugin_utils/progress_relay.py) shows the new lines every few seconds."""

from __future__ import annotations

import threading

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.staging import oci_layout
from ansible_collections.specpilot.core.plugins.module_utils.report.progress import (
    ByteProgress,
    ProgressTee,
    human,
)
from ansible_collections.specpilot.core.plugins.plugin_utils import progress_relay
from fake_clock import Clock


def test_byte_progress_says_bytes_share_and_rate_at_most_every_interval():
    clock, lines = Clock(100.0), []
    meter = ByteProgress("target", 4 * 1024**3, lines.append, every=10.0, clock=clock)
    meter.add(1024**3)
    clock.now += 9.9
    meter.add(1)
    assert lines == []  # not yet 10 s
    clock.now += 0.1
    meter.add(1024**3 - 1)
    assert lines == ["target: 2.0 GiB of 4.0 GiB (50%), 204.8 MiB/s"]
    clock.now += 10.0
    meter.add(2 * 1024**3)
    meter.finish()
    assert lines[1:] == ["target: 4.0 GiB of 4.0 GiB (100%), 204.8 MiB/s"] * 2
    assert [human(n) for n in (0, 1023, 1536, 5 * 1024**4)] == ["0 B", "1023 B", "1.5 KiB", "5.0 TiB"]


def test_the_tee_keeps_every_line_and_writes_each_to_the_file_at_once(tmp_path):
    path = tmp_path / "progress.log"
    tee = ProgressTee(str(path))
    tee.line("one")
    assert path.read_text() == "one\n"  # flushed: readable while the module still runs
    tee.write("two\n")
    tee.close()
    assert tee.getvalue() == "one\ntwo\n" and path.read_text() == "one\ntwo\n"
    plain = ProgressTee()
    plain.line("kept")
    assert plain.getvalue() == "kept\n"


class Connection:
    def __init__(self, transport):
        self.transport = transport


class Action:
    """An action whose module writes two progress lines, the second only after the first was shown:
    the relay shows lines while the module runs, not only when it ended."""

    def __init__(self, transport="local"):
        self._connection = Connection(transport)
        self.shown_first = threading.Event()
        self.args = None

    def _execute_module(self, module_name=None, module_args=None, task_vars=None):
        self.args = module_args
        if "progress_file" not in module_args:
            return {"changed": False, "relayed": False}
        with open(module_args["progress_file"], "a") as fh:
            fh.write("fetching: 1.0 MiB of 2.0 MiB (50%), 1.0 MiB/s\n")
            fh.flush()
            if not self.shown_first.wait(10):
                raise AssertionError("the first line was not shown while the module ran")
            fh.write("fetched\npartial line without its end")
        return {"changed": True, "relayed": True}


def test_the_relay_shows_lines_while_the_module_runs_and_removes_its_file():
    action, shown = Action(), []

    def show(line):
        shown.append(line)
        action.shown_first.set()

    result = progress_relay.execute_showing_progress(
        action, "specpilot.core.model_fetch", {"a": 1}, {}, show, 0.05
    )
    assert result == {"changed": True, "relayed": True}
    assert shown == ["fetching: 1.0 MiB of 2.0 MiB (50%), 1.0 MiB/s", "fetched"]  # whole lines only
    assert action.args["a"] == 1
    import os

    assert not os.path.exists(action.args["progress_file"])


def test_over_another_connection_the_module_runs_as_usual():
    action = Action("ssh")
    assert progress_relay.execute_showing_progress(action, "m", {"a": 1}, {}, print) == {
        "changed": False,
        "relayed": False,
    }
    assert action.args == {"a": 1}


def test_a_module_error_is_raised_in_the_action(tmp_path):
    class Failing(Action):
        def _execute_module(self, **kw):
            raise RuntimeError("connection lost")

    with pytest.raises(RuntimeError, match="connection lost"):
        progress_relay.execute_showing_progress(Failing(), "m", {}, {}, print, 0.01)


def test_a_layer_reports_its_bytes_written_and_hashed(tmp_path):
    src = tmp_path / "target"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"x" * 300_000)
    (src / "config.json").write_text("{}")
    lines = []
    layout = oci_layout.Layout(str(tmp_path / "layout")).init()
    info = oci_layout.build_layer(layout, str(src), "models/target", line=lines.append)
    assert info["bytes"] == 300_002
    assert lines[-1].startswith("layer models/target: 293.0 KiB of 293.0 KiB (100%), ")
