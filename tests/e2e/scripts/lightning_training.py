"""The tiny transformer trained by Lightning on the CPU, as a Lightning user writes it:
  lightning_training.py --strategy ddp|ddp_spawn [--glitch-rank R --glitch-step S] [--oracle] [--print-losses]
Lightning starts the ranks itself and sets no RANK for them the way torchrun does: `ddp` re-runs
this script for rank 1 with LOCAL_RANK, `ddp_spawn` spawns both ranks from one process. The model,
its data and its glitch are examples/tiny_transformer.py's; the ground truth (--oracle) is that
script's plain-PyTorch forward hooks, on the LightningModule.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))

import lightning as L  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tiny_transformer import SensorModel, batches, install_oracle, say, this_rank  # noqa: E402


class Batches(torch.utils.data.IterableDataset):
    """tiny_transformer's batches, made as they are read: the glitch goes to the rank the process
    group says this process is, which exists only once Lightning has set the group up."""

    def __init__(self, args):
        self.args = args

    def __iter__(self):
        return batches(self.args)


class Lit(L.LightningModule):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.model = SensorModel(args.channels, args.d_model, args.heads, args.layers)
        self.oracle_step = [0]

    def setup(self, stage):
        # In each rank's process: ddp_spawn pickles the module to its ranks, and hooks do not pickle.
        if self.args.oracle:
            self.oracle_step = install_oracle(self)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        self.oracle_step[0] = self.global_step
        x, y = batch
        loss = F.mse_loss(self(x), y)
        if self.args.print_losses:
            say(f"rank{this_rank()} step{self.global_step} loss {loss.item().hex()}")
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.args.lr)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", choices=["ddp", "ddp_spawn"], required=True)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--glitch-step", type=int, default=-1)
    p.add_argument("--glitch-scale", type=float, default=1e20)
    p.add_argument("--glitch-rank", type=int, default=-1)
    p.add_argument("--oracle", action="store_true", help="print the first attention output that went non-finite")
    p.add_argument("--print-losses", action="store_true", help="print each rank's loss bits at every step")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    trainer = L.Trainer(accelerator="cpu", devices=args.devices, strategy=args.strategy, max_steps=args.steps,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, deterministic=True)
    loader = torch.utils.data.DataLoader(Batches(args), batch_size=None)
    trainer.fit(Lit(args), loader)


if __name__ == "__main__":
    main()
