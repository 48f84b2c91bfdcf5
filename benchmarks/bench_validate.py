"""Benchmarks of service-spec validation (specpilot.core.spec_validate).

Model facts (module_utils/service/model_facts.py) are read at each artifact's source and cached on
disk; the benchmark runs with a cache of its own (``SPECPILOT_MODEL_FACTS_CACHE`` in a temporary
directory, ``SPECPILOT_MODEL_FACTS=auto``), which a first run over every spec fills in a separate
process, as an earlier ``validate.yml`` run would have: what a source answered is cached, and a
source that did not answer (an air-gapped machine: the Hub unreachable) is known unreachable for
a few minutes.  That first run is reported (no target: it is the network's time); the figures
with a target are measured after it, and their unit says how the artifacts' facts were found.

* per spec, inside the module: ``validator.module_result`` (what the module and its action
  plugin run) over the spec corpus and the example inventories; the median and the worst
  warm time per spec, and the first (cold) call that also compiles the schemas.  Target:
  < 50 ms per spec.
* a fresh Python process that imports the validator and validates one spec: what each
  Ansible worker pays (imports, schema compilation) on top of the warm figure.
* one ansible-playbook run of playbooks/validate.yml over 50 services, against an empty
  play over the same 50 hosts (same inventory, same ansible-playbook start-up): the ratio
  says what validation adds to a play.  validate.yml runs two tasks per host (the role's
  automatic argument-spec check and the validation action, which runs on the controller:
  no module transfer, no remote interpreter), so most of the difference is Ansible's own
  per-task, per-host worker cost, about 25 ms each on a 2-core machine.

Contract for ``python -m benchmarks``: ``run() -> list[dict(name, value, unit, target, ok)]``.
Standalone: ``python benchmarks/bench_validate.py``.
Environment: ``SPECPILOT_BENCH_SERVICES`` (default 50; 2 in quick mode, which also runs each
measurement once).
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "collections"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ansible_collections.specpilot.core.plugins.module_utils.service import model_facts, validator
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import (  # noqa: E402
    assemble_from_vars,
)

from benchmarks import quick, setting  # noqa: E402

SERVICES = setting("SPECPILOT_BENCH_SERVICES", 50, 2)
ROUNDS = 1 if quick() else 5  # warm passes over the corpus
RUNS = 1 if quick() else 3  # fresh processes; ansible-playbook runs: RUNS - 1, at least one
PER_SPEC_TARGET_MS = 50.0
RATIO_TARGET = 10.0
PER_SERVICE_TARGET_MS = 150.0
EXAMPLE = ROOT / "inventories" / "example"
BIN = Path(sys.executable).parent


def _corpus_specs():
    specs = []
    for path in sorted((ROOT / "tests" / "data" / "specs").glob("*/*.yml")):
        with open(path) as handle:
            doc = yaml.safe_load(handle)
        doc.pop("expect", None)
        specs.append(assemble_from_vars(doc)[0])
    with open(EXAMPLE / "group_vars" / "specpilot_services.yml") as handle:
        group = yaml.safe_load(handle)
    for host in sorted((EXAMPLE / "host_vars").glob("*.yml")):
        with open(host) as handle:
            merged = dict(group, **yaml.safe_load(handle))
        specs.append(assemble_from_vars(merged, host.stem)[0])
    return specs


def _params(spec):
    params = {key: opt.get("default") for key, opt in validator.ARGUMENT_SPEC.items()}
    params.update(spec=spec, fail_on_error=False)
    return params


_FILL = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks import bench_validate as bv
from ansible_collections.specpilot.core.plugins.module_utils.service import validator
t0 = time.perf_counter()
for spec in bv._corpus_specs():
    validator.module_result(bv._params(spec))
print(json.dumps(time.perf_counter() - t0))
"""


def fill_cache():
    """Seconds of a first validation of every spec in a fresh process: it fills the model-facts cache
    (facts read, endpoints found unreachable) as an earlier run would have."""
    proc = subprocess.run(
        [sys.executable, "-c", _FILL, str(ROOT)], capture_output=True, text=True, timeout=900, check=True
    )
    return float(proc.stdout.strip().splitlines()[-1])


def _sources(results):
    """How the artifacts' facts were found in the measured runs: {cached, unreachable, ...: count}."""
    seen = {}
    for facts in results:
        for role in ("target", "draft"):
            info = (facts or {}).get(role) or {}
            if info.get("kind") not in model_facts.NETWORK_KINDS:
                continue
            if info.get("cached"):
                state = "cached"
            elif "did not answer" in str(info.get("problem")):
                state = "known unreachable"
            elif info.get("problem") and "HF_HUB_OFFLINE" in info["problem"]:
                state = "offline"
            elif info.get("problem"):
                state = "unreadable"
            else:
                state = "read now"
            seen[state] = seen.get(state, 0) + 1
    return ", ".join("%d %s" % (n, state) for state, n in sorted(seen.items())) or "none read"


def bench_module():
    specs = _corpus_specs()
    fill_s = fill_cache()
    results = []
    started = time.perf_counter()
    results.append(validator.module_result(_params(specs[0]))[0]["model_facts"])
    cold_ms = (time.perf_counter() - started) * 1000
    times = []
    for _round in range(ROUNDS):
        for spec in specs:
            started = time.perf_counter()
            results.append(validator.module_result(_params(spec))[0]["model_facts"])
            times.append((time.perf_counter() - started) * 1000)
    median = statistics.median(times)
    worst = max(times)
    target = "< %g" % PER_SPEC_TARGET_MS
    unit = "ms (artifacts' facts: %s)" % _sources(results)
    return [
        {
            "name": "validate: first run over %d specs, empty model-facts cache" % len(specs),
            "value": fill_s,
            "unit": "s",
            "target": "",
            "ok": True,
        },
        {
            "name": "validate: one spec in the module, median (%d specs)" % len(specs),
            "value": median,
            "unit": unit,
            "target": target,
            "ok": median < PER_SPEC_TARGET_MS,
        },
        {
            "name": "validate: one spec in the module, slowest",
            "value": worst,
            "unit": "ms",
            "target": target,
            "ok": worst < PER_SPEC_TARGET_MS,
        },
        {
            "name": "validate: first spec (cold: schemas compiled)",
            "value": cold_ms,
            "unit": "ms",
            "target": target,
            "ok": cold_ms < PER_SPEC_TARGET_MS,
        },
    ]


_FRESH = """
import sys, time, yaml
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from ansible_collections.specpilot.core.plugins.module_utils.service import validator
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import assemble_from_vars
doc = yaml.safe_load(open(sys.argv[2]))
doc.pop("expect", None)
validator.module_result(dict(spec=assemble_from_vars(doc)[0], fail_on_error=False))
print((time.perf_counter() - t0) * 1000)
"""


def bench_fresh_process():
    spec_file = ROOT / "tests" / "data" / "specs" / "valid" / "eagle3_0.32_storage_uris_hf.yml"
    runs = []
    for _ in range(RUNS):
        proc = subprocess.run(
            [sys.executable, "-c", _FRESH, str(ROOT / "collections"), str(spec_file)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        runs.append(float(proc.stdout.strip()))
    value = min(runs)
    return [
        {
            "name": "validate: fresh process, imports + first spec",
            "value": value,
            "unit": "ms",
            "target": "",
            "ok": True,
        }
    ]


def _inventory(tmp):
    """SERVICES hosts cycling through the example services, with the example's group_vars."""
    inv = Path(tmp) / "inventory"
    shutil.copytree(EXAMPLE / "group_vars", inv / "group_vars")
    (inv / "host_vars").mkdir(parents=True)
    templates = sorted((EXAMPLE / "host_vars").glob("*.yml"))
    hosts = {}
    for i in range(SERVICES):
        name = "svc-%02d" % i
        template = templates[i % len(templates)]
        shutil.copy(template, inv / "host_vars" / ("%s.yml" % name))
        hosts[name] = {}
    with open(inv / "hosts.yml", "w") as handle:
        yaml.safe_dump({"specpilot_services": {"hosts": hosts}}, handle)
    empty = Path(tmp) / "empty.yml"
    empty.write_text(
        "---\n- name: Empty play\n  hosts: specpilot_services\n  gather_facts: false\n  tasks: []\n"
    )
    return inv, empty


def _timed_run(tmp, *args):
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCAL_TEMP=str(Path(tmp) / "ansible-tmp"),
        TMPDIR=str(tmp),
    )
    started = time.perf_counter()
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(
            "ansible-playbook %s failed:\n%s" % (" ".join(args), proc.stdout[-3000:] + proc.stderr)
        )
    return elapsed


def bench_playbook():
    with tempfile.TemporaryDirectory(prefix="specpilot-bench-validate-") as tmp:
        inv, empty = _inventory(tmp)
        if not quick():
            _timed_run(tmp, "-i", str(inv), str(empty))  # warm the caches once
        runs = max(1, RUNS - 1)
        empty_s = min(_timed_run(tmp, "-i", str(inv), str(empty)) for _ in range(runs))
        validate_s = min(
            _timed_run(tmp, "-i", str(inv), str(ROOT / "playbooks" / "validate.yml")) for _ in range(runs)
        )
    ratio = validate_s / empty_s
    return [
        {
            "name": "validate.yml over %d services" % SERVICES,
            "value": validate_s,
            "unit": "s",
            "target": "",
            "ok": True,
        },
        {
            "name": "empty play over the same %d hosts" % SERVICES,
            "value": empty_s,
            "unit": "s",
            "target": "",
            "ok": True,
        },
        {
            "name": "validate.yml / empty play (%d services)" % SERVICES,
            "value": ratio,
            "unit": "x",
            "target": "<= %g" % RATIO_TARGET,
            "ok": ratio <= RATIO_TARGET,
        },
        {
            "name": "validate.yml per service, above the empty play",
            "value": (validate_s - empty_s) / SERVICES * 1000,
            "unit": "ms",
            "target": "< %g" % PER_SERVICE_TARGET_MS,
            "ok": (validate_s - empty_s) / SERVICES * 1000 < PER_SERVICE_TARGET_MS,
        },
    ]


def _closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run():
    """Benchmark contract: a list of dict(name, value, unit, target, ok)."""
    names = (model_facts.ENV_CACHE, model_facts.ENV_MODE, "HF_ENDPOINT")
    saved = {name: os.environ.get(name) for name in names}
    with tempfile.TemporaryDirectory(prefix="specpilot-bench-facts-") as cache:
        os.environ[model_facts.ENV_CACHE] = cache  # also for the processes started below
        os.environ[model_facts.ENV_MODE] = "auto"
        if quick():  # make test: no network; a Hub that refuses connections (known unreachable)
            os.environ["HF_ENDPOINT"] = "http://127.0.0.1:%d" % _closed_port()
        try:
            return bench_module() + bench_fresh_process() + bench_playbook()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


if __name__ == "__main__":
    for row in run():
        print(
            "%-55s %10.3f %-3s %-8s %s"
            % (row["name"], row["value"], row["unit"], row["target"], "ok" if row["ok"] else "MISSED")
        )
