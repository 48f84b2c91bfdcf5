"""The lab controller against the emulator, with a fake engine standing in for vLLM (fast).

The same paths run with the real engine in smoke/test_smoke_role_vllm.py (a rollout to a config vLLM
refuses, a delete).
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.request

import pytest

from specpilot_lab import engine, registry

pytestmark = [pytest.mark.lab]

ISVC = ("serving.kserve.io/v1beta1", "InferenceService")
NGRAM = '--speculative-config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pid_of_port(port: int) -> int | None:
    """The process listening on 127.0.0.1:port (from /proc/net/tcp)."""
    hexport = f"{port:04X}"
    inodes = set()
    with open("/proc/net/tcp") as fh:
        for line in fh.readlines()[1:]:
            parts = line.split()
            if parts[1].endswith(":" + hexport) and parts[3] == "0A":
                inodes.add(parts[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def test_isvc_becomes_ready_only_after_health(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(
        ns,
        "tiny",
        ["--model=/mnt/models/target", "--fake-health-gate=/mnt/models/healthy", NGRAM],
        model_extra={"env": [{"name": "CUSTOM_ENV", "value": "from-isvc"}]},
    )
    # not ready while the engine runs but /health does not answer yet (it answers 503 until the
    # gate file exists: no timing involved)
    lab.wait(
        lambda: any(
            "running" in (cs.get("state") or {})
            for p in lab.pods(ns, "tiny")
            for cs in (p.get("status") or {}).get("containerStatuses") or []
        ),
        20,
        "engine running",
    )
    # the InferenceService's status may lag the pod's by one controller pass: not Ready means
    # no Ready=True, whether the condition is written yet or not
    assert lab.conditions(ns, "tiny").get("Ready", {}).get("status") != "True"
    time.sleep(1.5)  # a few probe periods: still not ready
    assert lab.conditions(ns, "tiny")["Ready"]["status"] == "False"
    (lab.state / "pvcs" / ns / "models" / "healthy").write_text("")
    isvc = lab.wait_ready(ns, "tiny", 20)
    st = isvc["status"]
    conds = {c["type"]: c["status"] for c in st["conditions"]}
    assert conds == {"IngressReady": "True", "PredictorReady": "True", "Ready": "True"}
    assert st["url"].startswith("http://127.0.0.1:") and st["address"]["url"] == st["url"]
    assert st["modelStatus"]["transitionStatus"] == "UpToDate"
    assert st["modelStatus"]["states"] == {"activeModelState": "Loaded", "targetModelState": "Loaded"}
    assert st["clusterServingRuntimeName"] == "vllm-cpu"
    assert get(st["url"] + "/health")[0] == 200

    pods = lab.pods(ns, "tiny")
    assert len(pods) == 1
    pod = pods[0]
    assert pod["metadata"]["name"].startswith("tiny-predictor-")
    assert pod["metadata"]["labels"]["serving.kserve.io/inferenceservice"] == "tiny"
    assert pod["spec"]["nodeName"] == "lab-node"
    c = pod["spec"]["containers"][0]
    assert c["name"] == "kserve-container"
    # runtime args first, the InferenceService's appended, {{.Name}} substituted, as stored
    assert c["args"][:3] == ["--port=8080", "--served-model-name=tiny", "--model=/mnt/models"]
    assert c["args"][3:] == ["--model=/mnt/models/target", "--fake-health-gate=/mnt/models/healthy", NGRAM]
    assert {"name": "HF_HOME", "value": "/tmp/hf_home"} in c["env"]
    vm = next(v for v in c["volumeMounts"] if v["mountPath"] == "/mnt/models")
    assert vm["readOnly"] is True
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == vm["name"])
    assert vol["persistentVolumeClaim"]["claimName"] == "models"
    assert pod["status"]["phase"] == "Running"
    assert next(x for x in pod["status"]["conditions"] if x["type"] == "Ready")["status"] == "True"

    log = lab.pod_log(ns, pod["metadata"]["name"])
    assert "speculative_config=SpeculativeConfig(method='ngram'" in log
    # the engine runs in the pod's filesystem: it gets the container's paths and env, unchanged
    assert "model='/mnt/models/target'" in log and str(lab.state) not in log
    assert "CUSTOM=from-isvc" in log
    assert "HF_HOME=/tmp/hf_home" in log

    dep = lab.get("apps/v1", "Deployment", "tiny-predictor", ns)
    assert dep["status"]["observedGeneration"] == dep["metadata"]["generation"]
    assert dep["status"]["availableReplicas"] == 1 and dep["status"]["updatedReplicas"] == 1
    assert dep["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"
    assert lab.get("v1", "Service", "tiny-predictor", ns) is not None
    reasons = {e["reason"] for e in lab.events(ns, pod["metadata"]["name"])}
    assert {"Scheduled", "Created", "Started"} <= reasons
    node = lab.get("v1", "Node", "lab-node")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert_quiet(lab)


def test_isvc_ready_only_once_its_pod_is_written_ready(fake_lab, fake_models):
    """The engine turns ready while a reconcile runs, after that reconcile wrote its pod (not Ready yet):
    neither the Deployment nor the InferenceService may then say ready in that pass (KServe's PredictorReady
    follows the Deployment's availability, which follows the pods' Ready conditions); the next pass writes
    the pod Ready, then them. A reader that waits for Ready=True and reads the pod at once found it not
    Ready when the lab read the engine's live flag for the InferenceService."""
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    gate = lab.pvc_with_models(ns, fake_models) / "healthy"
    ctl = lab.ctl
    written: list[tuple[str, bool]] = []  # (kind, says ready), in the order the controller wrote them
    patch_status = ctl.kube.patch_status

    def recording(kind, name, namespace, status):
        conds = {c.get("type"): c.get("status") for c in (status or {}).get("conditions") or []}
        if kind == "deployment":
            written.append((kind, bool(status.get("availableReplicas"))))
        elif kind in ("pod", "isvc"):
            written.append((kind, conds.get("Ready") == "True"))
        return patch_status(kind, name, namespace, status)

    deployment_status = ctl._deployment_status
    flipped: list[str] = []

    def engine_ready_meanwhile(deploy, old, new, *rest):
        # once, after the pod was written running and not ready: the engine turns ready right now
        if not flipped and any("running" in r.snapshot()["state"] and not r.ready for r in new):
            gate.write_text("")
            lab.wait(lambda: new[-1].ready, 20, "the engine ready (inside the reconcile)")
            flipped.append(new[-1].name)
        return deployment_status(deploy, old, new, *rest)

    ctl.kube.patch_status = recording
    ctl._deployment_status = engine_ready_meanwhile
    lab.isvc(ns, "tiny", ["--model=/mnt/models/target", "--fake-health-gate=/mnt/models/healthy"])
    lab.wait_ready(ns, "tiny", 20)
    assert flipped
    pod = lab.pods(ns, "tiny")[0]
    assert next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
    pod_ready = False
    for kind, ready in list(written):
        if kind == "pod":
            pod_ready = ready
        else:
            assert pod_ready or not ready, written


def assert_quiet(lab, seconds: float = 3.0, within: float = 30.0):
    """The controller converges: with nothing changing, it soon writes nothing for ``seconds`` in a
    row (a busy machine may delay its last status writes; a controller that keeps writing never
    gets there)."""
    deadline = time.monotonic() + within
    while True:
        mark = lab.emu.control.mark()
        time.sleep(seconds)
        writes = [w for w in lab.emu.control.writes(since=mark) if "/events" not in w.get("path", "")]
        if not writes or time.monotonic() > deadline:
            break
    assert writes == [], writes[:5]


def test_rollout_new_pod_new_args_old_engine_stopped(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(ns, "tiny", ["--model=/mnt/models/target", NGRAM])
    isvc = lab.wait_ready(ns, "tiny", 20)
    url = isvc["status"]["url"]
    old_pod = lab.pods(ns, "tiny")[0]["metadata"]["name"]
    old_run = lab.ctl.runs[(ns, old_pod)]
    old_port = old_run.port
    dep = lab.get("apps/v1", "Deployment", "tiny-predictor", ns)
    gen1 = dep["metadata"]["generation"]

    lab.patch(
        *ISVC,
        "tiny",
        ns,
        {
            "spec": {
                "predictor": {"model": {"args": ["--model=/mnt/models/draft", "--fake-health-delay=1.5"]}}
            }
        },
    )
    # the new generation is observed only once the new pod is ready
    lab.wait(
        lambda: lab.get("apps/v1", "Deployment", "tiny-predictor", ns)["metadata"]["generation"] > gen1,
        10,
        "deployment updated",
    )
    time.sleep(0.3)
    dep = lab.get("apps/v1", "Deployment", "tiny-predictor", ns)
    assert dep["status"].get("observedGeneration") == gen1
    # default strategy (maxSurge 25% -> 1): the old pod serves until the new one is ready
    assert get(url + "/health")[0] == 200

    def rolled():
        pods = lab.pods(ns, "tiny")
        d = lab.get("apps/v1", "Deployment", "tiny-predictor", ns)
        return (
            len(pods) == 1
            and pods[0]["metadata"]["name"] != old_pod
            and d["status"].get("observedGeneration") == d["metadata"]["generation"]
        ) and pods[0]

    new_pod = lab.wait(rolled, 20, "rollout")
    assert new_pod["spec"]["containers"][0]["args"][3:] == [
        "--model=/mnt/models/draft",
        "--fake-health-delay=1.5",
    ]
    assert "--model=/mnt/models/target" not in new_pod["spec"]["containers"][0]["args"]
    log = lab.pod_log(ns, new_pod["metadata"]["name"])
    assert "speculative_config=None" in log and "/models/draft" in log
    # the old engine is gone, the Service URL is the same and answers from the new engine
    lab.wait(lambda: pid_of_port(old_port) is None, 10, "old engine stopped")
    assert lab.get_isvc(ns, "tiny")["status"]["url"] == url
    assert lab.wait(lambda: get(url + "/metrics")[0] == 200, 10, "new engine behind the URL")
    assert "spec_decode" not in get(url + "/metrics")[1]
    assert lab.get("v1", "Pod", old_pod, ns) is None
    lab.wait_event(ns, old_pod, lambda e: e["reason"] == "Killing", "Killing event")


def test_recreate_strategy_stops_the_old_engine_first(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(
        ns,
        "tiny",
        ["--model=/mnt/models/target"],
        deploymentStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
    )
    lab.wait_ready(ns, "tiny", 20)
    old_pod = lab.pods(ns, "tiny")[0]["metadata"]["name"]
    lab.patch(
        *ISVC,
        "tiny",
        ns,
        {"spec": {"predictor": {"model": {"args": ["--model=/mnt/models/target", "--fake-health-delay=1"]}}}},
    )
    # sample the pods through the whole rollout: with maxSurge 0 the new pod only comes once the old
    # one is gone, so no sample ever holds two
    samples = []

    def new_pod_ready():
        pods = lab.pods(ns, "tiny")
        samples.append(sorted(p["metadata"]["name"] for p in pods))
        return (
            len(pods) == 1
            and pods[0]["metadata"]["name"] != old_pod
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (pods[0].get("status") or {}).get("conditions") or []
            )
        )

    lab.wait(new_pod_ready, 60, "the new pod ready", interval=0.05)
    assert all(len(s) <= 1 for s in samples), [s for s in samples if len(s) > 1][:3]
    lab.wait_ready(ns, "tiny", 30)


def test_crash_loop_reports_exit_code_events_and_previous_log(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    # never healthy (the gate file never appears): Ready cannot flip to True between two crashes
    lab.isvc(
        ns,
        "tiny",
        [
            "--model=/mnt/models/target",
            "--fake-exit-code=3",
            "--fake-exit-after=0.3",
            "--fake-health-gate=/mnt/models/never",
        ],
    )

    def crashed():
        pods = lab.pods(ns, "tiny")
        cs = (pods[0].get("status") or {}).get("containerStatuses") if pods else None
        return cs and cs[0]["restartCount"] >= 2 and pods[0]

    pod = lab.wait(crashed, 30, "two restarts")
    cs = pod["status"]["containerStatuses"][0]
    assert cs["lastState"]["terminated"]["exitCode"] == 3
    assert cs["lastState"]["terminated"]["reason"] == "Error"
    assert pod["status"]["phase"] == "Running"
    # the state the wait found, not a second read: the back-off (2 s, then 4 s) may end between two reads, and
    # the restarted container is running again (a KeyError on "waiting")
    waiting = lab.wait(
        lambda: lab.pods(ns, "tiny")[0]["status"]["containerStatuses"][0]["state"].get("waiting"),
        10,
        "CrashLoopBackOff",
    )
    assert waiting["reason"] == "CrashLoopBackOff"
    # the InferenceService follows the pod one reconcile later, as KServe does
    conds = lab.wait(
        lambda: (lambda c: c if "exited with code 3" in (c["Ready"].get("message") or "") else None)(
            lab.conditions(ns, "tiny")
        ),
        10,
        "Ready=False with the exit code",
    )
    assert conds["Ready"]["status"] == "False"
    assert "RuntimeError: fake engine failure (exit 3)" in conds["Ready"]["message"]
    st = lab.get_isvc(ns, "tiny")["status"]["modelStatus"]
    assert st["transitionStatus"] == "BlockedByFailedLoad"
    assert st["lastFailureInfo"]["reason"] == "ModelLoadFailed" and st["lastFailureInfo"]["exitCode"] == 3
    name = pod["metadata"]["name"]
    lab.wait_event(ns, name, lambda e: e["reason"] == "BackOff" and e["type"] == "Warning", "BackOff event")
    assert "fake engine failure" in lab.pod_log(ns, name, previous=True)


def test_rejected_speculative_config_gives_the_engines_error(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(
        ns,
        "bad",
        [
            "--model=/mnt/models/target",
            '--speculative-config={"method": "ngram", "num_speculative_tokens": 0}',
        ],
    )
    lab.wait(
        lambda: "validation error for SpeculativeConfig"
        in lab.conditions(ns, "bad").get("Ready", {}).get("message", ""),
        30,
        "engine error in Ready",
    )
    assert lab.conditions(ns, "bad")["Ready"]["status"] == "False"
    pod = lab.pods(ns, "bad")[0]["metadata"]["name"]
    assert "validation error for SpeculativeConfig" in lab.pod_log(ns, pod)


def test_webhook_rules_become_failed_status(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.isvc(
        ns,
        "both",
        ["--model=/mnt/models"],
        storage_uri="pvc://models/",
        storageUris=[{"uri": "pvc://models/target", "mountPath": "/mnt/models/target"}],
    )
    lab.isvc(
        ns,
        "noparent",
        ["--model=/a/target"],
        storage_uri=None,
        storageUris=[
            {"uri": "hf://org/a", "mountPath": "/a/target"},
            {"uri": "hf://org/b", "mountPath": "/b/draft"},
        ],
    )
    lab.wait(lambda: "Ready" in lab.conditions(ns, "both") and "Ready" in lab.conditions(ns, "noparent"), 10)
    msg = lab.conditions(ns, "both")["Ready"]["message"]
    assert "Setting both StorageURI and StorageURIs is not supported." in msg
    assert lab.conditions(ns, "both")["Ready"]["status"] == "False"
    assert (
        "storage paths must have a common parent directory. Current paths: [/a/target /b/draft]"
        in lab.conditions(ns, "noparent")["Ready"]["message"]
    )
    assert lab.get_isvc(ns, "both")["status"]["modelStatus"]["transitionStatus"] == "InvalidSpec"
    assert lab.pods(ns, "both") == [] and lab.get("apps/v1", "Deployment", "both-predictor", ns) is None
    assert_quiet(lab)


def test_unknown_runtime_is_reported(fake_lab):
    lab = fake_lab()
    ns = lab.namespace()
    lab.isvc(ns, "tiny", [], model_extra={"runtime": "nope"})
    lab.wait(lambda: "Ready" in lab.conditions(ns, "tiny"), 10)
    c = lab.conditions(ns, "tiny")["Ready"]
    assert c["status"] == "False" and c["reason"] == "RuntimeNotRecognized"
    # the runtime appears and the InferenceService names it: reconciled (the engine then runs)
    lab.runtime()
    lab.patch(*ISVC, "tiny", ns, {"spec": {"predictor": {"model": {"runtime": "vllm-cpu"}}}})
    lab.wait(lambda: lab.pods(ns, "tiny"), 10, "predictor pod")
    lab.wait(lambda: lab.conditions(ns, "tiny")["Ready"].get("reason") != "RuntimeNotRecognized", 10)


def test_storage_uris_pvc_entry_mounts_the_whole_claim(fake_lab, fake_models):
    """KServe 0.20 drops the path part of pvc:// in storageUris: /mnt/models/target is the PVC root,
    so the model the user meant is at /mnt/models/target/target."""
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    pvc = lab.pvc_with_models(ns, fake_models)
    lab.isvc(
        ns,
        "wrong",
        ["--model=/mnt/models/target"],
        storage_uri=None,
        storageUris=[{"uri": "pvc://models/target", "mountPath": "/mnt/models/target"}],
    )
    lab.wait(
        lambda: "does not appear to have a file named config.json"
        in lab.conditions(ns, "wrong").get("Ready", {}).get("message", ""),
        20,
        "engine refuses the PVC root",
    )
    assert "/mnt/models/target does not appear" in lab.conditions(ns, "wrong")["Ready"]["message"]
    assert str(pvc) not in lab.conditions(ns, "wrong")["Ready"]["message"]
    lab.isvc(
        ns,
        "right",
        ["--model=/mnt/models/target/target"],
        storage_uri=None,
        storageUris=[{"uri": "pvc://models/target", "mountPath": "/mnt/models/target"}],
    )
    lab.wait_ready(ns, "right", 20)
    pod = lab.pods(ns, "right")[0]
    vm = [v for v in pod["spec"]["containers"][0]["volumeMounts"] if v["mountPath"] == "/mnt/models/target"][
        0
    ]
    assert "subPath" not in vm


def test_single_storage_uri_honours_the_pvc_sub_path(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(ns, "sub", ["--model=/mnt/models"], storage_uri="pvc://models/draft")
    lab.wait_ready(ns, "sub", 20)
    pod = lab.pods(ns, "sub")[0]
    vm = [v for v in pod["spec"]["containers"][0]["volumeMounts"] if v["mountPath"] == "/mnt/models"][0]
    assert vm["subPath"] == "draft"
    assert "model='/mnt/models'" in lab.pod_log(ns, pod["metadata"]["name"])
    # the sub-path's files are what the engine sees at /mnt/models
    run = lab.ctl.runs[(ns, pod["metadata"]["name"])]
    engine_pid = run._engine.proc.pid
    inner = [
        p
        for p in engine.process_tree(engine_pid)
        if "fake_vllm_server" in _cmdline(p) and not _cmdline(p).startswith("bwrap ")
    ]
    assert inner, engine.process_tree(engine_pid)
    assert sorted(os.listdir(f"/proc/{inner[0]}/root/mnt/models")) == sorted(
        os.listdir(fake_models / "draft")
    )


def test_pending_on_insufficient_gpu_then_scheduled(fake_lab, fake_models):
    lab = fake_lab(node_gpus=1)
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(
        ns,
        "big",
        ["--model=/mnt/models/target"],
        model_extra={"resources": {"limits": {"nvidia.com/gpu": "2"}}},
    )

    def pending_event():
        return [e for e in lab.events(ns) if e["reason"] == "FailedScheduling"]

    ev = lab.wait(pending_event, 10, "FailedScheduling")[0]
    assert "0/1 nodes are available: 1 Insufficient nvidia.com/gpu." in ev["message"]
    assert ev["type"] == "Warning"

    # the event and the pod's PodScheduled condition are two writes (kube-scheduler's
    # handleSchedulingFailure, pkg/scheduler/schedule_one.go, records the event through an asynchronous
    # broadcaster and updates the pod's status apart), so a reader may see the event first: wait for both
    def unscheduled_pod():
        pods = lab.pods(ns, "big")
        conds = (pods[0].get("status") or {}).get("conditions") if pods else None
        return pods[0] if conds else None

    pod = lab.wait(unscheduled_pod, 10, "the pod's PodScheduled condition")
    assert pod["status"]["phase"] == "Pending" and "nodeName" not in pod["spec"]
    sched = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert sched["status"] == "False" and sched["reason"] == "Unschedulable"
    lab.wait(
        lambda: "Insufficient nvidia.com/gpu"
        in lab.conditions(ns, "big").get("Ready", {}).get("message", ""),
        10,
        "FailedScheduling in Ready's message",
    )
    # a bigger node: the pod schedules
    lab.res("v1", "Node").status.patch(
        name="lab-node",
        body={"status": {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "2"}}},
        content_type="application/merge-patch+json",
    )
    lab.wait_ready(ns, "big", 30)


def test_pending_on_selector_and_taint_mismatch(fake_lab, fake_models):
    lab = fake_lab(
        node_labels={"gpu.product": "H100"},
        node_taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(ns, "taint", ["--model=/mnt/models/target"])
    lab.isvc(
        ns,
        "selector",
        ["--model=/mnt/models/target"],
        nodeSelector={"gpu.product": "A100"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    lab.isvc(
        ns,
        "fits",
        ["--model=/mnt/models/target"],
        nodeSelector={"gpu.product": "H100"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )

    def msg(isvc):
        pods = lab.pods(ns, isvc)
        return pods and [
            e["message"]
            for e in lab.events(ns, pods[0]["metadata"]["name"])
            if e["reason"] == "FailedScheduling"
        ]

    assert (
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}" in lab.wait(lambda: msg("taint"), 10)[0]
    )
    assert "1 node(s) didn't match Pod's node affinity/selector" in lab.wait(lambda: msg("selector"), 10)[0]
    lab.wait_ready(ns, "fits", 20)


def test_delete_stops_the_engine_and_removes_the_workload(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(ns, "tiny", ["--model=/mnt/models/target"])
    lab.wait_ready(ns, "tiny", 20)
    pod = lab.pods(ns, "tiny")[0]["metadata"]["name"]
    port = lab.ctl.runs[(ns, pod)].port
    assert pid_of_port(port) is not None
    lab.delete(*ISVC, "tiny", ns)
    lab.wait(lambda: pid_of_port(port) is None, 15, "engine stopped")
    lab.wait(
        lambda: lab.get("apps/v1", "Deployment", "tiny-predictor", ns) is None and not lab.pods(ns, "tiny"),
        10,
        "workload removed",
    )
    assert not (lab.state / "engines" / ns / pod).exists()


def test_deleting_the_pod_starts_a_new_one(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(ns, "tiny", ["--model=/mnt/models/target"])
    lab.wait_ready(ns, "tiny", 20)
    pod = lab.pods(ns, "tiny")[0]["metadata"]["name"]
    lab.delete("v1", "Pod", pod, ns)
    lab.wait(lambda: [p for p in lab.pods(ns, "tiny") if p["metadata"]["name"] != pod], 10, "replacement pod")
    lab.wait_ready(ns, "tiny", 20)


def test_pvc_bound_backed_by_a_lab_directory(fake_lab):
    lab = fake_lab()
    ns = lab.namespace()
    d = lab.pvc_with_models(ns, None, name="data")
    pvc = lab.get("v1", "PersistentVolumeClaim", "data", ns)
    assert pvc["status"]["phase"] == "Bound"
    assert pvc["status"]["capacity"] == {"storage": "1Gi"}
    assert d == lab.state / "pvcs" / ns / "data" and d.is_dir()
    pv = lab.get("v1", "PersistentVolume", pvc["spec"]["volumeName"])
    assert pv["spec"]["claimRef"]["name"] == "data" and pv["spec"]["hostPath"]["path"] == str(d)
    (d / "f").write_text("x")
    lab.delete("v1", "PersistentVolumeClaim", "data", ns)
    lab.wait(lambda: not d.exists(), 10, "PVC directory removed (reclaim policy Delete)")


def _job(name: str, command: list[str], **spec) -> dict:
    container = {"name": "main", "image": "busybox:1.36", "command": command}
    container.update(spec.pop("container", {}))
    pod_spec = {"restartPolicy": spec.pop("restartPolicy", "Never"), "containers": [container]}
    pod_spec.update(spec.pop("pod", {}))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": pod_spec}, **spec},
    }


def _job_condition(lab, ns, name):
    st = (lab.get("batch/v1", "Job", name, ns) or {}).get("status") or {}
    return {c["type"]: c for c in st.get("conditions") or [] if c.get("status") == "True"}


needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is installed by make")


@needs_bwrap
def test_job_runs_with_volume_mounts_env_and_args(fake_lab):
    lab = fake_lab()
    ns = lab.namespace()
    d = lab.pvc_with_models(ns, None, name="out")
    lab.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"greeting": "hello"}},
        ns,
    )
    job = _job(
        "writer",
        ["sh", "-c"],
        container={
            "args": [
                'echo "$(GREETING) from $POD" > /data/result.txt; cat /etc/cfg/greeting; ls /data; echo done'
            ],
            "env": [
                {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
            "volumeMounts": [{"name": "out", "mountPath": "/data"}, {"name": "cfg", "mountPath": "/etc/cfg"}],
        },
        pod={
            "volumes": [
                {"name": "out", "persistentVolumeClaim": {"claimName": "out"}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
            ]
        },
    )
    lab.create(job, ns)
    lab.wait(lambda: "Complete" in _job_condition(lab, ns, "writer"), 20, "Job Complete")
    st = lab.get("batch/v1", "Job", "writer", ns)["status"]
    assert st["succeeded"] == 1 and "completionTime" in st and "startTime" in st
    pods = lab.list("v1", "Pod", ns, label_selector="job-name=writer")
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Succeeded"
    assert (d / "result.txt").read_text().strip() == f"hello from {pods[0]['metadata']['name']}"
    log = lab.pod_log(ns, pods[0]["metadata"]["name"])
    assert "hello" in log and "result.txt" in log and "done" in log
    cs = pods[0]["status"]["containerStatuses"][0]
    assert cs["state"]["terminated"]["exitCode"] == 0 and cs["state"]["terminated"]["reason"] == "Completed"


@needs_bwrap
def test_job_backoff_limit(fake_lab):
    lab = fake_lab()
    ns = lab.namespace()
    lab.create(_job("fails", ["sh", "-c", "echo failing; exit 2"], backoffLimit=1), ns)
    lab.wait(lambda: "Failed" in _job_condition(lab, ns, "fails"), 30, "Job Failed")
    c = _job_condition(lab, ns, "fails")["Failed"]
    assert c["reason"] == "BackoffLimitExceeded"
    st = lab.get("batch/v1", "Job", "fails", ns)["status"]
    assert st["failed"] == 2 and not st.get("succeeded")
    pods = lab.list("v1", "Pod", ns, label_selector="job-name=fails")
    assert len(pods) == 2 and {p["status"]["phase"] for p in pods} == {"Failed"}
    assert pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    assert "failing" in lab.pod_log(ns, pods[0]["metadata"]["name"])


@needs_bwrap
def test_job_active_deadline(fake_lab):
    lab = fake_lab()
    ns = lab.namespace()
    t0 = time.monotonic()
    lab.create(_job("slow", ["sleep", "60"], activeDeadlineSeconds=2), ns)
    lab.wait(lambda: "Failed" in _job_condition(lab, ns, "slow"), 20, "DeadlineExceeded")
    # the deadline, not the end of the 60 s sleep (a loaded machine took 16.6 s to notice a 2 s deadline)
    assert time.monotonic() - t0 < 45
    assert _job_condition(lab, ns, "slow")["Failed"]["reason"] == "DeadlineExceeded"
    lab.wait(lambda: not lab.list("v1", "Pod", ns, label_selector="job-name=slow"), 10, "pods deleted")


@needs_bwrap
def test_job_without_command_fails_with_a_clear_message(fake_lab):
    lab = fake_lab()
    ns = lab.namespace()
    job = _job("nocmd", [], backoffLimit=0)
    del job["spec"]["template"]["spec"]["containers"][0]["command"]
    lab.create(job, ns)
    lab.wait(lambda: "Failed" in _job_condition(lab, ns, "nocmd"), 20)
    pod = lab.list("v1", "Pod", ns, label_selector="job-name=nocmd")[0]
    assert "does not pull images" in pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"]


@pytest.mark.skipif(
    not (shutil.which("docker-registry") and shutil.which("skopeo") and registry.BUSYBOX.exists()),
    reason="docker-registry, skopeo, busybox-static are installed by make",
)
def test_oci_modelcar_from_the_lab_registry(fake_lab, fake_models, tmp_path):
    reg = registry.Registry(tmp_path / "reg").start()
    try:
        lab = fake_lab(registry_addr=reg.addr)
        registry.build_modelcar_layout(
            tmp_path / "img", {"target": fake_models / "target", "draft": fake_models / "draft"}, tag="v1"
        )
        registry.push(tmp_path / "img", f"{reg.addr}/models/tiny:v1", tag="v1")
        ns = lab.namespace()
        lab.runtime()
        # "registry.lab" is the lab registry's alias, whatever port it listens on
        lab.isvc(ns, "oci", ["--model=/mnt/models/target"], storage_uri="oci://registry.lab/models/tiny:v1")
        lab.wait_ready(ns, "oci", 30)
        pod = lab.pods(ns, "oci")[0]
        names = [c["name"] for c in pod["spec"]["containers"]]
        assert names == ["kserve-container", "modelcar"]
        assert pod["spec"]["shareProcessNamespace"] is True
        assert pod["spec"]["initContainers"][0]["name"] == "modelcar-init"
        log = lab.pod_log(ns, pod["metadata"]["name"], container="kserve-container")
        # the image's /models at /mnt/models, over the emptyDir KServe mounts at /mnt (on a cluster
        # the modelcar sidecar links it there): the engine reads the path the container names
        assert "model='/mnt/models/target'" in log and str(lab.state) not in log
        vm = {v["mountPath"]: v for v in pod["spec"]["containers"][0]["volumeMounts"]}
        assert vm["/mnt"]["name"] == "kserve-provision-location"
        assert any(
            e["reason"] == "Pulled" and "models/tiny:v1" in e["message"]
            for e in lab.events(ns, pod["metadata"]["name"])
        )
        # an image that is not there: ErrImagePull, not Ready
        lab.isvc(ns, "missing", ["--model=/mnt/models"], storage_uri=f"oci://{reg.addr}/models/none:v1")
        lab.wait(
            lambda: "ErrImagePull" in lab.conditions(ns, "missing").get("Ready", {}).get("message", "")
            or "ImagePullBackOff" in lab.conditions(ns, "missing").get("Ready", {}).get("message", ""),
            20,
        )
    finally:
        reg.stop()


def test_without_a_working_bubblewrap_the_pod_fails_naming_the_fix(fake_lab, fake_models, monkeypatch):
    """No silent fallback to running the engine outside the pod's filesystem: the container waits in
    CreateContainerError with bubblewrap's own complaint and the fix, and the InferenceService says so."""
    from specpilot_lab.controller import podrun

    problem = "bubblewrap cannot create its sandbox here (bwrap: No permissions to create new namespace)"
    monkeypatch.setattr(podrun, "bwrap_problem", lambda: problem + "; install it (`make system-packages`)")
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    lab.isvc(ns, "tiny", ["--model=/mnt/models/target"])

    def waiting():
        pods = lab.pods(ns, "tiny")
        cs = (pods[0].get("status") or {}).get("containerStatuses") if pods else None
        return cs and (cs[0]["state"].get("waiting") or {}).get("reason") == "CreateContainerError" and cs[0]

    cs = lab.wait(waiting, 20, "CreateContainerError")
    assert cs["state"]["waiting"]["message"].startswith("lab: " + problem)
    assert "make system-packages" in cs["state"]["waiting"]["message"]
    assert cs["restartCount"] == 0 and not cs["ready"]
    # the InferenceService's status follows the pod's on the controller's next pass (as on a cluster,
    # where KServe reconciles after the kubelet reports), so it is waited for, not read at once
    ready = lab.wait(
        lambda: problem in (lab.conditions(ns, "tiny").get("Ready") or {}).get("message", "")
        and lab.conditions(ns, "tiny")["Ready"],
        20,
        "InferenceService Ready condition naming the problem",
    )
    assert ready["status"] == "False" and "CreateContainerError" in ready["message"]
    pod = lab.pods(ns, "tiny")[0]["metadata"]["name"]
    lab.wait_event(ns, pod, lambda e: e["reason"] == "Failed" and problem in e["message"], "Failed event")


def _inner_engine(lab, ns: str, name: str) -> int:
    """The pid of the engine process itself inside its sandbox (not bwrap, not taskset)."""
    pod = lab.pods(ns, name)[0]["metadata"]["name"]
    pid = lab.ctl.runs[(ns, pod)]._engine.proc.pid
    inner = [
        p
        for p in engine.process_tree(pid)
        if "fake_vllm_server" in _cmdline(p) and not _cmdline(p).startswith(("bwrap ", "taskset "))
    ]
    assert inner, engine.process_tree(pid)
    return inner[0]


def _proc_cpus(pid: int) -> str:
    with open(f"/proc/{pid}/status") as fh:
        return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("Cpus_allowed_list"))


def _proc_env(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        items = [kv.decode(errors="replace").partition("=") for kv in fh.read().split(b"\0") if kv]
    return {k: v for k, _, v in items}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to hand out")
def test_each_engine_gets_the_cores_its_pod_requests_or_no_binding_where_cores_are_short(fake_lab, fake_models):
    """Issue 39 item 0: the lab's kubelet pins each engine to cores of its own, as a CPU manager's static
    policy would (a cpuset; VLLM_CPU_OMP_THREADS_BIND naming it), never every engine to core 0 (vLLM's
    auto binding on the whole machine); where cores are short an engine runs unbound on the shared pool
    (nobind, one OpenMP thread per requested core); a stopped engine's cores go back to the pool; the
    controller's record is what `make lab-status` prints."""
    from specpilot_lab.controller import cpus

    cores = sorted(os.sched_getaffinity(0))
    lab = fake_lab()
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, fake_models)
    one_cpu = {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    names = [f"e{i}" for i in range(len(cores) + 1)]
    for name in names[:-1]:
        lab.isvc(ns, name, ["--model=/mnt/models/target"], model_extra=one_cpu)
        lab.wait_ready(ns, name, 30)
    pinned = {name: _proc_cpus(_inner_engine(lab, ns, name)) for name in names[:-1]}
    assert sorted(pinned.values()) == [str(c) for c in cores], pinned  # one core each, all different
    for name, core in pinned.items():
        assert _proc_env(_inner_engine(lab, ns, name))["VLLM_CPU_OMP_THREADS_BIND"] == core
    # no core left: the next engine runs unbound on every core, one OpenMP thread
    lab.isvc(ns, names[-1], ["--model=/mnt/models/target"], model_extra=one_cpu)
    lab.wait_ready(ns, names[-1], 30)
    last = _inner_engine(lab, ns, names[-1])
    assert _proc_cpus(last) == cpus.cpu_list(cores)
    env = _proc_env(last)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and env["OMP_NUM_THREADS"] == "1"
    status = "\n".join(cpus.describe(lab.ctl.state_dir))
    for name, core in pinned.items():
        pod = lab.pods(ns, name)[0]["metadata"]["name"]
        assert f"engine {ns}/{pod}: cores {core} (exclusive; requests 1 cpu)" in status, status
    assert "shared pool, no binding (cores short)" in status
    # a deleted engine's core goes back: a new pod takes it
    lab.delete(*ISVC, names[0], ns)
    lab.wait(lambda: not lab.pods(ns, names[0]), 30, "the first engine gone")
    lab.isvc(ns, "again", ["--model=/mnt/models/target"], model_extra=one_cpu)
    lab.wait_ready(ns, "again", 30)
    assert _proc_cpus(_inner_engine(lab, ns, "again")) == pinned[names[0]]
