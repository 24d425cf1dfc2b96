"""`python -m nanprov_boot.check`: what `nanprov run` and `nanprov doctor` need to know about the
torch of an interpreter, as one JSON line. Exit 3 when torch cannot be imported."""

import json
import sys


def main():
    try:
        import torch
    except Exception as exc:
        print(json.dumps({"importable": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 3
    info = {
        "importable": True,
        "python": sys.executable,
        "torch": torch.__version__,
        "cxx11_abi": str(int(torch._C._GLIBCXX_USE_CXX11_ABI)),
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "devices": [],
        "sdpa_backends": {},
    }
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            info["devices"].append({"name": torch.cuda.get_device_name(i), "arch": f"sm_{major}{minor}"})
        cuda = torch.backends.cuda
        info["sdpa_backends"] = {
            "cudnn": cuda.cudnn_sdp_enabled(),
            "flash": cuda.flash_sdp_enabled(),
            "efficient": cuda.mem_efficient_sdp_enabled(),
            "math": cuda.math_sdp_enabled(),
        }
    else:
        info["sdpa_backends"] = {"flash_cpu": True, "math": True}
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
