#!/usr/bin/env python3
"""Namespaces follow folders (issue 65): what a folder declares lives in that folder's namespace.

A name then says where it is defined (`store::StoreWriter`, `report::Conclusion`,
`probes::DeviceChecks`), and a folder that reaches into another names it at the place it does.
base/ and tracer/ are the shared vocabulary and stay in `nanprov`. Forward declarations of another
folder's types are allowed when they open that folder's namespace in full
(`namespace nanprov::store { struct RunData; }`). Anonymous namespaces, and namespaces nested
inside the folder's, are the file's own business, as are the tests' shared helpers. Prints each
namespace out of place.

    namespaces_follow_folders.py SOURCE_DIR
"""
import pathlib
import re
import sys

FOLDERS = {
    "cli": "nanprov::cli",
    "kernels": "nanprov::kernels",
    "probes": "nanprov::probes",
    "replay": "nanprov::replay",
    "report": "nanprov::report",
    "store": "nanprov::store",
    "tests/cli": "nanprov::cli",
    "tests/kernels": "nanprov::kernels",
    "tests/probes": "nanprov::probes",
    "tests/replay": "nanprov::replay",
    "tests/report": "nanprov::report",
    "tests/store": "nanprov::store",
}
# The tests' shared helpers (tests/temp_dir.h, tests/report/synthetic_run.h), used across folders.
TEST_HELPERS = {"nanprov::testing", "nanprov::synthetic"}
# A namespace opened at file scope: `namespace a::b {` (not `namespace x = y;`, not anonymous).
OPENED = re.compile(r"^namespace\s+([A-Za-z_][A-Za-z0-9_:]*)\s*\{", re.M)


def misplaced(root):
    found = []
    for folder, own in FOLDERS.items():
        others = {ns for f, ns in FOLDERS.items() if ns != own}
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".h", ".cpp", ".cu"):
                continue
            opened = OPENED.findall(path.read_text())
            for ns in opened:
                if ns == own or ns.startswith(own + "::") or ns in others or ns in TEST_HELPERS:
                    continue
                if ns != "nanprov" and not ns.startswith("nanprov::"):
                    continue  # a nested helper namespace (thread_slots_detail) or a third party's
                found.append(f"{path.relative_to(root)}: namespace {ns} (this folder's is {own})")
    return found


def main():
    root = pathlib.Path(sys.argv[1])
    found = misplaced(root)
    for line in found:
        print(line)
    # Not vacuous: the store's writer is where this test says it is.
    if "namespace nanprov::store {" not in (root / "store/writer.h").read_text():
        print("store/writer.h opens no nanprov::store: this test no longer reads the tree")
        return 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
