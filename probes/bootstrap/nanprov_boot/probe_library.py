"""The probe library's C ABI as the bootstrap calls it through ctypes.

One table, checked against probes/libtorch/c_abi.h by tests/probes/abi_table_test.py: a function
added to one side only, or a type changed on one side only, fails that test instead of
corrupting a training process's stack.
"""

import ctypes

# int resolve(char* buffer, size_t capacity): writes the current module path, returns its length.
Resolver = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)

# name: (result type, argument types); None is void.
SIGNATURES = {
    "nanprov_start": (ctypes.c_int, []),
    "nanprov_last_error": (ctypes.c_char_p, []),
    "nanprov_step": (None, [ctypes.c_longlong]),
    "nanprov_set_module_resolver": (None, [Resolver]),
    "nanprov_count_unprobed": (None, [ctypes.c_char_p, ctypes.c_longlong]),
    "nanprov_compiled_grad_mode": (None, [ctypes.c_int]),
    "nanprov_probe_op": (ctypes.c_char_p, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]),
    "nanprov_foreign_calls": (ctypes.c_longlong, []),
    "nanprov_trail_compiled": (None, []),
    "nanprov_become_worker": (None, []),
    "nanprov_graph_capture_began": (None, [ctypes.c_longlong]),
    "nanprov_graph_replayed": (None, [ctypes.c_longlong]),
    "nanprov_graph_reset": (None, [ctypes.c_longlong]),
    "nanprov_graph_pool": (None, [ctypes.c_int]),
    "nanprov_set_fact": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p]),
    "nanprov_process_group": (None, [ctypes.c_int, ctypes.c_int, ctypes.c_int]),
    "nanprov_mesh": (None, [ctypes.c_char_p]),
    "nanprov_shutdown": (None, []),
}


def load(path):
    """The library at `path`, every function of the table typed."""
    lib = ctypes.CDLL(path)
    for name, (result, arguments) in SIGNATURES.items():
        function = getattr(lib, name)
        function.restype = result
        function.argtypes = arguments
    return lib
