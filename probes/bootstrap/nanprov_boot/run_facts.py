"""What this process's attention stack is made of, read once when torch is imported and handed to
the probes (nanprov_set_fact), which keep it in the store's meta and every capture. Known bugs
depend on it: a CUDA 13 ptxas miscompiles FlexAttention's dQ, a system cuDNN can shadow the
wheel's, FlashAttention-4 fixes land between betas.

Cheap on purpose: package metadata and torch attributes, one read of /proc/self/maps, and one
`ptxas --version` when Triton ships one. Nothing is imported that the training has not imported
(importing triton costs about a second). A fact that cannot be read is left out, never guessed.
"""

import importlib.metadata
import importlib.util
import os
import re
import subprocess


def _version(*distributions):
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except Exception:
            continue
    return None


def _cudnn(torch):
    """The version of the cuDNN library in the process (torch's "cudnn" meta is the one it was
    compiled against), and the path it was loaded from."""
    version = None
    try:
        if torch.backends.cudnn.is_available():
            version = torch.backends.cudnn.version()
    except Exception:  # a cuDNN torch refuses to use: its path below still says which
        pass
    path = None
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                name = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(name).startswith("libcudnn.so"):
                    path = name
                    break
    except OSError:
        pass
    return (str(version) if version else None), path


def _ptxas():
    """The version of the ptxas Triton compiles with: TRITON_PTXAS_PATH, else the one it bundles."""
    path = os.environ.get("TRITON_PTXAS_PATH")
    if not path:
        spec = importlib.util.find_spec("triton")  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            return None
        path = os.path.join(list(spec.submodule_search_locations)[0], "backends", "nvidia", "bin", "ptxas")
    if not os.access(path, os.X_OK):
        return None
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=5).stdout
    except Exception:
        return None
    found = re.search(r"\bV(\d+\.\d+(?:\.\d+)?)", text)  # "Cuda compilation tools, release 13.0, V13.0.88"
    return found.group(1) if found else None


def read(torch):
    """The facts, by the keys the probes take (probes/core/run_facts.h); unknown ones left out."""
    cudnn_loaded, cudnn_library = _cudnn(torch)
    facts = {
        "cuda_build": getattr(torch.version, "cuda", None),
        "cudnn_loaded": cudnn_loaded,
        "cudnn_library": cudnn_library,
        "triton": _version("triton", "pytorch-triton"),
        "flash_attn_4": _version("flash-attn-4"),
    }
    try:
        facts["ptxas"] = _ptxas()
    except Exception:
        pass
    return {key: str(value) for key, value in facts.items() if value}


def hand_over(lib, torch):
    for key, value in read(torch).items():
        lib.nanprov_set_fact(key.encode(), value.encode(errors="replace"))
