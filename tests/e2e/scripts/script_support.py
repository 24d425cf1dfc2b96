"""What the small test models share: a stack of layers applied in turn, and a short SGD training
loop that prints each step's loss (the tests read it) and can blow up one step's input."""
import torch
import torch.nn as nn


class Stack(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def train(model, shape, steps, lr, glitch_step=-1):
    """`steps` SGD steps on random inputs of `shape` with a square loss; at `glitch_step` the first
    sample is scaled by 1e20, so the first attention's logits overflow float32."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        x = torch.randn(*shape)
        if step == glitch_step:
            x[0] *= 1e20
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4g}", flush=True)
