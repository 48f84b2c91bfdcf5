"""The whole walk a user takes through the lab, as one test (issue 14, items 1 and 6; issue 39, item 1): the
README's lab walk, its commands copied verbatim out of README.md, runs in a fresh copy of the checkout (its
files as a clone has them, the installed toolchain linked in, nothing on PATH or PYTHONPATH but a plain
shell's): ``make lab-up`` seeds everything the lab services need (namespace, the PVCs with the tiny models,
the Modelcar base image and runtime), every service validates, ``stage.yml`` pushes the Modelcar image,
``make lab-status`` says so, ``deploy.yml -i inventories/lab`` deploys every lab service (options A, B and C;
ngram, draft_model, suffix, eagle3) at once on the first try and ``smoke.yml`` passes for every service.
Before the README's last line (``make lab-down``) the test goes on in the same copy: a second ``make
lab-up`` changes nothing, ``make lab-status`` tells the engine, the kubeconfig's https:// address, the
PVCs' layout, each engine's cores and the PATH line; ``benchmark.yml`` measures one service,
``rollback.yml`` turns speculative decoding off everywhere and a second rollback changes nothing, the
checkout stays clean (every report under the ignored ``.reports/``); then ``make lab-down`` stops it all.

One lab for the whole walk, on the stand-in engine (SPECPILOT_LAB_ENGINE=fake, the one variable the test
sets for the user): this test is about the lab's readiness, the README and the playbooks' wiring, not the
engine (the real-engine lab tests and molecule scenarios prove that)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
WALK_MARK = "<!-- the lab walk:"
TOOLCHAIN = (".venv", ".venv-vllm", ".venv-staging")
OLD = 946684800  # 2000-01-01: the copy's files are older than make's install stamps, as after `make`
SERVICES = {"lab-ngram", "lab-draft", "lab-suffix", "lab-eagle3", "lab-storage-uris", "lab-modelcar", "lab-llm"}
LLM_SERVICES = {"lab-llm"}  # served by KServe's LLMInferenceService (issue 35); the others by InferenceServices
# short runs on the stand-in engine, TTFT judged loosely (the point is the walk, not the figures)
SHORT_BENCHMARK = {
    "specpilot_benchmark_qps_levels": [2],
    "specpilot_benchmark_target_qps": 2,
    "specpilot_benchmark_runs_per_prompt": 2,
    "specpilot_benchmark_warmup_requests": 2,
    "specpilot_benchmark_max_tokens": 24,
    "specpilot_benchmark_wait_timeout": 180,
    "specpilot_benchmark_slo": {"ttft_max_regression": 10},
}
RECAP = re.compile(r"^(lab-[\w-]+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=(\d+)", re.M)


def readme_walk() -> list[str]:
    """The README's lab walk: the lines of the bash block after its marker, as written."""
    block = README.read_text().split(WALK_MARK, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def fresh_copy(dest: Path) -> Path:
    """The checkout as a fresh clone of it has it: the working tree's tracked and unignored files, a git
    repository of its own, and the toolchain ``make`` installs (.venv, .venv-vllm, .venv-staging) linked in,
    its stamps newer than every file, so ``make`` installs nothing."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        src, dst = ROOT / name, dest / name
        if name.split("/", 1)[0] in TOOLCHAIN or not (src.is_file() or src.is_symlink()):
            continue  # the toolchain (a worktree may link it), or deleted in the working tree
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
        os.utime(dst, (OLD, OLD), follow_symlinks=False)
    git = ["git", "-c", "user.name=walk", "-c", "user.email=walk@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "a fresh clone"]):
        subprocess.run(git + args, cwd=dest, check=True, capture_output=True)
    for venv in TOOLCHAIN:
        (dest / venv).symlink_to((ROOT / venv).resolve())
    return dest


def user_env() -> dict[str, str]:
    """A plain shell's environment: none of the test run's Ansible, Kubernetes, lab or Python settings, no
    virtualenv on PATH; the stand-in engine for the lab (SPECPILOT_LAB_ENGINE=fake)."""
    drop = ("ANSIBLE_", "K8S_AUTH_", "SPECPILOT_", "PYTHON", "VIRTUAL_ENV", "KUBECONFIG", "PYTEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv" not in p)
    env["SPECPILOT_LAB_ENGINE"] = "fake"
    env["TMPDIR"] = "/tmp"  # the engines' ZeroMQ socket paths must stay short
    return env


def shell(clone: Path, lines: list[str], timeout: int = 1500) -> list[tuple[str, str]]:
    """Run the lines as one bash session in the copy (exports carry over), stopping at the first failure;
    [(command without its comment, its output)]."""
    script = "set -e\n" + "".join(f"echo '>>> {i}'\n{line}\n" for i, line in enumerate(lines))
    proc = subprocess.run(
        ["bash", "-c", script],
        cwd=clone,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    parts = re.split(r"^>>> (\d+)$", proc.stdout, flags=re.M)
    outs = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    assert proc.returncode == 0, f"the README's walk failed at {lines[max(outs)]!r}:\n{proc.stdout[-6000:]}"
    return [(line.split(" #", 1)[0].strip(), outs[i]) for i, line in enumerate(lines)]  # the command, its output


def _recap(out: str) -> dict[str, tuple[int, int]]:
    return {h: (int(c), int(f)) for h, c, f in RECAP.findall(out)}


def _playbook(clone: Path, env: dict[str, str], playbook: str, *args: str) -> tuple[str, dict[str, tuple[int, int]]]:
    """A playbook on inventories/lab as a user types it in the copy; (output, {host: (changed, failed)})."""
    proc = subprocess.run(
        [".venv/bin/ansible-playbook", "-i", "inventories/lab", f"playbooks/{playbook}", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=clone,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{playbook}:\n{out[-6000:]}"
    return out, _recap(out)


def _lab_down(clone: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "specpilot_lab", "down"],
        env=dict(user_env(), PYTHONPATH=f"{clone / 'lab'}{os.pathsep}{clone / 'collections'}"),
        cwd=clone,
        capture_output=True,
        timeout=300,
    )


@pytest.fixture
def clone(vllm_venv, tmp_path):
    copy = fresh_copy(tmp_path / "specpilot")
    yield copy
    _lab_down(copy)


@pytest.mark.skipif(not shutil.which("skopeo"), reason="skopeo builds the Modelcar image (make installs it)")
def test_the_readme_lab_walk_runs_verbatim_in_a_fresh_copy_and_every_service_deploys_first_try(clone):
    walk = readme_walk()
    assert walk[0] == "make lab-up" and walk[-1] == "make lab-down", walk
    assert not any(line.startswith("ansible-playbook") for line in walk), "bare ansible-playbook is not on PATH"
    ran = dict(shell(clone, walk[:-1]))
    seeded = ran["make lab-up"].split("seeded: ", 1)[-1].splitlines()[0].split(", ")
    for item in (
        "namespace specpilot-lab",
        "tiny models",
        "PVC specpilot-lab/specpilot-lab-models",
        "PVC specpilot-lab/specpilot-lab-target",
        "PVC specpilot-lab/specpilot-lab-draft",
        "Modelcar base image",
        "ClusterServingRuntime specpilot-lab-vllm",
    ):
        assert item in seeded, ran["make lab-up"]
    by_playbook = {pb: out for line, out in ran.items() for pb in re.findall(r"playbooks/(\w+)\.yml", line)}
    assert _recap(by_playbook["validate"]) == {h: (0, 0) for h in SERVICES}, by_playbook["validate"][-3000:]
    recap = _recap(by_playbook["stage"])
    assert recap["lab-modelcar"] == (1, 0) and set(recap) == SERVICES, by_playbook["stage"][-3000:]
    pushed = re.search(
        r"pushed: (127\.0\.0\.1:\d+/specpilot/lab-modelcar)@(sha256:[0-9a-f]{64})", by_playbook["stage"]
    )
    assert pushed, by_playbook["stage"][-3000:]
    assert "inventories/lab: registry holds specpilot/lab-modelcar" in ran["make lab-status"]
    for pb in ("deploy", "smoke"):
        recap = _recap(by_playbook[pb])
        assert set(recap) == SERVICES and all(f == 0 for _, f in recap.values()), by_playbook[pb][-3000:]

    again = dict(shell(clone, ["make lab-up", "make lab-status"]))
    assert "already running" in again["make lab-up"]
    assert "seed: what the lab inventory needs is there" in again["make lab-up"], again["make lab-up"]
    status = again["make lab-status"]
    state = clone / ".lab"
    for line in (
        "engine: the lab's stand-in (SPECPILOT_LAB_ENGINE=fake)",
        "url https://127.0.0.1:",
        "inventories/lab: PVC specpilot-lab/specpilot-lab-models Bound, model draft at /draft, "
        "model eagle3 at /eagle3, model target at /target",
        "inventories/lab: PVC specpilot-lab/specpilot-lab-target Bound, model target at the claim's root",
        "inventories/lab: PVC specpilot-lab/specpilot-lab-draft Bound, model draft at the claim's root",
        f"inventories/lab: Modelcar base image {state / 'modelcar-base'}: there",
        "inventories/lab: ClusterServingRuntime specpilot-lab-vllm: there",
        "inventories/lab: LLMInferenceServiceConfigs in kserve: kserve-config-llm-decode-template, "
        "kserve-config-llm-prefill-template, kserve-config-llm-router-route, kserve-config-llm-scheduler, "
        "kserve-config-llm-template",
        "inventories/lab: LLMInferenceService specpilot-lab/lab-llm: Ready True, url http://127.0.0.1:",
        f"export KUBECONFIG={state / 'kubeconfig'}",
        f"export PATH={clone / '.venv' / 'bin'}:$PATH",
    ):
        assert line in status, status
    assert "http://" not in status.split("apiserver:", 1)[1].split("\n  kubeconfig", 1)[0], status
    # seven engines, two cores or more: each holds a core of its own while there are any, the rest share
    engines = re.findall(r"engine specpilot-lab/(\S+): cores (\S+) \((exclusive|shared pool)", status)
    assert len(engines) == len(SERVICES), status
    exclusive = [cores for _pod, cores, how in engines if how == "exclusive"]
    assert exclusive and len(set(exclusive)) == len(exclusive) == min(len(os.sched_getaffinity(0)), len(SERVICES)), status
    # option A's PVCs hold their model at the root (KServe 0.20 mounts the whole claim)
    assert (state / "pvcs" / "specpilot-lab" / "specpilot-lab-target" / "config.json").is_file()

    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(str(state / "kubeconfig")))

    def predictor(name: str) -> dict:
        isvc = api.get_namespaced_custom_object(
            "serving.kserve.io", "v1beta1", "specpilot-lab", "inferenceservices", name
        )
        assert {c["type"]: c["status"] for c in isvc["status"]["conditions"]}.get("Ready") == "True", isvc[
            "status"
        ]
        return isvc["spec"]["predictor"]

    for name in SERVICES - {"lab-storage-uris", "lab-modelcar"} - LLM_SERVICES:
        assert predictor(name)["model"]["storageUri"] == "pvc://specpilot-lab-models/", name
    # option B: the image stage.yml pushed, by its digest; option A: one PVC entry per artifact
    assert predictor("lab-modelcar")["model"]["storageUri"] == f"oci://{pushed[1]}@{pushed[2]}"
    assert predictor("lab-storage-uris")["storageUris"] == [
        {"uri": "pvc://specpilot-lab-target", "mountPath": "/mnt/models/target"},
        {"uri": "pvc://specpilot-lab-draft", "mountPath": "/mnt/models/draft"},
    ]
    assert '"method":"eagle3","model":"/mnt/models/eagle3"' in " ".join(
        predictor("lab-eagle3")["model"]["args"]
    )
    def llm_args(name: str) -> str:
        """The decode workload's args of an LLMInferenceService (its container main), once Ready."""
        obj = api.get_namespaced_custom_object(
            "serving.kserve.io", "v1alpha2", "specpilot-lab", "llminferenceservices", name
        )
        assert {c["type"]: c["status"] for c in obj["status"]["conditions"]}.get("Ready") == "True", obj["status"]
        main = next(c for c in obj["spec"]["template"]["containers"] if c["name"] == "main")
        return " ".join(main["args"])

    for name in LLM_SERVICES:  # deploy.yml put speculative decoding in the decode workload's args
        assert "--speculative-config=" in llm_args(name), name
    env = dict(user_env(), KUBECONFIG=str(state / "kubeconfig"))
    _walk_on(clone, env, predictor, llm_args)
    # the README's last line
    down = dict(shell(clone, walk[-1:] + ["make lab-status"]))
    assert ": running" not in down["make lab-status"], down["make lab-status"]
    assert "the lab is not (fully) running" in down["make lab-status"]


def _git_status(clone: Path) -> set[str]:
    out = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.splitlines())


def _walk_on(clone: Path, env: dict[str, str], predictor, llm_args) -> None:
    """After the README's deploy and smoke: the smoke reports, one benchmark, rollback twice, a clean
    checkout. The reports go where a user's would, under the project's `.reports/` (git ignores it)."""

    def _report(kind: str, *parts: str) -> dict:
        return json.loads((clone / ".reports" / kind / Path(*parts)).read_text())

    before = _git_status(clone)
    assert not any(".reports" in line for line in before), before
    for name in SERVICES:
        smoke = _report("smoke", name, "smoke.json")
        assert smoke["verdict"] == "pass" and smoke["expect"] == "on", (name, smoke.get("reasons"))

    # one service measured against its baseline twin, with short runs (the stand-in engine's figures
    # say nothing about vLLM; what counts here is that the walk measures and cleans up after itself)
    out, recap = _playbook(clone, env, "benchmark.yml", "--limit", "lab-ngram", "-e", json.dumps(SHORT_BENCHMARK))
    assert recap == {"lab-ngram": recap["lab-ngram"]} and recap["lab-ngram"][1] == 0, out[-3000:]
    bench = _report("benchmark", "lab-ngram", "report.json")
    assert bench["decision"] in {"keep", "rollback", "inconclusive", "invalid"} and bench["levels"], bench
    assert all(lv["baseline"]["ok"] and lv["speculative"]["ok"] for lv in bench["levels"])
    assert "--speculative-config" in " ".join(predictor("lab-ngram")["model"]["args"])  # not acted on

    out, recap = _playbook(clone, env, "rollback.yml")
    assert recap == {h: recap[h] for h in SERVICES} and all(c > 0 and f == 0 for c, f in recap.values()), out[-3000:]
    for name in SERVICES:
        args = llm_args(name) if name in LLM_SERVICES else " ".join(predictor(name)["model"]["args"])
        assert "--speculative-config" not in args, (name, args)
        assert _report("rollback", f"{name}.json")["verification"]["ok"], name
    out, recap = _playbook(clone, env, "rollback.yml")
    assert recap == {h: (0, 0) for h in SERVICES}, out[-3000:]  # a second rollback changes nothing

    assert _git_status(clone) == before, "the walk left files in the checkout"
