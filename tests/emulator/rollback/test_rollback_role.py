"""playbooks/rollback.yml against the API emulator, the test playing KServe (deploy's FakeKServe).

Checked on the stored objects: off removes the speculative args (server-side apply by deploy's
field manager), records the live revision in deploy's format, waits for the new rollout, releases
deploy's lock; a second run writes nothing (changed=0, no new pod); restore re-applies the recorded
predictor byte-for-byte; check mode writes nothing; a missing service fails clearly or is skipped;
(20% injected API faults: tests/emulator/test_fault_matrix.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from deploy_helpers import (
    DRAFT,
    NGRAM,
    ROOT,
    VENV_BIN,
    FakeKServe,
    Run,
    ansible_env,
    create_namespace,
    get,
    hold_deploy_lock,
    run_deploy,
    write_inventory,
)  # noqa: E402
from markdown_cells import unpadded

pytestmark = pytest.mark.slow

ISVC_API = "serving.kserve.io/v1beta1"
PLAYBOOK = "playbooks/rollback.yml"
GROUP = {
    "specpilot_rollback_smoke": False,
    "specpilot_rollback_wait_delay": 0.5,
    "specpilot_rollback_wait_timeout": 60,
    "specpilot_rollback_api_retries": 8,
}


def _rollback(emu, tmp, inv, *args, timeout=600) -> Run:
    return Run(
        emu, tmp, inv, "-e", "specpilot_rollback_report_dir=%s" % (tmp / "reports"), *args, playbook=PLAYBOOK
    ).wait(timeout)


def _ok(run: Run) -> None:
    assert run.rc == 0, run.out[-6000:]


def _isvc(emu, ns, name="svc"):
    return get(emu, ISVC_API, "InferenceService", name, ns)


def _pods(emu, ns, name="svc"):
    return [
        p["metadata"]["name"]
        for p in emu.dynamic_client()
        .resources.get(api_version="v1", kind="Pod")
        .get(namespace=ns, label_selector=f"serving.kserve.io/inferenceservice={name}")
        .to_dict()["items"]
    ]


def _history_reads(emu, mark, ns, name="svc"):
    """GETs of the service's history ConfigMap since ``mark``."""
    return sum(
        1
        for e in emu.control.requests(mark)
        if e["method"] == "GET" and e["resource"] == "configmaps" and e["name"] == "%s-specpilot-history" % name
        and e["namespace"] == ns
    )


def _spec_args(args):
    return [a for a in args if "speculative" in a or "ngram" in a]


def _setup(emu, tmp, ns, group=None):
    create_namespace(emu, ns)
    inv = write_inventory(
        tmp / "inv", ns, {"svc": {"specpilot_speculative": NGRAM}}, dict(GROUP, **(group or {}))
    )
    with FakeKServe(emu, ns):
        _ok(run_deploy(emu, tmp, inv))
    return inv


def _aside(tmp_path):
    """The report directory of a run that must leave nothing behind (not the one whose history is counted)."""
    return "specpilot_rollback_report_dir=%s" % (tmp_path / "reports-aside")


def _check_mode_writes_nothing(emulator, tmp_path, inv, ns, before):
    """--check --diff on the deployed service: the diff names the speculative config, nothing is written (the
    server-side dry runs excepted). (A test of its own once, with a deploy of its own.)"""
    mark = emulator.control.mark()
    run = _rollback(emulator, tmp_path, inv, "--check", "--diff", "-e", _aside(tmp_path))
    _ok(run)
    assert [
        w for w in emulator.control.writes(since=mark) if not w.get("dry_run")
    ] == [], emulator.control.writes(since=mark)
    assert _isvc(emulator, ns)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "speculative-config" in run.out and "would change" in run.out


def _a_lock_held_by_a_deploy_fails_fast(emulator, tmp_path, inv, ns):
    """A deploy holds the service's lock: the rollback fails at once naming the holder, and writes nothing.
    The lock is then removed, as its holder would. (A test of its own once, with a deploy of its own.)"""
    leases = hold_deploy_lock(emulator, ns, "svc", "alice@ci/deploy")
    mark = emulator.control.mark()
    run = _rollback(emulator, tmp_path, inv, "-e", _aside(tmp_path))
    assert run.rc != 0 and "held by alice@ci/deploy" in run.out, run.out[-3000:]
    assert emulator.control.writes(since=mark) == []
    assert _spec_args(_isvc(emulator, ns)["spec"]["predictor"]["model"]["args"])
    leases.delete(name="specpilot-deploy-svc", namespace=ns)


def test_off_then_rerun_then_restore(emulator, tmp_path):
    ns = "rb-main"
    inv = _setup(emulator, tmp_path, ns)
    deployed = _isvc(emulator, ns)
    on_predictor = deployed["spec"]["predictor"]
    on_args = on_predictor["model"]["args"]
    assert _spec_args(on_args)
    _check_mode_writes_nothing(emulator, tmp_path, inv, ns, deployed)
    _a_lock_held_by_a_deploy_fails_fast(emulator, tmp_path, inv, ns)

    with FakeKServe(emulator, ns):
        mark = emulator.control.mark()
        first = _rollback(emulator, tmp_path, inv)
        _ok(first)
        # issue 40: the service's objects are read by the play's one-read steps (read.yml's, and lock.yml's under the
        # lock), and the per-service tasks take them from there instead of reading again: the history ConfigMap is
        # read by those two and by the record's apply (which reads what it patches): 3 GETs, not 5
        assert _history_reads(emulator, mark, ns) == 3, first.out[-3000:]
        assert "svc: off, rolled back, ready" in first.out, first.out[-3000:]
        isvc = _isvc(emulator, ns)
        args = isvc["spec"]["predictor"]["model"]["args"]
        assert _spec_args(args) == []
        assert args == [a for a in on_args if not _spec_args([a])]  # other args untouched, same order
        anns = isvc["metadata"]["annotations"]
        record = json.loads(anns["specpilot.io/previous-revision"])
        assert (
            record["predictor"] == on_predictor
            and record["digest"] == deployed["metadata"]["annotations"]["specpilot.io/spec-digest"]
        )
        assert anns["specpilot.io/spec-digest"] != record["digest"]
        assert any(
            m["manager"] == "specpilot" and m["operation"] == "Apply"
            for m in isvc["metadata"]["managedFields"]
        )
        history = json.loads(
            get(emulator, "v1", "ConfigMap", "svc-specpilot-history", ns)["data"]["revisions.json"]
        )
        assert history[-1]["predictor"] == on_predictor
        assert (
            get(emulator, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", ns) is None
        )  # released
        dep = get(emulator, "apps/v1", "Deployment", "svc-predictor", ns)
        assert _spec_args(dep["spec"]["template"]["spec"]["containers"][0]["args"]) == []
        report = json.loads((tmp_path / "reports" / "svc.json").read_text())
        assert report["changed"] and report["before"]["speculative"] and report["after"]["speculative"] == []
        assert report["verification"]["ok"] and report["rollout"]["done"]
        assert "| speculative args |" in unpadded((tmp_path / "reports" / "svc.md").read_text())

    # the same again (KServe paused, so that every write would be the rollback's): nothing written, no new pod
    pods = _pods(emulator, ns)
    mark = emulator.control.mark()
    again = _rollback(emulator, tmp_path, inv)
    _ok(again)
    assert _history_reads(emulator, mark, ns) == 1  # the one read, verified on it
    assert again.recap()["svc"]["changed"] == 0, again.changed_tasks()
    assert emulator.control.writes(since=mark) == []
    assert _pods(emulator, ns) == pods
    assert "svc: off, unchanged, ready" in again.out
    # issue 39: the second rollback's report ("nothing to change") leaves the first one's in place
    history = tmp_path / "reports" / "history" / "svc"
    records = sorted(p for p in history.iterdir() if p.name != "latest")
    assert len(records) == 2, records
    kept = [json.loads((r / "svc.json").read_text()) for r in records]
    assert [r["changed"] for r in kept] == [True, False]
    assert (history / "latest").resolve() == records[1].resolve()
    assert json.loads((tmp_path / "reports" / "svc.json").read_text()) == kept[1]
    run = kept[1]["run"]
    assert run["command"].startswith("ansible-playbook ") and "rollback.yml" in run["command"], run
    assert run["version"].startswith("0.") and run["id"] != kept[0]["run"]["id"]
    assert "Run `%s`" % run["id"] in (records[1] / "svc.md").read_text()

    with FakeKServe(emulator, ns):
        # restore: the recorded predictor, byte for byte
        restored_run = _rollback(emulator, tmp_path, inv, "-e", "specpilot_rollback_mode=restore")
        _ok(restored_run)
        restored = _isvc(emulator, ns)
        assert json.dumps(restored["spec"]["predictor"], sort_keys=True) == json.dumps(
            on_predictor, sort_keys=True
        )
        assert restored["spec"]["predictor"] == record["predictor"]
        assert restored["metadata"]["annotations"]["specpilot.io/spec-digest"] == record["digest"]
        assert "specpilot.io/rollback" not in restored["metadata"]["annotations"]

    mark = emulator.control.mark()
    restore_again = _rollback(emulator, tmp_path, inv, "-e", "specpilot_rollback_mode=restore")
    _ok(restore_again)
    assert restore_again.recap()["svc"]["changed"] == 0, restore_again.changed_tasks()
    assert emulator.control.writes(since=mark) == []

    # deploy after restore: in sync, nothing to write
    mark = emulator.control.mark()
    redeploy = run_deploy(emulator, tmp_path, inv)
    _ok(redeploy)
    assert emulator.control.writes(since=mark) == [], redeploy.out[-3000:]


def test_missing_service_fails_clearly_or_is_skipped(emulator, tmp_path):
    ns = "rb-missing"
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {"ghost": {"specpilot_speculative": NGRAM}}, GROUP)
    run = _rollback(emulator, tmp_path, inv)
    assert run.rc != 0
    assert "InferenceService rb-missing/ghost not found" in run.out
    ok = _rollback(emulator, tmp_path, inv, "-e", "specpilot_rollback_missing_ok=true")
    _ok(ok)
    assert "ghost: skipped (no InferenceService)" in ok.out
    assert ok.recap()["ghost"]["changed"] == 0


# ------------------------------------------------------------------ option B draft reclaim


def _resolves(ref):
    import subprocess

    import staging_support as ss

    creds = f"{ss.REGISTRY_USER}:{ss.REGISTRY_PASSWORD}"
    proc = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", "--creds", creds, f"docker://{ref}"],
        capture_output=True,
    )
    return (proc.returncode == 0, proc.stdout)


def _auth_registry_available():
    import staging_support as ss

    return ss.AuthRegistry.available()


@pytest.mark.skipif(
    not shutil.which("skopeo") or not shutil.which("docker-registry") or not _auth_registry_available(),
    reason="skopeo, docker-registry and bcrypt are needed (make installs them)",
)
def test_option_b_repoints_to_the_modelcar_without_the_draft_in_the_same_apply(emulator, tmp_path):
    """With registry credentials from the staging role's variables (never shown, even at -vvv)."""
    import hashlib

    import staging_support as ss
    from ansible_collections.specpilot.core.plugins.module_utils.staging import modelcar
    from specpilot_lab import registry as lab_registry

    ns = "rb-modelcar"
    ss.make_model(tmp_path / "m" / "target", weight_bytes=256 * 1024)
    ss.make_model(tmp_path / "m" / "draft", weight_bytes=64 * 1024, layers=1, seed=1)
    lab_registry.build_base_layout(tmp_path / "base", tag="busybox")
    with ss.AuthRegistry(tmp_path / "reg") as reg:
        repo = f"{reg.addr}/models/svc"
        built = modelcar.build_push(
            {
                "image": f"{repo}:v1",
                "base": f"oci:{tmp_path / 'base'}:busybox",
                "work_dir": str(tmp_path / "work"),
                "tls_verify": False,
                "username": ss.REGISTRY_USER,
                "password": ss.REGISTRY_PASSWORD,
                "artifacts": [
                    {"role": "target", "subdir": "target", "path": str(tmp_path / "m" / "target")},
                    {"role": "draft", "subdir": "draft", "path": str(tmp_path / "m" / "draft")},
                ],
            }
        )
        draft_layer = built["layers"][1]["digest"]
        host = {
            "specpilot_delivery": "modelcar",
            "specpilot_speculative": {"method": "draft_model", "num_speculative_tokens": 3},
            "specpilot_draft": DRAFT,
            "specpilot_modelcar": {
                "image": f"{repo}:v1",
                "image_digest": built["digest"],
                "tls_verify": False,
            },
            "specpilot_acknowledged_warnings": ["draft-ratio"],
        }
        create_namespace(emulator, ns)
        creds = {
            "specpilot_stage_modelcar_registry_username": ss.REGISTRY_USER,
            "specpilot_stage_modelcar_registry_password": ss.REGISTRY_PASSWORD,
        }
        inv = write_inventory(tmp_path / "inv", ns, {"svc": host}, dict(GROUP, **creds))
        with FakeKServe(emulator, ns):
            _ok(run_deploy(emulator, tmp_path, inv))
        deployed = _isvc(emulator, ns)
        assert deployed["spec"]["predictor"]["model"]["storageUri"] == f"oci://{repo}@{built['digest']}"
        assert _spec_args(deployed["spec"]["predictor"]["model"]["args"])
        reclaim = ("-e", "specpilot_rollback_reclaim_draft=true")

        # check mode: the new digest is computed; nothing pushed, nothing written, the diff shows the repoint
        mark = emulator.control.mark()
        check = _rollback(emulator, tmp_path, inv, "--check", "--diff", *reclaim)
        _ok(check)
        assert [w for w in emulator.control.writes(since=mark) if not w.get("dry_run")] == []
        assert not _resolves(f"{repo}:v1-nodraft")[0]
        assert "check mode: would push" in check.out and "would change" in check.out
        checked = json.loads((tmp_path / "reports" / "svc.json").read_text())["reclaim"]["modelcar"]
        assert checked["new_digest"] and checked["digest"] == built["digest"]

        with FakeKServe(emulator, ns):
            mark = emulator.control.mark()
            run = _rollback(emulator, tmp_path, inv, *reclaim, "-vvv")
            _ok(run)
        assert ss.REGISTRY_PASSWORD not in run.out and ss.REGISTRY_PASSWORD not in check.out
        isvc = _isvc(emulator, ns)
        model = isvc["spec"]["predictor"]["model"]
        new_digest = checked["new_digest"]  # check mode computed the very image that was pushed
        assert model["storageUri"] == f"oci://{repo}@{new_digest}"
        assert _spec_args(model["args"]) == []
        # one server-side apply of the InferenceService carried both changes: one rollout
        isvc_writes = [
            w
            for w in emulator.control.writes(since=mark)
            if w["resource"] == "inferenceservices"
            and not w["subresource"]
            and w["field_manager"] == "specpilot"
        ]
        assert len(isvc_writes) == 1, isvc_writes
        dep = get(emulator, "apps/v1", "Deployment", "svc-predictor", ns)
        runner = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "modelcar"]
        assert runner[0]["image"] == f"{repo}@{new_digest}"
        # the registry: the new image has no draft layer, the same target layer; the old image is still there
        ok, raw = _resolves(f"{repo}:v1-nodraft")
        assert ok and "sha256:" + hashlib.sha256(raw).hexdigest() == new_digest
        layers = [d["digest"] for d in json.loads(raw)["layers"]]
        assert draft_layer not in layers and built["layers"][0]["digest"] in layers
        assert _resolves(f"{repo}@{built['digest']}")[0] and _resolves(f"{repo}:v1")[0]
        report = json.loads((tmp_path / "reports" / "svc.json").read_text())
        mc = report["reclaim"]["modelcar"]
        assert (mc["digest"], mc["new_digest"]) == (built["digest"], new_digest)
        assert (
            mc["result"]["dropped_layer"]["digest"] == draft_layer and mc["result"]["bytes_uploaded"] < 8192
        )
        assert report["verification"]["checks"]["storage_uri_repointed"]
        assert report["verification"]["checks"]["modelcar_image_repointed"]
        md = (tmp_path / "reports" / "svc.md").read_text()
        assert built["digest"] in md and new_digest in md

        # again: the image has no draft layer any more, nothing written, nothing pushed
        mark = emulator.control.mark()
        again = _rollback(emulator, tmp_path, inv, *reclaim)
        _ok(again)
        assert again.recap()["svc"]["changed"] == 0, again.changed_tasks()
        assert emulator.control.writes(since=mark) == []
        assert "nothing to reclaim" in again.out


# ------------------------------------------------------------------ reports in one place (issue 14)
def _checkout_changes() -> set[str]:
    """The paths git status names in the checkout (untracked files one by one), less the report root and the
    lab's state. Paths, not status lines: a file someone was already editing may change its status meanwhile."""
    out = subprocess.run(
        ["git", "--no-optional-locks", "status", "--porcelain", "-z", "--untracked-files=all", "--no-renames"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    return {e[3:] for e in out.split("\0") if e[3:] and not e[3:].startswith((".reports/", ".lab/"))}


def _run_from(cwd: Path, emu, tmp: Path, inv: Path, playbook: str, *args: str) -> subprocess.CompletedProcess:
    """ansible-playbook started from ``cwd`` (its shell's PWD too), no report directory given."""
    env = dict(ansible_env(emu, tmp), PWD=str(cwd))
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inv), str(ROOT / playbook), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_default_reports_go_to_the_project_root_and_the_checkout_stays_clean(emulator, tmp_path):
    """Deploy and rollback with no report directory given, started from playbooks/ (as the two run outputs once
    committed under playbooks/.reports were): the rollback report lands in <project root>/.reports/rollback/, and
    nothing else appears or changes in the checkout. Other people's uncommitted edits may be in the tree, so the
    paths git status names are compared with a snapshot taken just before the runs, not with emptiness (a file that
    someone else starts editing during the runs would show here too: the message names it)."""
    if subprocess.run(["git", "rev-parse"], cwd=ROOT, capture_output=True, check=False).returncode:
        pytest.skip("not a git checkout")
    ns, name = "rb-root", "rbroot%d" % os.getpid()  # a service name no real report uses
    reports = ROOT / ".reports" / "rollback"
    before = _checkout_changes()
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {name: {"specpilot_speculative": NGRAM}}, GROUP)
    try:
        with FakeKServe(emulator, ns):
            for playbook in ("playbooks/deploy.yml", "playbooks/rollback.yml"):
                run = _run_from(ROOT / "playbooks", emulator, tmp_path, inv, playbook)
                assert run.returncode == 0, playbook + "\n" + run.stdout[-6000:] + run.stderr[-2000:]
        assert "%s: off, rolled back, ready" % name in run.stdout, run.stdout[-3000:]
        report = json.loads((reports / f"{name}.json").read_text())
        assert report["changed"] and report["after"]["speculative"] == []
        assert (reports / f"{name}.md").is_file()
        assert not (ROOT / "playbooks" / ".reports").exists()
        new = sorted(_checkout_changes() - before)
        assert new == [], "the runs left these in the checkout (or someone edited them meanwhile): %s" % new
    finally:
        for ext in ("json", "md"):
            (reports / f"{name}.{ext}").unlink(missing_ok=True)
        shutil.rmtree(reports / "history" / name, ignore_errors=True)
