"""The many-sample limit (SPEC §17): training on fresh samples, with no training set.

A fresh sample sees the state only through q = W p and nu. With W = I and isotropic
token noise, the population risk and its gradient depend on q and nu through their
overlaps with mu+, mu- and each other, and by Stein's lemma E[grad] lies in
span{mu+, mu-, q, nu}. So every state of these integrators is written in a frame of
four orthonormal directions: e1 = mu+/|mu|, e2 = mu-/|mu|, and f3, f4 spanning the
parts of q and nu outside span{mu+, mu-} (q = (q1, q2, L00, 0), nu = (n1, n2, L10,
L11)). A token of a fresh sample is its mean plus sigma times four standard normals
in this frame; what lies outside the frame never changes a logit or a value.

population (:class:`PopulationGD`)
    GD on the population risk, R(theta) = (1 - eta) E l(y f) + eta E l(-y f) (label
    noise at rate eta on infinitely many samples, clean test labels): the n -> infinity
    limit of the finite-n run, with no memorization. The expectation is a quasi-random
    quadrature over ``POPULATION_SAMPLES`` fresh samples in the frame (scrambled Sobol
    points; class -1 mirrors class +1, so a state symmetric under the class swap stays
    symmetric), projected on span{mu+, mu-, q, nu} where the exact gradient lies. With
    W trained from W(0) = I, W - I stays in the frame (grad W = E[g] p^T): W is 4 x 4.
    With ``batch`` = B > 0: the d -> infinity limit of online SGD at batch B (Saad &
    Solla; Arnaboldi et al. 2025): each step adds to the Gram matrix of the parts of q,
    nu outside the signals the variance of the batch gradient's part outside the frame,
    lr^2 sigma^2 (d - 4) E[C^T C] / B, C = (dl/dz_t, dl/du_t-weights) per sample.
online, engine implicit (:class:`OnlineFrame`)
    SGD on a fresh batch per step with W = I fixed, exact in distribution at any d:
    the batch's noise inside the frame is drawn (4 normals per token); outside it only
    the two vectors sum_it c_it eps_it and sum_it w_it eps_it reach q and nu, rows
    i.i.d. N(0, sigma^2 C^T C), so their Gram matrix is L B^T B L^T with B the 2 x 2
    Bartlett factor of d - 4 degrees of freedom; the frame is then rotated to the new
    q, nu (the next batch is isotropic in any frame).
online, engine dense (:class:`OnlineDense`)
    SGD on fresh d-dimensional batches with a d x d W: any train and init.

Fresh samples flip each label independently with probability noise_rate (the law the
population risk averages; ``label_noise`` orders the flips of a fixed training set, and
its balanced rounding would flip 4 of 16, not 20 %).

There is no training set: the ``train_*`` metrics of these runs are measured on a
monitor set, the quadrature's samples (population) or n fresh clean samples drawn at
each log point (online), and no sample is ever memorized (``fit_since`` stays -1).

Random numbers: the fresh batches come from the run's ``data`` stream (tokens, then
the batch's flips, step by step); the quadrature and the monitor samples from two
children spawned from the ``test`` stream; p(0) from ``init``.

This module holds the frame and the steppers; :mod:`.fresh_flow` the population flow,
and :mod:`.fresh_problem` the problem that builds them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...config import Config
from ...data.synthetic import (
    clean_labels,
    draw_tokens,
    flip_mask,
    role_coefficients,
    role_template,
)
from ...runtime.workspace import PROCESS
from ..base import ClassifierStepper, Observation, Outcome
from .buffers import Data, f64, loss_kind_code, work_for
from .kernels import _forward_backward
from .plan import batch_size
from .problem import Problem
from .steppers import outputs

FRAME = 4  # e1, e2, f3, f4


def frame_means(y: np.ndarray, T: int, role_counts: tuple, rho: float, signal_norm: float) -> np.ndarray:
    """(m, T, 4) token means of samples of classes ``y`` in the frame (roles in the fixed order)."""
    own, other = (c * signal_norm for c in role_coefficients(role_template(role_counts), rho))
    out = np.zeros((y.size, T, FRAME))
    pos = y > 0
    out[pos, :, 0], out[pos, :, 1] = own, other
    out[~pos, :, 0], out[~pos, :, 1] = other, own
    return out


def psd_pair(G: np.ndarray) -> tuple[float, float, float]:
    """(L00, L10, L11) of the lower factor of a 2 x 2 positive semi-definite matrix."""
    L00 = math.sqrt(max(G[0, 0], 0.0))
    L10 = G[0, 1] / L00 if L00 > 0 else 0.0
    return L00, L10, math.sqrt(max(G[1, 1] - L10 * L10, 0.0))


class _Fresh(ClassifierStepper):
    """What the fresh-sample steppers share: the state, the monitor, the gradient of a sample set."""

    def __init__(self, pb: Problem, cfg: Config):
        self.pb, self.cfg = pb, cfg
        self.W, self.p, self.nu = pb.W0.copy(), pb.p0.copy(), pb.nu0.copy()
        self.train = (*(b in cfg.train_set for b in ("W", "p", "nu")),)
        self.lr, self.eta, self.loss = cfg.lr, cfg.noise_rate, loss_kind_code(cfg.loss)
        self.n_monitor = pb.y.size
        self._init_records(self.n_monitor)
        self.W0 = self.W.copy()

    def state(self) -> dict[str, np.ndarray]:
        return {"W": self.W, "p": self.p, "nu": self.nu}

    def extra_metrics(self) -> dict[str, float]:
        return {"p_norm": float(np.linalg.norm(self.p)), "W_dev": float(np.linalg.norm(self.W - self.W0))}

    def relevant_increments(self, s: np.ndarray) -> np.ndarray:
        sr = s[:, 0]  # the relevant token is first (fixed roles)
        return sr * (1.0 - sr)

    def _label_copies(self, X2: np.ndarray, y: np.ndarray) -> list[tuple[float, Data, Any]]:
        """(weight, data, buffers) of the samples with their true labels (weight 1 - eta) and
        flipped (weight eta): the expectation over a label's flip, for the kernels."""
        rel = np.zeros(X2.shape[0])
        return [
            (
                weight,
                Data(X2, lab, rel, self.cfg.T, self.loss, not PROCESS.forked),
                work_for(X2.shape[0], y.size, X2.shape[1], self.p.size),
            )
            for lab, weight in ((y, 1.0 - self.eta), (-y, self.eta))
            if weight > 0.0
        ]

    def _gradient(self, copies: list) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """Mean loss under label noise, dL/dq, dL/dnu of the samples of ``copies``
        (:meth:`_label_copies`) and (E sum_t c_t^2, E sum_t c_t w_t, E sum_t w_t^2) per sample
        (the variance of one sample's gradient outside the frame, over its noise and its flip)."""
        L, g, gnu, stats = 0.0, np.zeros(self.p.size), np.zeros(self.nu.size), np.zeros(3)
        for weight, data, wk in copies:
            m = data.y.size
            L += weight * _forward_backward(data, self.W, self.p, self.nu, wk, True, self.train[2])
            g += weight * wk.g
            if self.train[2]:
                gnu += weight * wk.gnu
            c, w = wk.c, wk.w
            stats += weight * m * np.array([c @ c, c @ w, w @ w])  # per sample: (m c)^2 / m
        return float(L), g, gnu, stats

    def _update(self, g: np.ndarray, gnu: np.ndarray) -> None:
        tw, tp, tn = self.train
        gp = self.W.T @ g if tp else None  # at this state, before W moves
        if tw:
            self.W -= self.lr * np.outer(g, self.p)
        if tp:
            self.p -= self.lr * gp
        if tn:
            self.nu -= self.lr * gnu

    def _monitor_tokens(self) -> np.ndarray:
        """(n, T, k) fresh clean monitor samples (the labels of ``pb.y``)."""
        raise NotImplementedError

    def observe(self) -> Observation:
        X = self._monitor_tokens()
        q = self.W @ self.p
        z, u = X @ q, X @ self.nu
        s, f, L = outputs(z, u, self.pb.y, self.cfg.loss)
        return Observation(z, u, s, f, L)


class PopulationGD(_Fresh):
    """GD on the population risk in the frame (module docstring); ``batch`` > 0 adds
    online SGD's variance at dimension d."""

    def __init__(self, pb: Problem, cfg: Config):
        super().__init__(pb, cfg)
        self.batch = cfg.batch
        self.copies = self._label_copies(pb.X2, pb.y)

    def _project(self, v: np.ndarray) -> np.ndarray:
        """v on span{mu+, mu-, q, nu}, where the exact gradient lies (the quadrature's error elsewhere)."""
        A = np.column_stack([np.eye(FRAME)[:, :2], self.W @ self.p, self.nu])
        U, sv, _ = np.linalg.svd(A, full_matrices=False)
        U = U[:, sv > 1e-12 * max(sv[0], 1e-300)]
        return U @ (U.T @ v)

    def _advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        for step in range(step0, step0 + nsteps):
            L, g, gnu, stats = self._gradient(self.copies)
            if not math.isfinite(L):
                return Outcome.DIVERGED, step
            g = self._project(g)
            gnu = self._project(gnu) if self.train[2] else gnu
            self._update(g, gnu)
            if self.batch:
                self._add_variance(stats)
        return Outcome.FINISHED, step0 + nsteps

    def _variance(self, stats: np.ndarray, factor: float) -> np.ndarray:
        """factor sigma^2 (d - 4) E[C^T C] / B: the batch gradient's variance outside the frame,
        on (q, nu) as far as they are trained (factor lr^2 per step, lr per unit time)."""
        cc, cw, ww = stats
        tp, tn = self.train[1], self.train[2]
        cw = cw if tp and tn else 0.0
        S = np.array([[cc if tp else 0.0, cw], [cw, ww if tn else 0.0]])
        return factor * self.cfg.sigma**2 * max(self.cfg.d - FRAME, 0) / self.batch * S

    def _add_variance(self, stats: np.ndarray) -> None:
        """The Gram matrix of the parts of q, nu outside the signals grows by the batch
        gradient's variance outside the frame; the frame turns to keep them on f3, f4."""
        _rotate(self.p, self.nu, self._variance(stats, self.lr**2))

    def _monitor_tokens(self) -> np.ndarray:
        return self.pb.X2.reshape(-1, self.cfg.T, FRAME)

    def observe(self) -> Observation:
        """The quadrature's samples with their true labels; the loss is the population risk
        the steps descend (label noise included)."""
        X = self._monitor_tokens()
        q = self.W @ self.p
        z, u = X @ q, X @ self.nu
        s, f, L = outputs(z, u, self.pb.y, self.cfg.loss)
        if self.eta:
            L = (1.0 - self.eta) * L + self.eta * outputs(z, u, -self.pb.y, self.cfg.loss)[2]
        return Observation(z, u, s, f, L)


def _rotate(q: np.ndarray, nu: np.ndarray, add: np.ndarray) -> None:
    """Add ``add`` to the Gram matrix of (q, nu) on (f3, f4) and write them back in the
    lower-triangular form (q on f3 alone), in place."""
    P = np.stack([q[2:], nu[2:]])
    L00, L10, L11 = psd_pair(P @ P.T + add)
    q[2:] = (L00, 0.0)
    nu[2:] = (L10, L11)


class OnlineFrame(_Fresh):
    """Online SGD with W = I in the frame, exact in distribution at any d (module docstring);
    the steps run in :func:`.fresh_kernels.online_frame_steps`, a chunk of steps at a time."""

    CHUNK_NUMBERS = 1 << 16  # the random numbers of one chunk of steps (512 kB)

    def __init__(self, pb: Problem, cfg: Config):
        super().__init__(pb, cfg)
        self.B = batch_size(cfg)
        self.y_true = clean_labels(self.B)
        self.means = frame_means(self.y_true, cfg.T, cfg.role_counts, cfg.rho, cfg.signal_norm)
        # one stream per kind of number: the run does not depend on where a chunk begins
        self.rng_tokens, self.rng_flips, self.rng_chi, self.rng_normal = pb.data_rng.spawn(4)
        self.chunk = max(1, self.CHUNK_NUMBERS // (self.B * cfg.T * FRAME))

    def _advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        from .fresh_kernels import online_frame_steps  # lazy: only online runs load its object code

        cfg, B, T = self.cfg, self.B, self.cfg.T
        dof = cfg.d - FRAME - np.arange(2)
        step, end = step0, step0 + nsteps
        while step < end:
            K = min(self.chunk, end - step)
            xi = self.rng_tokens.standard_normal((K, B, T, FRAME))
            flip_u = self.rng_flips.random((K, B))
            chi = np.sqrt(self.rng_chi.chisquare(dof, size=(K, 2)))
            zn = self.rng_normal.standard_normal(K)
            done = online_frame_steps(
                xi, flip_u, chi, zn, self.y_true, self.means, self.p, self.nu, cfg.sigma, self.lr,
                self.eta, self.train[1], self.train[2], self.loss,
            )  # fmt: skip
            if done < K:
                return Outcome.DIVERGED, step + done
            step += K
        return Outcome.FINISHED, end

    def _monitor_tokens(self) -> np.ndarray:
        cfg = self.cfg
        xi = self.pb.monitor_rng.standard_normal((self.n_monitor, cfg.T, FRAME))
        return cfg.sigma * xi + frame_means(self.pb.y, cfg.T, cfg.role_counts, cfg.rho, cfg.signal_norm)


class OnlineDense(_Fresh):
    """Online SGD on fresh d-dimensional batches with a d x d W (any train and init)."""

    def __init__(self, pb: Problem, cfg: Config):
        super().__init__(pb, cfg)
        self.B = batch_size(cfg)
        self.rng = pb.data_rng
        self.dk = pb.dk._replace(n=self.B)

    def _advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        cfg, B, T = self.cfg, self.B, self.cfg.T
        for step in range(step0, step0 + nsteps):
            y_true = clean_labels(B)
            X, _ = draw_tokens(self.dk, y_true, self.rng)
            y = np.where(flip_mask("iid", cfg.noise_rate, y_true, self.rng), -y_true, y_true)
            data = Data(f64(X.reshape(B * T, -1)), y, np.zeros(B * T), T, self.loss, not PROCESS.forked)
            wk = work_for(B * T, B, cfg.d, cfg.d)
            L = _forward_backward(data, self.W, self.p, self.nu, wk, True, self.train[2])
            if not math.isfinite(L):
                return Outcome.DIVERGED, step
            self._update(wk.g.copy(), wk.gnu.copy())
        return Outcome.FINISHED, step0 + nsteps

    def _monitor_tokens(self) -> np.ndarray:
        return draw_tokens(self.pb.dk, self.pb.y, self.pb.monitor_rng)[0]
