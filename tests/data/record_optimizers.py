"""Record the optimizer parity fixture (optimizers_small.npz) with PyTorch.

Run once, with torch installed (``pip install .[bench]``); the tests read the
file and never need torch. The model is the paper's, f(X) = nu^T X^T
softmax(X W p), with the mean logistic loss, on the data and initial state of
``peer_small.npz``, all in float64. Three runs, each recording the loss before
every update and after the last:

- ``adamw``: ``torch.optim.AdamW`` with its defaults (betas 0.9, 0.999, eps
  1e-8, weight_decay 0.01), lr 0.01, W and p trained, 200 steps;
- ``adamw_all``: AdamW with betas (0.8, 0.99), eps 1e-6, weight_decay 0.1,
  lr 0.005, W, p and nu trained, 200 steps;
- ``normalized``: every trained block (W, p, nu) steps by lr G / |G|_F, lr
  0.02, 200 steps (a block whose gradient is zero, W's while p = 0, does not move).

    python tests/data/record_optimizers.py
"""

from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).parent
STEPS = 200
RUNS = {
    "adamw": {"train": "W,p", "lr": 0.01, "adam": {}},
    "adamw_all": {
        "train": "W,p,nu",
        "lr": 0.005,
        "adam": {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1},
    },
    "normalized": {"train": "W,p,nu", "lr": 0.02, "adam": None},
}


def loss_of(X, y, W, p, nu):
    s = torch.softmax(X @ (W @ p), dim=1)  # (n, T)
    f = torch.einsum("ntd,nt,d->n", X, s, nu)
    return torch.nn.functional.softplus(-y * f).mean()


def record(f, train, lr, adam):
    X, y = (torch.tensor(f[k], dtype=torch.float64) for k in ("X", "y"))
    params = {k: torch.tensor(f[k0], dtype=torch.float64, requires_grad=k in train.split(","))
              for k, k0 in (("W", "W0"), ("p", "p0"), ("nu", "nu"))}  # fmt: skip
    trained = [params[k] for k in ("W", "p", "nu") if k in train.split(",")]
    opt = torch.optim.AdamW(trained, lr=lr, **adam) if adam is not None else None
    losses = []
    for _ in range(STEPS):
        loss = loss_of(X, y, params["W"], params["p"], params["nu"])
        losses.append(loss.item())
        for t in trained:
            t.grad = None
        loss.backward()
        if opt is not None:
            opt.step()
        else:
            with torch.no_grad():
                for t in trained:  # a zero gradient (W's at p = 0) takes no step
                    norm = torch.linalg.norm(t.grad)
                    if norm > 0:
                        t -= lr * t.grad / norm
    with torch.no_grad():
        final = loss_of(X, y, params["W"], params["p"], params["nu"]).item()
    return np.array(losses), final


def main():
    f = dict(np.load(HERE / "peer_small.npz"))
    out = {k: f[k] for k in ("X", "y", "y_clean", "W0", "p0", "nu", "mu_pos", "mu_neg", "sigma")}
    out["steps"] = np.int64(STEPS)
    for name, run in RUNS.items():
        losses, final = record(f, run["train"], run["lr"], run["adam"])
        out[f"{name}_loss_before_step"], out[f"{name}_loss_final"] = losses, np.float64(final)
        out[f"{name}_lr"] = np.float64(run["lr"])
        print(f"{name}: loss {losses[0]:.6f} -> {final:.6f}")
    out["torch_version"] = np.array(torch.__version__)
    np.savez(HERE / "optimizers_small.npz", **out)


if __name__ == "__main__":
    main()
