"""nn.TransformerEncoder in eval() under no_grad: PyTorch's fast path runs the whole layer as
aten::_transformer_encoder_layer_fwd, not as SDPA. nanprov does not check that op yet, and its
report must say so instead of calling the run clean."""
import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for _ in range(3):
            out = model(torch.randn(2, 8, 32))
    print(f"output finite: {bool(torch.isfinite(out).all())}", flush=True)


if __name__ == "__main__":
    main()
