"""nn.TransformerEncoder in eval() under no_grad: PyTorch's fast path runs each layer as
aten::_transformer_encoder_layer_fwd, whose attention is aten::_native_multi_head_attention, not
SDPA's Python entry point. nanprov probes that op: a glitch in one batch (--glitch-pass) is found at
that forward pass, in the first layer."""
import argparse

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--glitch-pass", type=int, default=-1, help="forward pass whose batch carries a ~1e20 sample")
    p.add_argument("--glitch-scale", type=float, default=1e20)
    p.add_argument("--padding", action="store_true", help="pad the last 2 positions (src_key_padding_mask)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the encoder")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--print-outputs", action="store_true",
                   help="print each pass's output sum and a fresh random draw as exact hex floats (tests)")
    args = p.parse_args()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    model = model.to(args.device, getattr(torch, args.dtype))
    if args.compile:
        model = torch.compile(model)
    with torch.no_grad():
        for i in range(args.passes):
            x = torch.randn(2, 8, 32).to(args.device, getattr(torch, args.dtype))
            if i == args.glitch_pass:
                x[0] *= args.glitch_scale  # one corrupted sample, as a faulty sensor gives
            pad = None
            if args.padding:
                pad = torch.zeros(2, 8, dtype=torch.bool, device=args.device)
                pad[:, -2:] = True  # True = padding, as PyTorch's encoder masks say
            out = model(x, src_key_padding_mask=pad)
            if args.print_outputs:  # the random draw shows nothing consumed the global generator
                print(f"pass {i}: {out.double().sum().item().hex()} {torch.rand(1).item().hex()}", flush=True)
                continue
            print(f"pass {i}: output finite: {bool(torch.isfinite(out).all())}", flush=True)


if __name__ == "__main__":
    main()
