"""The bootstrap's ctypes table against the probe library's C ABI.

Usage: abi_table_test.py HEADER LIBRARY BOOTSTRAP_DIR

Fails when a function of probes/libtorch/c_abi.h is missing from the bootstrap's table (or the
other way round), when a result or argument type differs, or when the built library exports a
nanprov_* function the header does not declare, or lacks one it does. Needs no torch: the
library is only inspected, never loaded.
"""
import ctypes
import re
import subprocess
import sys

header, library, bootstrap = sys.argv[1:4]
sys.path.insert(0, bootstrap)
from nanprov_boot import probe_library  # noqa: E402

C_TYPES = {
    "void": None,
    "int": ctypes.c_int,
    "long long": ctypes.c_longlong,
    "const char*": ctypes.c_char_p,
    "nanprov_module_resolver": probe_library.Resolver,
}
DECLARATION = re.compile(r"^NANPROV_API\s+(.+?)\s*\b(nanprov_\w+)\((.*)\);\s*$")

failures = []
declared = {}
for line in open(header):
    match = DECLARATION.match(line)
    if not match:
        continue
    result, name, arguments = match.groups()
    types = []
    for argument in [a.strip() for a in arguments.split(",") if a.strip() and a.strip() != "void"]:
        # "const char* name" → "const char*"; "long long step" → "long long"
        c_type = re.sub(r"\s*\b\w+$", "", argument).replace(" *", "*")
        if c_type not in C_TYPES:
            failures.append(f"{name}: argument type '{c_type}' has no ctypes mapping in this test")
        types.append(C_TYPES.get(c_type))
    if result not in C_TYPES:
        failures.append(f"{name}: result type '{result}' has no ctypes mapping in this test")
    declared[name] = (C_TYPES.get(result), types)

if not declared:
    failures.append(f"no NANPROV_API declaration found in {header}")
table = probe_library.SIGNATURES
for name in sorted(set(declared) - set(table)):
    failures.append(f"{name} is declared in c_abi.h but missing from probe_library.SIGNATURES")
for name in sorted(set(table) - set(declared)):
    failures.append(f"{name} is in probe_library.SIGNATURES but not declared in c_abi.h")
for name in sorted(set(table) & set(declared)):
    if table[name][0] is not declared[name][0]:
        failures.append(f"{name}: result {table[name][0]} in the table, {declared[name][0]} in c_abi.h")
    if list(table[name][1]) != declared[name][1]:
        failures.append(f"{name}: arguments {table[name][1]} in the table, {declared[name][1]} in c_abi.h")

symbols = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True).stdout
exported = {line.split()[-1] for line in symbols.splitlines() if re.search(r"\bT nanprov_\w+$", line)}
for name in sorted(set(declared) - exported):
    failures.append(f"{name} is declared in c_abi.h but {library} does not export it")
for name in sorted(exported - set(declared)):
    failures.append(f"{library} exports {name}, which c_abi.h does not declare")

for failure in failures:
    print(f"FAIL: {failure}")
print(f"{len(declared)} functions declared, {len(table)} in the table, {len(exported)} exported; "
      f"{len(failures)} mismatches")
sys.exit(1 if failures else 0)
