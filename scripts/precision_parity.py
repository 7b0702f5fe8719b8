"""Where the bfloat16 twin and torch's bfloat16 loop part, over settings beyond the fixture.

    pip install torch            # the comparison needs torch (attnsim does not)
    OPENBLAS_NUM_THREADS=1 python scripts/precision_parity.py            # the table in docs/precision.md
    OPENBLAS_NUM_THREADS=1 python scripts/precision_parity.py --steps 300 --settings 256:0.2:8:qform

For each setting (d, lr, T, graph) both train W and p by SGD from attnsim's default data and
initial state at that d and T (seed 0), torch as the official loop writes it, with every
tensor in bfloat16 on the CPU. Printed per setting: the first step after which some entry of
W or p differs, how many entries differ then and by how many bfloat16 units at most, the
largest relative difference of the loss over the run, of |p| at the end, and the first step
at which some sample's softmax is exactly 1.0 in each. With ``--explain`` the first
differing step is taken apart: the gradient GEMMs' float32 sums (torch's own float32 matmul,
NumPy's BLAS, the exact sum) are each rounded to bfloat16 and compared with torch's bfloat16
gradient.
"""

import argparse

import numpy as np
import torch

from attnsim.config import Config
from attnsim.data.dataset import make_streams
from attnsim.models.attention import engines
from attnsim.models.attention.precision import PrecisionTwin
from attnsim.runtime.workspace import Workspace

SETTINGS = [
    "64:0.05:8:qform",
    "64:0.2:8:qform",
    "128:0.2:8:qform",
    "256:0.05:8:qform",
    "256:0.2:8:qform",
    "256:0.2:16:qform",
    "512:0.2:8:qform",
    "256:0.2:8:official",
]


def default_data(d: int, T: int):
    """attnsim's default training set and initial state at this d and T (seed 0)."""
    cfg = Config(d=d, T=T)
    pb, _ = engines.build(cfg, None, make_streams(cfg.seed), "dense", "parity", Workspace())
    n = pb.y.size
    return pb.X2.reshape(n, T, -1), pb.y, pb.W0, pb.p0, pb.nu0


def bf16_units(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| over the entries that differ, in units of the last place (2^-7 relative,
    8 significant bits) of the larger of the two."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    d = a != b
    if not d.any():
        return 0.0
    big = np.maximum(np.abs(a[d]), np.abs(b[d]))
    ulp = 2.0 ** (np.floor(np.log2(big)) - 7)
    return float(np.max(np.abs(a[d] - b[d]) / ulp))


class TorchLoop:
    """torch's SGD on W and p in bfloat16, one step at a time (the official loop's graph,
    or the q form x @ (W @ p))."""

    def __init__(self, X, y, W0, p0, nu, lr, graph):
        dt = torch.bfloat16
        self.X, self.y = torch.tensor(X, dtype=dt), torch.tensor(y, dtype=dt)
        self.W = torch.tensor(W0, dtype=dt, requires_grad=True)
        self.p = torch.tensor(p0.reshape(-1, 1), dtype=dt, requires_grad=True)
        self.nu = torch.tensor(nu.reshape(-1, 1), dtype=dt)
        self.opt = torch.optim.SGD([self.W, self.p], lr=lr)
        self.graph = graph

    def step(self):
        """One update; returns (loss before it, whether a score was exactly 1.0)."""
        self.opt.zero_grad()
        X, W, p = self.X, self.W, self.p
        self.W_before, self.p_before = W.detach().clone(), p.detach().clone()
        if self.graph == "official":
            self.A = X @ W
            self.A.retain_grad()
            z = self.A @ p
        else:
            self.q = W @ p
            self.q.retain_grad()
            z = X @ self.q
            z.retain_grad()
            self.z = z
        s = torch.softmax(z.squeeze(-1), dim=-1)
        out = torch.sum(s * (X @ self.nu).squeeze(-1), dim=1)
        loss = torch.log(1.0 + torch.exp(-self.y * out)).mean()
        loss.backward()
        self.z_grad = None
        sat = bool((s.max(dim=1).values == 1.0).any())
        grads = (self.W.grad.clone(), self.p.grad.clone())
        self.opt.step()
        return loss.item(), sat, grads


def explain(loop: TorchLoop, grads) -> str:
    """At a differing step: each sum of the step (the official graph: W's gradient GEMM; the
    q form: its four GEMVs) as torch's bfloat16 operation returned it, against its float32
    sum by torch, by NumPy's BLAS and exactly, each rounded to bfloat16."""
    gW = grads[0].double().numpy()
    n, T, d = loop.X.shape

    def bf(a):
        return torch.tensor(np.asarray(a)).to(torch.bfloat16).double().numpy()

    if loop.graph == "official":
        X32 = loop.X.float().reshape(n * T, d)
        G32 = loop.A.grad.float().reshape(n * T, d)
        by_torch = (X32.T @ G32).numpy()
        by_numpy = X32.numpy().T @ G32.numpy()
        exact = X32.double().numpy().T @ G32.double().numpy()
        what = "gW = X^T (dz p^T)"
        counts = [int(np.sum(bf(v) != gW)) for v in (by_torch, by_numpy, exact)]
    else:  # the q form's sums: q = W p, z = X q (forward), gq = dz X, gp = gq W (backward)
        W32, p32 = loop.W_before.float(), loop.p_before.float().reshape(-1)
        X32 = loop.X.float().reshape(n * T, d)
        q32, dz32 = loop.q.detach().float().reshape(-1), loop.z.grad.float().reshape(n * T)
        gq32 = loop.q.grad.float().reshape(-1)
        sums = {
            "q = W p": (W32, p32, loop.q.detach()),
            "z = X q": (X32, q32, loop.z.detach()),
            "gq = dz X": (X32.T, dz32, loop.q.grad),
            "gp = gq W": (W32.T, gq32, grads[1]),
        }
        parts = []
        for name, (M, v, theirs) in sums.items():
            theirs = theirs.double().numpy().ravel()
            c = [
                int(np.sum(bf(r) != theirs))
                for r in ((M @ v).numpy(), M.numpy() @ v.numpy(), M.double().numpy() @ v.double().numpy())
            ]
            parts.append(f"{name} {c[0]}/{c[1]}/{c[2]}")
        return (
            "entries of torch's bfloat16 result that differ from bfloat16 of the float32 sum by torch / "
            "by NumPy's BLAS / of the exact sum: " + ", ".join(parts)
        )
    return (
        "entries of torch's bfloat16 result that differ from bfloat16 of the float32 sum by torch / "
        f"by NumPy's BLAS / of the exact sum: {what} {counts[0]}/{counts[1]}/{counts[2]}"
    )


def compare(spec: str, steps: int, show: bool) -> str:
    d, lr, T, graph = spec.split(":")
    d, lr, T = int(d), float(lr), int(T)
    X, y, W0, p0, nu = default_data(d, T)
    n = y.size
    loop = TorchLoop(X, y, W0, p0, nu, lr, graph)
    twin = PrecisionTwin(X.reshape(n * T, d), y, W0, p0, nu, T, np.zeros(n * T), ("W", "p"), lr, "bfloat16",
                         graph=graph)  # fmt: skip
    first_split, split_entries, worst_units, loss_rel, torch_sat = None, 0, 0, 0.0, -1
    note = ""
    for k in range(steps):
        ours = twin.observe().loss
        theirs, sat, grads = loop.step()
        twin.advance(k, 1)
        if sat and torch_sat < 0:
            torch_sat = k
        loss_rel = max(loss_rel, abs(ours - theirs) / abs(theirs))
        Wt, pt = loop.W.detach().float().numpy(), loop.p.detach().float().numpy().ravel()
        Wo, po = np.asarray(twin.W, np.float32), np.asarray(twin.p, np.float32).ravel()
        if first_split is None and (np.any(Wt != Wo) or np.any(pt != po)):
            first_split = k
            split_entries = int(np.sum(Wt != Wo) + np.sum(pt != po))
            worst_units = max(bf16_units(Wt, Wo), bf16_units(pt, po))
            if show:
                note = "\n    " + explain(loop, grads)
    pt = loop.p.detach().float().numpy().ravel()
    po = np.asarray(twin.p, np.float32).ravel()
    p_rel = abs(np.linalg.norm(po) - np.linalg.norm(pt)) / np.linalg.norm(pt)
    split = (
        "never"
        if first_split is None
        else f"step {first_split} ({split_entries} entries, {worst_units:.2g} units)"
    )
    return (
        f"| {d} | {lr:g} | {T} | {graph} | {split} | {loss_rel:.1e} | {p_rel:.1e} | {torch_sat} | "
        f"{twin.first_saturated} |" + note
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--settings", nargs="*", default=SETTINGS, help="d:lr:T:graph ...")
    ap.add_argument("--explain", action="store_true", help="take the first differing step apart")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"bfloat16 twin vs torch {torch.__version__} bfloat16 SGD on W and p, {args.steps} steps")
    print(
        "| d | lr | T | graph | W, p first differ after | loss, max rel. diff. "
        "| \\|p\\| at the end, rel. diff. | torch's first saturated step | twin's |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in args.settings:
        print(compare(spec, args.steps, args.explain), flush=True)


if __name__ == "__main__":
    main()
