"""The engine launcher, with a stand-in server instead of vLLM (fast, no .venv-vllm)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from specpilot_lab import engine

# A stand-in for the vLLM server: answers /health after a short delay, forks a child
# (like vLLM's engine core) that must die with the group, exits 3 on --fail.
FAKE = r"""
import http.server, os, sys, time
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
print("fake engine args:", " ".join(args), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if "--fail" in args:
    sys.exit(3)
child = os.fork()
if child == 0:
    open(os.environ["CHILD_PID_FILE"], "w").write(str(os.getpid()))
    time.sleep(600)
    os._exit(0)
time.sleep(0.5)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def fake_engine(tmp_path: Path, args: list[str], **kw) -> engine.Engine:
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    env = {"CHILD_PID_FILE": str(tmp_path / "child.pid")}
    return engine.Engine(args, tmp_path / "run", command=[sys.executable, str(script)], env=env, **kw)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0)
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_set_and_get_arg():
    args = ["--model", "/m", "--port=8080", "--port", "9000", "--x"]
    out = engine.set_arg(args, "--port", "1234")
    assert out == ["--model", "/m", "--x", "--port", "1234"]
    assert engine.get_arg(args, "--port") == "9000"
    assert engine.get_arg(["--port=1"], "--port") == "1"
    assert engine.get_arg(args, "--missing") is None
    assert engine.set_arg(args, "--port", None) == ["--model", "/m", "--x"]


def test_engines_share_only_the_model_class_inspection_cache(tmp_path, monkeypatch):
    shared = tmp_path / "shared-modelinfos"
    monkeypatch.setattr(engine, "MODELINFO_CACHE", shared)
    roots = [Path(engine.engine_env(tmp_path / name)["VLLM_CACHE_ROOT"]) for name in ("a", "b")]
    assert roots[0] != roots[1]
    name = "vllm-model_executor-models-llama-LlamaForCausalLM.json"
    (roots[0] / "modelinfos" / name).write_text("{}")
    assert (roots[1] / "modelinfos" / name).read_text() == "{}"
    assert sorted(p.name for p in shared.iterdir()) == [name]
    engine.engine_env(tmp_path / "a")  # again: the link stays as it is
    assert (roots[0] / "modelinfos").resolve() == shared.resolve()


def test_env_keeps_state_under_run_dir(tmp_path):
    env = engine.engine_env(tmp_path, {"EXTRA": "1"})
    for key in ("VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH", "TMPDIR", "HF_HOME"):
        assert str(Path(env[key]).resolve()).startswith(str(tmp_path.resolve())), key
        assert Path(env[key]).is_dir()
    # ZeroMQ ipc sockets live there: the path must leave room for a 36-character name
    assert len(env["VLLM_RPC_BASE_PATH"]) <= engine.RPC_PATH_BUDGET
    if Path(env["VLLM_RPC_BASE_PATH"]).is_symlink():
        Path(env["VLLM_RPC_BASE_PATH"]).unlink()
    deep = tmp_path / ("d" * 80)
    link = Path(engine.engine_env(deep)["VLLM_RPC_BASE_PATH"])
    try:
        assert len(str(link)) <= engine.RPC_PATH_BUDGET
        assert link.resolve() == (deep / "rpc").resolve()
    finally:
        if link.is_symlink():
            link.unlink()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1" and env["EXTRA"] == "1"


def test_start_ready_stop_kills_the_group(tmp_path):
    eng = fake_engine(tmp_path, ["--model", "/m", "--port", "1"])
    eng.start()
    try:
        took = eng.wait_ready(20)
        assert 0 < took < 20
        assert eng.port != 1 and engine.get_arg(eng.args, "--port") == str(eng.port)
        assert engine.get_arg(eng.args, "--host") == "127.0.0.1"
        assert eng.healthy()
        for _ in range(50):
            if (tmp_path / "child.pid").exists() and (tmp_path / "child.pid").read_text():
                break
            time.sleep(0.1)
        child = int((tmp_path / "child.pid").read_text())
        assert pid_alive(child)
        assert eng.rss() > 0
    finally:
        eng.stop(timeout=5)
    assert not eng.alive()
    time.sleep(0.2)
    assert not pid_alive(child), "the engine's child survived stop()"
    log = eng.log_file.read_text()
    assert "fake engine args: --model /m --host 127.0.0.1 --port" in log
    assert "to stderr" in log
    assert eng.peak_rss > 0


def test_exit_before_ready_raises_with_code_and_tail(tmp_path):
    eng = fake_engine(tmp_path, ["--fail"])
    eng.start()
    with pytest.raises(engine.EngineExited) as exc:
        eng.wait_ready(20)
    eng.stop()
    assert exc.value.returncode == 3
    assert "fake engine args" in exc.value.tail


def test_line_sink_receives_merged_output(tmp_path):
    lines: list[str] = []
    eng = fake_engine(tmp_path, [], line_sink=lines.append)
    with eng:
        eng.wait_ready(20)
    assert any(line.startswith("fake engine args:") for line in lines)
    assert "to stderr" in lines


METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 66.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.795237666932006e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 198.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 188.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 64.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 62.0
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
process_open_fds 20.0
"""


def test_spec_decode_summary():
    s = engine.spec_decode_summary(METRICS)
    assert s["drafts"] == 66 and s["draft_tokens"] == 198 and s["accepted_tokens"] == 188
    assert s["acceptance_rate"] == pytest.approx(188 / 198)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 188 / 66)
    assert engine.parse_metrics(METRICS)["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == 126
    assert engine.parse_metrics(METRICS)["process_open_fds"] == 20
    assert engine.spec_decode_summary("process_open_fds 20.0\n") is None


def test_error_summary_picks_the_engines_reason():
    log = """(APIServer pid=7) INFO 11-21 05:07:21 [api_utils.py:286] non-default args: {'x': 1}
Traceback (most recent call last):
  File "/v/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 2099, in create_speculative_config
    return SpeculativeConfig(**self.speculative_config)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
num_speculative_tokens
  Input should be greater than 0 [type=greater_than, input_value=0, input_type=int]
    For further information visit https://errors.pydantic.dev/2.14/v/greater_than
"""
    out = engine.error_summary(log)
    assert out.startswith(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig"
    )
    assert "num_speculative_tokens Input should be greater than 0" in out
    assert "errors.pydantic.dev" not in out
    prefixed = (
        "(APIServer pid=9) ERROR 11-21 05:08:16 [core.py:1] ImportError: arctic_inference is required "
        "for suffix decoding\n(APIServer pid=9) INFO 11-21 05:08:16 [launcher.py:1] shutting down\n"
    )
    assert engine.error_summary(prefixed).startswith("ImportError: arctic_inference is required")
    assert engine.error_summary("all good\n") == ""
