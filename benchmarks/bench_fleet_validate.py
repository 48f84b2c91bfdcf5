"""Fleet benchmark of playbooks/validate.yml (issue 40): the whole fleet's specs validated and
rendered, 50 services against 200 (benchmarks/fleet.py: four namespaces, n-gram k 2-4), no cluster.

Rows: seconds at each size, the cost of one more service, the 200/50 ratio (target <= 4.4), the peak
RSS of ansible-playbook's process tree; target: 200 services <= 60 s on 2 cores. Best of
``SPECPILOT_BENCH_FLEET_RUNS`` (default 1) runs at each size, after one warm-up run of the small fleet
(the ansiballz and Jinja caches, the discovery of the collection). Result:
``.reports/bench/fleet_validate.{json,md}`` (``SPECPILOT_BENCH_FLEET_OUT``).

Quick mode: 1 and 2 services, one run each, no warm-up.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from benchmarks import fleet, quick, setting

RUNS = setting("SPECPILOT_BENCH_FLEET_RUNS", 1, 1)
TARGET_S = 60.0


def _best(env, tmp, inv):
    size = fleet.SMALL if inv.name == "inv-small" else fleet.BIG
    runs = (fleet.playbook(env, tmp, inv, "validate.yml", hosts=size) for _ in range(RUNS))
    return min(runs, key=lambda r: r.seconds)


def run():
    with tempfile.TemporaryDirectory(prefix="specpilot-bench-fleet-validate-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "home").mkdir()
        env = fleet.ansible_env(dict(os.environ, HOME=str(tmp / "home"), TMPDIR=str(tmp)), tmp)
        env.setdefault("SPECPILOT_MODEL_FACTS", "off")  # the facts are typed in the inventory
        small = fleet.write_inventory(tmp / "inv-small", fleet.SMALL)
        big = fleet.write_inventory(tmp / "inv-big", fleet.BIG)
        if not quick():
            fleet.playbook(env, tmp, small, "validate.yml")  # warm-up
        small_run, big_run = _best(env, tmp, small), _best(env, tmp, big)
        result = fleet.rows("validate.yml", small_run, big_run, TARGET_S)
        fleet.write_result(
            tmp,
            "fleet_validate",
            "Fleet benchmark: validate.yml",
            result,
            [
                "best of %d run(s) a size; no cluster" % RUNS,
                "CPU s: user + system of ansible-playbook's tree",
            ],
        )
    return result


if __name__ == "__main__":
    for row in run():
        print(
            "%-60s %10.3g %-9s %-8s %s" % (row["name"], row["value"], row["unit"], row["target"], row["ok"])
        )
