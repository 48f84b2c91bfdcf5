"""HTTP front end: routing, content negotiation, watch and log streaming, the /_lab control API."""

from __future__ import annotations

import base64
import json
import logging
import os
import select
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from .. import podexec, podlogs
from . import auth, auth_api, control_state, errors, tls
from .core import Cluster, DeleteOptions, Result, WriteOptions, _md
from .discovery import Discovery, version_info
from .errors import ApiError
from .resources import ResourceType
from .selection import parse_field_selector, parse_label_selector
from .tables import TableMaker, parse_include_object, partial_metadata
from .util import dumps, parse_time

log = logging.getLogger("specpilot_lab.apiserver")
access_log = logging.getLogger("specpilot_lab.apiserver.access")

MAX_BODY = 3 * 1024 * 1024
WATCH_DEFAULT_TIMEOUT = 1800
PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass
class ReqInfo:
    api: bool = False
    group: str = ""
    version: str = ""
    namespace: str | None = None
    resource: str = ""
    name: str = ""
    subresource: str = ""
    watch_path: bool = False
    verb: str = ""


class ClientGone(Exception):
    pass


def parse_api_path(path: str) -> ReqInfo | None:
    """Kubernetes' RequestInfo for /api and /apis paths (None for other paths)."""
    parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
    info = ReqInfo()
    if not parts:
        return None
    if parts[0] == "api":
        if len(parts) < 2:
            return None
        info.version = parts[1]
        rest = parts[2:]
    elif parts[0] == "apis":
        if len(parts) < 3:
            return None
        info.group, info.version = parts[1], parts[2]
        rest = parts[3:]
    else:
        return None
    info.api = True
    if not rest:
        return info
    if rest[0] == "watch":
        info.watch_path = True
        rest = rest[1:]
    if len(rest) >= 2 and rest[0] == "namespaces":
        info.namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
        else:
            info.resource = "namespaces"
            info.name = rest[1]
            info.namespace = None
            info.subresource = rest[2] if len(rest) > 2 else ""
            return info
    if not rest:
        return info
    info.resource = rest[0]
    if len(rest) > 1:
        info.name = rest[1]
    if len(rest) > 2:
        info.subresource = rest[2]
    if len(rest) > 3:
        info.resource = ""  # too deep: not found
        info.name = "/".join(rest)
    return info


def _opens_tls(sock: socket.socket) -> bool:
    try:
        sock.settimeout(30)
        first = sock.recv(1, socket.MSG_PEEK)
        sock.settimeout(None)
    except OSError:
        return False
    return first[:1] == bytes([tls.TLS_HANDSHAKE])


def _truthy(v: str | None) -> bool:
    return (v or "").lower() in ("1", "true", "yes")


class APIServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self, cluster: Cluster, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ):
        self.cluster = cluster
        self.tls = tls
        self.ca_file: str | os.PathLike | None = None  # the serving certificate, when tls
        self.discovery = Discovery(cluster)
        self.requests = control_state.RequestLog()
        self.faults = control_state.FaultInjector()
        self.shutting_down = threading.Event()
        self.bookmark_interval = 5.0
        self.authn = auth.Authenticator(lambda ns, name: cluster.store.get(("", "serviceaccounts"), ns, name))
        self.authz = auth.Authorizer(cluster.store.list)
        super().__init__((host, port), Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.port}"

    @property
    def https_url(self) -> str:
        """The same port over TLS (what kubeconfigs name: kubectl sends tokens only over TLS)."""
        return f"https://{self.server_address[0]}:{self.port}"

    def finish_request(self, request: socket.socket, client_address: Any) -> None:
        """TLS and plain HTTP on one port: a connection that opens with a TLS handshake is wrapped."""
        if self.tls is None or not _opens_tls(request):
            super().finish_request(request, client_address)
            return
        try:
            conn = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def reset(self) -> None:
        self.faults.clear()
        self.cluster.reset()
        self.requests.clear()

    def server_close(self) -> None:
        self.shutting_down.set()
        self.cluster.close()
        with self.cluster.store.cond:
            self.cluster.store.cond.notify_all()
        super().server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: APIServer
    server_version = "specpilot-lab-apiserver"
    sys_version = ""

    # quiet default logging; we log ourselves
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_OPTIONS(self) -> None:
        self._handle("OPTIONS")

    # ------------------------------------------------------------------ plumbing
    def _handle(self, method: str) -> None:
        self._started = time.monotonic()
        self._code = 0
        self._warnings: list[str] = []
        self._streamed = False
        url = urlsplit(self.path)
        self._path = url.path
        self._raw_query = url.query
        self._query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        self._query_lists = parse_qs(url.query, keep_blank_values=True)
        self._method = method
        self._recorded = False
        self._info: ReqInfo | None = None
        self._user: auth.User | None = None
        self._writes_before = self.server.cluster.store.writes_by_this_thread()
        try:
            try:
                self._body = self._read_body()
            except ApiError:
                self._body = b""
                raise
            self._user = self._authorize(method)
            if self._path.startswith("/_lab"):
                self._control(method)
                return
            self._dispatch(method)
        except ApiError as exc:
            self._send_status(exc)
        except (BrokenPipeError, ConnectionResetError, ClientGone):
            self.close_connection = True
        except Exception as exc:  # never leave a client without an answer
            log.exception("internal error on %s %s", method, self.path)
            try:
                self._send_status(errors.internal_error(f"{type(exc).__name__}: {exc}"))
            except OSError:
                self.close_connection = True
        finally:
            self._log_request()

    def _authorize(self, method: str) -> auth.User:
        """Authentication, then authorization (the real filter chain's order): 401 or 403 before routing,
        so a user without access learns nothing about what exists."""
        user = self.server.authn.authenticate(self.headers.get("Authorization"), self._path)
        self._user = user
        user = self.server.authz.impersonate(
            user, self.headers.get("Impersonate-User"), self.headers.get_all("Impersonate-Group") or []
        )
        self._user = user
        self.server.authz.check(self._attributes(user, method))
        return user

    def _attributes(self, user: auth.User, method: str) -> auth.Attributes:
        """RequestInfoFactory.NewRequestInfo: a resource request, or a non-resource one (discovery, the
        lab's /_lab, /healthz ...) with the lower-cased method as its verb."""
        info = parse_api_path(self._path.rstrip("/") or "/")
        if info is None or not info.resource:
            return auth.Attributes(user, method.lower(), False, path=self._path)
        info.verb = _verb(method, info, self._query)
        if info.verb in ("list", "watch") and not info.name:
            # a list or watch of one object by field selector is authorized as that name
            info.name = _single_name(self._query.get("fieldSelector", ""))
        self._info = info
        namespace = info.name if info.resource == "namespaces" else info.namespace
        return auth.Attributes(
            user,
            info.verb,
            True,
            path=self._path,
            api_group=info.group,
            api_version=info.version,
            namespace=namespace or "",
            resource=info.resource,
            subresource=info.subresource,
            name=info.name,
        )

    def _read_body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            total = 0
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
                total += size
                if total > MAX_BODY:
                    raise errors.request_entity_too_large(f"limit is {MAX_BODY}")
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.rfile.read(length)
            raise errors.request_entity_too_large(f"limit is {MAX_BODY}")
        return self.rfile.read(length) if length else b""

    def _log_request(self) -> None:
        dur = (time.monotonic() - self._started) * 1000
        access_log.info(
            "%s %s %s %d %.1fms %s",
            self.client_address[0],
            self._method,
            self.path,
            self._code,
            dur,
            self.headers.get("User-Agent", ""),
        )
        self._record_request()

    def _record_request(self) -> None:
        """Add this request to the control API's request log, once.

        Called just before the response goes out (and again, as a no-op, when the handler
        ends), so a client that has its answer always finds the request in the log.
        """
        if self._recorded or self._path.startswith("/_lab"):
            return
        self._recorded = True
        info = self._info
        q = self._query
        self.server.requests.add(
            {
                "time": time.time(),
                "method": self._method,
                "path": self._path,
                "query": self._raw_query,
                "verb": info.verb if info else "",
                "group": info.group if info else "",
                "version": info.version if info else "",
                "resource": info.resource if info else "",
                "subresource": info.subresource if info else "",
                "namespace": (info.namespace or "") if info else "",
                "name": info.name if info else "",
                "content_type": self.headers.get("Content-Type", ""),
                "dry_run": "All" in self._query_lists.get("dryRun", []) or self._body_dry_run(),
                "field_manager": q.get("fieldManager", ""),
                "user_agent": self.headers.get("User-Agent", ""),
                "user": self._user.name if self._user else "",
                "code": self._code,
                # True when this request changed stored state (a no-op patch or a dry run does not)
                "mutated": self.server.cluster.store.writes_by_this_thread() > self._writes_before,
            }
        )

    def _body_dry_run(self) -> bool:
        if self._method != "DELETE" or not getattr(self, "_body", b""):
            return False
        try:
            body = json.loads(self._body)
        except ValueError:
            return False
        return isinstance(body, dict) and "All" in (body.get("dryRun") or [])

    def _send(
        self, code: int, body: bytes, content_type: str = "application/json", headers: dict | None = None
    ) -> None:
        self._code = code
        self._record_request()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("X-Kubernetes-Pf-Flowschema-Uid", "f3f2f4f6-0000-4000-8000-000000000001")
        self.send_header("X-Kubernetes-Pf-Prioritylevel-Uid", "f3f2f4f6-0000-4000-8000-000000000002")
        for w in self._warnings:
            self.send_header("Warning", "299 - " + json.dumps(w))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self._method != "HEAD":
            self.wfile.write(body)

    def _send_obj(self, code: int, obj: Any) -> None:
        accept = self.headers.get("Accept", "") or ""
        if _wants_yaml(accept):
            body = yaml.dump(obj, Dumper=_YAML_DUMPER, default_flow_style=False, sort_keys=False).encode()
            self._send(code, body, "application/yaml")
            return
        if _truthy(self._query.get("pretty")):
            self._send(code, json.dumps(obj, indent=2, ensure_ascii=False).encode() + b"\n")
        else:
            self._send(code, dumps(obj))

    def _send_status(self, exc: ApiError) -> None:
        if self._streamed:
            self.close_connection = True
            return
        self._send(exc.code, dumps(exc.status()), headers=exc.headers)

    def _start_stream(self, content_type: str) -> None:
        self._code = 200
        self._streamed = True
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        for w in self._warnings:
            self.send_header("Warning", "299 - " + json.dumps(w))
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        if not data:
            return
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if r:
                # peek below TLS (an SSLSocket cannot): no bytes left means the client closed
                with socket.socket(fileno=os.dup(self.connection.fileno())) as raw:
                    data = raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                return data == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True
        return False

    # ------------------------------------------------------------------ body decoding
    def _content_type(self) -> str:
        return (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()

    def _decode_body(self, allow_yaml: bool = True) -> Any:
        ct = self._content_type()
        raw = self._body
        if not raw:
            return None
        if ct in ("", "application/json", "*/*", "text/plain") or ct.endswith("+json"):
            try:
                return json.loads(raw)
            except ValueError as exc:
                raise errors.bad_request(f"json: {exc}") from None
        if ct == "application/vnd.kubernetes.protobuf":
            from .protobuf import decode_object

            return decode_object(raw)
        if ct in ("application/yaml", "application/x-yaml", "text/yaml", "application/apply-patch+yaml"):
            try:
                return yaml.load(raw, Loader=_YAML_LOADER)
            except yaml.YAMLError as exc:
                raise errors.bad_request(f"error converting YAML to JSON: {exc}") from None
        raise errors.unsupported_media_type(
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json, application/yaml"
        )

    # ------------------------------------------------------------------ dispatch
    def _dispatch(self, method: str) -> None:
        path = self._path.rstrip("/") or "/"
        accept = self.headers.get("Accept", "") or ""
        if path in ("/healthz", "/readyz", "/livez") or path.startswith(("/healthz/", "/readyz/", "/livez/")):
            self._send(200, b"ok", "text/plain; charset=utf-8")
            return
        if path == "/version":
            self._send_obj(200, version_info())
            return
        if path == "/openapi/v2":
            if "protobuf" in accept:
                self._send(
                    200,
                    self.server.discovery.get("/openapi/v2#pb") or b"",
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                )
            else:
                self._send(200, self.server.discovery.get("/openapi/v2") or b"{}")
            return
        if path == "/openapi/v3":
            self._send(200, self.server.discovery.get("/openapi/v3") or b"{}")
            return
        if path.startswith("/openapi/v3/"):
            doc = self.server.discovery.openapi_v3(path[len("/openapi/v3/") :])
            if doc is None:
                self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
            else:
                self._send(200, doc)
            return
        if path in ("/api", "/apis"):
            self._send(200, self.server.discovery.get(path) or b"{}")
            return
        if path.startswith("/apis/") and path.count("/") == 2:
            doc = self.server.discovery.get(path)
            if doc is None:
                raise errors.resource_not_found()
            self._send(200, doc)
            return
        info = parse_api_path(path)
        if info is None:
            if path == "/":
                self._send_obj(
                    200,
                    {
                        "paths": [
                            "/api",
                            "/api/v1",
                            "/apis",
                            "/healthz",
                            "/livez",
                            "/openapi/v2",
                            "/openapi/v3",
                            "/readyz",
                            "/version",
                        ]
                    },
                )
                return
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
            return
        self._info = info
        cluster = self.server.cluster
        if not info.resource and not info.name:
            key = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
            doc = self.server.discovery.get(key)
            if doc is None:
                if info.group and self.server.discovery.get(f"/apis/{info.group}") is not None:
                    raise errors.resource_not_found()
                self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
                return
            self._send(200, doc)
            return
        rt = cluster.find(info.group, info.version, info.resource) if info.resource else None
        if rt is None:
            info.verb = _verb(method, info, self._query)
            raise errors.resource_not_found()
        if info.namespace is not None and not rt.namespaced:
            raise errors.resource_not_found()
        info.verb = _verb(method, info, self._query)
        if info.subresource and info.subresource not in rt.subresources:
            raise errors.resource_not_found()
        self._fault(info)
        if info.subresource == "exec":
            self._pod_exec(rt, info)
            return
        handler = {
            "get": self._get,
            "list": self._list,
            "watch": self._watch,
            "create": self._create,
            "update": self._update,
            "patch": self._patch,
            "delete": self._delete,
            "deletecollection": self._deletecollection,
        }.get(info.verb)
        if handler is None:
            raise errors.method_not_allowed()
        base_verb = info.verb
        if not info.subresource and base_verb not in rt.verbs:
            raise errors.method_not_allowed()
        if (
            info.subresource
            and base_verb not in rt.subresources.get(info.subresource, [])
            and not (info.subresource == "log" and base_verb == "get")
        ):
            raise errors.method_not_allowed()
        if (
            rt.namespaced
            and info.namespace is None
            and base_verb in ("get", "update", "patch", "delete", "create")
        ):
            raise errors.resource_not_found() if base_verb != "create" else errors.method_not_allowed()
        handler(rt, info)

    def _fault(self, info: ReqInfo) -> None:
        delay, err = self.server.faults.check(
            info.verb, info.group, info.resource, info.subresource, info.namespace or "", info.name
        )
        control_state.sleep(delay)
        if err is not None:
            if err.code == 409 and not info.name:
                body = self._peek_name()
                err = errors.modified_conflict(info.resource, info.group, body) if body else err
            raise err

    def _peek_name(self) -> str:
        try:
            body = self._decode_body()
        except ApiError:
            return ""
        return str(_md(body).get("name") or "") if isinstance(body, dict) else ""

    # ------------------------------------------------------------------ options
    def _write_opts(self) -> WriteOptions:
        q = self._query
        dry = self._query_lists.get("dryRun", [])
        for d in dry:
            if d not in ("All", ""):
                raise errors.bad_request(f'Invalid dryRun value: "{d}"; only "All" is supported')
        fv = q.get("fieldValidation", "") or "Warn"
        if fv not in ("Ignore", "Warn", "Strict"):
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{fv}": supported values: ' '"Ignore", "Strict", "Warn"'
            )
        fm = q.get("fieldManager") or None
        if fm and len(fm) > 128:
            raise errors.ApiError(422, "Invalid", f"fieldManager: Too long: must have at most 128 bytes")
        force = q.get("force")
        return WriteOptions(
            dry_run="All" in dry,
            field_manager=fm,
            field_validation=fv,
            force=_truthy(force),
            user_agent=self.headers.get("User-Agent", ""),
        )

    def _selectors(self):
        return (
            parse_label_selector(self._query.get("labelSelector")),
            parse_field_selector(self._query.get("fieldSelector")),
        )

    def _respond(self, rt: ResourceType, res: Result) -> None:
        self._warnings.extend(res.warnings)
        obj = res.obj
        if isinstance(obj, dict) and obj.get("kind") == rt.kind:
            obj = self.server.cluster.view(rt, obj)
        self._send_obj(res.code, obj)

    # ------------------------------------------------------------------ reads
    def _output_mode(self) -> tuple[str, str]:
        """('table'|'partial'|'object', includeObject)."""
        accept = self.headers.get("Accept", "") or ""
        for part in accept.split(","):
            params = {}
            bits = [b.strip() for b in part.split(";")]
            for b in bits[1:]:
                k, _, v = b.partition("=")
                params[k.strip()] = v.strip()
            if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
                return "table", parse_include_object(self._query.get("includeObject"))
            if (
                params.get("as") in ("PartialObjectMetadata", "PartialObjectMetadataList")
                and params.get("g") == "meta.k8s.io"
            ):
                return "partial", ""
        if accept and all(
            p.split(";")[0].strip() == "application/vnd.kubernetes.protobuf" for p in accept.split(",")
        ):
            raise errors.not_acceptable(
                "only the following media types are accepted: application/json, " "application/yaml"
            )
        return "object", ""

    def _get(self, rt: ResourceType, info: ReqInfo) -> None:
        cluster = self.server.cluster
        if info.subresource == "log":
            self._pod_log(rt, info)
            return
        if info.subresource == "scale":
            self._send_obj(200, cluster.get_scale(rt, info.namespace, info.name))
            return
        obj = cluster.view(rt, cluster.get(rt, info.namespace, info.name))
        mode, include = self._output_mode()
        if mode == "table":
            table = TableMaker(rt).table(
                [obj], include, {"resourceVersion": _md(obj).get("resourceVersion", "")}
            )
            self._send_obj(200, table)
        elif mode == "partial":
            self._send_obj(200, partial_metadata(obj))
        else:
            self._send_obj(200, obj)

    def _list(self, rt: ResourceType, info: ReqInfo) -> None:
        cluster = self.server.cluster
        labels, fields = self._selectors()
        ns = info.namespace
        if rt.namespaced and ns is None and fields:
            ns = fields.exact("metadata.namespace")
        objs, rv = cluster.list(rt, ns, labels, fields)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        limit = self._query.get("limit")
        cont = self._query.get("continue")
        if cont:
            try:
                token = json.loads(base64.urlsafe_b64decode(cont.encode() + b"==="))
                start = (token["ns"], token["name"])
                meta["resourceVersion"] = str(token.get("rv", rv))
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request("continue key is not valid: illegal base64 data") from None
            objs = [o for o in objs if ((_md(o).get("namespace") or ""), _md(o).get("name", "")) > start]
        if limit:
            try:
                n = int(limit)
            except ValueError:
                raise errors.bad_request(f"invalid limit {limit!r}") from None
            if 0 < n < len(objs):
                last = objs[n - 1]
                remaining = len(objs) - n
                objs = objs[:n]
                token = {
                    "rv": int(meta["resourceVersion"]),
                    "ns": _md(last).get("namespace") or "",
                    "name": _md(last).get("name", ""),
                }
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")
                meta["remainingItemCount"] = remaining
        objs = [cluster.view(rt, o) for o in objs]
        mode, include = self._output_mode()
        if mode == "table":
            self._send_obj(200, TableMaker(rt).table(objs, include, meta))
        elif mode == "partial":
            self._send_obj(
                200,
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                    "items": [partial_metadata(o) for o in objs],
                },
            )
        else:
            self._send_obj(
                200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": objs}
            )

    # ------------------------------------------------------------------ writes
    def _create(self, rt: ResourceType, info: ReqInfo) -> None:
        opts = self._write_opts()
        body = self._decode_body()
        review = auth_api.CREATE_ONLY.get((rt.group, rt.plural, info.subresource))
        if review is not None:
            self._send_obj(201, review(self.server, self._user, info.namespace or "", info.name, body))
            return
        res = self.server.cluster.create(rt, info.namespace, body, opts, info.subresource or None, info.name)
        self._respond(rt, res)

    def _update(self, rt: ResourceType, info: ReqInfo) -> None:
        opts = self._write_opts()
        body = self._decode_body()
        res = self.server.cluster.update(rt, info.namespace, info.name, body, opts, info.subresource or None)
        self.server.cluster.after_mutation()
        self._respond(rt, res)

    def _patch(self, rt: ResourceType, info: ReqInfo) -> None:
        ct = self._content_type()
        ptype = PATCH_TYPES.get(ct)
        if ptype is None:
            raise errors.unsupported_media_type(
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(PATCH_TYPES)}"
                if not rt.is_custom
                else errors.UNSUPPORTED_PATCH_CR
            )
        if ptype == "strategic" and rt.is_custom:
            raise errors.unsupported_media_type(errors.UNSUPPORTED_PATCH_CR)
        opts = self._write_opts()
        if ptype == "apply":
            try:
                body = yaml.load(self._body, Loader=_YAML_LOADER) if self._body else None
            except yaml.YAMLError as exc:
                raise errors.bad_request(f"error decoding YAML: {exc}") from None
        else:
            if not self._body:
                raise errors.bad_request("the body of the request was empty")
            try:
                body = json.loads(self._body)
            except ValueError as exc:
                raise errors.bad_request(f"error decoding patch: {exc}") from None
        res = self.server.cluster.patch(
            rt, info.namespace, info.name, body, ptype, opts, info.subresource or None
        )
        self.server.cluster.after_mutation()
        self._respond(rt, res)

    def _delete_opts(self) -> DeleteOptions:
        q = self._query
        body: Any = None
        if self._body:
            try:
                body = self._decode_body()
            except ApiError:
                body = None
        body = body if isinstance(body, dict) else {}
        dry = list(self._query_lists.get("dryRun", [])) + list(body.get("dryRun") or [])
        for d in dry:
            if d not in ("All", ""):
                raise errors.bad_request(f'Invalid dryRun value: "{d}"; only "All" is supported')
        policy = q.get("propagationPolicy") or body.get("propagationPolicy")
        orphan = q.get("orphanDependents")
        if orphan is None and "orphanDependents" in body:
            orphan = str(body.get("orphanDependents")).lower()
        if policy is None and orphan is not None:
            policy = "Orphan" if _truthy(orphan) else "Background"
        if policy not in (None, "Background", "Foreground", "Orphan"):
            raise errors.ApiError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                f'Unsupported value: "{policy}": supported values: "Foreground", '
                f'"Background", "Orphan", "nil"',
            )
        pre = body.get("preconditions") or {}
        grace = q.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
        return DeleteOptions(
            dry_run="All" in dry,
            propagation=policy,
            grace_period=int(grace) if grace not in (None, "") else None,
            precondition_uid=pre.get("uid"),
            precondition_rv=pre.get("resourceVersion"),
        )

    def _delete(self, rt: ResourceType, info: ReqInfo) -> None:
        if info.subresource:
            raise errors.method_not_allowed()
        res = self.server.cluster.delete(rt, info.namespace, info.name, self._delete_opts())
        self._respond(rt, res)

    def _deletecollection(self, rt: ResourceType, info: ReqInfo) -> None:
        labels, fields = self._selectors()
        res = self.server.cluster.delete_collection(rt, info.namespace, labels, fields, self._delete_opts())
        self._respond(rt, res)

    # ------------------------------------------------------------------ watch
    def _watch(self, rt: ResourceType, info: ReqInfo) -> None:
        cluster = self.server.cluster
        store = cluster.store
        labels, fields = self._selectors()
        q = self._query
        ns = info.namespace if rt.namespaced else None
        if info.name:
            from .selection import FieldTerm

            fields.terms.append(FieldTerm("metadata.name", "=", info.name))
        try:
            timeout = float(q.get("timeoutSeconds") or 0) or WATCH_DEFAULT_TIMEOUT  # 0 = server default
        except ValueError:
            raise errors.bad_request("invalid timeoutSeconds") from None
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        send_initial = _truthy(q.get("sendInitialEvents"))
        rv_param = q.get("resourceVersion", "")
        mode, include = self._output_mode()
        table = TableMaker(rt) if mode == "table" else None
        gr = rt.group_resource
        generation = store.generation
        with store.lock:
            current = store.rv
            initial: list[dict] = []
            if rv_param in ("", "0") or send_initial:
                initial = [o for o in store.list(gr, ns) if cluster.matches(o, labels, fields)]
                cursor = current
                if rv_param not in ("", "0") and send_initial:
                    cursor = current
            else:
                try:
                    cursor = int(rv_param)
                except ValueError:
                    raise errors.bad_request(f'invalid resource version: "{rv_param}"') from None
                too_old = store.too_old(cursor)
        self._start_stream("application/json")
        first = [True]

        def emit(etype: str, obj: dict) -> None:
            if table is not None and etype in ("ADDED", "MODIFIED", "DELETED"):
                payload = table.table(
                    [obj], include, {"resourceVersion": _md(obj).get("resourceVersion", "")}, headers=first[0]
                )
                first[0] = False
            elif mode == "partial" and etype in ("ADDED", "MODIFIED", "DELETED"):
                payload = partial_metadata(obj)
            else:
                payload = obj
            self._chunk(dumps({"type": etype, "object": payload}) + b"\n")

        deadline = time.monotonic() + max(timeout, 0)
        try:
            if rv_param not in ("", "0") and not send_initial and too_old:
                status = errors.gone(
                    f"too old resource version: {cursor} ({store.compacted_rv + 1})"
                ).status()
                self._chunk(dumps({"type": "ERROR", "object": status}) + b"\n")
                self._end_stream()
                return
            for obj in initial:
                emit("ADDED", cluster.view(rt, obj))
            if send_initial and bookmarks:
                self._chunk(
                    dumps(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": rt.kind,
                                "apiVersion": rt.api_version,
                                "metadata": {
                                    "resourceVersion": str(cursor),
                                    "annotations": {"k8s.io/initial-events-end": "true"},
                                },
                            },
                        }
                    )
                    + b"\n"
                )
            last_sent = time.monotonic()
            while not self.server.shutting_down.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if store.generation != generation:
                    break
                events = store.events_after(cursor)
                if not events:
                    if self._client_gone():
                        raise ClientGone()
                    if bookmarks and time.monotonic() - last_sent > self.server.bookmark_interval:
                        self._chunk(
                            dumps(
                                {
                                    "type": "BOOKMARK",
                                    "object": {
                                        "kind": rt.kind,
                                        "apiVersion": rt.api_version,
                                        "metadata": {"resourceVersion": str(cursor)},
                                    },
                                }
                            )
                            + b"\n"
                        )
                        last_sent = time.monotonic()
                    with store.cond:
                        if not store.events_after(cursor) and store.generation == generation:
                            store.cond.wait(min(remaining, 1.0))
                    continue
                for ev in events:
                    cursor = ev.rv
                    if ev.gr != gr or (ns is not None and ev.namespace != ns):
                        continue
                    new_ok = cluster.matches(ev.obj, labels, fields)
                    old_ok = ev.old is not None and cluster.matches(ev.old, labels, fields)
                    if ev.type == "ADDED":
                        if new_ok:
                            emit("ADDED", cluster.view(rt, ev.obj))
                    elif ev.type == "MODIFIED":
                        if new_ok and old_ok:
                            emit("MODIFIED", cluster.view(rt, ev.obj))
                        elif new_ok:
                            emit("ADDED", cluster.view(rt, ev.obj))
                        elif old_ok:
                            gone = dict(ev.old)
                            gone["metadata"] = dict(ev.old["metadata"])
                            gone["metadata"]["resourceVersion"] = str(ev.rv)
                            emit("DELETED", cluster.view(rt, gone))
                    elif ev.type == "DELETED":
                        if cluster.matches(ev.obj, labels, fields):
                            emit("DELETED", cluster.view(rt, ev.obj))
                    last_sent = time.monotonic()
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError, ClientGone):
            self.close_connection = True

    # ------------------------------------------------------------------ pod exec
    def _pod_exec(self, rt: ResourceType, info: ReqInfo) -> None:
        """pods/exec over WebSocket or SPDY/3.1 (podexec.py): the command runs in the running container."""
        if rt.group_resource != ("", "pods"):
            raise errors.resource_not_found()
        pod = self.server.cluster.get(rt, info.namespace, info.name)
        command = self._query_lists.get("command") or []
        if not command:
            raise errors.bad_request("you must specify at least 1 command")
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        container = self._query.get("container") or (names[0] if names else "")
        if container not in names:
            raise errors.bad_request(f"container {container} is not valid for pod {info.name}")
        upgrade = (self.headers.get("Upgrade") or "").lower()
        over_spdy = "spdy/3.1" in upgrade and "upgrade" in (self.headers.get("Connection") or "").lower()
        if upgrade != "websocket" and not over_spdy:
            raise errors.bad_request("Upgrade request required")
        opened = self._exec_spdy_upgrade() if over_spdy else self._exec_websocket_upgrade()
        where = podexec.target(self.server.cluster.state_dir, info.namespace or "", info.name, container)
        if where is None:
            raise errors.bad_request(f'unable to upgrade connection: container not found ("{container}")')
        self._code = 101
        self._streamed = True
        self._record_request()
        wire = opened()
        self.close_connection = True
        if wire is not None:
            podexec.run(wire, where, command, _truthy(self._query.get("stdin")))

    def _switch_protocols(self, headers: list[tuple[str, str]]) -> None:
        self.send_response(101)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def _exec_websocket_upgrade(self):
        """The checks of a WebSocket exec; returns what answers 101 and opens the wire."""
        protocol = podexec.choose_protocol(self.headers.get("Sec-WebSocket-Protocol"))
        if protocol is None:
            raise errors.bad_request(
                "unable to upgrade connection: none of the offered subprotocols is supported (%s)"
                % ", ".join(podexec.PROTOCOLS)
            )

        def opened() -> podexec.WebSocketWire:
            key = podexec.accept_key(self.headers.get("Sec-WebSocket-Key", ""))
            self._switch_protocols(
                [
                    ("Upgrade", "websocket"),
                    ("Connection", "Upgrade"),
                    ("Sec-WebSocket-Accept", key),
                    ("Sec-WebSocket-Protocol", protocol),
                ]
            )
            wire = podexec.WebSocketWire(self.rfile, self.wfile)
            wire.open()
            return wire

        return opened

    def _exec_spdy_upgrade(self):
        """The checks of a SPDY exec (apimachinery httpstream.Handshake, the kubelet's NewOptions);
        returns what answers 101 (spdy upgrade.go UpgradeResponse) and waits for the client's streams."""
        offered = self.headers.get_all("X-Stream-Protocol-Version") or []
        protocol = podexec.spdy_protocol(offered)
        if not offered:
            raise errors.bad_request("unable to upgrade: X-Stream-Protocol-Version is required")
        if protocol is None:
            raise errors.ApiError(
                403,
                "Forbidden",
                "unable to upgrade: unable to negotiate protocol: client supports %s, server accepts %s"
                % (offered, list(podexec.SPDY_PROTOCOLS)),
                headers={"X-Accepted-Stream-Protocol-Versions": ", ".join(podexec.SPDY_PROTOCOLS)},
            )
        q = self._query
        tty = _truthy(q.get("tty"))
        flags = [_truthy(q.get(k)) for k in ("stdin", "stdout")] + [_truthy(q.get("stderr")) and not tty]
        if not any(flags):
            raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")

        def opened() -> podexec.SpdyWire | None:
            self._switch_protocols(
                [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"), ("X-Stream-Protocol-Version", protocol)]
            )
            wire = podexec.SpdyWire(self.rfile, self.wfile, protocol)
            return wire if wire.open(podexec.spdy_streams(protocol, *flags, tty)) else None

        return opened

    # ------------------------------------------------------------------ pod logs
    def _pod_log(self, rt: ResourceType, info: ReqInfo) -> None:
        if rt.group_resource != ("", "pods"):
            raise errors.resource_not_found()
        cluster = self.server.cluster
        q = self._query
        pod = cluster.get(rt, info.namespace, info.name)
        previous = _truthy(q.get("previous"))
        follow = _truthy(q.get("follow"))
        timestamps = _truthy(q.get("timestamps"))

        def int_param(key: str) -> int | None:
            v = q.get(key)
            if v in (None, ""):
                return None
            try:
                n = int(v)
            except ValueError:
                raise errors.bad_request(f'{key}: Invalid value: "{v}": must be an integer') from None
            return n

        tail = int_param("tailLines")
        since_seconds = int_param("sinceSeconds")
        limit_bytes = int_param("limitBytes")
        since_time = q.get("sinceTime")
        if since_seconds is not None and since_time:
            raise errors.ApiError(
                422,
                "Invalid",
                'PodLogOptions "" is invalid: []: Forbidden: at most one of '
                "`sinceTime` or `sinceSeconds` may be specified",
            )
        errs = []
        if tail is not None and tail < 0:
            errs.append("tailLines: Invalid value: %d: must be greater than or equal to 0" % tail)
        if since_seconds is not None and since_seconds < 1:
            errs.append("sinceSeconds: Invalid value: %d: must be greater than 0" % since_seconds)
        if limit_bytes is not None and limit_bytes < 1:
            errs.append("limitBytes: Invalid value: %d: must be greater than 0" % limit_bytes)
        if errs:
            raise errors.ApiError(
                422,
                "Invalid",
                'PodLogOptions "" is invalid: '
                + (errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"),
            )
        cutoff = None
        if since_seconds is not None:
            cutoff = time.time() - since_seconds
        elif since_time:
            cutoff = parse_time(since_time)
            if cutoff is None:
                raise errors.bad_request(f'sinceTime: Invalid value: "{since_time}": must be RFC3339')
        container = q.get("container") or None
        path = cluster.pod_log_path(info.namespace or "", pod, container, previous)
        if container is None:
            container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")

        def render(line: str) -> bytes | None:
            ts, text = podlogs.split_line(line)
            if cutoff is not None:
                t = podlogs.parse_timestamp(ts)
                if t is not None and t < cutoff:
                    return None
            return (line if timestamps else text).encode() + b"\n"

        data = b""
        offset = 0
        ino = None
        if path is not None:
            with open(path, "rb") as fh:
                raw = fh.read()
                ino = os.fstat(fh.fileno()).st_ino
            complete_len = raw.rfind(b"\n") + 1
            offset = complete_len
            lines = raw[:complete_len].decode("utf-8", errors="replace").splitlines()
            rendered = [r for r in (render(ln) for ln in lines) if r is not None]
            if tail is not None:
                rendered = rendered[-tail:] if tail > 0 else []
            data = b"".join(rendered)
        if limit_bytes is not None:
            data = data[:limit_bytes]
        if not follow or previous:
            self._send(200, data, "text/plain")
            return
        self._start_stream("text/plain")
        sent = len(data)
        try:
            self._chunk(data)
            ns = info.namespace or ""
            idle_since = time.monotonic()
            while not self.server.shutting_down.is_set():
                if limit_bytes is not None and sent >= limit_bytes:
                    break
                cur_pod = cluster.store.get(rt.group_resource, ns, info.name)
                if cur_pod is None or _md(cur_pod).get("uid") != _md(pod).get("uid"):
                    break
                p = podlogs.log_path(cluster.state_dir, ns, info.name, container)
                new_data = b""
                if p.exists():
                    with open(p, "rb") as fh:
                        st = os.fstat(fh.fileno())
                        if ino is not None and st.st_ino != ino:
                            break  # the container restarted: this stream belongs to the old one
                        if ino is None:
                            ino = st.st_ino
                        fh.seek(offset)
                        chunk = fh.read()
                    complete_len = chunk.rfind(b"\n") + 1
                    if complete_len:
                        offset += complete_len
                        lines = chunk[:complete_len].decode("utf-8", errors="replace").splitlines()
                        new_data = b"".join(r for r in (render(ln) for ln in lines) if r is not None)
                if new_data:
                    if limit_bytes is not None:
                        new_data = new_data[: max(0, limit_bytes - sent)]
                    self._chunk(new_data)
                    sent += len(new_data)
                    idle_since = time.monotonic()
                    continue
                if cluster.container_finished(cur_pod, container) and time.monotonic() - idle_since > 0.3:
                    break
                if self._client_gone():
                    raise ClientGone()
                time.sleep(0.1)
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError, ClientGone):
            self.close_connection = True

    # ------------------------------------------------------------------ /_lab control API
    def _control(self, method: str) -> None:
        path = self._path.rstrip("/")
        srv = self.server
        body = None
        if self._body:
            try:
                body = json.loads(self._body)
            except ValueError:
                raise errors.bad_request("control API bodies are JSON") from None
        if path == "/_lab/requests":
            if method == "GET":
                since = int(self._query.get("since") or 0)
                self._send_obj(200, srv.requests.query(since))
                return
            if method == "DELETE":
                self._send_obj(200, srv.requests.clear())
                return
        elif path == "/_lab/faults":
            if method == "GET":
                self._send_obj(200, srv.faults.list())
                return
            if method == "POST":
                rules = body if isinstance(body, list) else [body]
                added = [srv.faults.add(r) for r in rules]
                self._send_obj(201, added[0] if not isinstance(body, list) else {"items": added})
                return
            if method == "DELETE":
                self._send_obj(200, srv.faults.clear())
                return
        elif path.startswith("/_lab/faults/") and method == "DELETE":
            try:
                rid = int(path.rsplit("/", 1)[1])
            except ValueError:
                raise errors.bad_request("fault ids are integers") from None
            self._send_obj(200, srv.faults.remove(rid))
            return
        elif path == "/_lab/reset" and method == "POST":
            srv.reset()
            self._send_obj(200, {"reset": True, "resourceVersion": str(srv.cluster.store.rv)})
            return
        elif path == "/_lab/info" and method == "GET":
            self._send_obj(
                200,
                {
                    "url": srv.url,
                    "port": srv.port,
                    "pid": os.getpid(),
                    "stateDir": str(srv.cluster.state_dir),
                    "resourceVersion": str(srv.cluster.store.rv),
                    "version": version_info()["gitVersion"],
                },
            )
            return
        raise ApiError(404, "NotFound", f"no control endpoint {method} {path}")


def _verb(method: str, info: ReqInfo, query: dict) -> str:
    if info.subresource == "exec" and method in ("GET", "POST"):
        # a WebSocket exec is a GET; Kubernetes >= 1.31 (AuthorizePodWebsocketUpgradeCreatePermission)
        # also requires create on pods/exec for it, which is what a Role has to grant either way
        return "create"
    if method in ("GET", "HEAD"):
        if info.watch_path or _truthy(query.get("watch")):
            return "watch"
        return "get" if info.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if info.name else "deletecollection"
    return method.lower()


def _single_name(field_selector: str) -> str:
    """``metadata.name=X`` (or ``==``) in a field selector, as RequestInfoFactory reads it for list/watch."""
    for term in field_selector.split(","):
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if sep and key.strip() == "metadata.name" and not key.endswith("!"):
            return value.strip()
    return ""


def _wants_yaml(accept: str) -> bool:
    if not accept:
        return False
    first = accept.split(",")[0].split(";")[0].strip()
    return first in ("application/yaml", "application/x-yaml", "text/yaml")
