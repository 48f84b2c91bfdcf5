"""A small stand-in for the AWX REST API (/api/v2/), enough for the awx.awx modules that
playbooks/awx_configure.yml calls, with the server-side checks of AWX that the data files must
pass: survey specs, credential inputs against their type, launch-time variables of workflow
nodes and schedules (only survey variables or ask_variables_on_launch), references by id.

Objects keep what the client sent plus ``id``, ``url``, ``type`` and ``related`` links, so the
modules' "is it different?" comparisons behave as against AWX and a second run changes nothing.
"""

from __future__ import annotations

import itertools
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API = "/api/v2/"
TOKEN = "fake-awx-token"

# sub-lists (associations) per collection
ASSOCIATIONS = {
    "job_templates": ["credentials", "labels", "instance_groups", "notification_templates_started",
                      "notification_templates_success", "notification_templates_error"],
    "workflow_job_templates": ["labels", "notification_templates_started", "notification_templates_success",
                               "notification_templates_error", "notification_templates_approvals"],
    "workflow_job_template_nodes": ["success_nodes", "failure_nodes", "always_nodes", "credentials", "labels",
                                    "instance_groups"],
    "schedules": ["credentials", "labels", "instance_groups"],
    "projects": ["notification_templates_started", "notification_templates_success", "notification_templates_error"],
    "inventory_sources": ["notification_templates_started", "notification_templates_success",
                          "notification_templates_error"],
}
TYPES = {"job_templates": "job_template", "workflow_job_templates": "workflow_job_template",
         "projects": "project", "inventory_sources": "inventory_source", "schedules": "schedule",
         "credentials": "credential", "credential_types": "credential_type", "inventories": "inventory",
         "execution_environments": "execution_environment", "organizations": "organization",
         "workflow_job_template_nodes": "workflow_job_template_node", "project_updates": "project_update",
         "instance_groups": "instance_group"}
UNIFIED = ("job_templates", "workflow_job_templates", "projects", "inventory_sources")
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


class ApiError(Exception):
    def __init__(self, status: int, body: dict):
        super().__init__(body)
        self.status = status
        self.body = body


def survey_errors(spec: dict) -> list[str]:
    """AWX's survey spec validation (awx/api/views: JobTemplateSurveySpec), the parts that matter here."""
    errors = []
    for key in ("name", "description", "spec"):
        if key not in spec:
            errors.append(f"'{key}' missing from survey spec.")
    if not isinstance(spec.get("spec"), list):
        return errors + ["'spec' must be a list of items."]
    variables = set()
    for idx, q in enumerate(spec["spec"]):
        where = f"Survey question {idx}"
        for key in ("question_name", "variable", "type", "required"):
            if key not in q:
                errors.append(f"'{key}' missing from {where}.")
        if q.get("type") not in SURVEY_TYPES:
            errors.append(f"{where}: '{q.get('type')}' is not a valid question type.")
        if q.get("variable") in variables:
            errors.append(f"'variable' '{q.get('variable')}' duplicated in survey question {idx}.")
        variables.add(q.get("variable"))
        if not isinstance(q.get("required"), bool):
            errors.append(f"{where}: 'required' must be a boolean.")
        default = q.get("default")
        if q.get("type") in ("multiplechoice", "multiselect"):
            choices = q.get("choices")
            if isinstance(choices, str):
                choices = choices.split("\n")
            if not choices:
                errors.append(f"{where}: multiple choice questions need choices.")
            elif default not in (None, "") and q["type"] == "multiplechoice" and default not in choices:
                errors.append(f"Default choice must be answered from the choices listed ({where}).")
        if q.get("type") == "integer" and default not in (None, "") and not isinstance(default, int):
            errors.append(f"{where}: default value {default!r} is not an integer.")
        if q.get("type") == "float" and default not in (None, "") and not isinstance(default, (int, float)):
            errors.append(f"{where}: default value {default!r} is not a number.")
        if q.get("type") in ("text", "textarea", "password") and default not in (None, "") \
                and not isinstance(default, str):
            errors.append(f"{where}: default value {default!r} is not a string.")
    return errors


class FakeAWX:
    def __init__(self):
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.store: dict[str, dict[int, dict]] = {}
        self.assoc: dict[tuple[str, int, str], list[int]] = {}
        self.surveys: dict[tuple[str, int], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.authorized = True
        self._create("organizations", {"name": "Default"})
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _go(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                fake.requests.append((self.command, self.path))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    fake.authorized = False
                    return self._send(401, {"detail": "Authentication credentials were not provided."})
                try:
                    body = json.loads(raw) if raw else {}
                    with fake.lock:
                        status, out = fake.handle(self.command, self.path, body)
                except ApiError as exc:
                    status, out = exc.status, exc.body
                self._send(status, out)

            def _send(self, status, out):
                data = b"" if out is None else json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-API-Product-Name", "AWX")
                self.send_header("X-API-Product-Version", "24.6.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _go  # noqa: N815 (http.server API)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # ------------------------------------------------------------------ objects

    def objects(self, coll: str) -> list[dict]:
        return list(self.store.get(coll, {}).values())

    def find(self, coll: str, **fields) -> dict:
        (obj,) = [o for o in self.objects(coll) if all(o.get(k) == v for k, v in fields.items())]
        return obj

    def associated(self, coll: str, obj_id: int, name: str) -> list[dict]:
        target = {"success_nodes": "workflow_job_template_nodes", "failure_nodes": "workflow_job_template_nodes",
                  "always_nodes": "workflow_job_template_nodes"}.get(name, name)
        return [self.store[target][i] for i in self.assoc.get((coll, obj_id, name), [])]

    def survey(self, coll: str, obj_id: int) -> dict:
        return self.surveys.get((coll, obj_id), {})

    def _create(self, coll: str, body: dict) -> dict:
        obj_id = next(self.ids)
        obj = dict(body, id=obj_id, url=f"{API}{coll}/{obj_id}/", type=TYPES.get(coll, coll))
        related = {name: f"{API}{coll}/{obj_id}/{name}/" for name in ASSOCIATIONS.get(coll, [])}
        if coll in ("job_templates", "workflow_job_templates"):
            related["survey_spec"] = f"{API}{coll}/{obj_id}/survey_spec/"
        if coll == "projects":
            related["update"] = f"{API}projects/{obj_id}/update/"
            update = self._create("project_updates", {"status": "successful", "failed": False,
                                                       "finished": "2026-01-01T00:00:00Z", "scm_revision": "abc"})
            obj["summary_fields"] = {"current_update": {"id": update["id"]}}
            obj["scm_revision"] = "abc"
        obj["related"] = related
        self.store.setdefault(coll, {})[obj_id] = obj
        return obj

    # ------------------------------------------------------------------ checks AWX makes

    def _ref(self, coll: str, obj_id, field: str):
        if obj_id is not None and obj_id not in self.store.get(coll, {}):
            raise ApiError(400, {field: [f"Invalid pk \"{obj_id}\" - object does not exist."]})

    def _launch_vars(self, ujt_id: int, data: dict, field: str):
        for coll in ("job_templates", "workflow_job_templates"):
            ujt = self.store.get(coll, {}).get(ujt_id)
            if ujt is None:
                continue
            if ujt.get("ask_variables_on_launch"):
                return
            asked = {q["variable"] for q in self.survey(coll, ujt_id).get("spec", [])} \
                if ujt.get("survey_enabled") else set()
            extra = set(data or {}) - asked
            if extra:
                raise ApiError(400, {field: [f"Variables {sorted(extra)} provided, but this template cannot accept them."]})

    def _validate(self, coll: str, obj: dict):
        if coll == "credentials":
            ctype = self.store["credential_types"][obj["credential_type"]]
            fields = {f["id"]: f for f in ctype["inputs"]["fields"]}
            unknown = set(obj.get("inputs", {})) - set(fields)
            if unknown:
                raise ApiError(400, {"inputs": [f"Additional properties are not allowed ({sorted(unknown)})"]})
            for req in ctype["inputs"].get("required", []):
                if not obj.get("inputs", {}).get(req):
                    raise ApiError(400, {"inputs": {req: ["required for this credential type"]}})
            for key, value in obj.get("inputs", {}).items():
                if fields[key]["type"] == "boolean" and not isinstance(value, bool):
                    raise ApiError(400, {"inputs": {key: [f"{value!r} is not of type 'boolean'"]}})
        if coll == "credential_types":
            if obj.get("kind") not in ("cloud", "net"):
                raise ApiError(400, {"kind": ["Must be 'cloud' or 'net', not " + repr(obj.get("kind"))]})
            ids = {f["id"] for f in obj["inputs"]["fields"]}
            if not set(obj["inputs"].get("required", [])) <= ids:
                raise ApiError(400, {"inputs": ["required names an undefined field"]})
        if coll == "job_templates":
            for field, target in (("project", "projects"), ("inventory", "inventories"),
                                  ("execution_environment", "execution_environments")):
                self._ref(target, obj.get(field), field)
            if not str(obj.get("playbook", "")).startswith("playbooks/") or not obj["playbook"].endswith(".yml"):
                raise ApiError(400, {"playbook": ["Playbook not found for project."]})
            slices = obj.get("job_slice_count", 1)
            if not isinstance(slices, int) or isinstance(slices, bool) or slices < 0:
                raise ApiError(400, {"job_slice_count": ["A valid integer is required."]})
        if coll == "inventory_sources":
            self._ref("inventories", obj.get("inventory"), "inventory")
            if obj.get("source") == "scm":
                self._ref("projects", obj.get("source_project"), "source_project")
        if coll == "workflow_job_template_nodes":
            self._ref("workflow_job_templates", obj.get("workflow_job_template"), "workflow_job_template")
            self._launch_vars(obj.get("unified_job_template"), obj.get("extra_data"), "extra_data")
        if coll == "schedules":
            self._launch_vars(obj.get("unified_job_template"), obj.get("extra_data"), "extra_data")
            if not str(obj.get("rrule", "")).startswith("DTSTART"):
                raise ApiError(400, {"rrule": ["Valid DTSTART required in rrule."]})

    # ------------------------------------------------------------------ routing

    def handle(self, method: str, path: str, body: dict):
        parsed = urllib.parse.urlparse(path)
        assert parsed.path.startswith(API), path
        parts = [p for p in parsed.path[len(API):].split("/") if p]
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        if not parts or parts[0] in ("ping", "config", "me"):
            return 200, {"version": "24.6.1"}
        coll = parts[0]
        if len(parts) == 1:
            if method == "GET":
                return 200, self._list(coll, query)
            if method == "POST":
                obj = dict(body)
                self._validate(coll, obj)
                return 201, self._create(coll, obj)
        obj_id = int(parts[1])
        obj = self.store.get(coll, {}).get(obj_id)
        if obj is None:
            raise ApiError(404, {"detail": "Not found."})
        if len(parts) == 2:
            if method == "GET":
                return 200, obj
            if method == "PATCH":
                merged = dict(obj, **body)
                self._validate(coll, merged)
                obj.update(body)
                return 200, obj
            if method == "DELETE":
                del self.store[coll][obj_id]
                return 204, None
        sub = parts[2]
        if sub == "survey_spec":
            if method == "GET":
                return 200, self.survey(coll, obj_id)
            if method == "POST":
                errors = survey_errors(body)
                if errors:
                    raise ApiError(400, {"error": errors[0]})
                self.surveys[(coll, obj_id)] = body
                return 200, None
            if method == "DELETE":
                self.surveys.pop((coll, obj_id), None)
                return 200, None
        if sub == "update" and method == "POST":
            update = self._create("project_updates", {"status": "successful", "failed": False,
                                                       "finished": "2026-01-01T00:00:00Z", "scm_revision": "abc"})
            return 202, update
        if sub in ASSOCIATIONS.get(coll, []):
            key = (coll, obj_id, sub)
            if method == "GET":
                results = self.associated(coll, obj_id, sub)
                return 200, {"count": len(results), "next": None, "previous": None, "results": results}
            if method == "POST":
                ids = self.assoc.setdefault(key, [])
                if body.get("disassociate"):
                    ids.remove(body["id"])
                elif body["id"] not in ids:
                    ids.append(body["id"])
                return 204, None
        raise ApiError(405, {"detail": f"{method} {path} not supported by the fake"})

    def _list(self, coll: str, query: dict) -> dict:
        if coll == "unified_job_templates":
            candidates = [o for c in UNIFIED for o in self.objects(c)]
        else:
            candidates = self.objects(coll)
        query = {k: v for k, v in query.items() if k not in ("page_size", "page", "order_by")}

        def match(obj):
            for key, value in query.items():
                if str(obj.get(key)) != value:
                    return False
            return True

        results = [o for o in candidates if match(o)]
        return {"count": len(results), "next": None, "previous": None, "results": results}
