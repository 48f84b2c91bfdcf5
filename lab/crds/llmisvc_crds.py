"""The lab's own LLMInferenceService and LLMInferenceServiceConfig CRDs (serving.kserve.io,
v1alpha1 served, v1alpha2 served and stored, as KServe v0.20.0's ``config/crd/full/llmisvc/``).

Called by generate.py with its schema builders (``g``). Where KServe types a field, ours types it
the same way (tests/emulator/test_lab_crds_llmisvc.py checks it against the upstream files when
they are available); the router, scaling and tracing parts, which the lab does not run, are kept
as given (``x-kubernetes-preserve-unknown-fields``)."""

from __future__ import annotations

GROUP = "serving.kserve.io"


def pod_spec(g, desc: str) -> dict:
    """core/v1 PodSpec: what a workload template sets (containers and initContainers are list-maps
    keyed by name, as KServe's CRD declares them)."""
    fields = g.pod_scheduling_fields()
    fields["volumes"] = g.array("Volumes of the pod.", g.volume(), "map", ["name"])
    fields["imagePullSecrets"] = g.array(
        "Secrets used to pull the images of the pod.",
        g.local_object_reference("A Secret in the pod's namespace."),
        "map",
        ["name"],
    )
    fields.update(
        {
            "containers": g.array("Containers of the pod.", g.container("A container of the pod."), "map", ["name"]),
            "initContainers": g.array(
                "Init containers of the pod.", g.container("An init container of the pod."), "map", ["name"]
            ),
            "priorityClassName": g.string("Priority class of the pod."),
            "runtimeClassName": g.string("RuntimeClass the pod runs with."),
            "schedulerName": g.string("Scheduler that schedules the pod."),
            "securityContext": g.pod_security_context(),
            "serviceAccountName": g.string("ServiceAccount the pod runs as."),
            "terminationGracePeriodSeconds": g.int64("Seconds the pod has to stop gracefully."),
        }
    )
    return g.obj(desc, fields, ["containers"])


def parallelism(g) -> dict:
    return g.obj(
        "How the model is split over GPUs and nodes.",
        {
            "data": g.int32("Data parallel size."),
            "dataLocal": g.int32("Data parallel size on one node."),
            "dataRPCPort": g.int32("Port of the data parallel RPC."),
            "expert": g.boolean("Expert parallelism on."),
            "pipeline": g.int32("Pipeline parallel size."),
            "tensor": g.int32("Tensor parallel size."),
        },
    )


def workload_fields(g) -> dict:
    """Fields a workload (the main one, or prefill) shares (WorkloadSpec)."""
    return {
        "annotations": g.string_map("Annotations added to the workload's pods."),
        "labels": g.string_map("Labels added to the workload's pods."),
        "parallelism": parallelism(g),
        "replicas": g.int32("Number of replicas of the workload.", minimum=0),
        "scaling": g.preserved("Autoscaling of the workload (HPA or KEDA), kept as given."),
        "template": pod_spec(g, "Pod template of the workload (its container named main runs vLLM)."),
        # the lab runs single-node workloads only: the multi-node worker template is kept as given
        "worker": g.preserved("Pod template of the workers of a multi-node workload."),
    }


def spec(g, version: str) -> dict:
    fields = workload_fields(g)
    model = {
        "lora": g.preserved("LoRA adapters served with the model."),
        "name": g.string("Name the model is served as."),
        "uri": g.string("URI of the model (hf://, pvc://, oci://, s3://)."),
    }
    model["criticality" if version == "v1alpha1" else "confidential"] = (
        g.string("Criticality of the model's requests.")
        if version == "v1alpha1"
        else g.preserved("Confidential computing settings of the model's workload.")
    )
    prefill = workload_fields(g)
    if version == "v1alpha2":
        fields["kvCacheOffloading"] = g.preserved("KV cache offloading to CPU memory and storage.")
        prefill["kvCacheOffloading"] = g.preserved("KV cache offloading of the prefill workload.")
    fields.update(
        {
            "baseRefs": g.untyped_list(
                "LLMInferenceServiceConfigs merged under this spec, in order.",
                g.local_object_reference("An LLMInferenceServiceConfig in the namespace or KServe's."),
            ),
            "model": g.obj("The model to serve.", model, ["uri"]),
            "prefill": g.obj("The prefill workload of prefill/decode disaggregation.", prefill),
            "router": g.preserved("Router: gateway, HTTPRoute, inference pool and scheduler."),
            "storageInitializer": g.preserved("Storage initializer settings."),
            "tracing": g.preserved("Tracing of the workloads and the router."),
        }
    )
    return g.obj("Desired state of the LLMInferenceService.", fields)


def condition(g) -> dict:
    return g.obj(
        "One condition (knative.dev/pkg apis.Condition).",
        {
            "lastTransitionTime": g.string("Last time the condition changed status."),
            "message": g.string("Human-readable details about the transition."),
            "reason": g.string("Machine-readable reason of the last transition."),
            "severity": g.string("Severity of the condition: Error, Warning or Info."),
            "status": g.string("Status of the condition: True, False or Unknown."),
            "type": g.string("Type of the condition."),
        },
        ["status", "type"],
    )


def status(g, version: str, config: bool = False) -> dict:
    fields = {
        "annotations": g.string_map("Status annotations."),
        "conditions": g.untyped_list("Conditions of the resource.", condition(g)),
        "observedGeneration": g.int64("Generation observed by the controller."),
    }
    if not config:
        addr = {
            "CACerts": g.string("CA certificates of the address."),
            "audience": g.string("Audience of the address."),
            "name": g.string("Name of the address."),
            "url": g.string("URL of the address."),
        }
        fields.update(
            {
                "address": g.obj("Address (deprecated: addresses).", addr),
                "addresses": g.untyped_list(
                    "Addresses the service answers at.",
                    g.obj("One address.", dict(addr, models=g.untyped_list("Models served at the address.", g.preserved("One model.")),
                                              origin=g.preserved("Where the address comes from."))),
                ),
                "router": g.preserved("Observed state of the router."),
                "url": g.string("URL of the service (the gateway's, with a router route)."),
            }
        )
        if version == "v1alpha2":
            fields["appliedConfigs"] = g.untyped_list(
                "LLMInferenceServiceConfigs merged into the spec.", g.preserved("One applied config.")
            )
            fields["workloads"] = g.preserved("Observed state of the workloads.")
    return g.obj("Observed state, written by the controller.", fields)


def _crd(g, plural: str, kind: str, short: list[str] | None, columns: list[dict], config: bool, desc: str) -> dict:
    versions = []
    for name in ("v1alpha1", "v1alpha2"):
        one = g.crd(plural, kind, name, "Namespaced", spec(g, name), status(g, name, config), columns, short, True, desc)
        ver = one["spec"]["versions"][0]
        ver["storage"] = name == "v1alpha2"
        versions.append(ver)
    one["spec"]["versions"] = versions
    return one


def llm_inference_service(g) -> dict:
    columns = [
        {"jsonPath": ".status.url", "name": "URL", "type": "string"},
        {"jsonPath": ".status.conditions[?(@.type=='Ready')].status", "name": "Ready", "type": "string"},
        {"jsonPath": ".status.conditions[?(@.type=='Ready')].reason", "name": "Reason", "type": "string"},
        {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
        {"jsonPath": ".status.addresses[*].url", "name": "URLs", "priority": 1, "type": "string"},
    ]
    return _crd(
        g, "llminferenceservices", "LLMInferenceService", ["llmisvc"], columns, False,
        "LLMInferenceService serves an LLM with vLLM workloads, a router and a scheduler (KServe).",
    )


def llm_inference_service_config(g) -> dict:
    columns = [
        {"jsonPath": ".status.conditions[?(@.type=='Ready')].status", "name": "Ready", "type": "string"},
        {"jsonPath": ".status.conditions[?(@.type=='Ready')].reason", "name": "Reason", "type": "string"},
        {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
    ]
    return _crd(
        g, "llminferenceserviceconfigs", "LLMInferenceServiceConfig", None, columns, True,
        "LLMInferenceServiceConfig is a spec template LLMInferenceServices merge through baseRefs (KServe).",
    )


def documents(g) -> dict[str, dict]:
    return {
        f"{GROUP}_llminferenceservices.yaml": llm_inference_service(g),
        f"{GROUP}_llminferenceserviceconfigs.yaml": llm_inference_service_config(g),
    }
