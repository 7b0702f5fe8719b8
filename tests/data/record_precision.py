"""Record the precision twin's parity fixture (precision_small.npz) with PyTorch.

Run once, with torch installed (``pip install .[bench]``); the tests read the
file and never need torch. Every run is the official loop of main.py
(keitaroskmt/benign-attention) on the data and initial state of
``peer_small.npz``: ``z = (x @ W @ p)``, ``torch.softmax``, ``sum(s * (x @ nu))``,
``torch.log(1.0 + torch.exp(-y * out)).mean()``, with every tensor in the run's
dtype, on the CPU:

- ``official_float32``, ``official_bfloat16``: SGD on W and p, lr 0.05, 1000 steps;
- ``qform_float32``, ``qform_bfloat16``: the same with ``x @ (W @ p)``;
- ``adamw_float32``, ``adamw_bfloat16``: ``torch.optim.AdamW`` at its defaults,
  lr 0.01, W and p, 300 steps (official graph);
- ``stablemax_qform_float32``, ``stablemax_qform_bfloat16``: the q form's SGD with
  StableMax for the softmax, as Prieto et al.'s reference code writes it
  (``where(z < 0, 1 / (1 - z + 1e-30), z + 1)``, divided by its sum), lr 0.05,
  1000 steps; ``stablemax_float64``: the same in float64 (the exact run's check);
- ``sat_float32`` (W = I fixed, p alone, lr 12.5) and ``sat_bfloat16`` (W = I,
  p alone, lr 2): up to 10^4 steps, stopping at the first step at which
  torch's softmax returns exactly 1.0 for some training sample
  (``NAME_first_saturated``, -1 if none).

And ``adamw_d200``: attnsim's default data at d = 200 (seed 0, built by
attnsim's dense engine), ``x @ (W @ p)``, float32 ``torch.optim.AdamW`` at lr
0.001 (defaults otherwise) on W and p for 20 000 steps, where float32 saturates
every score: ``adamw_d200_loss_every_100`` and ``adamw_d200_first_saturated``.

Each run stores ``NAME_loss_before_step`` (the loss before every update, as a
float64 copy of the run's value) and ``NAME_lr``.

    python tests/data/record_precision.py
"""

from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).parent
RUNS = {
    "official_float32": dict(dtype=torch.float32, graph="official", lr=0.05, steps=1000),
    "official_bfloat16": dict(dtype=torch.bfloat16, graph="official", lr=0.05, steps=1000),
    "qform_float32": dict(dtype=torch.float32, graph="qform", lr=0.05, steps=1000),
    "qform_bfloat16": dict(dtype=torch.bfloat16, graph="qform", lr=0.05, steps=1000),
    "adamw_float32": dict(dtype=torch.float32, graph="official", lr=0.01, steps=300, adamw=True),
    "adamw_bfloat16": dict(dtype=torch.bfloat16, graph="official", lr=0.01, steps=300, adamw=True),
    "stablemax_qform_float32": dict(dtype=torch.float32, graph="qform", lr=0.05, steps=1000, stable=True),
    "stablemax_qform_bfloat16": dict(dtype=torch.bfloat16, graph="qform", lr=0.05, steps=1000, stable=True),
    "stablemax_float64": dict(dtype=torch.float64, graph="qform", lr=0.05, steps=1000, stable=True),
    "sat_float32": dict(dtype=torch.float32, graph="official", lr=12.5, steps=10_000, p_alone=True),
    "sat_bfloat16": dict(dtype=torch.bfloat16, graph="official", lr=2.0, steps=10_000, p_alone=True),
}


def stablemax(z):
    """Prieto et al.'s StableMax over the last axis, as their reference code writes it."""
    w = torch.where(z < 0, 1 / (1 - z + 1e-30), z + 1)
    return w / torch.sum(w, dim=-1, keepdim=True)


def record(f, dtype, graph, lr, steps, adamw=False, p_alone=False, stable=False):
    X, y = (torch.tensor(f[k], dtype=dtype) for k in ("X", "y"))
    d = X.shape[2]
    W = torch.eye(d, dtype=dtype) if p_alone else torch.tensor(f["W0"], dtype=dtype)
    W.requires_grad_(not p_alone)
    p = torch.tensor(f["p0"].reshape(-1, 1), dtype=dtype, requires_grad=True)
    nu = torch.tensor(f["nu"].reshape(-1, 1), dtype=dtype)
    params = [p] if p_alone else [W, p]
    opt = torch.optim.AdamW(params, lr=lr) if adamw else torch.optim.SGD(params, lr=lr)
    losses, first = [], -1
    for t in range(steps):
        opt.zero_grad()
        z = (X @ W @ p) if graph == "official" else (X @ (W @ p))
        s = stablemax(z.squeeze(-1)) if stable else torch.softmax(z.squeeze(-1), dim=-1)
        out = torch.sum(s * (X @ nu).squeeze(-1), dim=1)
        loss = torch.log(1.0 + torch.exp(-y * out)).mean()
        losses.append(loss.item())
        if p_alone and bool((s.max(dim=1).values == 1.0).any()):
            first = t
            break
        loss.backward()
        opt.step()
    return np.array(losses), first


def record_adamw_d200(steps=20_000):
    from attnsim.config import Config
    from attnsim.data.dataset import make_streams
    from attnsim.models.attention import engines
    from attnsim.runtime.workspace import Workspace

    cfg = Config(d=200, optimizer="adam", lr=0.001)
    pb, _ = engines.build(cfg, None, make_streams(cfg.seed), "dense", "fixture", Workspace())
    n, T = pb.y.size, pb.T
    X, y = torch.tensor(pb.X2.reshape(n, T, -1)), torch.tensor(pb.y)
    X, y = X.float(), y.float()
    W = torch.tensor(pb.W0, dtype=torch.float32, requires_grad=True)
    p = torch.tensor(pb.p0.reshape(-1, 1), dtype=torch.float32, requires_grad=True)
    nu = torch.tensor(pb.nu0.reshape(-1, 1), dtype=torch.float32)
    opt = torch.optim.AdamW([W, p], lr=cfg.lr)
    losses, first = [], -1
    for t in range(steps):
        opt.zero_grad()
        s = torch.softmax((X @ (W @ p)).squeeze(-1), dim=-1)
        loss = torch.log(1.0 + torch.exp(-y * torch.sum(s * (X @ nu).squeeze(-1), dim=1))).mean()
        if t % 100 == 0:
            losses.append(loss.item())
        if first < 0 and bool((s.max(dim=1).values == 1.0).any()):
            first = t
        loss.backward()
        opt.step()
    return np.array(losses), first


def main():
    f = dict(np.load(HERE / "peer_small.npz"))
    out = {k: f[k] for k in ("X", "y", "y_clean", "W0", "p0", "nu", "mu_pos", "mu_neg", "sigma")}
    for name, run in RUNS.items():
        losses, first = record(f, **run)
        out[f"{name}_loss_before_step"] = losses
        out[f"{name}_lr"] = np.float64(run["lr"])
        if run.get("p_alone"):
            out[f"{name}_first_saturated"] = np.int64(first)
        print(
            f"{name}: {losses.size} steps, loss {losses[0]:.6f} -> {losses[-1]:.6f}, first saturated {first}"
        )
    losses, first = record_adamw_d200()
    out["adamw_d200_loss_every_100"], out["adamw_d200_first_saturated"] = losses, np.int64(first)
    print(f"adamw_d200: first saturated {first}, loss {losses[0]:.6f} -> {losses[-1]:.6f}")
    out["torch_version"] = np.array(torch.__version__)
    np.savez_compressed(HERE / "precision_small.npz", **out)


if __name__ == "__main__":
    main()
