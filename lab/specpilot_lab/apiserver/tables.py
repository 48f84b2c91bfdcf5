"""``meta.k8s.io/v1 Table`` output for ``kubectl get`` (server-side printing)."""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable

from .errors import bad_request
from .util import age, human_duration, parse_time

NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. "
    "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
AGE_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It "
    "is not guaranteed to be set in happens-before order across separate operations. Clients may not "
    "set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. "
    "Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def col(name: str, typ: str = "string", fmt: str = "", desc: str = "", priority: int = 0) -> dict:
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": priority}


NAME_COL = col("Name", "string", "name", NAME_DESC)
AGE_COL = col("Age", "string", "", AGE_DESC)


# ----------------------------------------------------------------------------- JSONPath subset
_TOKEN = re.compile(
    r"""\.\.?(?P<name>[A-Za-z0-9_$@\-/]+)      # .name
      |\[\s*'(?P<q1>[^']*)'\s*\]              # ['name']
      |\[\s*"(?P<q2>[^"]*)"\s*\]              # ["name"]
      |\[\s*(?P<idx>-?\d+)\s*\]               # [0]
      |\[\s*(?P<slice>-?\d*:-?\d*)\s*\]       # [0:2]
      |\[\s*\*\s*\]|\.\*                      # [*] .*
      |\[\s*\?\(\s*(?P<filter>.*?)\s*\)\s*\]  # [?(@.type=="Ready")]
    """,
    re.X,
)
_FILTER = re.compile(r"""^@((?:\.[A-Za-z0-9_\-/]+)+)\s*(?:(==|!=|<=|>=|<|>)\s*(.+))?$""")


def _literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def compile_jsonpath(expr: str) -> list[tuple[str, Any]]:
    """Compile the subset of kubectl JSONPath that printer columns use."""
    e = expr.strip()
    if e.startswith("{") and e.endswith("}"):
        e = e[1:-1].strip()
    if e.startswith("$"):
        e = e[1:]
    if e and not e.startswith((".", "[")):
        e = "." + e
    steps: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(e):
        m = _TOKEN.match(e, pos)
        if not m or m.end() == pos:
            raise ValueError(f"unrecognized JSONPath near {e[pos:]!r}")
        text = m.group(0)
        if m.group("name") is not None:
            steps.append(("recurse" if text.startswith("..") else "key", m.group("name")))
        elif m.group("q1") is not None or m.group("q2") is not None:
            steps.append(("key", m.group("q1") if m.group("q1") is not None else m.group("q2")))
        elif m.group("idx") is not None:
            steps.append(("index", int(m.group("idx"))))
        elif m.group("slice") is not None:
            a, _, b = m.group("slice").partition(":")
            steps.append(("slice", (int(a) if a else None, int(b) if b else None)))
        elif m.group("filter") is not None:
            fm = _FILTER.match(m.group("filter"))
            if not fm:
                raise ValueError(f"unsupported filter {m.group('filter')!r}")
            path = [p for p in fm.group(1).split(".") if p]
            steps.append(("filter", (path, fm.group(2), _literal(fm.group(3)) if fm.group(3) else None)))
        else:
            steps.append(("all", None))
        pos = m.end()
    return steps


def eval_jsonpath(steps: list[tuple[str, Any]], obj: Any) -> list[Any]:
    cur = [obj]
    for kind, arg in steps:
        nxt: list[Any] = []
        for v in cur:
            if kind == "key":
                if isinstance(v, dict) and arg in v:
                    nxt.append(v[arg])
            elif kind == "index":
                if isinstance(v, list) and -len(v) <= arg < len(v):
                    nxt.append(v[arg])
            elif kind == "slice":
                if isinstance(v, list):
                    nxt.extend(v[arg[0] : arg[1]])
            elif kind == "all":
                if isinstance(v, list):
                    nxt.extend(v)
                elif isinstance(v, dict):
                    nxt.extend(v.values())
            elif kind == "filter":
                if isinstance(v, list):
                    path, op, lit = arg
                    for item in v:
                        val: Any = item
                        for p in path:
                            val = val.get(p) if isinstance(val, dict) else None
                        if _filter_ok(val, op, lit):
                            nxt.append(item)
            elif kind == "recurse":
                nxt.extend(_recurse(v, arg))
        cur = nxt
    return cur


def _recurse(v: Any, key: str) -> list[Any]:
    out = []
    if isinstance(v, dict):
        if key in v:
            out.append(v[key])
        for x in v.values():
            out.extend(_recurse(x, key))
    elif isinstance(v, list):
        for x in v:
            out.extend(_recurse(x, key))
    return out


def _filter_ok(val: Any, op: str | None, lit: Any) -> bool:
    if op is None:
        return val is not None
    if val is None:
        return False
    if op == "==":
        return val == lit or str(val) == str(lit)
    if op == "!=":
        return not (val == lit or str(val) == str(lit))
    try:
        a, b = float(val), float(lit)
    except (TypeError, ValueError):
        return False
    return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]


# ----------------------------------------------------------------------------- cells
def _go_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def cell_for(typ: str, value: Any) -> Any:
    if value is None:
        return None
    if typ == "date":
        t = parse_time(value) if isinstance(value, str) else None
        return "<invalid>" if t is None else human_duration(time.time() - t)
    if typ == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return int(value)
        return None
    if typ == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if typ == "boolean":
        return value if isinstance(value, bool) else None
    return _go_string(value)


class CustomColumns:
    """Columns from a CRD version's additionalPrinterColumns (Age by default)."""

    def __init__(self, printer_columns: list[dict] | None):
        self.columns: list[tuple[dict, list, str]] = []
        specs = printer_columns
        if not specs:
            specs = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
        for spec in specs:
            try:
                steps = compile_jsonpath(spec.get("jsonPath", ""))
            except ValueError:
                steps = []
            typ = spec.get("type", "string")
            self.columns.append(
                (
                    col(
                        spec.get("name", ""),
                        typ,
                        spec.get("format", ""),
                        spec.get("description", ""),
                        int(spec.get("priority", 0) or 0),
                    ),
                    steps,
                    typ,
                )
            )

    def definitions(self) -> list[dict]:
        return [NAME_COL] + [c for c, _, _ in self.columns]

    def cells(self, obj: dict) -> list[Any]:
        out: list[Any] = [obj.get("metadata", {}).get("name", "")]
        for _, steps, typ in self.columns:
            results = eval_jsonpath(steps, obj) if steps else []
            out.append(cell_for(typ, results[0]) if results else None)
        return out


# ----------------------------------------------------------------------------- built-in printers
def _md(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _ts_age(obj: dict) -> str:
    return age(_md(obj).get("creationTimestamp"))


def _pod_cells(obj: dict) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    reason = status.get("reason") or status.get("phase") or "Pending"
    for s in statuses:
        st = s.get("state") or {}
        if st.get("waiting", {}).get("reason"):
            reason = st["waiting"]["reason"]
        elif "terminated" in st:
            t = st["terminated"]
            reason = t.get("reason") or (
                f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode', 0)}"
            )
    if _md(obj).get("deletionTimestamp"):
        reason = "Terminating"
    restarts_cell: Any = restarts
    return [
        _md(obj).get("name"),
        f"{ready}/{len(containers)}",
        reason,
        restarts_cell,
        _ts_age(obj),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>" if not spec.get("readinessGates") else str(len(spec["readinessGates"])),
    ]


def _svc_ports(spec: dict) -> str:
    ports = spec.get("ports") or []
    if not ports:
        return "<none>"
    out = []
    for p in ports:
        s = f"{p.get('port')}"
        if p.get("nodePort"):
            s += f":{p['nodePort']}"
        out.append(f"{s}/{p.get('protocol', 'TCP')}")
    return ",".join(out)


def _svc_cells(obj: dict) -> list[Any]:
    spec = obj.get("spec") or {}
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    ext = ",".join(i.get("ip") or i.get("hostname") or "" for i in ingress) or (
        ",".join(spec.get("externalIPs") or [])
        or (
            "<pending>"
            if spec.get("type") == "LoadBalancer"
            else spec.get("externalName") if spec.get("type") == "ExternalName" else "<none>"
        )
    )
    sel = spec.get("selector") or {}
    return [
        _md(obj).get("name"),
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        ext,
        _svc_ports(spec),
        _ts_age(obj),
        ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "<none>",
    ]


def _deploy_cells(obj: dict) -> list[Any]:
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    desired = spec.get("replicas", 1)
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    return [
        _md(obj).get("name"),
        f"{st.get('readyReplicas', 0)}/{desired}",
        st.get("updatedReplicas", 0),
        st.get("availableReplicas", 0),
        _ts_age(obj),
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        ",".join(f"{k}={v}" for k, v in sorted(sel.items())),
    ]


def _rs_cells(obj: dict) -> list[Any]:
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    return [
        _md(obj).get("name"),
        spec.get("replicas", 1),
        st.get("replicas", 0),
        st.get("readyReplicas", 0),
        _ts_age(obj),
    ]


def _job_cells(obj: dict) -> list[Any]:
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    if conds.get("Complete") == "True":
        status = "Complete"
    elif conds.get("Failed") == "True":
        status = "Failed"
    elif conds.get("Suspended") == "True":
        status = "Suspended"
    elif _md(obj).get("deletionTimestamp"):
        status = "Terminating"
    else:
        status = "Running"
    completions = spec.get("completions")
    comp = (
        f"{st.get('succeeded', 0)}/{completions}"
        if completions is not None
        else f"{st.get('succeeded', 0)}/1 of {spec.get('parallelism', 1)}"
    )
    start = parse_time(st.get("startTime") or "")
    end = parse_time(st.get("completionTime") or "")
    duration = "" if start is None else human_duration((end or time.time()) - start)
    return [_md(obj).get("name"), status, comp, duration, _ts_age(obj)]


def _event_cells(obj: dict) -> list[Any]:
    io = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or _md(obj).get("creationTimestamp")
    kind = (io.get("kind") or "").lower()
    return [
        age(last),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{kind}/{io.get('name', '')}",
        obj.get("message", ""),
    ]


def _node_cells(obj: dict) -> list[Any]:
    st = obj.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    status = "Unknown" if not ready else ("Ready" if ready.get("status") == "True" else "NotReady")
    if (obj.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(
        k.split("/", 1)[1] for k in (_md(obj).get("labels") or {}) if k.startswith("node-role.kubernetes.io/")
    )
    return [
        _md(obj).get("name"),
        status,
        ",".join(roles) or "<none>",
        _ts_age(obj),
        (st.get("nodeInfo") or {}).get("kubeletVersion", ""),
    ]


def _pvc_cells(obj: dict) -> list[Any]:
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    cap = (st.get("capacity") or {}).get("storage", "")
    modes = ",".join(
        {
            "ReadWriteOnce": "RWO",
            "ReadOnlyMany": "ROX",
            "ReadWriteMany": "RWX",
            "ReadWriteOncePod": "RWOP",
        }.get(m, m)
        for m in st.get("accessModes") or []
    )
    phase = "Terminating" if _md(obj).get("deletionTimestamp") else st.get("phase", "Pending")
    return [
        _md(obj).get("name"),
        phase,
        spec.get("volumeName", ""),
        cap,
        modes,
        spec.get("storageClassName") or "<unset>",
        spec.get("volumeAttributesClassName") or "<unset>",
        _ts_age(obj),
        spec.get("volumeMode", "Filesystem"),
    ]


def _pv_cells(obj: dict) -> list[Any]:
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    ref = spec.get("claimRef") or {}
    claim = f"{ref.get('namespace')}/{ref.get('name')}" if ref else ""
    modes = ",".join(
        {
            "ReadWriteOnce": "RWO",
            "ReadOnlyMany": "ROX",
            "ReadWriteMany": "RWX",
            "ReadWriteOncePod": "RWOP",
        }.get(m, m)
        for m in spec.get("accessModes") or []
    )
    return [
        _md(obj).get("name"),
        (spec.get("capacity") or {}).get("storage", ""),
        modes,
        spec.get("persistentVolumeReclaimPolicy", "Retain"),
        st.get("phase", "Pending"),
        claim,
        spec.get("storageClassName", ""),
        "<unset>",
        st.get("reason", ""),
        _ts_age(obj),
    ]


def _ep_cells(obj: dict) -> list[Any]:
    eps = []
    for s in obj.get("subsets") or []:
        for a in s.get("addresses") or []:
            for p in s.get("ports") or [{}]:
                eps.append(f"{a.get('ip')}:{p.get('port')}" if p else a.get("ip"))
    shown = ",".join(eps[:3]) + (f" + {len(eps) - 3} more..." if len(eps) > 3 else "")
    return [_md(obj).get("name"), shown or "<none>", _ts_age(obj)]


def _binding_role(obj: dict) -> str:
    ref = obj.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


def _created_at(obj: dict) -> str:
    return _md(obj).get("creationTimestamp") or ""


Printer = tuple[list[dict], Callable[[dict], list[Any]]]

PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "namespaces"): (
        [NAME_COL, col("Status", desc="The status of the namespace"), AGE_COL],
        lambda o: [_md(o).get("name"), (o.get("status") or {}).get("phase", "Active"), _ts_age(o)],
    ),
    ("", "configmaps"): (
        [NAME_COL, col("Data", "string", desc="Data contains the configuration data."), AGE_COL],
        lambda o: [_md(o).get("name"), len(o.get("data") or {}) + len(o.get("binaryData") or {}), _ts_age(o)],
    ),
    ("", "secrets"): (
        [
            NAME_COL,
            col("Type", desc="The type of the secret"),
            col("Data", desc="The number of entries in the secret"),
            AGE_COL,
        ],
        lambda o: [_md(o).get("name"), o.get("type", "Opaque"), len(o.get("data") or {}), _ts_age(o)],
    ),
    ("", "pods"): (
        [
            NAME_COL,
            col("Ready", desc="The aggregate readiness state of this pod for accepting " "traffic."),
            col("Status", desc="The aggregate status of the containers in this pod."),
            col(
                "Restarts",
                desc="The number of times the containers in this pod have been "
                "restarted and when the last container in this pod has restarted.",
            ),
            AGE_COL,
            col(
                "IP",
                desc="IP address allocated to the pod. Routable at least within the "
                "cluster. Empty if not yet allocated.",
                priority=1,
            ),
            col("Node", desc="NodeName is a request to schedule this pod onto a specific node.", priority=1),
            col(
                "Nominated Node",
                desc="nominatedNodeName is set only when this pod preempts other " "pods on the node",
                priority=1,
            ),
            col(
                "Readiness Gates",
                desc="If specified, all readiness gates will be evaluated for pod " "readiness.",
                priority=1,
            ),
        ],
        _pod_cells,
    ),
    ("", "services"): (
        [
            NAME_COL,
            col("Type", desc="type determines how the Service is exposed."),
            col("Cluster-IP", desc="clusterIP is the IP address of the service"),
            col("External-IP", desc="externalIPs is a list of IP addresses"),
            col("Port(s)", desc="The list of ports that are exposed by this service."),
            AGE_COL,
            col(
                "Selector",
                desc="Route service traffic to pods with label keys and values " "matching this selector.",
                priority=1,
            ),
        ],
        _svc_cells,
    ),
    ("", "serviceaccounts"): (
        [NAME_COL, col("Secrets", "integer", desc="Secrets is a list of the secrets"), AGE_COL],
        lambda o: [_md(o).get("name"), len(o.get("secrets") or []), _ts_age(o)],
    ),
    ("", "events"): (
        [
            col("Last Seen", desc="Time when last this event was seen"),
            col("Type", desc="Type of this event (Normal, Warning)"),
            col("Reason", desc="Short, machine understandable string"),
            col("Object", desc="Object this event is about"),
            col("Message", desc="A human-readable description of the status"),
        ],
        _event_cells,
    ),
    ("", "persistentvolumeclaims"): (
        [
            NAME_COL,
            col("Status"),
            col("Volume"),
            col("Capacity"),
            col("Access Modes"),
            col("StorageClass"),
            col("VolumeAttributesClass"),
            AGE_COL,
            col("VolumeMode", priority=1),
        ],
        _pvc_cells,
    ),
    ("", "persistentvolumes"): (
        [
            NAME_COL,
            col("Capacity"),
            col("Access Modes"),
            col("Reclaim Policy"),
            col("Status"),
            col("Claim"),
            col("StorageClass"),
            col("VolumeAttributesClass"),
            col("Reason"),
            AGE_COL,
        ],
        _pv_cells,
    ),
    ("", "nodes"): ([NAME_COL, col("Status"), col("Roles"), AGE_COL, col("Version")], _node_cells),
    ("", "endpoints"): ([NAME_COL, col("Endpoints"), AGE_COL], _ep_cells),
    ("apps", "deployments"): (
        [
            NAME_COL,
            col("Ready"),
            col("Up-to-date", "integer"),
            col("Available", "integer"),
            AGE_COL,
            col("Containers", priority=1),
            col("Images", priority=1),
            col("Selector", priority=1),
        ],
        _deploy_cells,
    ),
    ("apps", "replicasets"): (
        [NAME_COL, col("Desired", "integer"), col("Current", "integer"), col("Ready", "integer"), AGE_COL],
        _rs_cells,
    ),
    ("batch", "jobs"): ([NAME_COL, col("Status"), col("Completions"), col("Duration"), AGE_COL], _job_cells),
    ("batch", "cronjobs"): (
        [
            NAME_COL,
            col("Schedule"),
            col("Timezone"),
            col("Suspend"),
            col("Active", "integer"),
            col("Last Schedule"),
            AGE_COL,
        ],
        lambda o: [
            _md(o).get("name"),
            (o.get("spec") or {}).get("schedule", ""),
            (o.get("spec") or {}).get("timeZone") or "<none>",
            str(bool((o.get("spec") or {}).get("suspend"))),
            len((o.get("status") or {}).get("active") or []),
            (
                age((o.get("status") or {}).get("lastScheduleTime"))
                if (o.get("status") or {}).get("lastScheduleTime")
                else "<none>"
            ),
            _ts_age(o),
        ],
    ),
    ("rbac.authorization.k8s.io", "roles"): (
        [NAME_COL, col("Created At", "date")],
        lambda o: [_md(o).get("name"), _created_at(o)],
    ),
    ("rbac.authorization.k8s.io", "clusterroles"): (
        [NAME_COL, col("Created At", "date")],
        lambda o: [_md(o).get("name"), _created_at(o)],
    ),
    ("rbac.authorization.k8s.io", "rolebindings"): (
        [NAME_COL, col("Role"), AGE_COL],
        lambda o: [_md(o).get("name"), _binding_role(o), _ts_age(o)],
    ),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): (
        [NAME_COL, col("Role"), AGE_COL],
        lambda o: [_md(o).get("name"), _binding_role(o), _ts_age(o)],
    ),
    ("coordination.k8s.io", "leases"): (
        [NAME_COL, col("Holder"), AGE_COL],
        lambda o: [_md(o).get("name"), (o.get("spec") or {}).get("holderIdentity", ""), _ts_age(o)],
    ),
    ("storage.k8s.io", "storageclasses"): (
        [
            NAME_COL,
            col("Provisioner"),
            col("ReclaimPolicy"),
            col("VolumeBindingMode"),
            col("AllowVolumeExpansion"),
            AGE_COL,
        ],
        lambda o: [
            _md(o).get("name"),
            o.get("provisioner", ""),
            o.get("reclaimPolicy", "Delete"),
            o.get("volumeBindingMode", "Immediate"),
            str(bool(o.get("allowVolumeExpansion"))).lower(),
            _ts_age(o),
        ],
    ),
}

DEFAULT_PRINTER: Printer = (
    [NAME_COL, col("Created At", "date", desc=AGE_DESC)],
    lambda o: [_md(o).get("name"), _created_at(o)],
)


def partial_metadata(obj: dict) -> dict:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def parse_include_object(value: str | None) -> str:
    v = value or "Metadata"
    if v not in ("None", "Metadata", "Object"):
        raise bad_request(
            f'includeObject: Unsupported value: "{v}": supported values: "Metadata", ' '"None", "Object"'
        )
    return v


class TableMaker:
    def __init__(self, rt: Any):
        if rt.is_custom:
            cc = CustomColumns(rt.printer_columns)
            self.columns, self.cells = cc.definitions(), cc.cells
        else:
            self.columns, self.cells = PRINTERS.get(rt.group_resource, DEFAULT_PRINTER)

    def row(self, obj: dict, include: str) -> dict:
        cells = self.cells(obj)
        row: dict[str, Any] = {"cells": cells[: len(self.columns)]}
        if include == "Object":
            row["object"] = obj
        elif include == "Metadata":
            row["object"] = partial_metadata(obj)
        return row

    def table(
        self, objs: list[dict], include: str, list_meta: dict | None = None, headers: bool = True
    ) -> dict:
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": list_meta or {},
            "columnDefinitions": self.columns if headers else None,
            "rows": [self.row(o, include) for o in objs],
        }
