"""The Renewer in a worker whose ansible-playbook died before the Renewer was built (the race between the
worker's fork and the wait's start): it must still see the run gone - release the lock and stop - rather than
take the process it was re-parented to for the run and keep renewing. Real processes: a "controller" forks
its worker with multiprocessing (as ansible-playbook forks its WorkerProcess), then is SIGKILLed; only
then does the worker build its Renewer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

CONTROLLER = r"""
import json, multiprocessing, os, sys, time
from ansible_collections.specpilot.core.plugins.plugin_utils import lease_client

OUT = sys.argv[1]

class Client:
    def __init__(self):
        self.calls = []
    def release(self, holder, version):
        self.calls.append(("release", holder, version))
        return {"released": True}
    def renew(self, holder, version):
        self.calls.append(("renew", holder, version))
        return {"renewed": True, "resource_version": str(int(version) + 1)}

def worker(controller):
    while os.getppid() == controller:  # until the controller is gone
        time.sleep(0.02)
    client = Client()
    renewer = lease_client.Renewer(client, {"holder": "me", "resource_version": "7", "duration": 3})
    said = renewer(time.time() + 60)  # a renewal would be due: the run must be seen gone first
    with open(OUT, "w") as fh:
        json.dump({"said": said, "calls": client.calls}, fh)

if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    p = multiprocessing.Process(target=worker, args=(os.getpid(),))
    p.start()
    print(p.pid, flush=True)
    time.sleep(60)
"""


def test_a_worker_orphaned_before_its_renewer_is_built_releases_the_lock(tmp_path):
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "collections"), str(ROOT / "lab")]))
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert controller.stdout.readline().strip().isdigit()  # the worker is forked
        controller.send_signal(signal.SIGKILL)
        controller.wait(10)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        controller.kill()
    result = json.loads(out.read_text())
    assert result["calls"] == [["release", "me", "7"]], result
    assert result["said"] == "ansible-playbook (pid %d) is gone; the lock was released" % controller.pid
