"""Reruns a captured FlashAttention 2/3/4 or FFPA call through the package that ran it, for `nanprov replay`.

Their kernels are reachable only through their Python packages, so the replay engine (C++) runs this
in a child process of the Python nanprov was built against:

    python -m nanprov_boot.flash_rerun CAPTURE OUTPUT DEVICE

It reads Q, K, V (and dO, cu_seqlens) from the capture in the layout the run used, calls the
package's public function with the captured scale and causal flag (FFPA: `ffpa_attn_func`, [B, H, N, D],
with the captured additive mask), and writes O (and dQ, dK, dV for a backward capture) to OUTPUT as
safetensors, in that same layout. Exit 0 when it ran; 3, with one
line on stdout, when the package does not import here (the engine then names the captured backend
the suspect); 1, with one line, when the call failed. Stdout carries only that line.
"""

import importlib
import sys

from .flash_attn_probes import FLAVOURS


def _function(backend, varlen):
    """The package's public entry point for a (backend, varlen) call; ImportError when absent."""
    name = "flash_attn_varlen_func" if varlen else "flash_attn_func"
    for module_name, (flavours, _unchecked) in FLAVOURS.items():
        if flavours[0].backend == backend:
            module = importlib.import_module(module_name)
            function = getattr(module, name, None)
            if function is None:
                raise ImportError(f"{module_name} has no {name}")
            return function
    raise ImportError(f"no FlashAttention package is known for backend {backend}")


def _ffpa(tensors, scale, causal):
    """FFPA's dense entry point, called as the run called it: [B, H, N, D], GQA when K has fewer heads."""
    from ffpa_attn import ffpa_attn_func

    def call(q, k, v):
        return ffpa_attn_func(
            q, k, v, attn_mask=tensors.get("mask"), is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )

    return call


def rerun(capture, output, device):
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(capture, "pt") as f:
        meta = f.metadata() or {}
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    varlen = meta.get("arg.layout") == "thd"
    backward = meta.get("phase") == "bwd"
    scale = None if meta.get("arg.scale", "None") == "None" else float(meta["arg.scale"])
    causal = meta.get("arg.is_causal") == "true"
    if meta.get("backend") == "ffpa":
        if "mask" in tensors:
            tensors["mask"] = tensors["mask"].to(device)
        function = _ffpa(tensors, scale, causal)
    else:
        function = _function(meta.get("backend", ""), varlen)
    q, k, v = (tensors[r].to(device).requires_grad_(backward) for r in ("Q", "K", "V"))
    kwargs = {} if meta.get("backend") == "ffpa" else {"softmax_scale": scale, "causal": causal}
    if varlen:
        cu_q, cu_k = (tensors[n].to(device=device, dtype=torch.int32) for n in ("cu_seqlens_q", "cu_seqlens_k"))
        kwargs.update(
            cu_seqlens_q=cu_q,
            cu_seqlens_k=cu_k,
            max_seqlen_q=int((cu_q[1:] - cu_q[:-1]).max()),
            max_seqlen_k=int((cu_k[1:] - cu_k[:-1]).max()),
        )
    with torch.enable_grad():
        result = function(q, k, v, **kwargs)
        out = result[0] if isinstance(result, tuple) else result
        written = {"O": out.detach()}
        if backward:
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), tensors["dO"].to(device))
            written = {"dQ": dq, "dK": dk, "dV": dv}
    save_file({role: t.detach().cpu().contiguous() for role, t in written.items()}, output)


def _first_line(e):
    text = str(e)
    return text.splitlines()[0] if text else ""


def main(argv):
    if len(argv) != 4:
        sys.stderr.write("usage: python -m nanprov_boot.flash_rerun CAPTURE OUTPUT DEVICE (run by nanprov replay)\n")
        return 2
    try:
        rerun(argv[1], argv[2], argv[3])
    except ImportError as e:
        print(f"{type(e).__name__}: {_first_line(e)}")
        return 3
    except Exception as e:  # one line for the engine, never a traceback
        print(f"{type(e).__name__}: {_first_line(e)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
