"""What the fleet benchmarks share (``bench_fleet_validate.py``, ``bench_fleet_cluster.py``): the
generated fleet inventory, one timed ``ansible-playbook`` run with the peak memory of its process
tree, the rows of one playbook measured at two fleet sizes, and the JSON + Markdown result.

The fleet: ``size`` services named ``svc-000`` ... spread round-robin over ``NAMESPACES`` namespaces,
each a lab-like n-gram service (tests/emulator/deploy/deploy_helpers.GROUP_VARS: PVC delivery, vLLM
0.32, the lab's tiny target) with num_speculative_tokens 2, 3 or 4 (``K_VALUES``), so that neither the
validation's caches nor the rendered manifests see one spec 200 times. The small fleet's inventory
holds the first ``small`` services of the big one: each run's inventory is the fleet it measures.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "lab", ROOT / "collections", ROOT / "tests" / "emulator" / "deploy"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from deploy_helpers import GROUP_VARS, NGRAM, parse_recap  # noqa: E402

from benchmarks import quick, setting  # noqa: E402
from benchmarks.__main__ import descendants  # noqa: E402

SMALL = setting("SPECPILOT_BENCH_FLEET_SMALL", 50, 1)
BIG = setting("SPECPILOT_BENCH_FLEET_BIG", 200, 2)
NAMESPACES = setting("SPECPILOT_BENCH_FLEET_NAMESPACES", 4, 2)
K_VALUES = (2, 3, 4)
RATIO_TARGET = 4.4  # growth no worse than linear: 200/50 services <= 4.4 (issue 40)
# A measured run is killed after RUN_TIMEOUT_S: past it the row has missed its target anyway (the slowest target is
# 300 s), and a hung run must not hold the machine. A setup step (deploy.yml creating the fleet, the first real
# rollback.yml that the no-op rollbacks are measured after) is no row: it has SETUP_TIMEOUT_S, long enough for a
# slow first rollout of 200 services on a loaded 2-core machine, and is still stopped if it hangs.
RUN_TIMEOUT_S = 900
SETUP_TIMEOUT_S = 2400
POLL_S = 0.2
VENV_BIN = ROOT / ".venv" / "bin"
OUT_ENV = "SPECPILOT_BENCH_FLEET_OUT"
PROFILE_ENV = "SPECPILOT_BENCH_FLEET_PROFILE"


def namespace(i: int) -> str:
    return "fleet-%d" % (i % NAMESPACES)


def host(i: int) -> str:
    return "svc-%03d" % i


def k_of(i: int) -> int:
    return K_VALUES[i % len(K_VALUES)]


def write_inventory(path: Path, size: int, host_vars=None, group=None) -> Path:
    """An inventory of the first ``size`` services of the fleet; ``host_vars(i)`` adds to service i's
    host vars (the engines' URLs of the cluster benchmark)."""
    (path / "group_vars").mkdir(parents=True, exist_ok=True)
    (path / "host_vars").mkdir(parents=True, exist_ok=True)
    gv = dict(GROUP_VARS, **(group or {}))
    (path / "group_vars" / "specpilot_services.yml").write_text("---\n" + yaml.safe_dump(gv, sort_keys=False))
    for i in range(size):
        hv = {
            "specpilot_namespace": namespace(i),
            "specpilot_speculative": dict(NGRAM, num_speculative_tokens=k_of(i)),
        }
        hv.update(host_vars(i) if host_vars else {})
        (path / "host_vars" / ("%s.yml" % host(i))).write_text("---\n" + yaml.safe_dump(hv, sort_keys=False))
    hosts = {"specpilot_services": {"hosts": {host(i): {} for i in range(size)}}}
    (path / "hosts.yml").write_text("---\n" + yaml.safe_dump(hosts))
    return path


def _tree_rss_kib(pid: int) -> int:
    """RSS of ``pid`` and every process below it, KiB (forked workers counted each: their pages shared
    copy-on-write with ansible-playbook are counted again, so this is an upper bound)."""
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            with open("/proc/%d/statm" % p) as handle:
                total += int(handle.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, IndexError, ValueError):
            pass
    return total


class Timed:
    """One ``ansible-playbook`` run: ``seconds`` (wall), ``cpu_s`` (user + system of the whole process
    tree), ``peak_rss_mib`` (the largest RSS sum of the tree, sampled every POLL_S), ``rc``, ``out``."""

    def __init__(self, cmd: list[str], env: dict, log: Path, timeout: float = RUN_TIMEOUT_S):
        self.cmd, self.env, self.log, self.timeout = cmd, env, log, timeout
        self.seconds = self.cpu_s = self.peak_rss_mib = 0.0
        self.rc: int | None = None
        self.out = ""

    def run(self) -> "Timed":
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak = 0
        with open(self.log, "w") as fh:
            started = time.perf_counter()
            proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + self.timeout
            try:
                while proc.poll() is None:
                    peak = max(peak, _tree_rss_kib(proc.pid))
                    if time.monotonic() > deadline:
                        proc.kill()
                    time.sleep(POLL_S)
            except BaseException:  # SIGTERM (SystemExit), ^C: the run is stopped with the benchmark
                proc.terminate()
                proc.wait(30)
                raise
            self.rc = proc.wait()
            self.seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.peak_rss_mib = peak / 1024.0
        self.out = self.log.read_text()
        return self

    def recap(self) -> dict[str, dict[str, int]]:
        return parse_recap(self.out)


def playbook(
    env: dict,
    tmp: Path,
    inventory: Path,
    book: str,
    *args: str,
    expect_rc: int = 0,
    hosts: int | None = None,
    timeout: float = RUN_TIMEOUT_S,
) -> Timed:
    """``ansible-playbook -i inventory playbooks/<book>.yml args``, timed, killed after ``timeout`` seconds
    (RUN_TIMEOUT_S; a setup step SETUP_TIMEOUT_S); raises unless its exit status is ``expect_rc`` and its recap
    names ``hosts`` hosts (a benchmark of a failing run measures nothing)."""
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(ROOT / "playbooks" / book), *args]
    tag = "%s-%s-%d" % (Path(book).stem, inventory.name, time.monotonic_ns() % 100000)
    cmd, env = _profiled(cmd, env, tag)
    run = Timed(cmd, env, tmp / ("%s-%d.log" % (Path(book).stem, time.monotonic_ns())), timeout).run()
    if run.rc != expect_rc or (hosts is not None and len(run.recap()) != hosts):
        killed = " (killed after %d s)" % timeout if run.rc == -9 and run.seconds >= timeout else ""
        raise RuntimeError(
            "%s %s: exit %s%s, %d host(s) in the recap\n%s"
            % (book, " ".join(args), run.rc, killed, len(run.recap()), run.out[-6000:])
        )
    print(
        "    %s, %d services: %.1f s, %.1f s CPU, peak RSS %.0f MiB"
        % (book, len(run.recap()), run.seconds, run.cpu_s, run.peak_rss_mib),
        file=sys.stderr,  # stdout's "==> module" line is followed by its result count (test_bench_quick)
        flush=True,
    )
    return run


def _profiled(cmd: list[str], env: dict, tag: str) -> tuple[list[str], dict]:
    """With $SPECPILOT_BENCH_FLEET_PROFILE=DIR: the run under cProfile (ansible-playbook's own process:
    the strategy, the templating, the variables; not the forked workers) into DIR/<tag>.prof, and
    callback/fleet_profile.py's per-task wall times into DIR/<tag>.tasks.json. cProfile slows the parent
    several-fold, and the workers' share of each task with it: with $SPECPILOT_BENCH_FLEET_CPROFILE=0 only the
    per-task times are taken, at the run's own speed (to compare sizes task by task)."""
    where = os.environ.get(PROFILE_ENV)
    if not where:
        return cmd, env
    Path(where).mkdir(parents=True, exist_ok=True)
    env = dict(env)
    env["ANSIBLE_CALLBACK_PLUGINS"] = str(ROOT / "benchmarks" / "callback")
    env["ANSIBLE_CALLBACKS_ENABLED"] = "specpilot.core.preload,fleet_profile"
    env["FLEET_PROFILE_OUT"] = str(Path(where) / ("%s.tasks.json" % tag))
    if os.environ.get("SPECPILOT_BENCH_FLEET_CPROFILE", "1") == "0":
        return cmd, env
    return [str(VENV_BIN / "python"), "-m", "cProfile", "-o", str(Path(where) / ("%s.prof" % tag)), *cmd], env


def rows(label: str, small: Timed, big: Timed, target_s: float | None = None) -> list[dict]:
    """The rows of one playbook: seconds at each size, the marginal cost of one more service, the
    big/small ratio (target RATIO_TARGET), the peak memory at the big size."""
    ratio = big.seconds / small.seconds if small.seconds else float("inf")
    per_service = (big.seconds - small.seconds) / (BIG - SMALL) if BIG > SMALL else big.seconds / BIG
    out = [
        {
            "name": "fleet %s, %d services" % (label, SMALL),
            "value": small.seconds,
            "unit": "s",
            "target": "",
            "ok": True,
        },
        {
            "name": "fleet %s, %d services" % (label, BIG),
            "value": big.seconds,
            "unit": "s",
            "target": "<= %g" % target_s if target_s else "",
            "ok": target_s is None or big.seconds <= target_s,
        },
        {
            "name": "fleet %s, cost of one more service" % label,
            "value": per_service,
            "unit": "s/service",
            "target": "",
            "ok": True,
        },
        {
            "name": "fleet %s, %d / %d services" % (label, BIG, SMALL),
            "value": ratio,
            "unit": "x",
            "target": "<= %g" % RATIO_TARGET,
            "ok": ratio <= RATIO_TARGET,
        },
        {
            "name": "fleet %s, peak RSS of ansible-playbook, %d services" % (label, BIG),
            "value": big.peak_rss_mib,
            "unit": "MiB",
            "target": "",
            "ok": True,
        },
    ]
    for row, run in zip(out, (small, big)):
        if run is not None:
            row["cpu_s"] = run.cpu_s
    return out


def out_dir(tmp: Path) -> Path:
    """Where the result goes: $SPECPILOT_BENCH_FLEET_OUT, else <project>/.reports/bench (quick mode: the
    benchmark's temporary directory, gone with it)."""
    if os.environ.get(OUT_ENV):
        return Path(os.environ[OUT_ENV])
    return tmp / "result" if quick() else ROOT / ".reports" / "bench"


def markdown(title: str, result: list[dict], notes: list[str]) -> str:
    from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table

    table = markdown_table(
        ["benchmark", "value", "unit", "CPU s", "target", "ok"],
        [
            [
                r["name"],
                "%.3g" % r["value"],
                r["unit"],
                "%.1f" % r["cpu_s"] if "cpu_s" in r else "-",
                r["target"] or "-",
                "-" if not r.get("target") else ("yes" if r["ok"] else "NO"),
            ]
            for r in result
        ],
    )
    return "\n".join(["# %s" % title, ""] + table + [""] + ["- %s" % n for n in notes] + [""])


def write_result(tmp: Path, name: str, title: str, result: list[dict], notes: list[str]) -> Path:
    """``<out>/<name>.json`` and ``<name>.md``: the rows, the sizes, the machine's load; the JSON's path."""
    out = out_dir(tmp)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "title": title,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sizes": {"small": SMALL, "big": BIG, "namespaces": NAMESPACES},
        "quick": quick(),
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "notes": notes,
        "rows": result,
    }
    (out / ("%s.json" % name)).write_text(json.dumps(doc, indent=1))
    (out / ("%s.md" % name)).write_text(
        markdown(title, result, notes + ["load average at the end: %.2f %.2f %.2f" % doc["loadavg"]])
    )
    print("    result: %s" % (out / ("%s.md" % name)), file=sys.stderr, flush=True)
    return out / ("%s.json" % name)


def ansible_env(base: dict, tmp: Path) -> dict:
    env = dict(base)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_STDOUT_CALLBACK="default",
        PWD=str(ROOT),
    )
    env.pop("K8S_AUTH_KUBECONFIG", None)
    for extra in os.environ.get("SPECPILOT_BENCH_FLEET_ANSIBLE_ENV", "").split():
        key, _, value = extra.partition("=")  # e.g. ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks
        env[key] = value
    return env
