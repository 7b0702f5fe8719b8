"""The replica theory of positional and semantic attention (Cui, Behrens, Krzakala and Zdeborová,
NeurIPS 2024, Result 4.2): the empirical-risk minimizer's test error, magnetization m, overlap
theta with the teacher, self-overlap q and variance V at d -> infinity, as the fixed point of a few
scalar equations, one per branch (semantic, positional, agnostic), and the free energy Phi whose
crossing between branches is the first-order transition.

Units are the published theory's (their ``theory/theory.ipynb``): empirical gen error = mse / 2,
empirical theta = theta / sigma^2, magnetization = m, train objective / d = -Phi. T = L = 2 tokens,
rank 1.

The equations, with rho = sigma^2, a student local field h = (sqrt(q) xi_1 + m, sqrt(q) xi_2 - m),
a teacher field t = V* y + (theta / sqrt q) xi (V*^2 = rho - theta^2 / q; xi, y standard 2-D
normals), the teacher's mixing M(t) = (1 - omega) softmax(t t^T) + omega A and the student's
S(z) = softmax(z z^T):

    z*(h, t) = argmin_z |z - h|^2 / V + sigma^2 |S(z) - M(t)|_F^2              (the proximal map)
    r = z* - h
    m^ = alpha E[(r_1 - r_2) / V],  q^ = alpha E[|r|^2 / V^2],
    theta^ = alpha E[r . y / (V V*)],  V^ = -alpha E[r . xi / (V sqrt q)] + theta theta^ / q,
    D = lambda + sigma^2 V^:  V = sigma^2 / D,  m = m^ / D,  theta = sigma^2 rho theta^ / D,
    q = sigma^2 (sigma^2 q^ + m^2 + sigma^2 rho theta^2) / D^2                (hats in the last two)
    mse = sigma^2 E|S(h) - M(t)|_F^2
    Phi = (V^ q - q^ V) / 2 - m m^ - theta theta^ + (sigma^2 q^ + m^^2 + rho sigma^2 theta^^2) / (2 D)
          - alpha / 2 E[min_z |z - h|^2 / V + sigma^2 |S(z) - M(t)|_F^2]

The expectations are over xi and y. attnsim computes them with a tensor Gauss-Hermite rule whose
order it raises until the answer stops moving (``solve``), and the minimum with a vectorized
Newton method from several starts (the map is not convex: its global minimum is what the theory
asks for). ``rule="published"`` instead uses the published notebook's fixed rules (quadpy's
Stroud-Secrest VI of degree 7 for the equations, Rabinowitz-Richter 2 of degree 11 for mse and
Phi), its start, damping and stopping rule, to reproduce its rows; ``published_stop``, ``curve``
(continuation in alpha) and ``proximal="notebook"`` (its local proximal map) reproduce the files
that were made with a looser stop, by continuation or on a local minimum (docs/positional-semantic.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from .keys import TEACHER_A  # noqa: F401  (the published teacher's matrix, the settings' default)
from .replica_equations import (  # noqa: F401  (the equations: part of this module's interface)
    RULES,
    ReplicaError,
    Settings,
    _conjugates,
    _fields,
    _mixing,
    _Rules,
    _rules,
    conjugates,
    free_energy,
    hats_at,
    mse,
    overlaps,
)
from .replica_maps import (  # noqa: F401  (the rules and maps: part of this module's interface)
    PROXIMAL,
    gauss_hermite,
    prox,
    prox_from_origin,
    rabinowitz_richter_2,
    stroud_secrest_6,
)

BRANCHES = ("semantic", "positional", "agnostic")
PROGRESS_S = 2.0  # iterate() says how far it is this often, when given a progress callback
ORDERS = (8, 12, 16, 24)  # the Gauss-Hermite orders ``solve`` tries, per axis (order^4 proximal maps)
# The published notebook's starts (q, m, V, theta), one per branch; the agnostic branch starts from
# the positional start with m = theta = 0 and holds them there.
STARTS = {
    "semantic": (0.906838209589, 0.0002, 14.575, 0.3472),
    "positional": (0.0206838209589, 0.2, 14.575, 0.0),
    "agnostic": (0.0206838209589, 0.0, 14.575, 0.0),
}


# The notebook's stop: the iteration ends when an undamped update moves q, m and theta by less than
# this, absolute (its ``tol``; the omega = 0.3 files were made with it, the omega = 0.5 files with 1e-3).
PUBLISHED_STOP = 1e-4


# ------------------------------------------------------------------ solving


@dataclass
class Solution:
    """One branch's fixed point (published units) and how it was reached."""

    q: float | None
    m: float | None
    V: float | None
    theta: float | None
    mse: float | None
    Phi: float | None
    converged: bool
    iterations: int
    branch: str
    rule: str
    order: int | None
    settings: Settings
    hats: tuple | None = None
    integration_error: float | None = None  # the largest relative move at the last order raised
    message: str = ""
    history: list = field(default_factory=list)  # (order, q, m, V, theta, mse, Phi) per order tried

    def state(self) -> tuple:
        return (self.q, self.m, self.V, self.theta)

    def empirical(self) -> dict:
        """The finite-d GD metrics' units: gen error = mse / 2, theta / sigma^2, magnetization = m,
        train objective / d = -Phi."""
        s2 = self.settings.sigma**2
        if not self.converged:
            return {"gen_error": None, "theta": None, "magnetization": None, "train_objective_per_d": None}
        return {
            "gen_error": self.mse / 2,
            "theta": self.theta / s2,
            "magnetization": self.m,
            "train_objective_per_d": -self.Phi,
        }

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("q", "m", "V", "theta", "mse", "Phi", "converged", "iterations")}
        out |= {
            "branch": self.branch,
            "rule": self.rule,
            "order": self.order,
            "integration_error": self.integration_error,
            "message": self.message,
            "settings": asdict(self.settings),
        }
        return out


def iterate(
    s: Settings,
    branch: str = "semantic",
    rule: str = "gauss-hermite",
    order: int | None = 16,
    tol: float = 1e-8,
    damping: float = 0.8,
    max_iter: int = 1000,
    start: tuple | None = None,
    published_stop: float | None = None,
    anderson: int | None = None,
    proximal: str = "global",
    progress: Callable[[str], None] | None = None,
    track: bool | None = None,
) -> Solution:
    """The damped fixed-point iteration x <- damping x + (1 - damping) F(x) from ``start`` (the
    branch's published start by default) until the undamped update F(x) - x is below ``tol``
    relative in every overlap (m and theta relative to at least 0.1: they are 0 on some
    branches); Solution.converged False
    (numbers None, a message) when it does not within ``max_iter``, leaves the region where the
    equations are defined, or a proximal map does not converge.

    ``anderson`` (default 4 for Gauss-Hermite, 0 for the published rule) mixes in that many past
    updates (Anderson acceleration of the damped map; a step that would leave the domain falls
    back to the damped one). ``published_stop`` (default: ``PUBLISHED_STOP`` for the published
    rule, off (0) otherwise) is the notebook's stop: absolute moves of q, m and theta below it,
    answering the state before that update. ``proximal`` "notebook" swaps attnsim's global
    proximal map for the notebook's local one (``prox_from_origin``; seconds per iteration instead
    of milliseconds). The agnostic branch holds m = theta = 0. ``progress`` is told how far the
    iteration is every ``PROGRESS_S`` seconds (a long solve is never silent).

    ``track`` (default on for Gauss-Hermite with the global map; off with ``published_stop``):
    near the fixed point each proximal map starts from its previous answer alone, the minimum it
    tracks checked against the global map (every start) where the iteration stops, and the
    iteration goes on with the global map where they differ; the stop, the returned conjugates
    and Phi are the global map's. Tracking starts once the largest relative move is below
    :data:`TRACK_FROM`, at most :data:`TRACK_CHECKS` times. A fixed point of the global map to
    ``tol`` with several times fewer Newton steps."""
    if branch not in BRANCHES:
        raise ReplicaError(f"branch: {branch!r} is not one of {', '.join(BRANCHES)}")
    if not 0.0 <= damping < 1.0:
        raise ReplicaError(f"damping: must be in [0, 1), got {damping}")
    rules = _rules(rule, order if rule == "gauss-hermite" else None, proximal)
    if published_stop is None:
        published_stop = PUBLISHED_STOP if rule == "published" else 0.0
    if anderson is None:
        anderson = 0 if rule == "published" else 4
    if track is None:
        track = rule == "gauss-hermite" and proximal != "notebook"
    track = bool(track and not published_stop)
    tracking, checks = False, 0
    state = np.array([float(v) for v in (start or STARTS[branch])])
    agnostic = branch == "agnostic"
    if agnostic:
        state[[1, 3]] = 0.0
    scale = np.maximum(np.abs(state), 1e-2)  # the iteration's coordinates: overlaps over their size
    warm, k = None, 0
    past_x, past_f = [], []
    said = time.monotonic()

    def failed(msg):
        return Solution(
            None, None, None, None, None, None, False, k, branch, rules.name, rules.order, s, message=msg
        )

    def valid(x):
        return x[0] > 0 and x[2] > 0 and x[3] ** 2 / x[0] < s.sigma**2

    try:  # overflow and 0/0 in NumPy or Python floats: caught by the finiteness checks
        with np.errstate(all="ignore"):
            for k in range(1, max_iter + 1):
                for full in (False, True) if tracking else (True,):
                    hats, warm, minima, bad = _conjugates(tuple(state), s, rules, warm, track=not full)
                    new, hats = _updated(hats, s, agnostic)
                    if not full and not bad and not _close(new, state, tol):
                        break  # tracked; the global map decides where a map failed or where it stops
                if full and tracking:  # checked: the global map goes on from here (Anderson's
                    tracking, checks = False, checks + 1  # history was the tracked map's)
                    past_x[:], past_f[:] = [], []
                if bad:
                    return failed(f"{bad} proximal maps did not converge at iteration {k}")
                if not (np.all(np.isfinite(new)) and all(math.isfinite(v) for v in hats)):
                    return failed(f"the overlaps became non-finite at iteration {k}")
                if track and checks < TRACK_CHECKS and _move(new, state) < TRACK_FROM:
                    tracking = True  # near the fixed point: each map follows its own minimum
                if published_stop:
                    if np.max(np.abs(new - state)[[0, 1, 3]]) < published_stop:
                        break
                elif _close(new, state, tol):
                    if track:  # the global maps' conjugates and minima at this state are at hand
                        break
                    state = new
                    hats, warm, minima, bad = _conjugates(tuple(state), s, rules, warm)
                    break
                f = (new - state) / scale
                if progress is not None and time.monotonic() - said > PROGRESS_S:
                    said = time.monotonic()
                    where = f"order {rules.order}" if rules.order else f"{rules.name} rules"
                    move = float(np.max(np.abs(f)))
                    progress(f"{branch}: {where}: iteration {k}, largest relative move {move:.2g}")
                damped = state + (1 - damping) * (new - state)
                step = damped
                if anderson:
                    past_x.append(state / scale)
                    past_f.append(f)
                    del past_x[: -anderson - 1], past_f[: -anderson - 1]
                    if len(past_f) > 1:
                        dF = np.diff(np.array(past_f), axis=0).T
                        dX = np.diff(np.array(past_x), axis=0).T
                        gamma = np.linalg.lstsq(dF, f, rcond=None)[0]
                        x = state / scale + (1 - damping) * f - (dX + (1 - damping) * dF) @ gamma
                        step = x * scale
                        if not (np.all(np.isfinite(step)) and valid(step)):
                            step, past_x[:], past_f[:] = damped, [], []
                if agnostic:
                    step[[1, 3]] = 0.0
                state = step
                if not (state[0] > 0 and state[2] > 0):  # an undamped update may leave it, the state not
                    return failed(f"q or V fell to <= 0 at iteration {k}")
            else:
                return failed(f"the iteration did not converge in {max_iter} iterations")
            state = tuple(float(v) for v in state)
            error = mse(state, s, rules)
            known = track and rules.outer is rules.eqs
            phi, bad = free_energy(state, hats, s, rules, minima if known else None)
            if bad:
                return failed(f"{bad} proximal maps of the free energy did not converge")
    except OverflowError:  # Python floats' powers raise where NumPy's give inf
        return failed(f"an overlap overflowed float64 at iteration {k} (alpha, sigma or a scale too large)")
    except FloatingPointError as exc:
        return failed(f"the iteration left the equations' domain at iteration {k}: {exc}")
    if not (math.isfinite(error) and math.isfinite(phi)):
        return failed("the error or the free energy at the fixed point is not finite")
    return Solution(*state, error, phi, True, k, branch, rules.name, rules.order, s, hats=hats)


TRACK_CHECKS = 4  # checks of the tracked minima against the global map before tracking stops
TRACK_FROM = 1e-2  # the largest relative move at which the proximal maps start tracking


def _updated(hats, s: Settings, agnostic: bool):
    """The overlaps the conjugates give (m = theta = 0 held on the agnostic branch) and the hats."""
    new = np.array(overlaps(hats, s))
    if agnostic:
        new[[1, 3]] = 0.0
        hats = (hats[0], 0.0, hats[2], 0.0)
    return new, hats


def _move(new, state) -> float:
    """The largest relative move (m and theta relative to at least 0.1), as :func:`_close` measures it."""
    return float(np.max(np.abs(new - state) / np.maximum(np.abs(new), [1e-300, 0.1, 1e-300, 0.1])))


def _close(new, state, tol: float) -> bool:
    """The stop: every overlap moved by at most ``tol`` relative (m and theta relative to >= 0.1)."""
    return bool(np.all(np.abs(new - state) <= tol * np.maximum(np.abs(new), [0.0, 0.1, 0.0, 0.1])))


def solve(
    s: Settings,
    branch: str = "semantic",
    rule: str = "gauss-hermite",
    int_tol: float = 3e-2,
    orders: tuple | None = None,
    progress: Callable[[str], None] | None = None,
    **kw,
) -> Solution:
    """The branch's fixed point with an integration accuracy it checks: with the Gauss-Hermite
    rule, solve at successive orders (``ORDERS``) until q, m, V, theta, mse and Phi move by less
    than ``int_tol`` relative between two orders (``integration_error`` says by how much; not
    converged when the last order still moves more). The published rule is fixed: its answer
    reproduces the published rows, with no accuracy claim (integration_error None)."""
    if rule == "published":
        return iterate(s, branch, "published", None, progress=progress, **kw)
    prev, history = None, []
    for order in orders or ORDERS:
        start = kw.pop("start", None) if prev is None else prev.state()
        sol = iterate(s, branch, rule, order, start=start or None, progress=progress, **kw)
        if progress:
            progress(
                f"{branch}: order {order}: "
                + (f"q {sol.q:.6g}, mse {sol.mse:.6g}" if sol.converged else sol.message)
            )
        if not sol.converged:
            sol.history = history
            return sol
        history.append((order, sol.q, sol.m, sol.V, sol.theta, sol.mse, sol.Phi))
        if prev is not None:
            sol.integration_error = max(
                abs(a - b) / max(abs(a), 1e-8)
                for a, b in zip(
                    (sol.q, sol.V, sol.mse, sol.Phi) + _signal(sol),
                    (prev.q, prev.V, prev.mse, prev.Phi) + _signal(prev),
                )
            )
            sol.history = history
            if sol.integration_error < int_tol:
                return sol
        prev = sol
    if len(history) < 2:  # one order given: nothing to check its accuracy against
        message = f"one Gauss-Hermite order ({history[-1][0]}) gives no accuracy check; give two or more"
    else:
        message = (
            f"the answer still moves by {sol.integration_error:.2g} relative between orders "
            f"{history[-2][0]} and {history[-1][0]} (int_tol {int_tol:g}); history has each order's numbers"
        )
    return Solution(
        None,
        None,
        None,
        None,
        None,
        None,
        False,
        sol.iterations,
        branch,
        sol.rule,
        sol.order,
        s,
        integration_error=sol.integration_error,
        message=message,
        history=history,
    )


def _signal(sol: Solution) -> tuple:
    """m and theta when they are not held at 0 (relative moves of a zero are meaningless)."""
    return tuple(v for v in (sol.m, sol.theta) if abs(v) > 1e-6)
