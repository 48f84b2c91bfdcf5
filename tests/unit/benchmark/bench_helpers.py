"""Constructed benchmark results and helpers shared by the benchmark tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STREAM_SERVER = ROOT / "benchmarks" / "stream_server.py"
WORKLOADS = ROOT / "roles" / "specpilot_benchmark" / "files" / "workloads"
BIN = Path(sys.executable).parent

if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))


def requests_for(ttft_ms, tpot_ms, n=20, tokens=100, prompts=4, jitter=0.0, failed=0, tail=None):
    """n request records with the given medians (a small deterministic spread of +-jitter);
    tail: (fraction, factor) multiplies the TPOT of that last fraction of requests."""
    out = []
    for i in range(n):
        spread = 1.0 + jitter * (((i * 7) % 11) - 5) / 5.0
        t = ttft_ms * spread / 1000.0
        p = tpot_ms * spread / 1000.0
        if tail and i >= n * (1 - tail[0]):
            p *= tail[1]
        e2e = t + p * (tokens - 1)
        rec = {
            "index": i,
            "prompt_id": "p%d" % (i % prompts),
            "run": i // prompts,
            "ok": True,
            "error": None,
            "ttft_s": t,
            "tpot_s": p,
            "e2e_s": e2e,
            "itl_s": [p] * (tokens - 1),
            "output_tokens": tokens,
            "prompt_tokens": 50,
            "token_source": "usage",
            "queue_s": 0.0,
        }
        out.append(rec)
    for j in range(failed):
        out[-1 - j] = {"index": n - 1 - j, "prompt_id": "p0", "ok": False, "error": "timeout"}
    return out


def run(side, qps, ttft_ms, tpot_ms, duration_s=10.0, acceptance=None, concurrency=None, **kw):
    """One run as vllm_load returns it (summary computed from constructed requests)."""
    from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_analysis import summarise_run
    from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_client import level_key

    raw = {
        "level": {"qps": qps, "concurrency": concurrency, "key": level_key(qps, concurrency)},
        "requests": requests_for(ttft_ms, tpot_ms, **kw),
        "duration_s": duration_s,
    }
    return {
        "side": side,
        "level": raw["level"],
        "summary": summarise_run(raw),
        "acceptance": acceptance,
        "server": {"version": "0.32.0"},
        "config": {
            "api": "completions",
            "sampling": {"temperature": 0, "max_tokens": 100, "seed": 42},
            "runs_per_prompt": 5,
            "warmup_requests": 3,
            "arrival": "poisson",
            "seed": 42,
            "prompt_ids": ["p0", "p1", "p2", "p3"],
        },
    }


ACCEPT = {
    "spec_decode_enabled": True,
    "num_drafts": 100,
    "num_draft_tokens": 300,
    "num_accepted_tokens": 154,
    "draft_acceptance_rate": 154 / 300,
    "mean_acceptance_length": 2.54,
    "per_position_acceptance": [0.80, 0.50, 0.24],
}


def metrics_page(drafts, draft_tokens, accepted, per_pos, model="tiny", ttft=(0.0, 0)):
    lbl = 'engine="0",model_name="%s"' % model
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        "vllm:spec_decode_num_drafts_total{%s} %s" % (lbl, drafts),
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        "vllm:spec_decode_num_draft_tokens_total{%s} %s" % (lbl, draft_tokens),
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        "vllm:spec_decode_num_accepted_tokens_total{%s} %s" % (lbl, accepted),
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    for i, v in enumerate(per_pos):
        lines.append('vllm:spec_decode_num_accepted_tokens_per_pos_total{%s,position="%d"} %s' % (lbl, i, v))
    lines += [
        "# TYPE vllm:time_to_first_token_seconds histogram",
        'vllm:time_to_first_token_seconds_bucket{%s,le="+Inf"} %s' % (lbl, ttft[1]),
        "vllm:time_to_first_token_seconds_sum{%s} %s" % (lbl, ttft[0]),
        "vllm:time_to_first_token_seconds_count{%s} %s" % (lbl, ttft[1]),
    ]
    return "\n".join(lines) + "\n"


class StreamServer:
    """benchmarks/stream_server.py in a child process (127.0.0.1, free port)."""

    def __init__(self, tmp_path, *args):
        import stream_server

        self.proc, self.url = stream_server.start_subprocess(tmp_path, *args)

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def ansible_env(tmp_path):
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
            "ANSIBLE_REMOTE_TEMP": str(tmp_path / "ansible-remote"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "0",
            "TMPDIR": str(tmp_path),
        }
    )
    return env


def run_tasks(tmp_path, tasks, check=False):
    """Run tasks on localhost through ansible-playbook; returns the registered results in order."""
    out = tmp_path / "results.json"
    play_tasks = [dict(task, register="r%d" % i, ignore_errors=True) for i, task in enumerate(tasks)]
    collected = "{" + ", ".join('"r%d": r%d' % (i, i) for i in range(len(tasks))) + "}"
    play_tasks.append(
        {
            "name": "save",
            "ansible.builtin.copy": {"content": "{{ %s | to_json }}" % collected, "dest": str(out)},
            "check_mode": False,
        }
    )
    playbook = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "connection": "local",
            "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
            "tasks": play_tasks,
        }
    ]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    (tmp_path / "hosts").write_text("localhost\n")
    cmd = [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts"), str(tmp_path / "play.yml")]
    if check:
        cmd.append("--check")
    proc = subprocess.run(
        cmd, cwd=ROOT, env=ansible_env(tmp_path), capture_output=True, text=True, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    return [data["r%d" % i] for i in range(len(tasks))], proc.stdout + proc.stderr
