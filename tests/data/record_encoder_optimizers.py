"""Record the encoder's optimizer fixture (encoder_optimizers_small.npz) with PyTorch.

Run once, with torch installed (``pip install .[bench]``); the tests read the file
and never need torch. The model is the official one-layer encoder of
``main_one_layer.py`` (keitaroskmt/benign-attention; its classes are copied below,
``einops.repeat`` written as ``expand``) in float64, on the data and initial
parameters of ``peer_encoder_small.npz`` (n = 10, T = 8, d = 64, mlp_dim = 32,
skip connections on), trained on the mean logistic loss of the official loop,
``torch.log(1.0 + torch.exp(-target * output)).mean()``, full batch, 300 steps:

- ``adamw``: ``torch.optim.AdamW(model.parameters(), lr=0.001)`` (betas 0.9 / 0.999,
  eps 1e-8, weight_decay 0.01: torch's defaults; every parameter decays, as one
  parameter group);
- ``normalized``: every parameter tensor steps by lr g / ||g||_F (lr = 0.002; to_qkv's
  weight is one tensor; a zero gradient takes no step).

And the precision twin's checks, the same model with every tensor in the run's dtype:
``sgd_float32``, ``sgd_bfloat16`` (``torch.optim.SGD``, lr 0.02, as the official loop)
and ``adamw_float32`` (AdamW as above), 300 steps each.

Arrays: per run ``NAME_lr``, ``NAME_loss_before_step`` (steps,), ``NAME_loss_final``
and ``NAME_scores_final`` (n, T) (the CLS query's attention on the data tokens).

    python tests/data/record_encoder_optimizers.py
"""

from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).parent
STEPS = 300


class SingleHeadAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim ** (-0.5)
        self.norm = nn.LayerNorm(dim)
        self.attend = nn.Softmax(dim=-1)
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)

    def forward_with_scores(self, x):
        x = self.norm(x)
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        attn = self.attend(torch.matmul(q, k.transpose(-1, -2)) * self.scale)
        return torch.matmul(attn, v), attn


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim), nn.Linear(dim, hidden_dim), nn.GELU(), nn.Dropout(0.0),
            nn.Linear(hidden_dim, dim), nn.Dropout(0.0),
        )  # fmt: skip

    def forward(self, x):
        return self.net(x)


class OneLayerEncoder(nn.Module):
    def __init__(self, dim, mlp_dim):
        super().__init__()
        self.attn = SingleHeadAttention(dim)
        self.ff = FeedForward(dim, mlp_dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))

    def forward_with_scores(self, x):
        cls = self.cls_token.expand(x.shape[0], 1, x.shape[2])
        x = torch.cat((cls, x), dim=1)
        out, attn = self.attn.forward_with_scores(x)
        x = out + x
        x = self.ff(x) + x
        x = self.norm(x)
        return self.head(x[:, 0]).squeeze(1), attn[:, 0, 1:]


# attnsim's parameter names -> the official module's
NAMES = {
    "cls": "cls_token", "ln1_g": "attn.norm.weight", "ln1_b": "attn.norm.bias",
    "W_qkv": "attn.to_qkv.weight", "ln2_g": "ff.net.0.weight", "ln2_b": "ff.net.0.bias",
    "W1": "ff.net.1.weight", "b1": "ff.net.1.bias", "W2": "ff.net.4.weight", "b2": "ff.net.4.bias",
    "lnf_g": "norm.weight", "lnf_b": "norm.bias", "head_w": "head.weight", "head_b": "head.bias",
}  # fmt: skip


def model_of(f, dtype):
    d, m = f["X"].shape[2], f["W1"].shape[0]
    model = OneLayerEncoder(d, m).to(dtype)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for ours, theirs in NAMES.items():
            params[theirs].copy_(torch.tensor(f[ours], dtype=torch.float64).to(dtype))
    return model


def run(f, kind, lr, dtype=torch.float64):
    model = model_of(f, dtype)
    X, y = (torch.tensor(f[k], dtype=torch.float64).to(dtype) for k in ("X", "y"))
    opts = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    opt = opts[kind](model.parameters(), lr=lr) if kind in opts else None
    losses = []
    for _ in range(STEPS):
        model.zero_grad()
        out, _ = model.forward_with_scores(X)
        loss = torch.log(1.0 + torch.exp(-y * out)).mean()
        losses.append(loss.item())
        loss.backward()
        if opt is not None:
            opt.step()
            continue
        with torch.no_grad():
            for p in model.parameters():
                g = p.grad.norm()
                if g > 0:
                    p.sub_(lr * p.grad / g)
    with torch.no_grad():
        out, scores = model.forward_with_scores(X)
        final = torch.log(1.0 + torch.exp(-y * out)).mean().item()
    return np.array(losses), final, scores.double().numpy()


def main():
    f = dict(np.load(HERE / "peer_encoder_small.npz"))
    out = {}
    runs = {
        "adamw": ("adamw", 0.001, torch.float64),
        "normalized": ("normalized", 0.002, torch.float64),
        "sgd_float32": ("sgd", 0.02, torch.float32),
        "sgd_bfloat16": ("sgd", 0.02, torch.bfloat16),
        "adamw_float32": ("adamw", 0.001, torch.float32),
    }
    for name, (kind, lr, dtype) in runs.items():
        losses, final, scores = run(f, kind, lr, dtype)
        out |= {f"{name}_lr": np.float64(lr), f"{name}_loss_before_step": losses}
        out |= {f"{name}_loss_final": np.float64(final), f"{name}_scores_final": scores}
        print(f"{name}: loss {losses[0]:.6f} -> {final:.6f}")
    out["torch_version"] = np.array(torch.__version__)
    np.savez_compressed(HERE / "encoder_optimizers_small.npz", **out)


if __name__ == "__main__":
    main()
