"""Fleet benchmark of the playbooks that talk to the cluster (issue 40): a no-op deploy.yml, smoke.yml,
guard.yml and a no-op rollback.yml over 50 and 200 services in four namespaces (benchmarks/fleet.py).

The cluster is the API emulator with deploy's FakeKServe playing KServe and the kubelet
(tests/emulator/deploy/deploy_helpers.py: each InferenceService's predictor Deployment, pod and
Ready status). The engines are the lab's stand-in (lab/specpilot_lab/fake_engine.py), one process per
speculative config of the fleet (n-gram k 2, 3 and 4) rather than one per service: every service's
smoke probes (specpilot_smoke_url, specpilot_smoke_model_name) and guard scrapes
(specpilot_guard_metrics_url) go to the engine of its config, and every predictor pod's log in the
emulator (pods/log) is that engine's log. A thread sends each engine a completion every half second,
so that the guard's window sees drafted tokens.

Setup, not measured: deploy.yml once over the 200 (no wait), FakeKServe rolls them out; before the
no-op rollbacks, rollback.yml once over the 200 (no smoke; it waits for the rollouts FakeKServe makes
meanwhile and verifies the new pods). The setup's runs have fleet.SETUP_TIMEOUT_S, the measured runs
fleet.RUN_TIMEOUT_S: a slow first rollback is no row and does not stop the benchmark; a measured run is
judged by its target.
Measured, each at 50 then 200 services (the 50's inventory holds the first 50 of the 200):
- deploy.yml, nothing to change (checked: changed=0);
- smoke.yml (every verdict passes: exit 0);
- guard.yml, the role's window (``SPECPILOT_BENCH_FLEET_GUARD_WINDOW``, default 60 s as scheduled;
  one pause for the whole play), verdict healthy, history kept in each service's ConfigMap;
- rollback.yml, every service already off (checked: changed=0; specpilot_rollback_smoke false,
  since smoke has its own row).
Rows per playbook: seconds, cost of one more service, 200/50 (target <= 4.4), peak RSS of the
ansible-playbook process tree. Targets at 200: guard <= 180 s, no-op deploy and no-op rollback
<= 300 s each. Result: ``.reports/bench/fleet_cluster.{json,md}``.

``SPECPILOT_BENCH_FLEET_PLAYBOOKS`` (default ``deploy,smoke,guard,rollback``) measures a part (each
part's timed runs under ten minutes on a loaded machine). Quick mode: 2 services, each playbook
once at that size only (the small size's rows repeat it), a 1 s guard window.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

from benchmarks import fleet, quick, setting  # fleet puts lab/ and deploy_helpers' folder on sys.path

from deploy_helpers import ISVC as _ISVC, FakeKServe, create_namespace  # noqa: E402
from specpilot_lab import podlogs  # noqa: E402
from specpilot_lab.testing import Emulator  # noqa: E402

GUARD_WINDOW_S = setting("SPECPILOT_BENCH_FLEET_GUARD_WINDOW", 60, 1)
PLAYBOOKS = os.environ.get("SPECPILOT_BENCH_FLEET_PLAYBOOKS", "deploy,smoke,guard,rollback").split(",")
SIZES = [fleet.SMALL] if quick() else [fleet.SMALL, fleet.BIG]
TARGETS_S = {"deploy": 300.0, "guard": 180.0, "rollback": 300.0}
CONTAINER = "kserve-container"
FAKE_ENGINE = fleet.ROOT / "lab" / "specpilot_lab" / "fake_engine.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Engines:
    """One stand-in engine per k, its stdout stored as a pod log (podlogs' format) in the emulator's
    state directory, to which every predictor pod of that k links its container log."""

    def __init__(self, emu: Emulator, tmp: Path):
        self.emu, self.tmp = emu, tmp
        self.ports = {k: _free_port() for k in fleet.K_VALUES}
        self.procs: list[subprocess.Popen] = []
        self.logs: dict[int, Path] = {}
        self.stop = threading.Event()

    def url(self, k: int) -> str:
        return "http://127.0.0.1:%d" % self.ports[k]

    @staticmethod
    def model(k: int) -> str:
        return "fleet-k%d" % k

    def host_vars(self, i: int) -> dict:
        k = fleet.k_of(i)
        return {
            "specpilot_smoke_url": self.url(k),
            "specpilot_smoke_model_name": self.model(k),
            "specpilot_guard_metrics_url": self.url(k) + "/metrics",
        }

    def start(self, spec_configs: dict[int, str]) -> None:
        """``spec_configs``: k -> the --speculative-config value the predictor pods run."""
        self.configs = dict(spec_configs)
        model_dir = self.tmp / "model"
        model_dir.mkdir(exist_ok=True)
        (model_dir / "config.json").write_text("{}")
        for k, config in spec_configs.items():
            writer = podlogs.PodLogWriter(self.emu.state_dir, "_engines", "engine-k%d" % k, CONTAINER)
            self.logs[k] = writer.path
            cmd = [
                sys.executable,
                str(FAKE_ENGINE),
                "serve",
                str(model_dir),
                "--port",
                str(self.ports[k]),
                "--served-model-name",
                self.model(k),
                "--speculative-config",
                config,
            ]
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, FAKE_LOG_INTERVAL="1"),
            )
            self.procs.append(proc)
            threading.Thread(target=self._pump, args=(proc, writer), daemon=True).start()
        for k in spec_configs:
            _wait_http(self.url(k) + "/health")
        threading.Thread(target=self._traffic, args=(self.stop,), daemon=True).start()

    @staticmethod
    def _pump(proc, writer) -> None:
        for line in iter(proc.stdout.readline, b""):
            writer.write(line)
        writer.close()

    def _traffic(self, stop: threading.Event) -> None:
        while not stop.wait(0.5):
            for k in self.ports:
                body = json.dumps({"model": self.model(k), "prompt": "the fleet", "max_tokens": 64}).encode()
                req = urllib.request.Request(
                    self.url(k) + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
                )
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        resp.read()
                except OSError:
                    pass

    def link_pods(self, pods: list[dict]) -> None:
        """Every predictor pod's container log is its engine's log."""
        for pod in pods:
            k = _k_of_args(pod["spec"]["containers"][0]["args"])
            directory = podlogs.container_dir(
                self.emu.state_dir, pod["metadata"]["namespace"], pod["metadata"]["name"], CONTAINER
            )
            directory.mkdir(parents=True, exist_ok=True)
            link = directory / podlogs.CURRENT
            if not link.is_symlink() and k in self.logs:
                link.symlink_to(self.logs[k])

    def restart(self) -> None:
        """The engines started again, each with a new log: every measured run meets engines whose logs hold
        their start-up and what came since, as a service's engine does, not everything since the benchmark
        began. smoke.yml reads each pod's whole engine log (start-up facts, errors) and then its window of
        the play's time; the stand-in engines are shared by all pods and log every second, so a run made
        later met longer logs and the big run's cost grew with the benchmark's own age, not the fleet's size
        (profiled: the log reads' share grew from 0.79 to 1.1 s a service between 25 and 100 services)."""
        configs = self.configs
        self.close()
        for path in self.logs.values():
            path.unlink(missing_ok=True)
        self.procs, self.stop = [], threading.Event()
        self.start(configs)

    def close(self) -> None:
        self.stop.set()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_http(url: str, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                resp.read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _spec_config(args: list[str]) -> str | None:
    for arg in args:
        if arg.startswith("--speculative-config="):
            return arg.split("=", 1)[1]
    return None


def _k_of_args(args: list[str]) -> int | None:
    config = _spec_config(args)
    return json.loads(config).get("num_speculative_tokens") if config else None


def _pods(emu: Emulator) -> list[dict]:
    api = emu.dynamic_client().resources.get(api_version="v1", kind="Pod")
    return [
        p for n in range(fleet.NAMESPACES) for p in api.get(namespace=fleet.namespace(n)).to_dict()["items"]
    ]


def _roll_out(emu: Emulator) -> None:
    """FakeKServe's rollout of every service, its pods labelled as KServe labels a predictor's
    (component=predictor: what smoke selects them by)."""
    for n in range(fleet.NAMESPACES):
        FakeKServe(emu, fleet.namespace(n)).reconcile_all()
    for pod in _pods(emu):
        if (pod["metadata"].get("labels") or {}).get("component") != "predictor":
            path = "/api/v1/namespaces/%s/pods/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
            patch = {"metadata": {"labels": {"component": "predictor"}}}
            emu.request("PATCH", path, patch, content_type="application/merge-patch+json")


class _Rollouts(FakeKServe):
    """FakeKServe for a fleet: a service is reconciled again only when its InferenceService's spec changed
    (metadata.generation), as KServe's controller reconciles on a watch event. FakeKServe's own loop reads each
    service's runtime, Deployment and pods and writes its status at every pass: four requests a service a second
    over 200 services kept the emulator and this process busy on a 2-core machine and starved the playbook the
    rollout was for. (The fleet's ServingRuntimes do not change in a rollback off: only the InferenceService.)"""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settled: dict[str, int] = {}

    def reconcile_all(self) -> None:
        for isvc in self.res(*_ISVC).get(namespace=self.ns).to_dict()["items"]:
            name, generation = isvc["metadata"]["name"], isvc["metadata"].get("generation")
            if self.settled.get(name) != generation:
                self.reconcile(isvc, self.policy(name, isvc))
                self.settled[name] = generation


class Fleet:
    """The emulator, the engines, both inventories and the runs."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.emu = Emulator(tmp / "emulator").start()
        self.engines = Engines(self.emu, tmp)
        self.env = fleet.ansible_env(self.emu.env, tmp)
        self.common = ["-e", "specpilot_report_dir=%s" % (tmp / "reports")]
        group = {
            "specpilot_rollback_smoke": False,
            "specpilot_rollback_wait_delay": 0.5,
            "specpilot_guard_window_seconds": GUARD_WINDOW_S,
        }
        self.inv = {
            size: fleet.write_inventory(tmp / ("inv-%d" % size), size, self.engines.host_vars, group)
            for size in sorted({fleet.SMALL, fleet.BIG})
        }

    def run(self, size: int, book: str, *args: str, timeout: float = fleet.RUN_TIMEOUT_S) -> fleet.Timed:
        return fleet.playbook(
            self.env, self.tmp, self.inv[size], book, *self.common, *args, hosts=size, timeout=timeout
        )

    def setup(self) -> None:
        for n in range(fleet.NAMESPACES):
            create_namespace(self.emu, fleet.namespace(n))
        self.run(SIZES[-1], "deploy.yml", "-e", "specpilot_deploy_wait=false", timeout=fleet.SETUP_TIMEOUT_S)
        _roll_out(self.emu)
        pods = _pods(self.emu)
        configs = {
            _k_of_args(p["spec"]["containers"][0]["args"]): _spec_config(p["spec"]["containers"][0]["args"])
            for p in pods
        }
        self.engines.start({k: c for k, c in configs.items() if k is not None})
        self.engines.link_pods(pods)

    def roll_back(self) -> fleet.Timed:
        """rollback.yml over the whole fleet (speculative decoding off), FakeKServe rolling it out
        meanwhile (the rollback verifies the new pods). A setup step, not a row: SETUP_TIMEOUT_S."""
        players = [_Rollouts(self.emu, fleet.namespace(n), interval=1.0) for n in range(fleet.NAMESPACES)]
        for player in players:
            player.__enter__()
        try:
            run = self.run(SIZES[-1], "rollback.yml", timeout=fleet.SETUP_TIMEOUT_S)
        finally:
            for player in players:
                player.__exit__(None, None, None)
        _roll_out(self.emu)
        return run

    def measure(self, book: str, *args: str, noop: bool = False) -> tuple[fleet.Timed, fleet.Timed]:
        """(small run, big run) of ``book``; a no-op run must change nothing."""
        runs = []
        for size in SIZES:
            self.engines.restart()
            timed = self.run(size, book, *args)
            changed = sum(r.get("changed", 0) for r in timed.recap().values())
            if noop and changed:
                raise RuntimeError(
                    "%s changed %d task(s) on a no-op run:\n%s" % (book, changed, timed.out[-4000:])
                )
            runs.append(timed)
        return (runs[0], runs[-1])

    def close(self) -> None:
        self.engines.close()
        self.emu.stop()


def _measure_all(f: Fleet) -> list[dict]:
    result = []
    if "deploy" in PLAYBOOKS:
        result += fleet.rows("no-op deploy.yml", *f.measure("deploy.yml", noop=True), TARGETS_S["deploy"])
    if "smoke" in PLAYBOOKS:
        result += fleet.rows("smoke.yml", *f.measure("smoke.yml"))
    if "guard" in PLAYBOOKS:
        label = "guard.yml (%d s window)" % GUARD_WINDOW_S
        result += fleet.rows(label, *f.measure("guard.yml"), TARGETS_S["guard"])
    if "rollback" in PLAYBOOKS:
        first = f.roll_back()
        if quick():  # the rollback itself, once: the no-op runs' code is the same as the big sizes'
            result += fleet.rows("rollback.yml (turning off)", first, first)
        else:
            result += fleet.rows(
                "no-op rollback.yml", *f.measure("rollback.yml", noop=True), TARGETS_S["rollback"]
            )
    return result


def _stop_on_sigterm(signum, frame):
    """A SIGTERM (``timeout``, the runner) unwinds like an error: the emulator and the engines are stopped and
    the temporary directory removed (Python's default would leave them running)."""
    raise SystemExit("bench_fleet_cluster: terminated (signal %d)" % signum)


def run():
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    with tempfile.TemporaryDirectory(prefix="specpilot-bench-fleet-cluster-") as tmp_name:
        tmp = Path(tmp_name)
        f = Fleet(tmp)
        try:
            f.setup()
            result = _measure_all(f)
        finally:
            f.close()
        fleet.write_result(
            tmp,
            "fleet_cluster",
            "Fleet benchmark: deploy, smoke, guard, rollback",
            result,
            [
                "API emulator + FakeKServe; the lab's stand-in engine, one per speculative config",
                "guard window %d s (one pause for the play)" % GUARD_WINDOW_S,
                "one run a size; CPU s: user + system of ansible-playbook's tree",
            ],
        )
    return result


if __name__ == "__main__":
    for row in run():
        print(
            "%-60s %10.3g %-9s %-8s %s" % (row["name"], row["value"], row["unit"], row["target"], row["ok"])
        )
