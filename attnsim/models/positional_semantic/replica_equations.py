"""The replica theory's equations (:mod:`.replica` solves them): the settings of a point, the
saddle-point equations' conjugates (q^, m^, V^, theta^) given the overlaps (q, m, V, theta) through
the proximal maps at a quadrature rule's nodes, the overlaps given the conjugates, the test error
mse and the free energy Phi. The rules and the proximal maps are :mod:`.replica_maps`'s."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .keys import TEACHER_A
from .replica_maps import (
    PROXIMAL,
    _frob,
    _softmax2,
    gauss_hermite,
    prox,
    rabinowitz_richter_2,
    stroud_secrest_6,
)

RULES = ("gauss-hermite", "published")


class ReplicaError(ValueError):
    """Settings the theory cannot take (the message names the key)."""


@dataclass(frozen=True)
class Settings:
    """One point of the theory: samples per dimension alpha, the teacher's positional weight omega,
    the token scale sigma, the weight decay lambda and the teacher's 2 x 2 positional matrix A."""

    alpha: float = 2.0
    omega: float = 0.3
    sigma: float = 0.5
    weight_decay: float = 0.01
    teacher_A: tuple = TEACHER_A

    def __post_init__(self):
        for key in ("alpha", "sigma"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ReplicaError(f"{key}: must be a finite number > 0, got {v!r}")
        if not (isinstance(self.omega, (int, float)) and 0.0 <= self.omega <= 1.0):
            raise ReplicaError(f"omega: must be in [0, 1], got {self.omega!r}")
        lam = self.weight_decay
        if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam > 0):
            raise ReplicaError(
                f"weight_decay: must be a finite number > 0 (the theory needs lambda > 0), got {lam!r}"
            )
        try:
            A = np.asarray(self.teacher_A, dtype=float)
        except (TypeError, ValueError):
            A = np.zeros(0)
        if A.shape != (2, 2) or not np.all(np.isfinite(A)):
            raise ReplicaError(
                "teacher_A: the theory has T = 2 tokens: give a finite 2 x 2 matrix such as "
                f"[[0.6, 0.4], [0.4, 0.6]], got {self.teacher_A!r}"
            )
        object.__setattr__(self, "teacher_A", tuple(tuple(float(v) for v in row) for row in A))


# ------------------------------------------------------------------ the equations


def _mixing(t1, t2, omega, A):
    """M(t) = (1 - omega) softmax(t t^T) + omega A, shape (..., 2, 2)."""
    a, b = _softmax2(t1, t2)
    M = np.empty(a.shape + (2, 2))
    M[..., 0, 0], M[..., 0, 1] = a, 1 - a
    M[..., 1, 0], M[..., 1, 1] = 1 - b, b
    return (1 - omega) * M + omega * np.asarray(A)


@dataclass
class _Rules:
    name: str
    order: int | None
    eqs: tuple  # (points, weights) for the saddle-point equations (both xi and y)
    outer: tuple  # for mse's and Phi's xi (and Phi's y)
    inner: tuple  # for mse's y
    prox: Callable = prox  # the proximal map (``PROXIMAL``)


def _rules(rule: str, order: int | None, proximal: str = "global") -> _Rules:
    if proximal not in PROXIMAL:
        raise ReplicaError(f"proximal: {proximal!r} is not one of {', '.join(PROXIMAL)}")
    if rule == "published":
        ss, rr = stroud_secrest_6(), rabinowitz_richter_2()
        return _Rules(rule, None, ss, rr, ss, PROXIMAL[proximal])
    if rule != "gauss-hermite":
        raise ReplicaError(f"rule: {rule!r} is not one of {', '.join(RULES)}")
    if not (isinstance(order, int) and order >= 2):
        raise ReplicaError(f"order: the Gauss-Hermite order must be an integer >= 2, got {order!r}")
    gh = gauss_hermite(order)
    return _Rules(rule, order, gh, gh, gh, PROXIMAL[proximal])


def _fields(state, s: Settings, xi_rule, y_rule):
    """Student fields h (Nxi, 1), teacher mixing M (Nxi, Ny, 2, 2), xi, y and the weights."""
    q, m, V, theta = state
    rho = s.sigma**2
    vstar2 = rho - theta**2 / q
    if not vstar2 > 0:
        raise FloatingPointError(f"theta^2 / q = {theta**2 / q:.6g} reached rho = {rho:.6g}")
    (xi, wx), (yy, wy) = xi_rule, y_rule
    sq = math.sqrt(q)
    h1, h2 = (sq * xi[:, 0] + m)[:, None], (sq * xi[:, 1] - m)[:, None]
    vs, c = math.sqrt(vstar2), theta / sq
    t1 = vs * yy[None, :, 0] + c * xi[:, None, 0]
    t2 = vs * yy[None, :, 1] + c * xi[:, None, 1]
    M = _mixing(t1, t2, s.omega, s.teacher_A)
    return h1, h2, M, xi, yy, wx, wy, vs


def conjugates(state, s: Settings, rules: _Rules, warm=None, track: bool = False):
    """(q^, m^, V^, theta^) at ``state`` = (q, m, V, theta), the proximal maps' answer (to start
    the next call from) and the count of maps that did not converge. ``track``: each map's
    minimum reached from ``warm`` alone, not necessarily the global one."""
    hats, xy, _, bad = _conjugates(state, s, rules, warm, track)
    return hats, xy, bad


def _conjugates(state, s: Settings, rules: _Rules, warm=None, track: bool = False):
    """:func:`conjugates` and the maps' minima E (the free energy's envelope at these nodes)."""
    fields = _fields(state, s, rules.eqs, rules.eqs)
    h1, h2, M, *_ = fields
    x, y, E, ok = rules.prox(h1, h2, M, state[2], s.sigma**2, warm, track)
    return hats_at(state, s, rules, x, y, fields), (x, y), E, int((~ok).sum())


def hats_at(state, s: Settings, rules: _Rules, x, y, fields: tuple | None = None) -> tuple:
    """The conjugates given the proximal maps' answers (x, y) at the rule's points (``fields``:
    :func:`_fields` at ``state`` on the equations' rule, when at hand)."""
    q, m, V, theta = state
    h1, h2, M, xi, yy, wx, wy, vs = fields or _fields(state, s, rules.eqs, rules.eqs)
    r1, r2 = x - h1, y - h2
    W = wx[:, None] * wy[None, :]
    E = lambda f: float((W * f).sum())  # noqa: E731
    a = s.alpha
    mh = a * E((r1 - r2) / V)
    qh = a * E((r1**2 + r2**2) / V**2)
    th = a * E((r1 * yy[None, :, 0] + r2 * yy[None, :, 1]) / (V * vs))
    Vh = -a * E((r1 * xi[:, None, 0] + r2 * xi[:, None, 1]) / (V * math.sqrt(q))) + theta * th / q
    return (qh, mh, Vh, th)


def overlaps(hats, s: Settings):
    """(q, m, V, theta) from the conjugates (the regularizer's side of the equations)."""
    qh, mh, Vh, th = hats
    s2, rho = s.sigma**2, s.sigma**2
    D = s.weight_decay + Vh * s2
    if D == 0:
        raise FloatingPointError("lambda + sigma^2 V^ = 0")
    q = (qh * s2 + mh**2 + th**2 * s2 * rho) / D**2 * s2
    return (q, mh / D, s2 / D, s2 * th * rho / D)


def mse(state, s: Settings, rules: _Rules) -> float:
    """The test error sigma^2 E|S(h) - M(t)|_F^2 (empirical gen error = mse / 2). The published
    rule splits it into teacher, student and cross terms with the notebook's rules."""
    q, m, V, theta = state
    s2 = s.sigma**2
    if rules.name == "published":
        # teacher term: t = sqrt(rho) u; student term: h = (sqrt q u1 + m, sqrt q u2 - m)
        (u, w), rho = rules.outer, s.sigma**2
        Mt = _mixing(math.sqrt(rho) * u[:, 0], math.sqrt(rho) * u[:, 1], s.omega, s.teacher_A)
        teacher = s2 * float(w @ (Mt**2).sum(axis=(-1, -2)))
        a, b = _softmax2(math.sqrt(q) * u[:, 0] + m, math.sqrt(q) * u[:, 1] - m)
        student = s2 * float(w @ (a**2 + (1 - a) ** 2 + (1 - b) ** 2 + b**2))
        h1, h2, M, *_ = _fields(state, s, rules.outer, rules.inner)
        a, b = _softmax2(h1, h2)
        cross = a * M[..., 0, 0] + (1 - a) * M[..., 0, 1] + (1 - b) * M[..., 1, 0] + b * M[..., 1, 1]
        W = rules.outer[1][:, None] * rules.inner[1][None, :]
        return teacher + student - 2 * s2 * float((W * cross).sum())
    h1, h2, M, xi, yy, wx, wy, _ = _fields(state, s, rules.outer, rules.inner)
    a, b = _softmax2(h1, h2)
    W = wx[:, None] * wy[None, :]
    return s2 * float((W * _frob(a, b, M)).sum())


def free_energy(state, hats, s: Settings, rules: _Rules, minima=None) -> tuple[float, int]:
    """Phi (train objective / d = -Phi) and the count of proximal maps that did not converge.
    ``minima``: the global proximal maps' minima at ``state`` on the rule's nodes, when known
    (the saddle-point equations' nodes are the free energy's with Gauss-Hermite)."""
    q, m, V, theta = state
    qh, mh, Vh, th = hats
    s2 = rho = s.sigma**2
    h1, h2, M, *_, wx, wy, _ = _fields(state, s, rules.outer, rules.outer)
    if minima is None:
        _, _, E, ok = rules.prox(h1, h2, M, V, s2)
    else:
        E, ok = minima, np.ones(1, dtype=bool)
    W = wx[:, None] * wy[None, :]
    envelope = float((W * E).sum())
    trace = 0.5 * (Vh * q - qh * V) - m * mh - theta * th
    entropy = 0.5 * (qh * s2 + mh**2 + th**2 * rho * s2) / (s.weight_decay + Vh * s2)
    return float(trace + entropy - s.alpha / 2 * envelope), int((~ok).sum())
