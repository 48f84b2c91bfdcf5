"""The smoke and benchmark flow on a real GPU vLLM: run on a lent GPU machine, never in CI.

    python3 benchmarks/gpu_flow.py --out DIR [--site DIR] [--methods ngram,draft_model,eagle3]

With the interpreter that holds vLLM (``--site`` is put on the engines' PYTHONPATH), it serves the
lab's tiny models (lab/specpilot_lab/models.py, made here with the same seed) on the GPU with
vLLM's own OpenAI server, once without speculative decoding and once per method, and runs on each
the same code the playbooks run in the pod's place:

* GPU memory facts: total memory as vLLM counts it (``torch.cuda.mem_get_info``, which
  ``vllm/v1/worker/gpu_worker.py`` reads through ``MemorySnapshot``) beside nvidia-smi's, and the
  CUDA context's own memory (what stays outside ``--gpu-memory-utilization``);
* smoke: the engine-init line (``vllm_logs``), its speculative config against the planned one
  (``smoke.compare_engine_config``), acceptance from /metrics deltas and the log windows
  (``smoke.figures``);
* benchmark: the same prompts at the same load on baseline and speculative (``bench_client``),
  judged by ``bench_analysis.analyse`` (keep / rollback / undecided).

Writes ``gpu_flow.json`` and ``gpu_flow.md`` under ``--out``; progress goes to stderr.

A GPU machine without vLLM or a package index (how the recorded run was made): take the newest vLLM
release whose ``torch==`` pin matches the machine's torch (0.24.0 for torch 2.11; ``unzip -p`` the
wheel's METADATA), resolve its requirements for the machine's Python (``pip install --dry-run
--ignore-installed --report``; pip 26 matches ``--platform`` tags exactly, so name every one the machine
takes: ``manylinux_2_17_x86_64`` to ``manylinux_2_39_x86_64``, ``manylinux2014_x86_64``,
``manylinux1_x86_64``, or older wheels such as blake3's are not found), drop what the machine already
has and the optional kernel packages (flashinfer, tilelang, cutlass-dsl, quack, humming, tokenspeed; keep ``apache-tvm-ffi``, which xgrammar
imports), ``pip install --no-deps --target DIR --platform manylinux_2_28_x86_64 --python-version 3.12``,
remove ``vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so`` (Hopper runs FA3), ``vllm/vllm-rs`` and the
third_party ``include`` trees, and carry DIR as ``tar.xz`` parts; pass it as ``--site``. Add ``tabulate`` (the report's tables,
requirements.txt's pin; one pure-Python wheel) to DIR when the machine lacks it. The engines
run with ``VLLM_USE_FLASHINFER_SAMPLER=0`` (ENGINE_ENV) so that vLLM does not import FlashInfer.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "collections", ROOT / "lab"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import (
    bench_analysis as ba,
)  # noqa: E402
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_client as bc  # noqa: E402
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import (
    bench_verdict as bv,
)  # noqa: E402
from ansible_collections.specpilot.core.plugins.module_utils.engine import (
    vllm_logs,
    vllm_metrics,
)  # noqa: E402
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table  # noqa: E402
from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke  # noqa: E402
from specpilot_lab.engine import Engine, EngineError, set_arg, tiny_target_args  # noqa: E402

WORKLOAD = ROOT / "roles" / "specpilot_benchmark" / "files" / "workloads" / "code-edit.jsonl"
SERVER = ["-m", "vllm.entrypoints.cli.main", "serve"]
LEVELS = [{"qps": None, "concurrency": 1}, {"qps": None, "concurrency": 8}]
GIB = float(1 << 30)
# the top-k/top-p sampler's FlashInfer check imports the FlashInfer backend (vllm/v1/sample/ops/
# topk_topp_sampler.py, flashinfer_sampler_supported): off, vLLM samples with its own kernels
ENGINE_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}


def log(msg):
    sys.stderr.write("[gpu-flow %6.1fs] %s\n" % (time.monotonic() - START, msg))
    sys.stderr.flush()


START = time.monotonic()


def gpu_facts():
    """Memory of GPU 0 as nvidia-smi and as torch (hence vLLM) count it, and the CUDA context's share."""
    try:
        return _gpu_facts()
    except (OSError, ValueError, KeyError) as exc:
        return {"error": "no GPU facts: %s" % exc}


def _gpu_facts():
    smi = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,memory.total,memory.used,driver_version",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    code = (
        "import json,torch,subprocess;torch.cuda.init();f,t=torch.cuda.mem_get_info();"
        "u=subprocess.run(['nvidia-smi','--query-gpu=memory.used','--format=csv,noheader,nounits'],"
        "capture_output=True,text=True).stdout.split()[0];"
        "print(json.dumps({'torch_total_bytes':t,'torch_free_bytes':f,'smi_used_mib_with_context':int(u),"
        "'torch_reserved_bytes':torch.cuda.memory_reserved(),'torch':torch.__version__,"
        "'cuda':torch.version.cuda,'capability':list(torch.cuda.get_device_capability())}))"
    )
    probe = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
    name, total_mib, used_mib, driver = [s.strip() for s in smi.split(",")]
    probe.update(
        product=name,
        driver=driver,
        smi_total_mib=int(total_mib),
        smi_used_mib_idle=int(used_mib),
        total_gib_as_vllm_counts=round(probe["torch_total_bytes"] / GIB, 2),
        context_mib=(probe["torch_total_bytes"] - probe["torch_free_bytes"] - probe["torch_reserved_bytes"])
        >> 20,
    )
    return probe


def make_models(out):
    if not (out / "manifest.json").exists():
        subprocess.run(
            [sys.executable, "-m", "specpilot_lab.models", "--out", str(out), "--seed", "0"],
            check=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT / "lab")),
            stdout=subprocess.DEVNULL,
        )
    return out


def speculative_configs(models, methods):
    known = {
        "ngram": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        },
        "draft_model": {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 3},
        "eagle3": {"method": "eagle3", "model": str(models / "eagle3"), "num_speculative_tokens": 3},
    }
    return {m: known[m] for m in methods}


def server_args(models, spec_cfg, extra, dtype):
    args = tiny_target_args(models, spec_cfg)
    args = set_arg(args, "--dtype", dtype)
    args = set_arg(args, "--gpu-memory-utilization", "0.1")
    return args + extra


def start(name, models, spec_cfg, opts):
    eng = Engine(
        server_args(models, spec_cfg, opts.extra, opts.dtype),
        opts.run_root / name,
        python=Path(sys.executable),
        command=[sys.executable] + SERVER,
        env=dict(ENGINE_ENV, **({"PYTHONPATH": opts.site} if opts.site else {})),
    )
    eng.start()
    try:
        ready_s = eng.wait_ready(timeout=300)
    except EngineError as exc:
        eng.stop()
        raise EngineError("%s did not start: %s" % (name, exc)) from None
    log("%s ready in %.1f s" % (name, ready_s))
    return eng, ready_s


def load(eng, prompts, runs_per_prompt):
    cfgs = [
        {
            "base_url": eng.url,
            "model": "tiny",
            "prompts": prompts,
            "runs_per_prompt": runs_per_prompt,
            "warmup_requests": 4,
            "concurrency": lv["concurrency"],
            "qps": lv["qps"],
            "sampling": {"temperature": 0.0, "max_tokens": 96, "seed": 42},
            "progress_interval": 30.0,
        }
        for lv in LEVELS
    ]
    return bc.run_many(cfgs)


def smoke_view(eng, plan_cfg, raw_runs):
    parsed = vllm_logs.parse_log_file(str(eng.log_file))
    before = parse(raw_runs[0].get("metrics_before"))
    after = vllm_metrics.parse_metrics_text(
        raw_runs[-1].get("metrics_after") or "", previous=before, source="after"
    )
    fig = smoke.figures(after, parsed, plan_cfg)
    logged = parsed.get("speculative_config")
    return {
        "engine_init_line": parsed.get("engine_init_line"),
        "vllm_version": parsed.get("vllm_version"),
        "logged_speculative_config": logged,
        "config_differences": smoke.compare_engine_config(plan_cfg, logged) if plan_cfg else [],
        "figures": {k: fig.get(k) for k in ("source", "acceptance_rate", "mean_acceptance_length")},
        "interpretation": smoke.interpretation(fig, smoke.thresholds()) if plan_cfg else [],
        # the parser's names (vllm_logs: "warnings" is reserved in Ansible module results)
        "log_warnings": parsed.get("log_warnings") or [],
        "log_errors": parsed.get("log_errors") or [],
    }


def parse(text):
    return vllm_metrics.parse_metrics_text(text, source="before") if text else None


def side_runs(side, raw_runs):
    return [
        {
            "side": side,
            "level": r["level"],
            "summary": ba.summarise_run(r),
            "acceptance": ba.acceptance_from_scrapes(r.get("metrics_before"), r.get("metrics_after")),
            "server": r.get("server"),
            "config": r.get("config"),
        }
        for r in raw_runs
    ]


def run_side(name, models, plan_cfg, opts, prompts):
    try:
        eng, ready_s = start(name, models, plan_cfg, opts)
    except EngineError as exc:
        log(str(exc)[-2000:])
        return {"name": name, "started": False, "error": str(exc)[-4000:]}
    try:
        raw = load(eng, prompts, opts.runs_per_prompt)
        view = smoke_view(eng, plan_cfg, raw)
    finally:
        eng.stop()
    (opts.out / ("%s.log" % name)).write_bytes(eng.log_file.read_bytes()[-4_000_000:])
    return {"name": name, "started": True, "ready_s": round(ready_s, 1), "smoke": view, "raw": raw}


# what each judged level keeps in the report (bench_analysis._judge_level's keys): its decision and
# why, whether it was valid, and the p50 ratios with their 95% intervals (bench_verdict.ratios)
LEVEL_KEYS = ("level", "decision", "reasons", "valid", "invalid_reasons", "ratios", "acceptance")


def verdicts(base, sides):
    out = {}
    for name, side in sides.items():
        if not side.get("started") or not base.get("started"):
            out[name] = {"decision": None, "why": "an engine did not start: nothing measured, nothing judged"}
            continue
        runs = side_runs("baseline", base["raw"]) + side_runs("speculative", side["raw"])
        res = ba.analyse(runs, target=LEVELS[0], method=name)
        out[name] = {
            "decision": res["decision"],
            "reasons": res["reasons"],
            "per_level": res["per_level"],
            "levels": [{k: lv.get(k) for k in LEVEL_KEYS} for lv in res["levels"]],
        }
    return out


def _side_row(name, side, verdicts):
    sm = side.get("smoke") or {}
    fig = sm.get("figures") or {}
    return (
        name,
        side.get("started"),
        side.get("ready_s", "-"),
        sm.get("vllm_version", "-"),
        sm.get("engine_init_line", "-"),
        "; ".join(sm.get("config_differences") or []) or "none",
        _num(fig.get("acceptance_rate")),
        _num(fig.get("mean_acceptance_length")),
        (verdicts.get(name) or {}).get("decision", "-"),
    )


def markdown(doc):
    g = doc["gpu"]
    lines = ["# specpilot flow on a real GPU vLLM", ""]
    if "error" in g:
        lines.append("- GPU: %s" % g["error"])
    else:
        lines += [
            "- GPU: %s, driver %s, torch %s (CUDA %s)" % (g["product"], g["driver"], g["torch"], g["cuda"]),
            "- memory: nvidia-smi %d MiB; torch/vLLM total %.2f GiB; CUDA context %d MiB"
            % (g["smi_total_mib"], g["total_gib_as_vllm_counts"], g["context_mib"]),
        ]
    sides = [("baseline", doc["baseline"])] + list(doc["speculative"].items())
    columns = (
        "side",
        "started",
        "ready s",
        "vLLM",
        "init line",
        "config diffs",
        "acceptance",
        "MAL",
        "verdict",
    )
    lines += [""] + markdown_table(columns, [_side_row(name, side, doc["verdicts"]) for name, side in sides])
    lines.append("")
    for name, v in doc["verdicts"].items():
        why = "; ".join(v.get("reasons") or [v.get("why", "")])
        levels = ", ".join("%s %s" % kv for kv in (v.get("per_level") or {}).items())
        lines.append("- %s: %s (%s); per level: %s" % (name, v.get("decision"), why, levels or "-"))
    return "\n".join(lines + ratio_table(doc["verdicts"])) + "\n"


def ratio_table(verdicts_by_method):
    """Each level's p50 ratios, speculative against baseline (above 1 is better), with the 95% interval."""
    rows = [
        (name, (lv.get("level") or {}).get("key", "-"), lv.get("decision"))
        + tuple(_ratio((lv.get("ratios") or {}).get(f)) for f in bv.FIGURES)
        for name, v in verdicts_by_method.items()
        for lv in v.get("levels") or []
    ]
    if not rows:
        return []
    intro = ["", "p50 ratios, speculative against baseline (above 1 is better; 95% interval):", ""]
    return intro + markdown_table(("method", "level", "decision", "TTFT", "TPOT", "E2E", "throughput"), rows)


def _ratio(fig):
    if not fig or fig.get("value") is None:
        return "-"
    ci = fig.get("ci95")
    return "%.2fx" % fig["value"] + (" (%.2f-%.2f)" % tuple(ci) if ci else " (no interval)")


def _num(value):
    return "-" if value is None else "%.3f" % value


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--site", default=os.environ.get("SPECPILOT_VLLM_SITE", ""))
    p.add_argument("--methods", default="ngram,draft_model,eagle3")
    p.add_argument("--runs-per-prompt", type=int, default=3)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--extra", default="", help="more server arguments, space separated")
    opts = p.parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    opts.run_root = Path(os.environ.get("TMPDIR", "/tmp")) / "gpu-flow"
    opts.extra = opts.extra.split()
    doc = {"gpu": gpu_facts()}
    log("gpu: %s" % json.dumps(doc["gpu"]))
    models = make_models(opts.run_root / "models")
    prompts = bc.load_workload(str(WORKLOAD))[:8]
    doc["baseline"] = run_side("baseline", models, None, opts, prompts)
    if not doc["baseline"]["started"] and "--attention-backend" not in opts.extra:
        # the default backend on this GPU (FlashAttention 3 on Hopper) may not take the tiny model's
        # head size 32: vLLM's Triton backend takes any, and then serves every side alike
        opts.extra += ["--attention-backend", "TRITON_ATTN"]
        doc["baseline_default_backend"] = doc["baseline"]
        doc["baseline"] = run_side("baseline", models, None, opts, prompts)
    doc["server_extra_args"] = opts.extra
    doc["speculative"] = {}
    for m, cfg in speculative_configs(models, opts.methods.split(",")).items():
        doc["speculative"][m] = run_side(m, models, cfg, opts, prompts)
        save(doc, opts.out)  # what one side measured survives a later side's hang
    doc["verdicts"] = verdicts(doc["baseline"], doc["speculative"])
    sys.stdout.write(save(doc, opts.out))
    return 0


def save(doc, out):
    """gpu_flow.json (without the raw request records), gpu_flow.md, and the raw records of each side
    (gpu_flow_raw.json.gz: every request and /metrics page, to judge again offline); returns the Markdown."""
    raw = {"baseline": doc["baseline"].get("raw")}
    raw.update({m: side.get("raw") for m, side in doc["speculative"].items()})
    with gzip.open(out / "gpu_flow_raw.json.gz", "wt") as fh:
        json.dump(raw, fh, default=str)
    slim = dict(doc, baseline={k: v for k, v in doc["baseline"].items() if k != "raw"})
    slim["speculative"] = {
        m: {k: v for k, v in side.items() if k != "raw"} for m, side in doc["speculative"].items()
    }
    slim.setdefault("verdicts", {})
    (out / "gpu_flow.json").write_text(json.dumps(slim, indent=1, default=str))
    md = markdown(slim)
    (out / "gpu_flow.md").write_text(md)
    return md


if __name__ == "__main__":
    raise SystemExit(main())
