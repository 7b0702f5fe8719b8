"""Multi-head linear attention in context as attnsim trains it (SPEC §21b): the heads' reduced
parameters (:mod:`.reference`'s note), GD on the population loss or on P sequences (the loss a
quadratic in T = sum_i c_i B_i, its moments formed once), the gradient flow on the population loss
by SciPy's LSODA between log points, and the plateaus a run's loss visited.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.integrate import LSODA

from ..base import Outcome, Stepper
from .reference import grads, product

BLOCKS = {"merged": ("c", "B"), "separate": ("c", "K", "Q")}


def initial(cfg: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The initial reduced weights, drawn in the order c, then B (merged) or K, Q.

    ``init=gaussian``: every entry ~ N(0, init_scale^2). ``init=published``: the authors' net.py
    (yedizhang/linattn-icl) with ``--init init_scale``: ATTN_S's value and key/query entries with
    std init_scale / sqrt(their layer's entries), H (D+1)^2 and H r (D+1); ATTN_M's every entry
    init_scale. Their forward pass leaves out the 1/N, so their weights are attnsim's divided by
    N^(1/3) (ATTN_S: three factors) or N^(1/2) (ATTN_M: two); drawn here already multiplied, a run
    at lr = their lr * N^(2/3) (ATTN_S) or their lr * N (ATTN_M) then takes their SGD's steps on the
    same loss (one attnsim step per epoch)."""
    H, D, r, s = cfg.heads, cfg.d, cfg.rank, cfg.init_scale
    merged = cfg.parametrization == "merged"
    sc = sk = s
    if cfg.init == "published":
        N = cfg.context
        if merged:
            sc = sk = s * N**0.5
        else:
            sc, sk = s * N ** (1 / 3) / np.sqrt(H * (D + 1) ** 2), s * N ** (1 / 3) / np.sqrt(H * r * (D + 1))
    out = {"c": sc * rng.standard_normal(H)}
    if merged:
        out["B"] = sk * rng.standard_normal((H, D, D))
    else:
        out["K"] = sk * rng.standard_normal((H, r, D))
        out["Q"] = sk * rng.standard_normal((H, r, D))
    return out


class _Heads(Stepper):
    """What GD and the flow share: the parameters, the losses and |T| as metrics."""

    def __init__(self, problem: Any, cfg: Any) -> None:
        self.problem, self.cfg = problem, cfg
        self.kind = cfg.parametrization
        self.p = {k: np.array(v, copy=True) for k, v in problem.params0.items()}

    def state(self) -> dict[str, np.ndarray]:
        return self.p

    def extra_metrics(self) -> dict[str, float]:
        T = product(self.p, self.kind)
        out = {"population_loss": self.problem.population.loss(T), "t_norm": float(np.linalg.norm(T))}
        if self.problem.train is not None:
            out["train_loss"] = self.problem.train.loss(T)
        return out

    def _grads(self, p: dict) -> dict:
        return grads(p, self.kind, self.problem.objective_moments.grad_T(product(p, self.kind)))


class GD(_Heads):
    """Plain GD: each step every block -= lr * its gradient."""

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        lr = self.cfg.lr
        for j in range(int(nsteps)):
            g = self._grads(self.p)
            for k in self.p:
                self.p[k] -= lr * g[k]
            if not all(np.isfinite(v).all() for v in self.p.values()):
                return Outcome.DIVERGED, int(step0) + j
        return Outcome.FINISHED, int(step0) + int(nsteps)


class Flow(_Heads):
    """The gradient flow d theta/dt = -grad L on the population loss, t = lr * step, by one LSODA
    solver stepped past each log point and read there from its dense output (rtol 1e-10, atol 1e-14:
    the plateaus' levels to 1e-12). Once a direction
    is learned it relaxes fast while the next plateau lasts long: the flow turns stiff, and an
    explicit method's steps stay below the fast direction's time scale (DOP853 took 358 s to
    t = 2e6 at D = 3, H = 3; LSODA, which switches to BDF there, 1.7 s, the same plateaus to 1e-15).
    The state is a few dozen numbers: an implicit step's dense Jacobian costs nothing."""

    whole_spans = True
    rtol, atol = 1e-10, 1e-14

    def __init__(self, problem: Any, cfg: Any) -> None:
        super().__init__(problem, cfg)
        self.names = list(self.p)
        self.shapes = [self.p[k].shape for k in self.names]
        self.sizes = [self.p[k].size for k in self.names]
        self._ode: LSODA | None = None

    def _pack(self, p: dict) -> np.ndarray:
        return np.concatenate([p[k].ravel() for k in self.names])

    def _unpack(self, theta: np.ndarray) -> dict:
        out, o = {}, 0
        for k, shape, size in zip(self.names, self.shapes, self.sizes):
            out[k] = theta[o : o + size].reshape(shape)
            o += size
        return out

    def _field(self, t: float, theta: np.ndarray) -> np.ndarray:
        g = self._grads(self._unpack(theta))
        return -np.concatenate([g[k].ravel() for k in self.names])

    def _solver(self, t0: float) -> LSODA:
        """One solver for the whole run (restarting it at every log point cost 1000 times more:
        each start probes its first step afresh), started again only after a restore."""
        if self._ode is None:
            self._ode = LSODA(self._field, t0, self._pack(self.p), np.inf, rtol=self.rtol, atol=self.atol)
        return self._ode

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        lr = self.cfg.lr
        t1 = lr * (step0 + nsteps)
        ode = self._solver(lr * step0)
        while ode.t < t1:
            if ode.step() is not None or ode.status == "failed":
                self.detail = f"the gradient flow stalled at t = {ode.t:.6g}"
                return Outcome.STALLED, step0
        theta = ode.dense_output()(t1) if ode.t > t1 else ode.y
        if not np.isfinite(theta).all():
            return Outcome.DIVERGED, step0
        for k, v in self._unpack(theta).items():
            self.p[k][...] = v
        if self.progress is not None:
            self.progress(step0 + nsteps)
        return Outcome.FINISHED, step0 + nsteps

    def snapshot(self) -> Any:
        return {k: v.copy() for k, v in self.p.items()}

    def restore(self, snap: Any) -> None:
        for k, v in snap.items():
            self.p[k][...] = v
        self._ode = None  # the solver starts again from the restored state


def plateaus(step: np.ndarray, loss: np.ndarray, saddles: np.ndarray, tol: float = 1e-3, run: int = 3):
    """The saddles' levels the loss sat at, in order: stretches of at least ``run`` log points within
    ``tol`` (relative) of one saddle's level. Per stretch the loss at its flattest point (the
    smallest change between its neighbours) and the first logged step after it (None: the run ends
    on it). Returns (levels, exit steps, indices m of the saddles)."""
    near = np.array([int(np.argmin(np.abs(saddles - v))) for v in loss])
    on = np.abs(loss - saddles[near]) <= tol * saddles[near]
    levels, exits, which = [], [], []
    j = 0
    while j < loss.size:
        if not on[j]:
            j += 1
            continue
        k = j
        while k + 1 < loss.size and on[k + 1] and near[k + 1] == near[j]:
            k += 1
        if k - j + 1 >= run:
            inner = range(max(j, 1), min(k, loss.size - 2) + 1)
            flat = min(inner, key=lambda i: abs(loss[i + 1] - loss[i - 1])) if len(inner) else j
            levels.append(float(loss[flat]))
            exits.append(None if k == loss.size - 1 else float(step[k + 1]))
            which.append(int(near[j]))
        j = k + 1
    return levels, exits, which
