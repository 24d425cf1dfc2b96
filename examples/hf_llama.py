"""A tiny random-init Hugging Face Llama trained for a few steps on the CPU, with
attn_implementation="sdpa" (the default) or, with --attn eager, HF's eager attention (plain
softmax in matmul ops, HF's path for output_attentions=True). No weights are downloaded: the config
builds the model. Used by the end-to-end tests to check that nanprov numbers layers from the
model's module paths (model.layers.<i>.self_attn), and finds the same edge in eager and sdpa.
--attn flash_attention_2/3/4 runs HF's FlashAttention path (its package must import; HF asks for a
CUDA GPU first, which --attn-after-build skips: the CPU tests run FlashAttention 3 that way, through
a stand-in package of its signature).

With --overflow-layer L --overflow-step N, layer L's query and key projections are scaled by 1e20
at step N: Q and K stay finite, their scores overflow float32 inside attention."""
import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--attn", choices=["sdpa", "eager", "flash_attention_2", "flash_attention_3", "flash_attention_4"],
                   default="sdpa", help="attn_implementation")
    p.add_argument("--attn-after-build", action="store_true",
                   help="build with sdpa, then switch every layer to --attn without HF's availability checks")
    p.add_argument("--overflow-layer", type=int, default=-1)
    p.add_argument("--overflow-step", type=int, default=-1)
    p.add_argument("--gradient-checkpointing", action="store_true", help="model.gradient_checkpointing_enable()")
    args = p.parse_args()

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=args.layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    built_with = "sdpa" if args.attn_after_build else args.attn
    model = LlamaForCausalLM._from_config(config, attn_implementation=built_with).to(args.device, getattr(torch, args.dtype))
    if args.attn_after_build:
        for module in model.modules():
            if hasattr(module, "config"):
                module.config._attn_implementation = args.attn
    current = [0]
    if args.overflow_layer >= 0:
        attn = model.model.layers[args.overflow_layer].self_attn
        for proj in (attn.q_proj, attn.k_proj):
            proj.register_forward_hook(lambda m, a, out: out * 1e20 if current[0] == args.overflow_step else None)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        current[0] = step
        ids = torch.randint(0, config.vocab_size, (2, args.seq), generator=gen).to(args.device)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
