#!/usr/bin/env python3
"""Write schemas/ from the specpilot.core collection (the single source of the schemas).

    python scripts/export_schemas.py          # (re)write schemas/
    python scripts/export_schemas.py --check  # exit 1 when schemas/ is out of date

The service schema lives in module_utils/service/spec.py and the vLLM profiles in
module_utils/service/vllm_profiles.py, so the module carries them wherever the collection is
installed.  The files under schemas/ are their exports, for editors, other tools and
the module's schema_dir option.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))

from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import SERVICE_SCHEMA  # noqa: E402


def dump(data):
    return json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def expected_files():
    files = {"service.schema.json": dump(SERVICE_SCHEMA)}
    files["speculative/index.json"] = dump(vllm_profiles.profile_index())
    for profile in vllm_profiles.all_profiles():
        files["speculative/%s.json" % profile["x-specpilot"]["profile"]] = dump(profile)
    return files


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    parser.add_argument("--dest", default=os.path.join(ROOT, "schemas"))
    args = parser.parse_args(argv)
    files = expected_files()
    stale = []
    for rel, content in sorted(files.items()):
        path = os.path.join(args.dest, rel)
        current = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                current = handle.read()
        if current != content:
            stale.append(rel)
            if not args.check:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(content)
    spec_dir = os.path.join(args.dest, "speculative")
    extra = sorted(
        "speculative/" + name
        for name in (os.listdir(spec_dir) if os.path.isdir(spec_dir) else [])
        if name.endswith(".json") and "speculative/" + name not in files
    )
    for rel in extra:
        stale.append(rel + " (obsolete)")
        if not args.check:
            os.remove(os.path.join(args.dest, rel))
    if args.check:
        if stale:
            print("schemas/ is out of date: %s\nrun: python scripts/export_schemas.py" % ", ".join(stale))
            return 1
        print("schemas/ is up to date (%d files)" % len(files))
        return 0
    print("wrote %d of %d files under %s" % (len(stale), len(files), args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
