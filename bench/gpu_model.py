"""The overhead benchmark's model (shared/GPU.md): 8 layers, d_model 2048, 16 heads, S=2048, B=4,
bf16, causal SDPA, AdamW. --batch 1 --seq 256 is the launch-bound variant. --attention fa4 runs
FlashAttention-4's flash_attn_func instead of SDPA, --attention flex a compiled FlexAttention with a
causal block mask: the variants whose attention nanprov sees through the bootstrap, not the dispatcher.
--model hf-llama trains a random-init Hugging Face Llama of about 1B parameters instead (16 layers,
d_model 2048, GQA 16/4, vocab 32000; built from a config, nothing is downloaded), B=2, S=2048 by
default, bf16, SDPA: the model shape users run.

--check picks what the training itself does to find NaNs, for the anchors:
  none     nothing (the baseline, and what runs under `nanprov run`)
  anomaly  torch.autograd.detect_anomaly(check_nan=True)
  naive    torch.isfinite(t).all() with a host sync on Q, K, V, O and their gradients
Prints the median step time of the steps after --warmup, in ms. --phases also times the forward,
the backward and the optimizer step apart (a synchronisation after each: where a fixed cost sits).
"""
import argparse
import contextlib
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

NAIVE_CHECKS = 0


def naive_check(t):
    """What people write by hand: one host sync per tensor."""
    global NAIVE_CHECKS
    NAIVE_CHECKS += 1
    if not bool(torch.isfinite(t).all()):
        raise RuntimeError("non-finite tensor")
    return t


def causal_attention(kind, seq):
    """(q, k, v) in [B, H, S, D] -> causal attention output, by SDPA, FlashAttention-4 or FlexAttention."""
    if kind == "fa4":
        from flash_attn.cute import flash_attn_func

        def fa4(q, k, v):
            o = flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=True)
            return (o[0] if isinstance(o, tuple) else o).transpose(1, 2)
        return fa4
    if kind == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, seq, seq, device="cuda")
        compiled = torch.compile(flex_attention)
        return lambda q, k, v: compiled(q, k, v, block_mask=mask)
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, d, heads, naive, attend):
        super().__init__()
        self.heads, self.naive, self.attend = heads, naive, attend
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.naive:
            for t in (q, k, v):
                naive_check(t)
                t.register_hook(naive_check)
        o = self.attend(q, k, v)
        if self.naive:
            naive_check(o)
            o.register_hook(naive_check)
        return self.out(o.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d, heads, naive, attend):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, naive, attend)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(), nn.Linear(4 * d, d, bias=False))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def hf_llama(args):
    """A ~1B Llama from a config (transformers' SDPA attention), and its training step's loss."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=args.d_model, intermediate_size=4 * args.d_model,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=max(1, args.heads // 4), max_position_embeddings=args.seq)
    with torch.device("cuda"):  # initialised on the GPU: on the host a 1B model takes tens of seconds
        model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16)
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")
    run = torch.compile(model) if args.compile else model
    return model, lambda: run(input_ids=tokens, labels=tokens).loss


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--check", default="none", choices=["none", "anomaly", "naive"])
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "fa4", "flex"])
    p.add_argument("--model", default="blocks", choices=["blocks", "hf-llama"])
    p.add_argument("--phases", action="store_true", help="also time forward, backward and optimizer step apart")
    p.add_argument("--compile", action="store_true", help="train torch.compile(model); raise --warmup past the compile")
    p.add_argument("--ddp", action="store_true",
                   help="train under DistributedDataParallel, one rank over NCCL: what the replica digests cost")
    args = p.parse_args()
    if args.model == "hf-llama" and (args.check == "naive" or args.attention != "sdpa"):
        p.error("--model hf-llama runs transformers' own SDPA attention: no --check naive, no --attention")
    if args.ddp and (args.model == "hf-llama" or args.compile):
        p.error("--ddp wraps the hand-written model, uncompiled")

    torch.manual_seed(0)
    naive = args.check == "naive"
    if args.model == "hf-llama":
        model, forward = hf_llama(args)
    else:
        attend = causal_attention(args.attention, args.seq)
        model = nn.Sequential(*[Block(args.d_model, args.heads, naive, attend) for _ in range(args.layers)]).cuda().bfloat16()
        x = torch.randn(args.batch, args.seq, args.d_model, device="cuda", dtype=torch.bfloat16)
        run = torch.compile(model) if args.compile else model
        if args.ddp:
            import os

            import torch.distributed as dist

            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29517")
            dist.init_process_group("nccl", rank=0, world_size=1)
            run = nn.parallel.DistributedDataParallel(model)
        forward = lambda: run(x).float().pow(2).mean()  # noqa: E731
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    anomaly = torch.autograd.detect_anomaly(check_nan=True) if args.check == "anomaly" else contextlib.nullcontext()
    times, every = [], []
    phases = {"fwd": [], "bwd": [], "opt": []}
    # With --phases each phase ends in a synchronisation: how long its host side and its GPU work took.
    mark = torch.cuda.synchronize if args.phases else (lambda: None)
    with anomaly:
        for step in range(args.steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            loss = forward()
            mark()
            t_fwd = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            mark()
            t_bwd = time.perf_counter()
            opt.step()
            torch.cuda.synchronize()
            end = time.perf_counter()
            every.append(end - start)
            if step >= args.warmup:
                times.append(every[-1])
                for name, took in (("fwd", t_fwd - start), ("bwd", t_bwd - t_fwd), ("opt", end - t_bwd)):
                    phases[name].append(took)
    if args.phases:
        print(" ".join(f"{name}_ms {1e3 * statistics.median(t):.3f}" for name, t in phases.items()))
    # step_ms: the steady state (median after the warmup); mean_ms: every step from the first,
    # what one-time costs (autotuning, the audit's first calls) weigh on a short run.
    print(f"step_ms {1e3 * statistics.median(times):.3f} mean_ms {1e3 * statistics.mean(every):.3f} "
          f"naive_checks_per_step {NAIVE_CHECKS / args.steps:.0f}")


if __name__ == "__main__":
    main()
