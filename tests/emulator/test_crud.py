"""CRUD at every URL form, namespaces, names, errors with real Status bodies."""

from __future__ import annotations

import pytest
from emulator_helpers import ADMIN_HEADERS, make_namespace, unique, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(crds=[], name="crud")


@pytest.fixture(scope="module")
def core(emu):
    return client.CoreV1Api(emu.api_client())


def cm(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_boot_namespaces_and_default_service_accounts(emu, core):
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    ns = core.read_namespace("default")
    assert ns.status.phase == "Active"
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == "default"
    assert core.read_namespaced_service_account("default", "kube-system").metadata.name == "default"


def test_namespace_object_at_every_url_form(emu):
    name = unique("nsforms")
    r = emu.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    assert r.status == 201 and r.json()["metadata"]["name"] == name
    got = emu.request("GET", f"/api/v1/namespaces/{name}").json()
    assert got["kind"] == "Namespace" and got["status"]["phase"] == "Active"
    got["metadata"]["labels"]["team"] = "a"
    r = emu.request("PUT", f"/api/v1/namespaces/{name}", got)
    assert r.status == 200 and r.json()["metadata"]["labels"]["team"] == "a"
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{name}",
        {"metadata": {"labels": {"team": "b"}}},
        content_type="application/merge-patch+json",
    )
    assert r.status == 200 and r.json()["metadata"]["labels"]["team"] == "b"
    r = emu.request("GET", f"/api/v1/namespaces/{name}/status")
    assert r.status == 200 and r.json()["metadata"]["name"] == name
    r = emu.request("DELETE", f"/api/v1/namespaces/{name}")
    assert r.status == 200 and r.json()["status"]["phase"] == "Terminating"
    wait_for(lambda: emu.request("GET", f"/api/v1/namespaces/{name}").status == 404)


def test_configmap_crud_with_the_python_client(emu, core):
    ns = make_namespace(emu)
    created = core.create_namespaced_config_map(ns, cm("one", a="1"))
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    assert core.read_namespaced_config_map("one", ns).data == {"a": "1"}
    created.data["b"] = "2"
    replaced = core.replace_namespaced_config_map("one", ns, created)
    assert replaced.data == {"a": "1", "b": "2"}
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    status = core.delete_namespaced_config_map("one", ns)  # the v37 client returns the Status as a dict
    assert status["status"] == "Success" and status["details"]["name"] == "one"
    assert status["details"]["kind"] == "configmaps" and status["details"]["uid"] == created.metadata.uid
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map("one", ns)
    assert e.value.status == 404


def test_not_found_and_already_exists_bodies(emu):
    ns = make_namespace(emu)
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/missing")
    assert r.status == 404
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "missing" not found',
        "reason": "NotFound",
        "details": {"name": "missing", "kind": "configmaps"},
        "code": 404,
    }
    r = emu.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/nope")
    assert r.json()["message"] == 'deployments.apps "nope" not found'
    assert r.json()["details"] == {"name": "nope", "group": "apps", "kind": "deployments"}
    assert emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("dup")).status == 201
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("dup"))
    assert r.status == 409 and r.json()["reason"] == "AlreadyExists"
    assert r.json()["message"] == 'configmaps "dup" already exists'


def test_writes_into_a_missing_namespace_are_404(emu):
    r = emu.request("POST", "/api/v1/namespaces/ghost/configmaps", cm("x"))
    assert r.status == 404
    assert r.json()["message"] == 'namespaces "ghost" not found'
    assert r.json()["details"] == {"name": "ghost", "kind": "namespaces"}
    r = emu.request(
        "PATCH",
        "/api/v1/namespaces/ghost/configmaps/x?fieldManager=t",
        cm("x"),
        content_type="application/apply-patch+yaml",
    )
    assert r.status == 404 and r.json()["message"] == 'namespaces "ghost" not found'


def test_put_of_a_missing_object_is_404(emu):
    ns = make_namespace(emu)
    r = emu.request("PUT", f"/api/v1/namespaces/{ns}/configmaps/nothere", cm("nothere"))
    assert r.status == 404 and r.json()["message"] == 'configmaps "nothere" not found'


def test_cluster_scoped_objects(emu):
    name = unique("reader")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }
    r = emu.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    assert r.status == 201 and "namespace" not in r.json()["metadata"]
    got = emu.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}").json()
    assert got["rules"][0]["verbs"] == ["get"]
    lst = emu.request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles").json()
    assert lst["kind"] == "ClusterRoleList" and name in {i["metadata"]["name"] for i in lst["items"]}
    assert emu.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}").status == 200
    # a cluster-scoped kind under a namespace path does not exist
    assert (
        emu.request(
            "GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/default/clusterroles/{name}"
        ).status
        == 404
    )


def test_all_namespaces_lists(emu, core):
    a, b = make_namespace(emu, "alla"), make_namespace(emu, "allb")
    core.create_namespaced_config_map(a, cm("shared-name"))
    core.create_namespaced_config_map(b, cm("shared-name"))
    items = core.list_config_map_for_all_namespaces(field_selector="metadata.name=shared-name").items
    assert {(i.metadata.namespace, i.metadata.name) for i in items} == {
        (a, "shared-name"),
        (b, "shared-name"),
    }
    lst = emu.request("GET", "/api/v1/configmaps").json()
    assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1"


def test_name_validation(emu):
    ns = make_namespace(emu)
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("Bad_Name"))
    assert r.status == 422
    body = r.json()
    assert body["reason"] == "Invalid"
    assert body["message"].startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
        "a lowercase RFC 1123 subdomain"
    )
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    # namespaces are DNS labels: no dots
    r = emu.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}}
    )
    assert r.status == 422 and "RFC 1123 label" in r.json()["message"]
    # services are DNS-1035 labels: no leading digit
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "1svc"},
        "spec": {"ports": [{"port": 80}]},
    }
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/services", svc)
    assert r.status == 422 and "DNS-1035" in r.json()["message"]
    r = emu.request(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}},
    )
    assert r.status == 422
    assert "metadata.name: Required value: name or generateName is required" in r.json()["message"]


def test_generate_name(emu):
    ns = make_namespace(emu)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}}
    names = set()
    for _ in range(3):
        r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body)
        assert r.status == 201
        name = r.json()["metadata"]["name"]
        assert name.startswith("gen-") and len(name) == len("gen-") + 5
        assert r.json()["metadata"]["generateName"] == "gen-"
        names.add(name)
    assert len(names) == 3


def test_annotations_size_limit(emu):
    ns = make_namespace(emu)
    big = cm("big")
    big["metadata"]["annotations"] = {"x": "a" * 262145}
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", big)
    assert r.status == 422
    assert r.json()["message"] == (
        'ConfigMap "big" is invalid: metadata.annotations: Too long: ' "must have at most 262144 bytes"
    )
    big["metadata"]["annotations"] = {"x": "a" * 1000}
    assert emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", big).status == 201


def test_label_validation(emu):
    ns = make_namespace(emu)
    bad = cm("badlabel")
    bad["metadata"]["labels"] = {"ok": "has space"}
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", bad)
    assert r.status == 422 and 'metadata.labels: Invalid value: "has space"' in r.json()["message"]


def test_namespace_deletion_removes_contents_then_the_namespace(emu, core):
    ns = make_namespace(emu, "doomed")
    core.create_namespaced_config_map(ns, cm("a"))
    held = cm("held")
    held["metadata"]["finalizers"] = ["lab.specpilot.dev/hold"]
    core.create_namespaced_config_map(ns, held)
    r = emu.request("DELETE", f"/api/v1/namespaces/{ns}")
    assert r.status == 200 and r.json()["status"]["phase"] == "Terminating"
    assert r.json()["metadata"]["deletionTimestamp"]
    # plain content is gone, the finalized one waits; the namespace stays Terminating
    wait_for(lambda: emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/a").status == 404)
    got = core.read_namespaced_config_map("held", ns)
    assert got.metadata.deletion_timestamp is not None
    assert core.read_namespace(ns).status.phase == "Terminating"
    # no new content in a terminating namespace
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("late"))
    assert r.status == 403 and "because it is being terminated" in r.json()["message"]
    # releasing the finalizer lets the namespace go
    core.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})
    wait_for(lambda: emu.request("GET", f"/api/v1/namespaces/{ns}").status == 404)


def test_secret_string_data_becomes_data(emu, core):
    ns = make_namespace(emu)
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"token": "abc"}}
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/secrets", body)
    assert r.status == 201
    got = r.json()
    assert got["data"] == {"token": "YWJj"} and "stringData" not in got and got["type"] == "Opaque"


def test_builtin_defaults_and_create_time_status(emu):
    ns = make_namespace(emu)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }
    got = emu.request("POST", f"/api/v1/namespaces/{ns}/pods", pod).json()
    assert got["status"]["phase"] == "Pending"
    assert (
        got["spec"]["restartPolicy"] == "Always"
        and got["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    )
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "img:1"}]},
            },
        },
    }
    got = emu.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", dep).json()
    assert got["spec"]["replicas"] == 1 and got["metadata"]["generation"] == 1
    assert got["spec"]["strategy"]["type"] == "RollingUpdate"
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc"},
        "spec": {"selector": {"app": "d"}, "ports": [{"port": 80}]},
    }
    got = emu.request("POST", f"/api/v1/namespaces/{ns}/services", svc).json()
    assert got["spec"]["clusterIP"].startswith("10.96.") and got["spec"]["ports"][0]["targetPort"] == 80
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bad"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "y"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    r = emu.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", bad)
    assert r.status == 422 and "`selector` does not match template `labels`" in r.json()["message"]


def test_body_and_url_must_agree(emu):
    ns = make_namespace(emu)
    other = cm("x")
    other["metadata"]["namespace"] = "elsewhere"
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", other)
    assert r.status == 400
    assert r.json()["message"] == (
        "the namespace of the provided object does not match the namespace sent " "on the request"
    )
    assert emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("y")).status == 201
    r = emu.request("PUT", f"/api/v1/namespaces/{ns}/configmaps/y", cm("z"))
    assert r.status == 400 and "does not match the name on the URL" in r.json()["message"]
    wrong = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "w"}}
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", wrong)
    assert r.status == 400


def test_keep_alive_and_yaml_output(emu):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=10)
    for _ in range(3):
        conn.request("GET", "/api/v1/namespaces/default", headers=ADMIN_HEADERS)
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read()
    conn.close()
    r = emu.request("GET", "/api/v1/namespaces/default", accept="application/yaml")
    assert r.header("Content-Type") == "application/yaml" and b"kind: Namespace" in r.body


def test_pod_spec_is_immutable_except_images_and_binding_assigns_a_node(emu):
    ns = make_namespace(emu)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "img:1", "args": ["--a"]}]},
    }
    assert emu.request("POST", f"/api/v1/namespaces/{ns}/pods", pod).status == 201
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/p",
        {"spec": {"containers": [{"name": "c", "image": "img:2"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert r.status == 200 and r.json()["spec"]["containers"][0]["image"] == "img:2"
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/p",
        {"spec": {"containers": [{"name": "c", "args": ["--b"]}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert r.status == 422 and "pod updates may not change fields other than" in r.json()["message"]
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/p",
        {"spec": {"nodeName": "n1"}},
        content_type="application/merge-patch+json",
    )
    assert r.status == 422
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "lab-node"},
    }
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/pods/p/binding", binding)
    assert r.status == 201 and r.json()["status"] == "Success"
    got = emu.request("GET", f"/api/v1/namespaces/{ns}/pods/p").json()
    assert got["spec"]["nodeName"] == "lab-node"
    assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in got["status"]["conditions"])
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/pods/p/binding", binding)
    assert r.status == 409 and 'already assigned to node "lab-node"' in r.json()["message"]
