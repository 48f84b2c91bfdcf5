"""KServe's rules as the lab controller applies them: webhook, runtime selection, container
merge, placeholders, storage, path and command mapping, scheduling filters."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from specpilot_lab.controller import kserve, mapping, scheduling


def isvc(predictor: dict, name: str = "tiny", ns: str = "demo", **meta) -> dict:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns, **meta},
        "spec": {"predictor": predictor},
    }


def runtime(name: str, formats: list[dict], **spec) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "supportedModelFormats": formats,
            "containers": [{"name": "kserve-container", "image": "x"}],
            **spec,
        },
    }


# ---------------------------------------------------------------- webhook
def test_webhook_storage_uri_and_storage_uris():
    with pytest.raises(kserve.SpecError) as exc:
        kserve.validate_webhook(
            isvc(
                {
                    "model": {"storageUri": "pvc://a/"},
                    "storageUris": [{"uri": "pvc://b", "mountPath": "/mnt/b"}],
                }
            )
        )
    assert (
        exc.value.webhook and exc.value.message == "Setting both StorageURI and StorageURIs is not supported."
    )
    assert exc.value.status_message.startswith(
        'admission webhook "inferenceservice.kserve-webhook-server.validator"'
    )


@pytest.mark.parametrize(
    "entries, message",
    [
        ([{"uri": "", "mountPath": "/mnt/a"}], "storage URI cannot be empty"),
        ([{"uri": "s3://a", "mountPath": "/"}], "storage path cannot be empty"),
        ([{"uri": "s3://a", "mountPath": "rel/a"}], "storage path must be absolute: rel/a"),
        (
            [{"uri": "s3://a", "mountPath": "/mnt/../etc"}],
            "storage path cannot contain '..' for security reasons: /mnt/../etc",
        ),
        (
            [{"uri": "s3://a", "mountPath": "/a/x"}, {"uri": "s3://b", "mountPath": "/b/y"}],
            "storage paths must have a common parent directory. Current paths: [/a/x /b/y] have no common parent "
            "beyond root",
        ),
        (
            [
                {"uri": "s3://a", "mountPath": "/m/x"},
                {"uri": "s3://b", "mountPath": "/m/y"},
                {"uri": "pvc://c", "mountPath": "/p"},
                {"uri": "pvc://d", "mountPath": "/p"},
            ],
            "PVC storage paths must be unique",
        ),
    ],
)
def test_webhook_storage_uris_rules(entries, message):
    assert kserve.validate_storage_uris(entries) == message


def test_webhook_accepts_valid_and_keeps_kserve_quirks():
    kserve.validate_webhook(isvc({"model": {"storageUri": "pvc://a/"}}))
    ok = [
        {"uri": "s3://a", "mountPath": "/mnt/models/target"},
        {"uri": "s3://b", "mountPath": "/mnt/models/draft"},
    ]
    assert kserve.validate_storage_uris(ok) is None
    # duplicate PVC paths pass when there is at most one non-PVC entry (KServe returns early)
    assert (
        kserve.validate_storage_uris(
            [{"uri": "pvc://c", "mountPath": "/p"}, {"uri": "pvc://d", "mountPath": "/p"}]
        )
        is None
    )
    assert kserve.find_common_parent_path(["/mnt/models/target", "/mnt/models/draft"]) == "/mnt/models"


# ---------------------------------------------------------------- runtimes
def test_runtime_by_name_prefers_the_namespace():
    ns_rt = runtime("vllm", [{"name": "vLLM"}])
    cl_rt = runtime("vllm", [{"name": "vLLM"}])
    kind, rt = kserve.select_runtime(
        isvc({"model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm"}}), [ns_rt], [cl_rt]
    )
    assert kind == "ServingRuntime" and rt is ns_rt
    kind, rt = kserve.select_runtime(
        isvc({"model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm"}}), [], [cl_rt]
    )
    assert kind == "ClusterServingRuntime"


def test_runtime_by_name_errors():
    with pytest.raises(kserve.SpecError) as exc:
        kserve.select_runtime(isvc({"model": {"modelFormat": {"name": "vLLM"}, "runtime": "nope"}}), [], [])
    assert exc.value.reason == "RuntimeNotRecognized"
    with pytest.raises(kserve.SpecError) as exc:
        kserve.select_runtime(
            isvc({"model": {"modelFormat": {"name": "sklearn"}, "runtime": "vllm"}}),
            [runtime("vllm", [{"name": "vLLM"}])],
            [],
        )
    assert exc.value.reason == "NoSupportingRuntime"
    with pytest.raises(kserve.SpecError) as exc:
        kserve.select_runtime(
            isvc({"model": {"modelFormat": {"name": "vLLM"}, "runtime": "off"}}),
            [runtime("off", [{"name": "vLLM"}], disabled=True)],
            [],
        )
    assert exc.value.reason == "RuntimeDisabled"


def test_runtime_auto_select_priority_and_scope():
    low = runtime("low", [{"name": "vLLM", "autoSelect": True, "priority": 1}])
    high = runtime("high", [{"name": "vllm", "autoSelect": True, "priority": 5}])
    manual = runtime("manual", [{"name": "vLLM"}])
    spec = isvc({"model": {"modelFormat": {"name": "vLLM"}}})
    assert kserve.select_runtime(spec, [], [low, high, manual])[1] is high
    assert kserve.select_runtime(spec, [low], [high])[1] is low  # namespace runtimes first
    with pytest.raises(kserve.SpecError) as exc:
        kserve.select_runtime(spec, [manual], [])
    assert str(exc.value) == "no runtime found to support predictor with model type: {vLLM <nil>}"


# ---------------------------------------------------------------- merge
def test_merge_container_appends_args_merges_env_replaces_command():
    rt = {
        "name": "kserve-container",
        "image": "vllm",
        "command": ["python", "-m", "x"],
        "args": ["--port=8080", "--model=/mnt/models"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
    }
    model = {
        "modelFormat": {"name": "vLLM"},
        "runtime": "r",
        "storageUri": "pvc://m/",
        "args": ["--model=/mnt/models/target"],
        "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    out = kserve.merge_container(rt, model)
    assert out["args"] == ["--port=8080", "--model=/mnt/models", "--model=/mnt/models/target"]
    assert out["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]
    assert out["command"] == ["python", "-m", "x"]
    assert out["resources"]["limits"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert "storageUri" not in out and "modelFormat" not in out and out["name"] == "kserve-container"
    out = kserve.merge_container(rt, {"command": ["vllm", "serve"]})
    assert out["command"] == ["vllm", "serve"] and out["args"] == rt["args"]


def test_placeholders():
    meta = {"name": "tiny", "namespace": "demo", "labels": {"team": "a"}, "annotations": {"x/y": "z"}}
    c = {
        "args": [
            "--served-model-name={{.Name}}",
            "{{ .Namespace }}",
            "{{.Labels.team}}",
            "{{.Annotations.x/y}}",
        ]
    }
    assert kserve.replace_placeholders(c, meta)["args"] == ["--served-model-name=tiny", "demo", "a", "z"]


# ---------------------------------------------------------------- storage
def test_storage_uri_pvc_honours_sub_path_and_storage_uris_mount_the_whole_claim():
    m = kserve.resolve_storage(isvc({"model": {"storageUri": "pvc://models/v1/target"}}))
    assert [(x.kind, x.claim, x.sub_path, x.mount_path) for x in m] == [
        ("pvc", "models", "v1/target", "/mnt/models")
    ]
    m = kserve.resolve_storage(
        isvc(
            {
                "model": {},
                "storageUris": [
                    {"uri": "pvc://models/target", "mountPath": "/mnt/models/target"},
                    {"uri": "oci://reg/img:v1", "mountPath": "/mnt/draft/model"},
                ],
            }
        )
    )
    assert (m[0].kind, m[0].claim, m[0].sub_path, m[0].mount_path) == (
        "pvc",
        "models",
        "",
        "/mnt/models/target",
    )
    assert (m[1].kind, m[1].image, m[1].mount_path) == ("oci", "reg/img:v1", "/mnt/draft/model")
    rw = kserve.resolve_storage(
        isvc({"model": {"storageUri": "pvc://m/"}}, annotations={"storage.kserve.io/readonly": "false"})
    )
    assert rw[0].read_only is False


def test_pod_template_modelcar_and_pvc():
    obj = isvc({"model": {"storageUri": "oci://reg/models:v1"}})
    rt = runtime("r", [{"name": "vLLM"}])
    c = kserve.merge_container(kserve.runtime_container(rt), {})
    t = kserve.pod_template(obj, "ClusterServingRuntime", rt, c, kserve.resolve_storage(obj))
    spec = t["spec"]
    assert [x["name"] for x in spec["containers"]] == ["kserve-container", "modelcar"]
    assert spec["initContainers"][0]["name"] == "modelcar-init" and spec["shareProcessNamespace"] is True
    assert spec["containers"][1]["args"][2] == "ln -sf /proc/$$$$/root/models /mnt/models && sleep infinity"
    assert {"name": "MODEL_INIT_MODE", "value": "async"} in spec["containers"][0]["env"]
    assert t["metadata"]["labels"]["serving.kserve.io/inferenceservice"] == "tiny"
    assert t["metadata"]["labels"]["component"] == "predictor"


# ---------------------------------------------------------------- mapping
DRAFT_SPEC = '{"method": "draft_model", "model": "/mnt/models/draft", "num_speculative_tokens": 3}'


def test_engine_command_and_args():
    py = Path("/v/bin/python")
    prefix, args = mapping.engine_argv(
        {"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"], "args": ["--port=$(PORT)"]},
        py,
        {"PORT": "8080"},
    )
    assert prefix == [str(py), "-m", "vllm.entrypoints.openai.api_server"] and args == ["--port=8080"]
    # vllm serve runs as vLLM's own CLI, its args as they are (the positional model wherever it stands)
    serve = [str(py), "-m", "vllm.entrypoints.cli.main", "serve"]
    assert mapping.engine_argv({"command": ["vllm", "serve"], "args": ["--port=1", "/mnt/models", "--x"]}, py, {}) == (
        serve,
        ["--port=1", "/mnt/models", "--x"],
    )
    assert mapping.engine_argv({"command": ["vllm", "serve", "/mnt/models"], "args": ["--x"]}, py, {}) == (
        serve,
        ["/mnt/models", "--x"],
    )
    # no command: the vLLM OpenAI image's entrypoint, vllm serve
    assert mapping.engine_argv({"args": ["--model=/m"]}, py, {}) == (serve, ["--model=/m"])
    assert mapping.engine_argv({"command": ["vllm"], "args": ["serve", "/m"]}, py, {}) == (serve, ["/m"])
    with pytest.raises(mapping.CommandError):
        mapping.engine_argv({"command": ["python", "-m", "huggingfaceserver"]}, py, {})
    assert mapping.expand_vars("$$(X) $(X) $(Y)", {"X": "1"}) == "$(X) 1 $(Y)"


def test_engine_args_touch_only_host_and_port():
    """The engine sees the pod's filesystem: model paths and --speculative-config reach it as the
    container has them; only the host and the port are this machine's."""
    container = [
        "--port=8080",
        "--model=/mnt/models/target",
        "--speculative-config",
        DRAFT_SPEC,
        "--tokenizer=/mnt/models/target",
        "--download-dir=/tmp/x",
    ]
    out = mapping.engine_args(container, 4321)
    assert out == container[1:] + ["--host", "127.0.0.1", "--port", "4321"]
    assert mapping.engine_args(["--speculative-config=" + DRAFT_SPEC, "--host=0.0.0.0"], 1) == [
        "--speculative-config=" + DRAFT_SPEC,
        "--host",
        "127.0.0.1",
        "--port",
        "1",
    ]
    assert not hasattr(mapping, "map_text") and not hasattr(mapping, "local_args")


def test_sandbox_binds_the_pod_volumes_at_their_mount_paths(tmp_path):
    from specpilot_lab.controller import sandbox

    pod = {
        "spec": {
            "volumes": [
                {"name": "kserve-pvc-source", "persistentVolumeClaim": {"claimName": "models"}},
                {"name": "kserve-provision-location", "emptyDir": {}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            ]
        }
    }
    container = {
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "kserve-pvc-source", "mountPath": "/mnt/models/target", "readOnly": True,
             "subPath": "t"},
            {"name": "kserve-provision-location", "mountPath": "/mnt", "readOnly": False},
        ]
    }
    vols = {"kserve-pvc-source": tmp_path / "pvc", "kserve-provision-location": tmp_path / "empty"}
    binds = sandbox.volume_binds(pod, container, vols, {"/mnt/models/draft": tmp_path / "oci" / "models"})
    assert [(b.dest, b.src, b.read_only) for b in binds] == [
        ("/mnt", tmp_path / "empty", False),  # parents first: the Modelcar's emptyDir, then what is in it
        ("/dev/shm", None, False),  # medium Memory: a tmpfs
        ("/mnt/models/target", tmp_path / "pvc" / "t", True),  # subPath created, as the kubelet does
        ("/mnt/models/draft", tmp_path / "oci" / "models", True),
    ]
    assert (tmp_path / "pvc" / "t").is_dir()
    with pytest.raises(Exception, match='volume "nope" not found'):
        sandbox.volume_binds(pod, {"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}, vols, {})


def test_sandbox_exposes_the_interpreter_where_it_is(tmp_path):
    """A virtualenv's python needs the virtualenv and the Python it was made from; a wrapper script
    (the lab's stand-in engines) the files it names; symlinks on the way are recreated."""
    from specpilot_lab.controller import sandbox

    base = tmp_path / "pythons" / "3.11"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python3.11").write_bytes(b"\x7fELF")
    venv = tmp_path / "real-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\n")
    (venv / "bin" / "python").symlink_to(base / "bin" / "python3.11")
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / ".venv").symlink_to(venv)
    server = tmp_path / "checkout" / "server.py"
    server.write_text("print()\n")
    script = tmp_path / "wrapper" / "python"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nexec {tmp_path}/checkout/.venv/bin/python {server} --x /nowhere "$@"\n')
    paths = sandbox.runtime_paths(script)
    assert paths == [script, tmp_path / "checkout" / ".venv", base, server]
    args = sandbox.expose_args(paths)
    assert args == [
        "--ro-bind", str(script), str(script),
        "--symlink", str(venv), str(tmp_path / "checkout" / ".venv"),
        "--ro-bind", str(venv), str(venv),
        "--ro-bind", str(base), str(base),
        "--ro-bind", str(server), str(server),
    ]  # fmt: skip
    assert sandbox.runtime_paths(Path("/usr/bin/python3")) == []  # the system's: there already


def test_sandbox_environment_is_the_containers():
    from specpilot_lab.controller import sandbox

    container_env = {"HF_HOME": "/tmp/hf_home", "VLLM_CPU_KVCACHE_SPACE": "2"}
    env = sandbox.engine_env(container_env, "pod-x", Path("/v/bin/python"))
    assert env["HF_HOME"] == "/tmp/hf_home" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["HOME"] == "/root" and env["HOSTNAME"] == "pod-x" and env["PATH"].startswith("/v/bin:")
    assert "VLLM_CACHE_ROOT" not in env and "TMPDIR" not in env  # vLLM's defaults: ~/.cache/vllm, /tmp


def test_bwrap_problem_names_the_fix(tmp_path, monkeypatch):
    """Where bubblewrap is missing or cannot create namespaces, the lab says so and what fixes it
    (the engines never fall back to running outside the pod's filesystem)."""
    from specpilot_lab.controller import jobs

    monkeypatch.setattr(jobs, "BWRAP", str(tmp_path / "no-bwrap"))
    missing = jobs.bwrap_problem.__wrapped__()
    assert missing.startswith("bubblewrap (bwrap) is not installed") and "make system-packages" in missing
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(jobs, "BWRAP", str(fake))
    refused = jobs.bwrap_problem.__wrapped__()
    assert refused.startswith(
        "bubblewrap cannot create its sandbox here (bwrap: No permissions to create new namespace)"
    )
    assert "unprivileged_userns_clone" in refused


# ---------------------------------------------------------------- scheduling
def node(gpus=1, labels=None, taints=None):
    return scheduling.node_object("lab-node", gpus, labels or {}, taints or [], "32", "256Gi")


def pod(gpus=0, **spec):
    c = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
    return {"containers": [c], **spec}


def test_quantities():
    assert scheduling.quantity("500m") == Decimal("0.5")
    assert scheduling.quantity("4Gi") == 4 * 2**30
    assert scheduling.quantity("1e3") == 1000


def test_fit_gpu_selector_taints_affinity():
    assert scheduling.fit(pod(1), node(1), []) is None
    msg = scheduling.fit(pod(2), node(1), [])
    assert msg == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: "
        "1 No preemption victims found for incoming pod."
    )
    assert "Insufficient nvidia.com/gpu" in scheduling.fit(pod(1), node(1), [{"spec": pod(1)}])
    assert "node affinity/selector" in scheduling.fit(pod(nodeSelector={"a": "b"}), node(), [])
    assert scheduling.fit(pod(nodeSelector={"a": "b"}), node(labels={"a": "b"}), []) is None
    taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert "untolerated taint {nvidia.com/gpu: present}" in scheduling.fit(pod(), node(taints=taint), [])
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert scheduling.fit(pod(tolerations=tol), node(taints=taint), []) is None
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["H100"]}]}
                ]
            }
        }
    }
    assert "node affinity" in scheduling.fit(pod(affinity=aff), node(labels={"gpu": "A10"}), [])
    assert scheduling.fit(pod(affinity=aff), node(labels={"gpu": "H100"}), []) is None
    assert "Insufficient cpu" in scheduling.fit(
        {"containers": [{"resources": {"requests": {"cpu": "64"}}}]}, node(), []
    )


def test_node_options_parse():
    assert scheduling.parse_labels("a=b, c=d") == {"a": "b", "c": "d"}
    assert scheduling.parse_taints("k=v:NoSchedule,x:NoExecute") == [
        {"key": "k", "value": "v", "effect": "NoSchedule"},
        {"key": "x", "effect": "NoExecute"},
    ]
    n = node(2, {"x": "y"})
    assert n["status"]["capacity"]["nvidia.com/gpu"] == "2" and n["metadata"]["labels"]["x"] == "y"
    assert "nvidia.com/gpu" not in node(0)["status"]["capacity"]


# ---------------------------------------------------------------- Knative mode (canaryTrafficPercent)
def test_knative_traffic_targets_follow_ksvc_reconciler():
    assert kserve.traffic_targets(None, "r-00001", False) == [{"latestRevision": True, "percent": 100}]
    # no revision rolled out yet: canaryTrafficPercent is ignored (blue-green)
    assert kserve.traffic_targets(10, "", True) == [{"latestRevision": True, "percent": 100, "tag": "latest"}]
    assert kserve.traffic_targets(10, "r-00001", False) == [
        {"latestRevision": True, "percent": 10},
        {"revisionName": "r-00001", "latestRevision": False, "percent": 90, "tag": "prev"},
    ]
    assert kserve.traffic_targets(100, "r-00001", True) == [
        {"latestRevision": True, "percent": 100, "tag": "latest"}
    ]


def test_knative_route_sends_the_latest_share_to_the_latest_ready_revision():
    targets = kserve.traffic_targets(50, "r-00001", False)
    assert kserve.route_traffic(targets, None) == []
    # revision 2 not ready yet: the latest target still resolves to revision 1
    assert [(t["revisionName"], t["percent"]) for t in kserve.route_traffic(targets, "r-00001")] == [
        ("r-00001", 50),
        ("r-00001", 50),
    ]
    assert [(t["revisionName"], t["percent"]) for t in kserve.route_traffic(targets, "r-00002")] == [
        ("r-00002", 50),
        ("r-00001", 50),
    ]


def _rollout(comp, created, ready, percent, rolledout):
    traffic = kserve.route_traffic(kserve.traffic_targets(percent, rolledout, False), ready)
    return kserve.propagate_rollout(comp, created, ready, traffic)


def test_knative_rolled_out_revisions_as_propagate_status_keeps_them():
    comp = _rollout({}, "r-1", "r-1", None, "")
    assert (comp["latestRolledoutRevision"], comp["previousRolledoutRevision"]) == ("r-1", "")
    comp = _rollout(comp, "r-2", "r-2", 50, "r-1")  # a canary: nothing rolled out
    assert comp["latestRolledoutRevision"] == "r-1" and comp["latestReadyRevision"] == "r-2"
    promoted = _rollout(comp, "r-2", "r-2", None, "r-1")
    assert (promoted["latestRolledoutRevision"], promoted["previousRolledoutRevision"]) == ("r-2", "r-1")
    # rolled out at canaryTrafficPercent 100, then pinned back with 0: the previous revision is rolled out again
    at_100 = _rollout(comp, "r-2", "r-2", 100, "r-1")
    assert at_100["latestRolledoutRevision"] == "r-2"
    pinned = _rollout(at_100, "r-2", "r-2", 0, "r-2")
    assert pinned["latestRolledoutRevision"] == "r-1"
    assert [
        (t["revisionName"], t["percent"]) for t in _rollout(pinned, "r-2", "r-2", 0, "r-1")["traffic"]
    ] == [
        ("r-2", 0),
        ("r-1", 100),
    ]
