"""Authentication and RBAC authorization of the API emulator (specpilot_lab/apiserver/auth.py), as
kube-apiserver does them: the rule matchers on their own, then the server: 401 for no or an unknown
token, 403 in Kubernetes' words, TokenRequest, SelfSubjectAccessReview and kubectl against them."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from emulator_helpers import make_namespace

from specpilot_lab.apiserver import auth
from specpilot_lab.apiserver.server import write_kubeconfig

SA = auth.sa_user("ns1", "bot", "uid-1")


def attrs(verb="get", resource="pods", sub="", name="", ns="ns1", group="", user=SA) -> auth.Attributes:
    return auth.Attributes(
        user, verb, True, api_group=group, namespace=ns, resource=resource, subresource=sub, name=name
    )


# ------------------------------------------------------------------ rule matching, no server
@pytest.mark.parametrize(
    "rule, request_, allowed",
    [
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, attrs(), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, attrs(verb="deletecollection"), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}, attrs(), False),
        ({"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["get"]}, attrs(), False),
        (
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]},
            attrs(group="batch", resource="jobs"),
            True,
        ),
        # a subresource is its own resource: pods does not grant pods/log, and pods/log not pods
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, attrs(sub="log", name="p"), False),
        ({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}, attrs(sub="log", name="p"), True),
        ({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}, attrs(name="p"), False),
        ({"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]}, attrs(sub="log", name="p"), True),
        (
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
            attrs("create", sub="exec"),
            True,
        ),
        # resourceNames: only those names; a list (no name) is not one of them
        (
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get", "list"]},
            attrs(resource="secrets", name="a"),
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]},
            attrs(resource="secrets", name="b"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["list"]},
            attrs("list", resource="secrets"),
            False,
        ),
    ],
)
def test_rule_allows_as_rbac_does(rule, request_, allowed):
    assert auth.rule_allows(request_, rule) is allowed


@pytest.mark.parametrize(
    "urls, path, allowed",
    [
        (["/healthz"], "/healthz", True),
        (["/healthz"], "/healthz/etcd", False),
        (["/apis/*"], "/apis/apps/v1", True),
        (["/apis/*"], "/apis", False),
        (["*"], "/anything", True),
    ],
)
def test_non_resource_urls(urls, path, allowed):
    rule = {"nonResourceURLs": urls, "verbs": ["get"]}
    assert auth.rule_allows(auth.Attributes(SA, "get", False, path=path), rule) is allowed


def _authorizer(objects: dict) -> auth.Authorizer:
    def lookup(gr, ns):
        return [o for o in objects.get(gr[1], []) if o["metadata"].get("namespace", "") == ns]

    return auth.Authorizer(lookup)


def test_bindings_roles_and_cluster_roles():
    role = {
        "metadata": {"name": "r", "namespace": "ns1"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }
    view = {
        "metadata": {"name": "view"},
        "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]}],
    }
    objects = {
        "roles": [role],
        "clusterroles": [view],
        "rolebindings": [
            # a ServiceAccount subject without a namespace means the binding's
            {
                "metadata": {"name": "b1", "namespace": "ns1"},
                "roleRef": {"kind": "Role", "name": "r"},
                "subjects": [{"kind": "ServiceAccount", "name": "bot"}],
            },
            # a RoleBinding may grant a ClusterRole's rules, in its namespace only
            {
                "metadata": {"name": "b2", "namespace": "ns1"},
                "roleRef": {"kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "Group", "name": "system:serviceaccounts:ns1"}],
            },
            {
                "metadata": {"name": "b3", "namespace": "ns1"},
                "roleRef": {"kind": "Role", "name": "gone"},
                "subjects": [{"kind": "User", "name": SA.name}],
            },
        ],
    }
    authz = _authorizer(objects)
    assert authz.authorize(attrs()) == (
        True,
        'RBAC: allowed by RoleBinding "b1/ns1" of Role "r" to ServiceAccount "bot/ns1"',
    )
    assert authz.authorize(attrs("list", "jobs", group="batch"))[0] is True
    assert authz.authorize(attrs("list", "jobs", group="batch", ns="ns2"))[0] is False
    # what the authorizer met on the way is its reason, as rbac.go aggregates it
    assert authz.authorize(attrs("delete")) == (
        False,
        'RBAC: role.rbac.authorization.k8s.io "gone" not found',
    )
    other = auth.sa_user("ns2", "bot", "uid-2")
    assert authz.authorize(attrs(user=other)) == (False, "")
    assert authz.authorize(attrs("delete", "nodes", ns="", user=auth.ADMIN))[0] is True  # system:masters


def test_forbidden_messages_are_kubernetes_words():
    e = auth.forbidden(attrs("list", "secrets"))
    assert e.code == 403 and e.reason == "Forbidden"
    assert e.message == (
        'secrets is forbidden: User "system:serviceaccount:ns1:bot" cannot list resource "secrets" '
        'in API group "" in the namespace "ns1"'
    )
    e = auth.forbidden(attrs("get", "jobs", sub="status", name="j", group="batch"))
    assert e.message == (
        'jobs.batch "j" is forbidden: User "system:serviceaccount:ns1:bot" cannot get resource '
        '"jobs/status" in API group "batch" in the namespace "ns1"'
    )
    assert e.status()["details"] == {"name": "j", "group": "batch", "kind": "jobs"}
    e = auth.forbidden(attrs("get", "nodes", ns=""))
    assert e.message.endswith('cannot get resource "nodes" in API group "" at the cluster scope')
    e = auth.forbidden(auth.Attributes(SA, "get", False, path="/metrics"))
    assert e.message == 'forbidden: User "system:serviceaccount:ns1:bot" cannot get path "/metrics"'


# ------------------------------------------------------------------ the server
def test_anonymous_and_unknown_tokens_get_401(emulator):
    for token in (None, "not-a-token", auth.ADMIN_TOKEN + "x"):
        r = emulator.request("GET", "/api/v1/namespaces/default/secrets", token=token)
        assert r.status == 401, r
        assert r.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
    assert emulator.request("POST", "/_lab/reset", token=None).status == 401  # the control API too
    assert emulator.request("GET", "/readyz", token=None).status == 200  # health checks stay open
    assert emulator.request("GET", "/api/v1/namespaces/default/secrets").status == 200  # the lab admin


def _sa_token(emu, ns: str, name: str, **spec) -> str:
    assert (
        emu.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": name}}).status
        == 201
    )
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token", {"spec": spec})
    assert r.status == 201, r
    body = r.json()
    assert body["kind"] == "TokenRequest" and body["status"]["expirationTimestamp"]
    return body["status"]["token"]


def test_service_account_tokens_rbac_and_access_reviews(emulator):
    ns = make_namespace(emulator)
    token = _sa_token(emulator, ns, "bot")
    r = emulator.request("GET", f"/api/v1/namespaces/{ns}/pods", token=token)
    assert r.status == 403 and r.json()["message"] == (
        f'pods is forbidden: User "system:serviceaccount:{ns}:bot" cannot list resource "pods" '
        f'in API group "" in the namespace "{ns}"'
    )
    role = {
        "metadata": {"name": "logs"},
        "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}],
    }
    binding = {
        "metadata": {"name": "logs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "logs"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": ns}],
    }
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    assert emulator.request("POST", f"{rbac}/roles", role).status == 201
    assert emulator.request("POST", f"{rbac}/rolebindings", binding).status == 201
    assert emulator.request("GET", f"/api/v1/namespaces/{ns}/pods", token=token).status == 200
    assert emulator.request("GET", f"/api/v1/namespaces/{ns}/secrets", token=token).status == 403
    assert emulator.request("GET", "/api/v1/namespaces/default/pods", token=token).status == 403
    assert emulator.request("GET", "/apis", token=token).status == 200  # system:discovery
    assert emulator.request("GET", "/_lab/info", token=token).status == 403  # the control API is admin's

    def review(**res) -> dict:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": res},
        }
        r = emulator.request(
            "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body, token=token
        )
        assert r.status == 201, r
        return r.json()["status"]

    assert review(namespace=ns, verb="get", resource="pods", subresource="log")["allowed"] is True
    assert review(namespace=ns, verb="create", resource="pods", subresource="exec") == {"allowed": False}
    who = emulator.request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {}, token=token
    ).json()
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:bot"
    assert set(who["status"]["userInfo"]["groups"]) == {
        "system:serviceaccounts",
        f"system:serviceaccounts:{ns}",
        "system:authenticated",
    }

    # a token dies with its ServiceAccount; one for another audience is not the API server's
    other = _sa_token(emulator, ns, "aud", audiences=["vault"])
    assert emulator.request("GET", "/apis", token=other).status == 401
    assert emulator.request("DELETE", f"/api/v1/namespaces/{ns}/serviceaccounts/bot").status == 200
    assert emulator.request("GET", f"/api/v1/namespaces/{ns}/pods", token=token).status == 401
    r = emulator.request(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/aud/token", {"spec": {"expirationSeconds": 60}}
    )
    assert r.status == 422 and "may not specify a duration less than 10 minutes" in r.json()["message"]


KUBECTL = shutil.which("kubectl")


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl")
def test_kubectl_create_token_and_auth_can_i(emulator):
    """kubectl sends a kubeconfig's token only over TLS: the lab's kubeconfig names https://."""
    ns = make_namespace(emulator)
    env = emulator.env

    def kubectl(*args: str, kubeconfig=None) -> subprocess.CompletedProcess:
        e = dict(env, KUBECONFIG=str(kubeconfig or emulator.kubeconfig))
        return subprocess.run([KUBECTL, "-n", ns, *args], env=e, capture_output=True, text=True, timeout=60)

    assert kubectl("create", "serviceaccount", "bot").returncode == 0
    made = kubectl("create", "token", "bot")
    if "unknown command" in made.stderr:  # kubectl before 1.24: the same TokenRequest, by hand
        path = f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token"
        token = emulator.request("POST", path, {"spec": {}}).json()["status"]["token"]
    else:
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()
    kc = write_kubeconfig(
        emulator.state_dir / f"{ns}-bot.kubeconfig",
        emulator.url.replace("http://", "https://"),
        ns,
        token=token,
        user="bot",
        ca_file=emulator.state_dir / "apiserver.crt",
    )
    assert kubectl("auth", "can-i", "list", "pods", kubeconfig=kc).stdout.strip() == "no"
    denied = kubectl("get", "secrets", kubeconfig=kc)
    assert denied.returncode != 0 and (
        f'User "system:serviceaccount:{ns}:bot" cannot list resource "secrets" in API group "" in the namespace "{ns}"'
        in denied.stderr
    )
    assert (
        kubectl(
            "create",
            "rolebinding",
            "bot-view",
            "--clusterrole=system:basic-user",
            f"--serviceaccount={ns}:bot",
        ).returncode
        == 0
    )
    assert kubectl("create", "role", "pods", "--verb=get,list", "--resource=pods").returncode == 0
    assert (
        kubectl("create", "rolebinding", "bot-pods", "--role=pods", f"--serviceaccount={ns}:bot").returncode
        == 0
    )
    assert kubectl("auth", "can-i", "list", "pods", kubeconfig=kc).stdout.strip() == "yes"
    assert kubectl("get", "pods", kubeconfig=kc).returncode == 0


# ------------------------------------------------------------------ impersonation
def test_impersonation_is_authorized_per_name(emulator):
    ns = make_namespace(emulator)
    token = _sa_token(emulator, ns, "ops")
    configmaps = f"/api/v1/namespaces/{ns}/configmaps"
    cluster_rbac = "/apis/rbac.authorization.k8s.io/v1"
    # reader may list ConfigMaps in ns; ops may impersonate reader (and nobody else) and the group viewers
    assert emulator.request("POST", f"{cluster_rbac}/namespaces/{ns}/roles", _role("cm", ["get", "list"])).status == 201
    assert emulator.request("POST", f"{cluster_rbac}/namespaces/{ns}/rolebindings", _binding("cm", "Role", "cm", [
        {"kind": "User", "name": "reader"}])).status == 201
    impersonator = {
        "metadata": {"name": f"{ns}-impersonate"},
        "rules": [
            {"apiGroups": [""], "resources": ["users"], "resourceNames": ["reader"], "verbs": ["impersonate"]},
            {"apiGroups": [""], "resources": ["groups"], "resourceNames": ["viewers"], "verbs": ["impersonate"]},
        ],
    }
    assert emulator.request("POST", f"{cluster_rbac}/clusterroles", impersonator).status == 201
    binding = _binding(f"{ns}-impersonate", "ClusterRole", f"{ns}-impersonate", [
        {"kind": "ServiceAccount", "name": "ops", "namespace": ns}])
    assert emulator.request("POST", f"{cluster_rbac}/clusterrolebindings", binding).status == 201

    assert emulator.request("GET", configmaps, token=token).status == 403  # ops itself may not
    r = emulator.request("GET", configmaps, token=token, headers={"Impersonate-User": "reader"})
    assert r.status == 200, r
    r = emulator.request("GET", configmaps, token=token, headers={"Impersonate-User": "admin"})
    assert r.status == 403 and r.json()["message"] == (
        f'users "admin" is forbidden: User "system:serviceaccount:{ns}:ops" cannot impersonate resource "users" '
        'in API group "" at the cluster scope'
    )
    r = emulator.request("GET", configmaps, token=token, headers={"Impersonate-Group": "viewers"})
    assert r.status == 400 and r.json()["message"] == "requested [{Group viewers}] without impersonating a user"
    who = emulator.request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {}, token=token,
        headers={"Impersonate-User": "reader", "Impersonate-Group": "viewers"},
    ).json()["status"]["userInfo"]
    assert (who["username"], sorted(who["groups"])) == ("reader", ["system:authenticated", "viewers"])
    r = emulator.request(
        "GET", configmaps, token=token, headers={"Impersonate-User": "reader", "Impersonate-Group": "admins"}
    )
    assert r.status == 403 and 'cannot impersonate resource "groups"' in r.json()["message"]


def _role(name: str, verbs: list[str]) -> dict:
    return {"metadata": {"name": name}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]}


def _binding(name: str, kind: str, role: str, subjects: list[dict]) -> dict:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": subjects,
    }


def test_the_connection_options_pass_impersonation_through(emulator, tmp_path):
    """impersonate_user set once in module_defaults reaches the API from kubernetes.core's lookup (k8s_read),
    from kubernetes.core's get_api_client in the worker (k8s_retry's apply) and from a kubernetes.core module:
    without it the ServiceAccount is refused; with it each call runs as the user it may impersonate."""
    import json

    import yaml
    from test_kubernetes_core import playbook_proc

    ns = make_namespace(emulator)
    token = _sa_token(emulator, ns, "ops")
    cluster_rbac = "/apis/rbac.authorization.k8s.io/v1"
    assert emulator.request("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "seen"}}).status == 201
    verbs = ["get", "list", "create", "patch"]
    assert emulator.request("POST", f"{cluster_rbac}/namespaces/{ns}/roles", _role("cm", verbs)).status == 201
    assert emulator.request("POST", f"{cluster_rbac}/namespaces/{ns}/rolebindings", _binding("cm", "Role", "cm", [
        {"kind": "User", "name": "deployer"}])).status == 201
    impersonator = {
        "metadata": {"name": f"{ns}-impersonate"},
        "rules": [{"apiGroups": [""], "resources": ["users"], "resourceNames": ["deployer"], "verbs": ["impersonate"]}],
    }
    assert emulator.request("POST", f"{cluster_rbac}/clusterroles", impersonator).status == 201
    binding = _binding(f"{ns}-impersonate", "ClusterRole", f"{ns}-impersonate", [
        {"kind": "ServiceAccount", "name": "ops", "namespace": ns}])
    assert emulator.request("POST", f"{cluster_rbac}/clusterrolebindings", binding).status == 201

    # the ServiceAccount's kubeconfig (kubernetes.core keeps a kubeconfig's token over api_key)
    kubeconfig = yaml.safe_load(emulator.kubeconfig.read_text())
    for entry in kubeconfig["users"]:
        entry["user"] = {"token": token}
    (tmp_path / "ops.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    answers = {}
    for as_user in ("", "deployer"):
        out = tmp_path / f"answers-{as_user or 'none'}.json"
        extra = {"ns": ns, "kubeconfig": str(tmp_path / "ops.kubeconfig"), "as_user": as_user, "out": str(out)}
        proc = playbook_proc(emulator, tmp_path, "impersonate.yml", extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        answers[as_user] = json.loads(out.read_text())
    refused = answers[""]
    for task in ("read", "apply", "info"):
        assert refused[task]["failed"] is True, (task, refused[task])
        assert f"system:serviceaccount:{ns}:ops" in str(refused[task]), (task, refused[task])
    allowed = answers["deployer"]
    assert [task for task in ("read", "apply", "info") if allowed[task].get("failed")] == [], allowed
    assert [o["metadata"]["name"] for o in allowed["read"]["resources"]] == ["seen"]
    assert [o["metadata"]["name"] for o in allowed["info"]["resources"]] == ["seen"]
    written = emulator.request("GET", f"/api/v1/namespaces/{ns}/configmaps/written").json()
    assert written["data"] == {"by": "impersonation"}
    assert [m["manager"] for m in written["metadata"]["managedFields"]] == ["specpilot"]
    log = [e for e in emulator.control.requests() if e.get("user") == "deployer" and e.get("namespace") == ns]
    assert {e["verb"] for e in log} >= {"get", "patch"}
