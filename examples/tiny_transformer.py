"""A small real transformer trained on the CPU: the nanprov demo and the end-to-end tests' workload.

It regresses the next value of multichannel sensor sequences. It is a post-LayerNorm encoder, so
the first attention layer sees the input projection's raw activations. The data can carry a real
sensor glitch: one sample of one batch, scaled by --glitch-scale at --glitch-step.
  ~1e20  leaves the activations finite, but the fp32 attention logits overflow: attention itself
         turns finite inputs into NaN (a source edge);
  ~3e38  makes the input Linear overflow first, so attention receives Inf (upstream origin).
Nothing here knows about nanprov.
"""
import argparse
import contextlib
import os
import signal
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, d_model, heads, kv_heads=None):
        super().__init__()
        self.heads = heads
        self.kv_heads = kv_heads or heads  # fewer: grouped-query attention
        self.causal = False
        kv_width = d_model // heads * self.kv_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, kv_width)
        self.v_proj = nn.Linear(d_model, kv_width)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, s, d = x.shape
        split = lambda t, n: t.view(b, s, n, d // self.heads).transpose(1, 2)
        q = split(self.q_proj(x), self.heads)
        k, v = split(self.k_proj(x), self.kv_heads), split(self.v_proj(x), self.kv_heads)
        gqa = {"enable_gqa": True} if self.kv_heads != self.heads else {}
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal and mask is None, **gqa)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d_model, heads, kv_heads=None):
        super().__init__()
        self.attn = SelfAttention(d_model, heads, kv_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.mlp(x))


class MlpBlock(nn.Module):
    """A block without attention (--no-attention): nanprov has nothing to check."""

    def __init__(self, d_model, heads, kv_heads=None):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        return self.norm(x + self.mlp(x))


class Stage(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)


class SensorModel(nn.Module):
    """`layers.<i>` blocks, or with stages > 1 `stages.<s>.blocks.<b>` (two numbers per path)."""

    def __init__(self, channels, d_model, heads, layers, stages=1, block=Block, checkpoint=None, kv_heads=None):
        super().__init__()
        self.embed = nn.Linear(channels, d_model)
        blocks = [block(d_model, heads, kv_heads) for _ in range(layers)]
        if stages > 1:
            per = layers // stages
            self.stages = nn.ModuleList(Stage(blocks[i * per:(i + 1) * per]) for i in range(stages))
        else:
            self.layers = nn.ModuleList(blocks)
        self.head = nn.Linear(d_model, channels)
        self.checkpoint = checkpoint

    def blocks(self):
        if hasattr(self, "stages"):
            return [b for stage in self.stages for b in stage.blocks]
        return list(self.layers)

    def forward(self, x, mask=None):
        h = self.embed(x)
        for i, layer in enumerate(self.blocks()):
            layer_mask = mask[i] if isinstance(mask, list) else mask  # a list: one mask per layer
            if self.checkpoint and self.training:
                from torch.utils.checkpoint import checkpoint

                h = checkpoint(layer, h, layer_mask, use_reentrant=self.checkpoint == "reentrant")
            elif layer_mask is None:
                h = layer(h)  # a block graphed by make_graphed_callables takes tensors only
            else:
                h = layer(h, layer_mask)
        return self.head(h)


def say(line):
    """One write per line, newline included: ranks share the pipe, and print() writes the newline
    apart, so two ranks' lines interleave when stdout is unbuffered (PYTHONUNBUFFERED)."""
    os.write(1, f"{line}\n".encode())


def this_rank():
    """The process group's rank once there is one, else the launcher's RANK (0 without one)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK", "0"))


def init_distributed(args):
    """The process group, as srun users and hand-written launchers start it: the rank and world size
    passed explicitly (--rank, --world-size), or read from Slurm's task variables, never RANK."""
    import torch.distributed as dist

    rank = args.rank if args.rank >= 0 else int(os.environ["SLURM_PROCID"])
    world = args.world_size if args.world_size > 0 else int(os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo", init_method=args.dist_init, rank=rank, world_size=world)


def install_oracle(model):
    """Plain-PyTorch forward hooks on every attention module: the first call whose inputs were finite
    and whose output was not, printed as the ground truth (`oracle: rank R step S module M`)."""
    found, step = [], [0]

    def finite(values):
        return all(bool(torch.isfinite(v).all()) for v in values if isinstance(v, torch.Tensor))

    for name, module in model.named_modules():
        if name.endswith("attn"):
            def hook(mod, inputs, output, name=name):
                if not found and finite(inputs) and not finite([output]):
                    found.append(name)
                    shown = name.removeprefix("module.")  # DDP's wrapper, as nanprov shows paths
                    say(f"oracle: rank {this_rank()} step {step[0]} module {shown}")
            module.register_forward_hook(hook)
    return step


def batches(args):
    gen = torch.Generator().manual_seed(args.seed)
    t = torch.arange(args.seq + 1, dtype=torch.float32)
    for step in range(args.steps):
        phase = torch.rand(args.batch, 1, args.channels, generator=gen) * 6.28
        freq = 0.2 + torch.rand(args.batch, 1, args.channels, generator=gen)
        series = torch.sin(t[None, :, None] * freq + phase)
        series = series + 0.05 * torch.randn(series.shape, generator=gen)
        if step == args.glitch_step and args.glitch_rank in (-1, this_rank()):
            series[0] = series[0] * args.glitch_scale  # one corrupted sample, as a faulty sensor gives
        # Contiguous, as a data loader gives them (torch.compile plans around input strides).
        yield series[:, :-1].contiguous(), series[:, 1:].contiguous()


def alibi_bias(args):
    """ALiBi's additive position bias, -slope_h * |i - j|, built in float32 whatever the model's dtype,
    as models that make their bias once in full precision do."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, args.heads + 1) / args.heads)
    pos = torch.arange(args.seq, dtype=torch.float32)
    return -(slopes[:, None, None] * (pos[None, :, None] - pos[None, None, :]).abs())[None]


def padding_mask(args, hide_rows):
    """Bool mask, True = may attend: the last quarter of each sequence is padding; with
    `hide_rows` its query rows see no key at all (fully masked rows)."""
    keep = torch.ones(args.batch, 1, args.seq, args.seq, dtype=torch.bool)
    keep[..., args.seq - args.seq // 4:] = False
    if hide_rows:
        keep[..., args.seq - args.seq // 4:, :] = False
    return keep


def bucket_health_hook(state, bucket):
    """DDP's own all-reduce of a gradient bucket (the mean, as DDP's default), checked in plain
    PyTorch before and after: the ground truth of which rank sent non-finite values in which step."""
    import torch.distributed as dist

    buf = bucket.buffer()
    before = "finite" if bool(torch.isfinite(buf).all()) else "nonfinite"

    def after(fut):
        out = fut.value()[0]
        health = "finite" if bool(torch.isfinite(out).all()) else "nonfinite"
        os.write(1, f"bucket rank{dist.get_rank()} step{state['step']} index{bucket.index()} input {before} "
                    f"output {health}\n".encode())
        return out

    buf.div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(after)


def die(how, forward):
    """Ends the process the way crash handlers, DataLoader workers and launchers do: no Python
    cleanup runs (SIGTERM's default action is the same as a kill)."""
    if how == "sigkill-mid-step":
        time.sleep(0.5)  # the step's own flush lands first; only the forward pass below is in flight
        with torch.no_grad():
            forward()
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "sigkill":
        time.sleep(0.5)  # let the step's flush land, as a real job's later crash would
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "os_exit":
        os._exit(7)
    elif how == "c_exit":
        import ctypes

        ctypes.CDLL(None).exit(7)
    else:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)


def flip_bit(model, name, rank, step):
    """Flips mantissa bit 20 of the first element of parameter `name` in place, as a faulty device
    might, and prints what it flipped: the oracle the replica digests are tested against."""
    w = dict(model.named_parameters())[name]
    w = getattr(w, "_local_tensor", w)  # FSDP2's DTensor: this rank's own shard
    words = {2: torch.int16, 4: torch.int32, 8: torch.int64}[w.element_size()]
    bit = 20 if w.element_size() >= 4 else 3  # a mantissa bit in float32/64; in 16-bit floats, a low one
    with torch.no_grad():
        first = w.view(-1)[:1].view(words)
        before = first.item()
        first.bitwise_xor_(1 << bit)
        after = first.item()
    shown = name[len("module."):] if name.startswith("module.") else name  # as the model names it, without DDP's wrapper
    say(f"flipped bit {bit} of {shown}[0] on rank {rank} at step {step}: {before:#x} -> {after:#x}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=None, help="fewer key/value heads: grouped-query attention")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--glitch-step", type=int, default=-1, help="step whose batch carries the glitch (-1: none)")
    p.add_argument("--glitch-scale", type=float, default=1e20)
    p.add_argument("--glitch-rank", type=int, default=-1, help="only this rank's batch carries the glitch (-1: every rank's)")
    p.add_argument("--mask", action="store_true", help="pass a bool padding mask to attention")
    p.add_argument("--causal", action="store_true", help="causal attention (is_causal=True; without a mask)")
    p.add_argument("--alibi-f32-layer", type=int, default=-1,
                   help="ALiBi in every layer, in the model's dtype, except this layer's: float32 from "
                        "--alibi-f32-from-step on (cuDNN's silent-wrong case, in one layer, mid-run)")
    p.add_argument("--alibi-f32-from-step", type=int, default=0)
    p.add_argument("--alibi-f32", action="store_true",
                   help="pass an ALiBi position bias, built in float32, as the attention mask")
    p.add_argument("--band-layer", type=int, default=-1,
                   help="an additive float mask of zeros in every layer; from --band-from-step on, this layer's "
                        "hides a band of keys with -30000 (a mask value arriving mid-run)")
    p.add_argument("--band-from-step", type=int, default=0)
    p.add_argument("--band-f32", action="store_true",
                   help="build the --band-layer masks in float32 whatever the model's dtype (cuDNN's silent-wrong "
                        "case: every layer shares one call signature, and the band arrives in one)")
    p.add_argument("--math", action="store_true", help="force the MATH SDPA backend")
    p.add_argument("--mask-rows", action="store_true",
                   help="padding also hides whole query rows (those rows see no key)")
    p.add_argument("--mask-rows-from", type=int, default=-1,
                   help="pass the --mask padding mask, then from this step on the --mask-rows one")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-cudnn", action="store_true", help="exclude cuDNN from SDPA (a control run)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--ddp", action="store_true", help="DistributedDataParallel over gloo (run under torchrun)")
    p.add_argument("--dist-init", default=None,
                   help="with --ddp: init_process_group at this URL (tcp://HOST:PORT, file://PATH), rank and world size from "
                        "--rank and --world-size, else from SLURM_PROCID and SLURM_NTASKS")
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--world-size", type=int, default=0)
    p.add_argument("--oracle", action="store_true", help="print the first attention output that went non-finite")
    p.add_argument("--forward-before-group", action="store_true",
                   help="with --ddp: one forward pass (no grad) before the process group is started")
    p.add_argument("--fsdp2", action="store_true",
                   help="FSDP2 (fully_shard per block, then the whole model) over gloo (run under torchrun)")
    p.add_argument("--hsdp", action="store_true",
                   help="with --fsdp2: HSDP, a 2-D mesh (replicate, shard) with shards of 2 ranks, replicated "
                        "across the rest (an even world size)")
    p.add_argument("--bucket-health", action="store_true",
                   help="with --ddp: print whether each gradient bucket was finite before and after its all-reduce")
    p.add_argument("--flip-bit-step", type=int, default=-1,
                   help="at this step, after backward and before the optimizer step, flip mantissa bit 20 of the "
                        "first element of the head's weight (a silent device fault: finite, on one rank only)")
    p.add_argument("--flip-bit-rank", type=int, default=0, help="the rank whose parameter --flip-bit-step flips")
    p.add_argument("--print-losses", action="store_true", help="print each loss as an exact hex float")
    p.add_argument("--speed", action="store_true", help="print steady-state steps/s (steps after the first)")
    p.add_argument("--profile", action="store_true", help="train inside torch.profiler (CPU and CUDA activities)")
    p.add_argument("--die-after-step", type=int, default=-1, help="end the process abruptly after this step (tests)")
    p.add_argument("--die-how", default="sigkill", choices=["sigkill", "sigkill-mid-step", "os_exit", "c_exit", "sigterm"],
                   help="how --die-after-step ends it: SIGKILL half a second later; SIGKILL half a second later, right after one "
                        "more forward pass (its calls still queued); or at once os._exit(7), C's exit(7) (no "
                        "Python atexit) or SIGTERM, as launchers and crash handlers do")
    p.add_argument("--compile", nargs="?", const="default", default=None,
                   help="torch.compile the model (optionally with this mode, e.g. max-autotune-no-cudagraphs)")
    p.add_argument("--fullgraph", action="store_true", help="torch.compile with fullgraph=True")
    p.add_argument("--graphed", action="store_true",
                   help="each block captured into CUDA graphs by torch.cuda.make_graphed_callables (CUDA, no mask)")
    p.add_argument("--checkpoint", choices=["reentrant", "nonreentrant"],
                   help="activation checkpointing of every block (torch.utils.checkpoint)")
    p.add_argument("--stages", type=int, default=1, help="group the layers into stages.<s>.blocks.<b>")
    p.add_argument("--no-attention", action="store_true", help="blocks without attention")
    p.add_argument("--eval", action="store_true",
                   help="inference only: model.eval() under torch.no_grad(), one forward pass per batch")
    p.add_argument("--regulariser-nan-step", type=int, default=-1,
                   help="add sqrt(sum((w - anchor)^2)) on the head's weight; at this step the anchor is "
                        "reset to w, so d sqrt at 0 makes that gradient NaN outside attention")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    block = MlpBlock if args.no_attention else Block
    model = SensorModel(args.channels, args.d_model, args.heads, args.layers, args.stages, block,
                        args.checkpoint, args.kv_heads).to(args.device, dtype)
    for block in model.blocks() if args.causal and not args.no_attention else []:
        block.attn.causal = True
    anchor = model.head.weight.detach().clone() + 1.0
    bucket_state = {"step": 0}  # --bucket-health: the step the hook's lines name
    if args.ddp:
        import torch.distributed as dist

        if args.forward_before_group:
            with torch.no_grad():
                model(torch.zeros(1, args.seq, args.channels, device=args.device, dtype=dtype), None)
        if args.dist_init:
            init_distributed(args)
        else:
            dist.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
        if args.bucket_health:
            model.register_comm_hook(bucket_state, bucket_health_hook)
    if args.fsdp2:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        device_type = torch.device(args.device).type
        if device_type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
        # The mesh on the model's device: FSDP2's default is the accelerator's, even for a CPU model.
        world = dist.get_world_size()
        if args.hsdp:  # shards of 2 ranks, replicated world/2 times: [[0, 1], [2, 3]] for 4 ranks
            mesh = init_device_mesh(device_type, (world // 2, 2), mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(device_type, (world,))
        # Parameters become DTensors sharded over the ranks; the names stay the model's.
        for block in model.blocks():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    if args.graphed:
        # Forward and backward of each block replay as CUDA graphs; the sample only fixes shapes.
        sample = torch.randn(args.batch, args.seq, args.d_model, device=args.device, dtype=dtype, requires_grad=True)
        for i, block in enumerate(model.layers):
            model.layers[i] = torch.cuda.make_graphed_callables(block, (sample,))
    if args.compile:
        mode = None if args.compile == "default" else args.compile
        model = torch.compile(model, mode=mode, fullgraph=args.fullgraph)
    if args.eval:
        model.eval()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    masked = args.mask or args.mask_rows or args.mask_rows_from >= 0
    mask = padding_mask(args, args.mask_rows).to(args.device) if masked else None
    if args.alibi_f32:
        mask = alibi_bias(args).to(args.device)
    # --mask-rows-from: a later batch brings fully masked rows, as a short sample padded out does.
    late_mask = padding_mask(args, True).to(args.device) if args.mask_rows_from >= 0 else None
    backend = contextlib.nullcontext()
    if args.math:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = sdpa_kernel(SDPBackend.MATH)

    head_weight = next(n for n, _ in model.named_parameters() if n.endswith("head.weight"))
    if args.no_cudnn:
        torch.backends.cuda.enable_cudnn_sdp(False)
    rank = this_rank()
    oracle_step = install_oracle(model) if args.oracle else [0]
    started = None
    profiler = contextlib.nullcontext()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
        profiler = profile(activities=activities)
    with backend, profiler as prof:
        for step, (x, y) in enumerate(batches(args)):
            oracle_step[0] = step
            if step == 1:
                started = time.perf_counter()
            bucket_state["step"] = step
            x, y = x.to(args.device, dtype), y.to(args.device, dtype)
            if late_mask is not None and step == args.mask_rows_from:
                mask = late_mask
            if args.band_layer >= 0:
                band_dtype = torch.float32 if args.band_f32 else dtype
                mask = [torch.zeros(1, 1, args.seq, args.seq, dtype=band_dtype, device=args.device)
                        for _ in range(args.layers)]
                if step >= args.band_from_step:
                    mask[args.band_layer][..., : args.seq // 4] = -30000.0
            if args.alibi_f32_layer >= 0:
                bias = alibi_bias(args).to(args.device)
                mask = [bias.to(dtype)] * args.layers
                if step >= args.alibi_f32_from_step:
                    mask[args.alibi_f32_layer] = bias
            if args.eval:
                with torch.no_grad():
                    loss = F.mse_loss(model(x, mask).float(), y.float())
            else:
                loss = F.mse_loss(model(x, mask).float(), y.float())
                if args.regulariser_nan_step >= 0:
                    w = dict(model.named_parameters())[head_weight]
                    if step == args.regulariser_nan_step:
                        anchor.copy_(w.detach())
                    loss = loss + 1e-3 * torch.sqrt(((w - anchor) ** 2).sum())
                opt.zero_grad()
                loss.backward()
                if step == args.flip_bit_step and rank == args.flip_bit_rank:
                    flip_bit(model, head_weight, rank, step)
                opt.step()
            if args.print_losses:
                say(f"rank{rank} step{step} loss {loss.item().hex()}")
            elif rank == 0 and not args.speed:
                say(f"step {step}: loss {loss.item():.4g}")
            if step == args.die_after_step:
                die(args.die_how, lambda: model(x, mask))
    if args.profile:
        print(f"profiler events: {len(prof.events())}", flush=True)
    if args.speed and started is not None:
        print(f"steps_per_sec {(args.steps - 1) / (time.perf_counter() - started):.3f}", flush=True)
    if args.ddp or args.fsdp2:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
