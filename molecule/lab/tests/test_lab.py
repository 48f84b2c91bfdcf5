"""molecule verify for the lab scenario, with testinfra: what converge left, read on this machine as a user
would - the Job's status and its pod log through kubectl, the marker on the claim's backing directory."""

import json
import os
import time

NAMESPACE = "molecule-lab"
# the machine itself (the inventory's localhost); the platform "lab" is only molecule's name for the lab
testinfra_hosts = ["ansible://localhost"]


def kubectl(host, *args):
    return host.check_output(
        "kubectl --kubeconfig %s -n %s " + " ".join(["%s"] * len(args)),
        os.environ["K8S_AUTH_KUBECONFIG"],
        NAMESPACE,
        *args,
    )


def test_the_job_completed_and_its_output_is_in_the_pod_log(host):
    deadline = time.monotonic() + 60
    while True:
        status = json.loads(kubectl(host, "get", "job", "write-marker", "-o", "json")).get("status") or {}
        done = {c.get("type") for c in status.get("conditions") or []} & {"Complete", "Failed"}
        if done or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert status.get("succeeded") == 1, status
    assert "wrote marker" in kubectl(host, "logs", "-l", "job-name=write-marker")


def test_the_marker_is_on_the_claims_directory(host):
    marker = host.file(
        os.path.join(os.environ["SPECPILOT_LAB_STATE_DIR"], "pvcs", NAMESPACE, "models/target/marker")
    )
    assert marker.is_file and marker.content_string.strip() == "specpilot"
