"""Fixtures for the lab tests: the engine's virtualenv and the tiny models."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest

from specpilot_lab import engine
from specpilot_lab.models import make_models_subprocess

REPO = Path(__file__).resolve().parents[2]
LATENCY_LOCK = REPO / ".cache" / "measures-latency.lock"


@pytest.fixture(autouse=True)
def _one_latency_measurement_at_a_time(request):
    """Tests marked measures_latency run one at a time, also across make test's lanes (pytest processes of one
    checkout): in two clean-clone CIs of 2026-11-30 the real engine's benchmark (lane-a) and the stand-in's
    side-by-side benchmark (lane-b) measured at the same minute, and each starved the other once (the real
    baseline's streams arrived in bursts: invalid; the stand-in's TTFT 43x worse: undecided)."""
    if request.node.get_closest_marker("measures_latency") is None:
        yield
        return
    LATENCY_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LATENCY_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    """The lab engine's virtualenv (make vllm); tests that need it are skipped without it."""
    if not engine.vllm_available():
        pytest.skip(f"{engine.VLLM_VENV} is not installed: run `make vllm`")
    return engine.VLLM_VENV


@pytest.fixture(scope="session")
def tiny_models(vllm_venv, tmp_path_factory) -> Path:
    """target/, draft/, eagle3/ made once per session (seed 0)."""
    out = tmp_path_factory.mktemp("models")
    make_models_subprocess(out)
    return out


# ---------------------------------------------------------------- real engines, shared
class EnginePool:
    """Real vLLM engines serving the tiny target, one per speculative config (None: speculative
    decoding off), started on first use and kept for the session: an engine start costs tens of
    seconds of CPU on 2 cores, so tests that need the same engine share it. At most ``keep`` run at
    once (the least recently used goes first). Engines are not reset between tests: /metrics
    counters are cumulative, so tests judge ratios or deltas, never absolute counts."""

    def __init__(self, models: Path, root: Path, keep: int = 2):
        self.models, self.root, self.keep = models, root, keep
        self.engines: dict[str, "engine.Engine"] = {}
        self.started: dict[str, float] = {}


    def get(self, spec: dict | None) -> "engine.Engine":
        key = json.dumps(spec, sort_keys=True)
        if key in self.engines:
            self.engines[key] = self.engines.pop(key)  # most recently used last
            return self.engines[key]
        while len(self.engines) >= self.keep:
            oldest = next(iter(self.engines))
            self.engines.pop(oldest).stop()
        eng = engine.Engine(engine.tiny_target_args(self.models, spec), self.root / f"engine-{len(self.started)}")
        eng.start()
        try:
            self.started[key] = eng.wait_ready(600)
        except Exception:
            eng.stop()
            raise
        self.engines[key] = eng
        return eng

    def close(self) -> None:
        for eng in self.engines.values():
            eng.stop()
        self.engines.clear()


@pytest.fixture(scope="session")
def shared_engine(vllm_venv, tiny_models, tmp_path_factory):
    """``shared_engine(spec)``: a ready real engine for that speculative config (see EnginePool)."""
    pool = EnginePool(tiny_models, tmp_path_factory.mktemp("shared-engines"))
    try:
        yield pool.get
    finally:
        pool.close()
        for key, seconds in pool.started.items():
            print(f"\n[shared engine] {key}: start to ready {seconds:.1f}s")


# ---------------------------------------------------------------- the lab controller, in-process
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from specpilot_lab.controller import Controller  # noqa: E402
from specpilot_lab.testing import LAB_CRDS, Emulator  # noqa: E402

FAKE_SERVER = Path(__file__).resolve().parent / "support" / "fake_vllm_server.py"
WAIT_SCALE = float(os.environ.get("SPECPILOT_TEST_WAIT_SCALE", "3"))

VLLM_RUNTIME = {
    "apiVersion": "serving.kserve.io/v1alpha1",
    "kind": "ClusterServingRuntime",
    "metadata": {"name": "vllm-cpu"},
    "spec": {
        "supportedModelFormats": [{"name": "vLLM", "autoSelect": True}],
        "containers": [
            {
                "name": "kserve-container",
                "image": "vllm/vllm-openai-cpu:v0.32.0",
                "command": ["python", "-m", "vllm.entrypoints.openai.api_server"],
                "args": ["--port=8080", "--served-model-name={{.Name}}", "--model=/mnt/models"],
                "env": [{"name": "HF_HOME", "value": "/tmp/hf_home"}],
            }
        ],
    },
}


class Lab:
    """An emulator and a controller (in this process) with helpers for assertions."""

    def __init__(self, root: Path, vllm_python: Path | None, **controller_kw):
        self.root = root
        self.emu = Emulator(root / "lab", [str(LAB_CRDS)]).start()
        kw = dict(crash_backoff=1.0, job_backoff=0.5)
        kw.update(controller_kw)
        self.ctl = Controller(self.emu.kubeconfig, root / "lab", vllm_python=vllm_python, **kw).start()
        self.dyn = self.emu.dynamic_client()
        self.core = None

    @property
    def state(self) -> Path:
        return self.root / "lab"

    def res(self, api_version: str, kind: str):
        return self.dyn.resources.get(api_version=api_version, kind=kind)

    def create(self, body: dict, namespace: str | None = None) -> dict:
        r = self.res(body["apiVersion"], body["kind"])
        return r.create(body=body, namespace=namespace if r.namespaced else None).to_dict()

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            return self.res(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ):
        return (
            self.res(api_version, kind)
            .get(namespace=namespace, label_selector=label_selector)
            .to_dict()["items"]
        )

    def patch(self, api_version: str, kind: str, name: str, namespace: str | None, body: dict) -> dict:
        return (
            self.res(api_version, kind)
            .patch(name=name, namespace=namespace, body=body, content_type="application/merge-patch+json")
            .to_dict()
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        self.res(api_version, kind).delete(name=name, namespace=namespace)

    def namespace(self, name: str = "demo") -> str:
        self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def runtime(self, body: dict | None = None) -> dict:
        return self.create(body or VLLM_RUNTIME)

    def pvc_with_models(self, ns: str, models: Path | None, name: str = "models") -> Path:
        self.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            },
            ns,
        )
        self.wait(
            lambda: (self.get("v1", "PersistentVolumeClaim", name, ns).get("status") or {}).get("phase")
            == "Bound",
            10,
            "PVC Bound",
        )
        d = self.state / "pvcs" / ns / name
        if models is not None:
            shutil.copytree(models, d, dirs_exist_ok=True)
        return d

    def isvc(
        self, ns: str, name: str, args: list[str], storage_uri: str | None = "pvc://models/", **predictor
    ) -> dict:
        model = {"modelFormat": {"name": "vLLM"}, "args": args}
        if storage_uri:
            model["storageUri"] = storage_uri
        model.update(predictor.pop("model_extra", {}))
        return self.create(
            {
                "apiVersion": "serving.kserve.io/v1beta1",
                "kind": "InferenceService",
                "metadata": {"name": name},
                "spec": {"predictor": {"model": model, **predictor}},
            },
            ns,
        )

    def get_isvc(self, ns: str, name: str) -> dict:
        return self.get("serving.kserve.io/v1beta1", "InferenceService", name, ns)

    def conditions(self, ns: str, name: str) -> dict[str, dict]:
        st = (self.get_isvc(ns, name) or {}).get("status") or {}
        return {c["type"]: c for c in st.get("conditions") or []}

    def wait(self, pred, timeout: float = 30.0, what: str = "condition", interval: float = 0.2):
        # the timeouts are what a quiet 2-core machine needs; a busy one gets WAIT_SCALE times more
        # (a wait returns as soon as its condition holds, so a passing test is no slower)
        timeout *= WAIT_SCALE
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = pred()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

    def wait_ready(self, ns: str, name: str, timeout: float = 30.0) -> dict:
        self.wait(
            lambda: self.conditions(ns, name).get("Ready", {}).get("status") == "True",
            timeout,
            f"{ns}/{name} Ready (conditions: {json.dumps(self.conditions(ns, name))[:800]})",
        )
        return self.get_isvc(ns, name)

    def pods(self, ns: str, isvc: str) -> list[dict]:
        return self.list("v1", "Pod", ns, label_selector=f"serving.kserve.io/inferenceservice={isvc}")

    def pod_log(self, ns: str, pod: str, container: str | None = None, previous: bool = False) -> str:
        from kubernetes import client

        core = client.CoreV1Api(self.emu.api_client())
        return core.read_namespaced_pod_log(pod, ns, container=container, previous=previous)

    def events(self, ns: str, name: str | None = None) -> list[dict]:
        evs = self.list("v1", "Event", ns)
        return [e for e in evs if name is None or e["involvedObject"].get("name") == name]

    def wait_event(self, ns: str, name: str, pred, what: str, timeout: float = 20.0) -> dict:
        """The first event of `name` that pred accepts. Events are written apart from the status (a
        kubelet's recorder is asynchronous too), so one may land a little after the state it reports."""
        return self.wait(lambda: next((e for e in self.events(ns, name) if pred(e)), None), timeout, what)

    def close(self) -> None:
        self.ctl.stop()
        self.emu.stop()


@pytest.fixture
def fake_lab(tmp_path):
    """Emulator + controller whose 'vLLM' is the fake server (fast; no .venv-vllm needed)."""
    labs: list[Lab] = []

    def make(**kw) -> Lab:
        lab = Lab(tmp_path / f"lab{len(labs)}", engine.fake_engine_python(tmp_path, FAKE_SERVER), **kw)
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.close()


@pytest.fixture
def fake_models(tmp_path) -> Path:
    """A models tree the fake server accepts: target/ and draft/ with a config.json each."""
    root = tmp_path / "fake-models"
    for sub in ("target", "draft"):
        (root / sub).mkdir(parents=True)
        (root / sub / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    return root


@pytest.fixture
def vllm_lab(vllm_venv, tmp_path):
    """Emulator + controller running the real engine from .venv-vllm."""
    lab = Lab(tmp_path / "lab-root", engine.vllm_python(), crash_backoff=5.0)
    try:
        yield lab
    finally:
        lab.close()


# ---------------------------------------------------------------- the smoke tests' lab, shared
# Emulator + controller whose 'vLLM' is the smoke tests' stand-in spec-decoding engine
# (lab/specpilot_lab/fake_engine.py: vLLM 0.32's log lines and /metrics, acceptance from FAKE_ACCEPTANCE),
# with the lab inventory's models PVC; the helpers are in smoke/smoke_lab.py.
sys.path.insert(0, str(Path(__file__).resolve().parent / "smoke"))
import smoke_lab  # noqa: E402


@pytest.fixture(scope="module")
def fake_spec_lab(tmp_path_factory):
    """One per test module: used by the smoke, rollback and guard lab tests (deploy.yml and friends
    against inventories/lab)."""
    root = tmp_path_factory.mktemp("spec-fake")
    lab = smoke_lab.SmokeLab(root, engine.fake_engine_python(root))
    try:
        models = root / "fake-models"
        for sub in ("target", "draft"):
            (models / sub).mkdir(parents=True)
            (models / sub / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
        lab.models_pvc(models)
        yield lab
    finally:
        lab.close()
