"""The lab's own well-known LLMInferenceServiceConfigs: what a KServe install puts in the
``kserve`` namespace (``config/llmisvcconfig/*.yaml`` of KServe v0.20.0), in the same names and
shape, reduced to what runs on this machine.

- ``kserve-config-llm-template`` (no prefill): the container ``main`` runs ``/bin/bash -c SCRIPT --``
  with the container's args as ``$@``; SCRIPT ends as KServe's does, in ``eval "exec vllm serve
  /mnt/models --served-model-name NAME publishers/NS/models/NAME --port 8000 ${ACCESS_LOG_ARGS}
  [--tensor-parallel-size N] ${VLLM_ADDITIONAL_ARGS} $@"``. The ``eval`` is KServe's: the args are
  word-split and their shell quoting removed once more, so an arg holding JSON must quote it for
  the shell (``--speculative-config '{"method": ...}'``), on a cluster as in the lab, where the
  same script runs in bash.
- ``kserve-config-llm-decode-template`` and ``kserve-config-llm-prefill-template`` (``spec.prefill``):
  the same, decode serving on 8001 and prefill on 8000 as KServe's. Left out, since the lab has no
  RDMA and does not run the router: the routing sidecar init container of the decode pods and the
  KV transfer between the workloads (NIXL); each workload's engine serves on its own.
- ``kserve-config-llm-scheduler`` and ``kserve-config-llm-router-route``: the router parts a spec
  asks for (``spec.router.scheduler``, ``spec.router.route``), kept for the merge; the lab runs no
  scheduler or gateway (its address at ``status.url`` proxies to the decode workload).

Left out from KServe's script: RoCE discovery (KSERVE_INFER_ROCE), TLS, the shutdown timeout
(vLLM 0.18+: ``--shutdown-timeout``) and KV offloading (vLLM 0.22+).
"""

from __future__ import annotations

from . import llmisvc

IMAGE = "ghcr.io/llm-d/llm-d-cuda:v0.8.0"  # KServe v0.20.0's config-llm-template.yaml

_SCRIPT = """ACCESS_LOG_ARGS="--disable-uvicorn-access-log"
VLLM_VERSION=$(vllm --version 2>/dev/null | tail -1 | awk '{print $NF}')
echo "[access-log-detect] vllm version='${VLLM_VERSION}'"
if [[ "$VLLM_VERSION" =~ ^[0-9]+\\.[0-9]+ ]] && [ "$(printf '%s\\n%s\\n' "0.16.0" "${VLLM_VERSION}" | sort -V | head -1)" = "0.16.0" ]; then
  ACCESS_LOG_ARGS="--disable-access-log-for-endpoints /health,/metrics,/ping"
fi
echo "[access-log-detect] selected ACCESS_LOG_ARGS='${ACCESS_LOG_ARGS}'"

eval "exec vllm serve /mnt/models \\
  --served-model-name "{{ .Spec.Model.Name }}" "publishers/{{ .ObjectMeta.Namespace }}/models/{{ .Spec.Model.Name }}" \\
  --port PORT \\
  ${ACCESS_LOG_ARGS} \\
  {{- if and .Spec.Parallelism .Spec.Parallelism.Tensor }} --tensor-parallel-size {{ .Spec.Parallelism.Tensor }}{{- end }} \\
  ${VLLM_ADDITIONAL_ARGS} \\
  $@\""""


def _probe(period: int, failures: int, port: int) -> dict:
    return {
        "httpGet": {"path": "/health", "port": port, "scheme": "HTTP"},
        "periodSeconds": period,
        "timeoutSeconds": 1,
        "failureThreshold": failures,
    }


def _pod(port: int) -> dict:
    main = {
        "name": llmisvc.CONTAINER,
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": port, "protocol": "TCP"}],
        "command": ["/bin/bash", "-c", _SCRIPT.replace("PORT", str(port)), "--"],
        "env": [
            {"name": "HOME", "value": "/home"},
            {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
            {"name": "HF_HUB_CACHE", "value": "/models"},
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "livenessProbe": _probe(10, 10, port),
        "readinessProbe": _probe(1, 2, port),
        "startupProbe": {"httpGet": {"path": "/health", "port": port, "scheme": "HTTP"}, "failureThreshold": 60,
                         "periodSeconds": 10},
        "volumeMounts": [
            {"mountPath": "/home", "name": "home"},
            {"mountPath": "/tmp", "name": "tmp-dir"},
            {"mountPath": "/dev/shm", "name": "dshm"},
            {"mountPath": "/models", "name": "model-cache"},
        ],
    }
    return {
        "containers": [main],
        "terminationGracePeriodSeconds": 60,
        "volumes": [
            {"name": "home", "emptyDir": {}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "model-cache", "emptyDir": {}},
            {"name": "tmp-dir", "emptyDir": {}},
        ],
    }


def _config(name: str, spec: dict) -> dict:
    return {
        "apiVersion": f"{llmisvc.GROUP}/{llmisvc.VERSION}",
        "kind": "LLMInferenceServiceConfig",
        "metadata": {"name": name, "namespace": llmisvc.SYSTEM_NAMESPACE},
        "spec": spec,
    }


def well_known() -> list[dict]:
    routing = {"serving.kserve.io/model-based-routing-enabled": "true"}
    return [
        _config(llmisvc.TEMPLATE, {"annotations": routing, "template": _pod(8000)}),
        _config(llmisvc.DECODE_TEMPLATE, {"annotations": routing, "template": _pod(8001)}),
        _config(llmisvc.PREFILL_TEMPLATE, {"prefill": {"template": _pod(8000)}}),
        _config(
            llmisvc.SCHEDULER,
            {
                "router": {
                    "scheduler": {
                        "template": {
                            "containers": [
                                {"name": "main", "image": "ghcr.io/llm-d/llm-d-inference-scheduler:v0.8.0"}
                            ]
                        }
                    }
                }
            },
        ),
        _config(llmisvc.ROUTER_ROUTE, {"router": {"route": {"http": {"spec": {"rules": []}}}}}),
    ]
