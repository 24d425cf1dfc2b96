"""x-transformers (installed from the package index, as a user has it) trained on the CPU: a small
TransformerWrapper over a causal Decoder, whose Attend computes einsum('b h i d, b h j d -> b h i j'),
a scale, a causal masked_fill, a float32 softmax, dropout and einsum back: attention nanprov must
recognise by what it computes. Four optimizer steps on random tokens.

--fault attention: at --glitch-step a bad update has multiplied the second attention layer's
(attn_layers.layers.2.1) q and k weights by 1e20: its logits overflow float32 from finite q and k.
--fault mlp: at --glitch-step the second feedforward's (attn_layers.layers.3.1) first weight is
multiplied by 1e38: the values are made outside attention, after the last attention layer.

--oracle adds plain-PyTorch forward hooks on every module and prints the first module whose output
went non-finite from finite inputs, and the step. --print-losses prints each loss as an exact hex float."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from x_transformers import Decoder, TransformerWrapper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
from mha_padding import install_oracle  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--glitch-step", type=int, default=-1)
    p.add_argument("--fault", choices=("attention", "mlp"), default="attention")
    p.add_argument("--oracle", action="store_true")
    p.add_argument("--print-losses", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = TransformerWrapper(num_tokens=64, max_seq_len=16, attn_layers=Decoder(dim=32, depth=2, heads=4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = [0]
    if args.oracle:
        install_oracle(model, steps)
    gen = torch.Generator().manual_seed(0)
    layers = model.attn_layers.layers
    for step in range(args.steps):
        steps[0] = step
        if step == args.glitch_step:
            with torch.no_grad():  # a bad update
                if args.fault == "attention":
                    layers[2][1].to_q.weight.mul_(1e20)
                    layers[2][1].to_k.weight.mul_(1e20)
                else:
                    layers[3][1].ff[0][0].weight.mul_(1e38)
        tokens = torch.randint(0, 64, (4, 17), generator=gen)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.item()
        print(f"step {step}: loss {value.hex() if args.print_losses else format(value, '.4g')}", flush=True)


if __name__ == "__main__":
    main()
