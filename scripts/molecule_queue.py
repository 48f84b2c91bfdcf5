"""A queue of molecule scenarios that make test's two lanes share (standard library only).

Each lane, once its lab tests are done, takes the next scenario until none is left, so the lanes
end together whatever their lab tests cost (longest scenarios first: the classic longest-job-first
rule keeps the last one short).

    python3 scripts/molecule_queue.py init QUEUE_FILE MOLECULE_DIR [FIRST ...]
        every scenario of MOLECULE_DIR (a folder with molecule.yml), the FIRST ones first, in order
    python3 scripts/molecule_queue.py next QUEUE_FILE
        prints the next scenario and removes it; exit status 1 when the queue is empty
"""

from __future__ import annotations

import fcntl
import sys
from pathlib import Path


def scenarios(molecule_dir: Path, first: list[str]) -> list[str]:
    found = sorted(p.parent.name for p in molecule_dir.glob("*/molecule.yml"))
    return [s for s in first if s in found] + [s for s in found if s not in first]


def init(queue: Path, molecule_dir: Path, first: list[str]) -> int:
    queue.parent.mkdir(parents=True, exist_ok=True)
    queue.write_text("".join(s + "\n" for s in scenarios(molecule_dir, first)))
    return 0


def take(queue: Path) -> str | None:
    """The next scenario, removed from the queue under an exclusive lock (None: empty or no queue)."""
    if not queue.is_file():
        return None
    with open(queue, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        names = fh.read().split()
        if not names:
            return None
        fh.seek(0)
        fh.truncate()
        fh.write("".join(s + "\n" for s in names[1:]))
        return names[0]


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "init":
        return init(Path(argv[1]), Path(argv[2]), argv[3:])
    if len(argv) == 2 and argv[0] == "next":
        name = take(Path(argv[1]))
        if name is None:
            return 1
        print(name)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
