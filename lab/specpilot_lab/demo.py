"""``make demo``: the main job, end to end, on the built-in lab.

Starts the lab (API emulator, KServe-like controller running a real vLLM engine on CPU,
OCI registry), makes the tiny models and puts them on the lab PVC, then runs the
project's own playbooks against ``inventories/lab`` for one n-gram service:

1. validate  (``playbooks/validate.yml``)
2. deploy    (``playbooks/deploy.yml``): waits for the new rollout
3. smoke     (``playbooks/smoke.yml``): probes, acceptance from /metrics and the log
4. rollback  (``playbooks/rollback.yml``): speculative decoding off, verified gone

Between the steps it reads the facts itself (InferenceService status, engine /metrics,
the ``SpecDecoding metrics:`` log line) and prints them. It exits 0 only when every
step really happened; the lab is stopped in any case (``--keep`` leaves it running).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

from . import processes, seed
from .processes import REPO_ROOT, LabPaths

SERVICE = "lab-ngram"
NAMESPACE = seed.lab_targets()[0]
INVENTORY = REPO_ROOT / "inventories" / "lab"
VENV_BIN = REPO_ROOT / ".venv" / "bin"
REPORTS = REPO_ROOT / ".reports"


class DemoFailed(RuntimeError):
    pass


T0 = time.monotonic()  # the job starts when python -m specpilot_lab.demo does


def step(n: int, total: int, text: str) -> None:
    """A step's header, with the seconds since the job started (where the first run's minutes go)."""
    print(f"\n\033[1m==> [{n}/{total}] {text}\033[0m (at {time.monotonic() - T0:.0f}s)", flush=True)


def info(text: str) -> None:
    print(f"    {text}", flush=True)


def run_playbook(paths: LabPaths, playbook: str, *extra: str) -> None:
    env = dict(os.environ)
    env.update(
        KUBECONFIG=str(paths.kubeconfig),
        K8S_AUTH_KUBECONFIG=str(paths.kubeconfig),
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="1",
        TMPDIR=str(paths.root / "tmp"),
    )
    (paths.root / "tmp").mkdir(parents=True, exist_ok=True)
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(INVENTORY), "--limit", SERVICE,
           str(REPO_ROOT / "playbooks" / playbook), *extra]
    info("$ " + " ".join(cmd[0:1] + [c.replace(str(REPO_ROOT) + "/", "") for c in cmd[1:]]))
    proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT)
    if proc.returncode != 0:
        raise DemoFailed(f"{playbook} failed (exit {proc.returncode})")


def custom_api(paths: LabPaths):
    from kubernetes import client, config

    return client.CustomObjectsApi(config.new_client_from_config(str(paths.kubeconfig)))


def get_isvc(paths: LabPaths) -> dict:
    return custom_api(paths).get_namespaced_custom_object(
        "serving.kserve.io", "v1beta1", NAMESPACE, "inferenceservices", SERVICE)


def ready(isvc: dict) -> bool:
    conds = isvc.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as resp:
        return resp.read().decode()


def metrics_facts(text: str) -> dict:
    from ansible_collections.specpilot.core.plugins.module_utils.engine import vllm_metrics

    return vllm_metrics.parse_metrics_text(text)


def pod_log(paths: LabPaths) -> str:
    core = seed.core_api(paths)
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"serving.kserve.io/inferenceservice={SERVICE}")
    running = [p for p in pods.items if p.status.phase == "Running"] or pods.items
    if not running:
        raise DemoFailed(f"no predictor pod for {SERVICE}")
    return core.read_namespaced_pod_log(running[0].metadata.name, NAMESPACE, container="kserve-container")


def show_engine_facts(paths: LabPaths, expect_on: bool) -> None:
    isvc = get_isvc(paths)
    url = isvc.get("status", {}).get("address", {}).get("url") or isvc.get("status", {}).get("url")
    if not ready(isvc) or not url:
        raise DemoFailed(f"{SERVICE} is not Ready: {json.dumps(isvc.get('status', {}).get('conditions'))}")
    args = isvc["spec"]["predictor"]["model"].get("args", [])
    spec_args = [a for a in args if a.startswith("--speculative-config")]
    info(f"InferenceService Ready at {url}; speculative args: {spec_args or 'none'}")
    facts = metrics_facts(scrape(url))
    log = pod_log(paths)
    init = [ln for ln in log.splitlines() if "speculative_config=" in ln]
    spec_lines = [ln for ln in log.splitlines() if "SpecDecoding metrics:" in ln]
    if init:
        cfg = init[-1][init[-1].index("speculative_config="):].split(", ")[0:3]
        info("engine init: " + ", ".join(cfg)[:160])
    if expect_on:
        derived = facts.get("derived", {})
        rate = derived.get("draft_acceptance_rate")
        mal = derived.get("mean_acceptance_length")
        if not facts.get("spec_decode_enabled") or not rate:
            raise DemoFailed(f"no acceptance measured from /metrics: {derived}")
        info(f"/metrics: acceptance rate {rate:.1%}, mean acceptance length {mal:.2f}, "
             f"per position {[round(x, 2) for x in derived.get('per_position_acceptance') or []]}")
        # vLLM logs "SpecDecoding metrics:" every 10 s for windows that had drafts.
        deadline = time.monotonic() + 25
        while not spec_lines and time.monotonic() < deadline:
            time.sleep(2)
            spec_lines = [ln for ln in pod_log(paths).splitlines() if "SpecDecoding metrics:" in ln]
        if not spec_lines:
            raise DemoFailed("the engine logged no 'SpecDecoding metrics:' line")
        info("log: " + spec_lines[-1][spec_lines[-1].index("SpecDecoding metrics:"):][:240])
    else:
        if facts.get("spec_decode_enabled"):
            raise DemoFailed("vllm:spec_decode_* series still present after rollback")
        if not init or "speculative_config=None" not in init[-1]:
            raise DemoFailed("the engine log does not show speculative_config=None")
        info("/metrics: no vllm:spec_decode_* series; engine log: speculative_config=None")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specpilot_lab.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the lab running at the end")
    args = parser.parse_args(argv)
    paths = LabPaths.default()
    total = 7
    try:
        step(1, total, "start the lab (API emulator, controller, OCI registry)")
        for spec in processes.ordered():
            processes.start(paths, spec)
        info(f"export KUBECONFIG={paths.kubeconfig}")

        step(2, total, "tiny models onto the lab PVC")
        seed.seed(paths, say=info)

        step(3, total, f"validate {SERVICE}")
        run_playbook(paths, "validate.yml")

        step(4, total, f"deploy {SERVICE} (n-gram speculative decoding) and wait for the rollout")
        run_playbook(paths, "deploy.yml")

        step(5, total, "smoke: probe requests, acceptance from /metrics and the engine log")
        run_playbook(paths, "smoke.yml")
        show_engine_facts(paths, expect_on=True)

        step(6, total, "roll back: speculative decoding off, verified gone")
        # rollback.yml verifies the new pods itself (specpilot_rollback_smoke: smoke with expect=off); the demo then
        # reads the facts directly, as after the smoke above
        run_playbook(paths, "rollback.yml")
        show_engine_facts(paths, expect_on=False)
        step(7, total, "done")
        status = 0
    except (DemoFailed, RuntimeError) as exc:
        print(f"\n\033[31mdemo failed: {exc}\033[0m", file=sys.stderr)
        status = 1
    finally:
        if not args.keep:
            print("\n==> stopping the lab", flush=True)
            for spec in reversed(processes.ordered()):
                processes.stop(paths, spec)
    if status == 0:
        # the last line: where the playbooks wrote their reports (the project's .reports/, filter project_root)
        info(f"the whole job took {time.monotonic() - T0:.0f}s; reports under {REPORTS}")
    return status


if __name__ == "__main__":
    sys.exit(main())
