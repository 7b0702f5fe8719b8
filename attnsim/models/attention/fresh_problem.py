"""The problem of the integrators on fresh samples (SPEC §17): the frame's initial state,
the quadrature's samples, the monitor set, and the stepper of each integrator
(:mod:`.fresh` and :mod:`.fresh_flow` say what they compute)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...config import Config
from ...data.dataset import Dataset, Streams
from ...data.synthetic import clean_labels, data_keys, head, role_template, signals
from ..base import Stepper
from . import plan
from .fresh import FRAME, OnlineDense, OnlineFrame, PopulationGD, frame_means
from .fresh_flow import PopulationFlow
from .plan import batch_size
from .population.sobol import sobol_normals
from .problem import Problem


class FreshProblem(Problem):
    """A problem of the integrators on fresh samples, in the frame (module docstring)."""

    monitor_rng: Any = None  # the monitor samples' stream
    data_rng: Any = None  # the fresh batches' stream
    dk: Any = None  # the data keys (dense batches)

    def stepper(self, cfg: Config, rel: np.ndarray, y: np.ndarray | None = None) -> Stepper:
        if cfg.integrator == "population_flow":
            return PopulationFlow(self, cfg)
        if cfg.integrator == "population":
            return PopulationGD(self, cfg)
        return (OnlineFrame if self.engine == "implicit" else OnlineDense)(self, cfg)

    def lift(self, W: np.ndarray, p: np.ndarray, nu: np.ndarray) -> dict[str, np.ndarray]:
        if self.engine == "dense":
            return super().lift(W, p, nu)
        raise ValueError(f"the {self.engine} coordinates (a frame of overlaps) have no d-dimensional state")


def build(cfg: Config, streams: Streams, engine: str, reason: str) -> tuple[Problem, Dataset]:
    """The problem and its monitor dataset (what the recorder measures as ``train_*``)."""
    quad_rng, monitor_rng = streams.test.spawn(2)
    dk = data_keys(cfg)
    if engine == "dense":
        mu_pos, mu_neg = signals(cfg.d, cfg.signal_norm)
        from ...init import W0Init, draw_p0, draw_W0  # lazy: the frame engines draw no W(0)

        W0 = draw_W0(W0Init(cfg.init_W, cfg.W_scale), streams.init, cfg.d)
        p0 = draw_p0(cfg.init_p, cfg.p_scale, streams.init, cfg.d)
    else:
        mu_pos, mu_neg = signal_norm_frame(cfg.signal_norm)
        W0, p0 = np.eye(FRAME), frame_p0(cfg, streams.init)
    nu0 = head(mu_pos, mu_neg) if cfg.init_nu == "head" else np.zeros_like(mu_pos)
    if engine == "population":
        X, y = quadrature_sample(cfg, quad_rng)
        n = y.size
    else:
        n, X, y = cfg.n, None, clean_labels(cfg.n)
    roles = np.broadcast_to(role_template(cfg.role_counts), (n, cfg.T)).copy()
    ds = Dataset(
        X=None,
        y=y,
        y_clean=y.copy(),
        roles=roles,
        mu_pos=mu_pos,
        mu_neg=mu_neg,
        sigma=cfg.sigma,
        nu=nu0,
        rho=cfg.rho,
        role_counts=cfg.role_counts,
        source=f"fresh samples of the data model ({cfg.integrator}; no training set)",
    )
    k = mu_pos.size
    pb = FreshProblem(
        engine=engine,
        reason=reason,
        X2=np.zeros((0, k)) if X is None else X,
        y=y,
        T=cfg.T,
        W0=W0,
        p0=p0,
        nu0=nu0,
        mu_pos=mu_pos,
        mu_neg=mu_neg,
        W0_source=W0,
        info={
            "k": k,
            "r": k,
            "test_n": 0,
            "batch": 0 if engine == "population" and not cfg.batch else batch_size(cfg),
        },
    )
    pb.monitor_rng, pb.data_rng, pb.dk = monitor_rng, streams.data, dk
    return pb, ds


def signal_norm_frame(signal_norm: float) -> tuple[np.ndarray, np.ndarray]:
    return signals(FRAME, signal_norm)


def frame_p0(cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """p(0) in the frame: N(0, s^2) on e1, e2 and its norm outside them, s chi(d - 2), on f3."""
    p0 = np.zeros(FRAME)
    if cfg.init_p == "gaussian":
        p0[:2] = cfg.p_scale * rng.standard_normal(2)
        p0[2] = cfg.p_scale * math.sqrt(rng.chisquare(cfg.d - 2))
    return p0


def quadrature_sample(cfg: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(M T, 4) tokens and (M,) labels of the population gradient's quadrature: M / 2
    scrambled Sobol samples of class +1 and their mirror images (e1 <-> e2) of class -1."""
    half = plan.POPULATION_SAMPLES // 2
    xi = sobol_normals(FRAME * cfg.T, half, rng).reshape(half, cfg.T, FRAME)
    mirror = xi[:, :, [1, 0, 2, 3]]
    y = np.concatenate([np.ones(half), -np.ones(half)])
    X = cfg.sigma * np.concatenate([xi, mirror]) + frame_means(
        y, cfg.T, cfg.role_counts, cfg.rho, cfg.signal_norm
    )
    return np.ascontiguousarray(X.reshape(-1, FRAME)), y
