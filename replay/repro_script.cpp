#include "replay/repro_script.h"

#include <cstdint>
#include <cstdio>

#include "base/records/dtype.h"

namespace nanprov::replay {
namespace {

std::string sdpaBackendName(const std::string& backend) {
  if (backend == "cudnn") return "CUDNN_ATTENTION";
  if (backend == "flash" || backend == "flash_cpu") return "FLASH_ATTENTION";
  if (backend == "efficient") return "EFFICIENT_ATTENTION";
  return "MATH";
}

// The next code point of UTF-8 `text` at `i`, advancing `i`; U+FFFD for a byte that starts no
// valid sequence (a capture's metadata is whatever bytes its file holds).
uint32_t nextCodePoint(const std::string& text, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  const int extra = lead < 0x80 ? 0 : (lead >> 5) == 0x6 ? 1 : (lead >> 4) == 0xe ? 2 : (lead >> 3) == 0x1e ? 3 : -1;
  if (extra < 0 || i + static_cast<size_t>(extra) >= text.size()) return ++i, 0xfffd;
  uint32_t cp = extra == 0 ? lead : lead & (0x3f >> extra);
  for (int k = 1; k <= extra; ++k) {
    if ((byte(i + static_cast<size_t>(k)) & 0xc0) != 0x80) return ++i, 0xfffd;
    cp = (cp << 6) | (byte(i + static_cast<size_t>(k)) & 0x3f);
  }
  i += static_cast<size_t>(extra) + 1;
  const uint32_t smallest[] = {0, 0x80, 0x800, 0x10000};
  return cp < smallest[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0xfffd : cp;
}

// Any text as printable ASCII that Python reads back as the same string inside a literal: quotes
// and backslashes escaped, everything outside printable ASCII (line breaks, a lone \r, NUL, U+2028,
// direction overrides) as \x, \u or \U escapes. Capture metadata is written into the script this
// way, in its literals and its comments alike, so no value can end a comment or a string and
// become code.
std::string pythonEscaped(const std::string& text) {
  std::string out;
  char buf[16];
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = nextCodePoint(text, i);
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp >= 0x20 && cp < 0x7f) {
      out += static_cast<char>(cp);
    } else {
      std::snprintf(buf, sizeof buf, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
      out += buf;
    }
  }
  return out;
}

std::string quoted(const std::string& s) { return "\"" + pythonEscaped(s) + "\""; }

}  // namespace

std::string reproScript(const ReproSpec& spec) {
  char scale[40] = "None";
  if (spec.scale) std::snprintf(scale, sizeof scale, "%.17g", *spec.scale);
  std::string s;
  s += "#!/usr/bin/env python3\n";
  s += "# Reproduces what `nanprov replay` found for " + pythonEscaped(spec.call) + ":\n#   " +
       pythonEscaped(spec.finding) + "\n";
  s += "# Captured with: " + pythonEscaped(spec.versions) + "\n";
  s += "# Needs only PyTorch. Run: python repro.py [cuda|cpu]   (exit 1: reproduced, 0: not)\n";
  s += R"py(import json
import os
import struct
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

)py";
  s += "CALL = " + quoted(spec.call) + "\n";
  s += "BACKEND = SDPBackend." + sdpaBackendName(spec.backend) + "\n";
  s += "DEVICE = " + quoted(spec.device) + "\n";
  s += std::string("CAUSAL = ") + (spec.causal ? "True" : "False") + "\n";
  s += std::string("SCALE = ") + scale + "\n";
  s += std::string("GQA = ") + (spec.gqa ? "True" : "False") + "\n";
  s += std::string("PRECISION_LIMIT = ") + (spec.root_cause == "precision-limit" ? "True" : "False") + "\n";
  s += "DTYPES = {";
  for (const DtypeInfo& d : captureDtypes()) {
    s += std::string(&d == &captureDtypes().front() ? "" : ", ") + quoted(d.safetensors) + ": torch." + d.torch;
  }
  s += R"py(}


def load(path):
    """A safetensors file, read with the standard library (no safetensors package needed)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        dtype = DTYPES[info["dtype"]]
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"])
    return tensors


def attention(t, backend, device, dtype=None):
    """O, and dQ/dK/dV for the captured dO, from one SDPA backend."""
    q, k, v = (t[n].to(device, dtype).requires_grad_() for n in "QKV")
    mask = t.get("mask")
    if mask is not None:
        mask = mask.to(device, dtype if mask.dtype != torch.bool else None)
    with sdpa_kernel([backend]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=CAUSAL, scale=SCALE, enable_gqa=GQA)
    out = {"O": o.detach()}
    if "dO" in t:
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), t["dO"].to(device, o.dtype))
        out.update(dQ=dq, dK=dk, dV=dv)
    return out


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else DEVICE
    t = load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "inputs.safetensors"))
    print(f"{CALL}: torch {torch.__version__}, {BACKEND} on {device}, reference MATH in float64 on the CPU")
    got = attention(t, BACKEND, device)
    ref = attention(t, SDPBackend.MATH, "cpu", torch.float64)
    reproduced = []
    for name, x in got.items():
        r = ref[name]
        x64 = x.detach().double().cpu()
        bad, ref_bad = int((~torch.isfinite(x64)).sum()), int((~torch.isfinite(r)).sum())
        finite = torch.isfinite(x64) & torch.isfinite(r)
        err = (x64 - r)[finite]
        rel = float(err.norm() / r[finite].norm().clamp_min(1e-30)) if err.numel() else 0.0
        print(f"  {name}: {bad} non-finite of {x.numel()} (reference: {ref_bad}), relative L2 error {rel:.3g}")
        if (bad and not ref_bad) or rel > 0.05:
            reproduced.append(name)
    if reproduced and PRECISION_LIMIT:
        # nanprov's replay saw every backend fail alike, as did a reordered float32 computation:
        # the values exceed the dtype's range. Any backend shows it; no kernel is at fault.
        print(f"REPRODUCED, a precision limit and not a kernel bug: {', '.join(reproduced)} overflow "
              f"{t['Q'].dtype} in every backend, while the float64 reference is finite")
        sys.exit(1)
    if reproduced:
        print(f"REPRODUCED: {BACKEND} gets {', '.join(reproduced)} wrong")
        sys.exit(1)
    print("not reproduced")


if __name__ == "__main__":
    main()
)py";
  return s;
}

}  // namespace nanprov::replay
