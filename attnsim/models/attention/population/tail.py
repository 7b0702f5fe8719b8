"""The population error by importance sampling around its design points (SPEC §5).

Given the logit noises zeta ~ N(0, I_T) of a fresh sample of class y, the
error is P_y = E[Phi(-t(zeta))] with t = y m / (sdc |s|) (see
:mod:`.metrics`). When P_y is small its mass sits far out in zeta:
the tokens that carry the margin must fall and a competing token rise
together (default run: zeta_rel ~ -3.7 with zeta_opp ~ +3.9), where plain
quasi-Monte Carlo points never land. So P_y is estimated by multiple
importance sampling.

1. Exchangeable tokens. Tokens of equal mean logit and value (the five
   irrelevant tokens of the default layout) form groups within which the
   integrand is symmetric. The estimate integrates over the fundamental
   domain D (each group's largest coordinate in its first member's place)
   and every point is folded into D; P_y = M int_D phi h, M the product of
   the group sizes. So one group needs one set of design points, however
   many tokens it has.
2. Design points (as in structural reliability, FORM;
   :func:`.design_kernels._design_points`): the origin; the
   maximum of psi = -|zeta|^2/2 + log Phi(-t) along the *anchor group*'s
   direction (the group of the token carrying the margin, falling against
   all others); and for the first member j of every other group the maximum
   of psi over the plane of the anchor's and j's directions, and along j's
   direction alone; the same for every group of two or more rising together
   (two weak-opposite tokens that share the margin's lost weight fail the
   sample more easily than one). The failure boundary is curved; these points
   span its arc. Newton's method with the exact Hessian in the plane.
3. At each design point z_k, t is linearized, t ~ c_k + g_k . zeta, and the
   component's density is the skew normal that linearization makes exact,
   q_k(zeta) = phi(zeta) Phi(-c_k - g_k . zeta) / Phi(-beta_k),
   beta_k = c_k / sqrt(1 + |g_k|^2) (the FORM reliability index; Phi(-beta_k)
   the FORM estimate of its mass). It is sampled exactly: the (T+1)-dim
   normal (zeta, W) conditioned on W > c_k + g_k . zeta, whose coordinate
   along that half-space's normal is a normal truncated to > beta_k (AS 241
   from the logarithm of its tail, so any beta works). Where t is linear
   the weights are constant; curvature makes them vary, which the standard
   error shows.
4. A defensive share (``DEFENSIVE``) of the points from N(0, I) itself; the
   rest in proportion to the FORM masses, each component at least ``FLOOR``
   of it. Fixed counts n_k with the balance heuristic: each point's term is
   h / (n_0/N + sum_k f_k (n_k/N) q_k/phi), where the Gaussian factor has
   cancelled (one dot product and one normal tail per component and point)
   and f_k = 1 for a component symmetric within groups, 1/|g| for one that
   favours group g's first member (its points outside D before folding count
   as 0). Unbiased for any design points: every q_k has full support. The
   standard error is the stratified one, from the spread within each
   component's points (plain Monte Carlo: +-2 se is a 95 % interval).

5. Shares from a pilot. The FORM masses can be far off: where t is far from
   linear the origin's linearization may claim most of the points and carry
   1 % of the error (figure 14's state: 80 % of them, its true failures near
   another design point left to the floor share, the weights heavy-tailed and
   the se too small in most draws). So the first eighth of the points
   (:func:`pilot_count`) is spent evenly over the components (the defensive share kept:
   the FORM shares would starve the component they misjudge), and the estimate comes
   from the rest, shared in proportion to each component's part of the pilot's
   estimate, sum_n h_n r_nk with r_nk = its term of the mixture density at
   point n over the whole (the mixture-weight update of population Monte Carlo,
   Douc, Guillin, Marin & Robert 2007), the defensive share and the floor kept.
   Given the pilot the shares are fixed, so the estimate and its standard error
   are those of item 4; the pilot's own estimate is not used (at the states
   where FORM misplaces the points its variance would dominate).

6. Widened copies. Along a large group of exchangeable tokens (``INFLATE_MIN``
   or more: the irrelevant tokens at T >= 16) log Phi(-t) can curve upwards
   where the margin's token falls (the referee's T = 32 state: curvature 0.3
   to 1.1 along each of 29 irrelevant noises), so the integrand falls along
   those directions like e^{-(1-c) zeta^2/2}, slower than any skew normal:
   a few points with typical-but-favourable irrelevant noises then carry
   heavy weights, and the interval misses low. A component whose design
   point has curvature c above ``CURVE_MIN`` along the group gets a copy
   with the group's coordinates scaled by (1 - min(c, CURVE_MAX))^(-1/2)
   (:func:`.design_kernels._inflated_copies`): density
   q(D^-1 zeta) / det D, exact in the mixture like every other component.

The design points only shape the proposal: a poor one costs variance, not
bias. What the estimator cannot see is mass far from every design point and
from the origin; the structure of the integrand (a softmax over tokens whose
failure needs the margin's tokens to lose weight to others) is what makes the
design points above complete. Below ~1e-250 (every design point's beta above
``MAX_BETA``), or with a standard error above ``RESOLVED_REL`` of the value,
the result is flagged unresolved and an upper bound is reported instead.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_ndtr

from . import design_kernels, pop_kernels, sample_kernels

DEFENSIVE = 0.15  # share of the points drawn from N(0, I)
FLOOR = 0.02  # least share of the rest for any design point
MERGE = 0.3  # design points closer than this are one
MAX_BETA = 36.0  # a design point beyond this (FORM mass below 1e-284) carries nothing resolvable
PRUNE = 1e-8  # design points of FORM mass below this share of the largest are dropped
FLOOR_BOUND = 1e-250  # the error of a class whose design points are all beyond MAX_BETA is below this
RESOLVED_REL = 0.2  # a standard error above this share of the estimate: unresolved
PILOT_MIN = 32  # least points per class of the pilot stage


def pilot_count(n: int) -> int:
    """Points per class of the pilot stage of n (step 5 of the module's docstring): an
    eighth, at least 32 (or half of n when that is fewer)."""
    return max(n // 8, min(PILOT_MIN, n // 2))


def tail_points(T: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The random numbers of :class:`TailError`, drawn once per run: per class
    (2, n, T + 1) standard normals (stored token-major, (2, T + 1, n)), then
    (2, n) uniforms in (0, 1]."""
    X = np.ascontiguousarray(rng.standard_normal((2, n, T + 1)).transpose(0, 2, 1))
    u = 1.0 - rng.random((2, n))  # (0, 1]: the truncated normal's inverse CDF stays finite
    return X, u


class TailWork(NamedTuple):
    """The work arrays of one layout's tail estimate, reused by every evaluation (the
    kernels of :mod:`.design_kernels` and :mod:`.sample_kernels` take them as one tuple)."""

    Z: np.ndarray  # (K, T) design points
    G: np.ndarray  # (K, T) gradients of t there
    t0: np.ndarray  # (K,) t there
    rep: np.ndarray  # (K,) the group a point favours (-1: none)
    members: np.ndarray  # (T,) tokens by exchangeable group
    offsets: np.ndarray  # (T + 1,) the groups' first members
    off: np.ndarray  # (K,) linearization offsets
    beta: np.ndarray  # (K,) FORM indices
    log_mass: np.ndarray  # (K,) log FORM masses
    A: np.ndarray  # (K + 1, T + 1) the half-spaces' normals
    counts: np.ndarray  # (K + 1,) points per stratum
    starts: np.ndarray  # (K + 2,) each stratum's first point
    s: np.ndarray  # (N,) truncated coordinates
    zeta: np.ndarray  # (T, N) folded points
    E: np.ndarray  # (T, N) the exponentials' arguments
    U: np.ndarray  # (K, N) each component's u
    GU: np.ndarray  # (K, N) e^{-u^2/2}
    factor: np.ndarray  # (K,) components' factors on the fundamental domain
    sig: np.ndarray  # (K,) widened copies' scales (1: not widened)
    inflate: np.ndarray  # (1,) the group the copies widen (-1: none)
    LR: np.ndarray  # (K, N) widened copies' log density factors


class TailError:
    """The population error P = (P_+ + P_-)/2 of one layout of T tokens.

    Parameters
    ----------
    X : (2, T + 1, N) standard normals and u : (2, N) uniforms in (0, 1] per
        class (:func:`tail_points`). The first :func:`pilot_count` points of each
        class are the pilot's (step 5 of the module's docstring), the rest the estimate's.
    """

    def __init__(self, X: np.ndarray, u: np.ndarray):
        self.X, self.u = X, u
        T, N = X.shape[1] - 1, X.shape[2]
        self.N, self.T = N, T
        n1 = pilot_count(N)
        # each stage's points contiguous: the kernels take whole arrays
        self._stages = [
            (np.ascontiguousarray(X[:, :, cols]), np.ascontiguousarray(u[:, cols]))
            for cols in (slice(0, n1), slice(n1, N))
        ]
        self._log_u = [np.log(su) for _, su in self._stages]
        self._work_arrays()
        self._components = design_kernels._tail_components
        self._sample = sample_kernels._tail_sample
        self._finish = pop_kernels._tail_finish

    def _work_arrays(self) -> None:
        """The work arrays the kernels fill, reused: at most K = 2 T components per class;
        the two stages share the components and have their own strata and points."""
        T = self.T
        K = 4 * T  # the design's at most 2 T, and a widened copy of each
        shared = {
            "Z": np.empty((K, T)),
            "G": np.empty((K, T)),
            "t0": np.empty(K),
            "rep": np.empty(K, dtype=np.int64),
            "members": np.empty(T, dtype=np.int64),
            "offsets": np.empty(T + 1, dtype=np.int64),
            "off": np.empty(K),
            "beta": np.empty(K),
            "log_mass": np.empty(K),
            "A": np.zeros((K + 1, T + 1)),
            "factor": np.ones(K),
            "sig": np.ones(K),
            "inflate": np.full(1, -1, dtype=np.int64),
        }
        self._work, self._vecs = [], []
        for X, _ in self._stages:
            N = X.shape[2]
            self._work.append(
                TailWork(
                    counts=np.zeros(K + 1, dtype=np.int64),
                    starts=np.zeros(K + 2, dtype=np.int64),
                    s=np.zeros(N),
                    zeta=np.empty((T, N)),
                    E=np.empty((T, N)),
                    U=np.empty((K, N)),
                    GU=np.empty((K, N)),
                    LR=np.zeros((K, N)),
                    **shared,
                )
            )
            self._vecs.append(np.empty((6, N)))
        self._w = self._work[0]  # the components (and the pilot's strata)

    def estimate(self, aq: np.ndarray, anu: np.ndarray, kappa: float, b: float, sdc: float) -> dict:
        """The error of the state with mean logits aq (2, T) and mean values
        anu (2, T) per class (+1 then -1), logit noise scale kappa = sigma |q| > 0,
        value-logit coupling b = sigma q^.nu and conditional value sd sdc.

        Returns ``pop_error``, ``pop_error_se`` and ``pop_error_resolved``
        (1.0 or 0.0); unresolved, ``pop_error`` is an upper bound and the
        standard error is NaN.
        """
        total, se, below = 0.0, 0.0, 0.0
        for c, y in enumerate((1.0, -1.0)):
            p, se_c, floor = self._class(c, y, aq[c], anu[c], kappa, b, sdc)
            below += 0.5 * floor
            total += 0.5 * p
            se = math.hypot(se, 0.5 * se_c)  # not the root of summed squares: those underflow below 1e-154
        resolved = total > 0.0 and se <= RESOLVED_REL * total and below <= 1e-3 * total
        if resolved:
            return {"pop_error": total, "pop_error_se": se, "pop_error_resolved": 1.0}
        bound = max(total + 3.0 * se, below)
        return {"pop_error": bound, "pop_error_se": math.nan, "pop_error_resolved": 0.0}

    def class_error(
        self, c: int, y: float, aq: ArrayLike, anu: ArrayLike, kappa: float, b: float, sdc: float
    ) -> tuple[float, float]:
        """The error P_y of one class (c = 0 for y = +1, 1 for y = -1, the
        points of that class) with its standard error."""
        p, se, _ = self._class(c, y, aq, anu, kappa, b, sdc)
        return p, se

    def _class(self, c: int, y: float, aq, anu, kappa: float, b: float, sdc: float):
        """(P_y, its standard error, the bound on P_y not seen: 0 or FLOOR_BOUND)."""
        w = self._w
        aq, anu = np.ascontiguousarray(aq, dtype=np.float64), np.ascontiguousarray(anu, dtype=np.float64)
        kappa, b, sdc, y = float(kappa), float(b), float(sdc), float(y)  # the kernels' types, every call
        # a design needs a smooth integrand: with sdc = 0 (nu along q) Phi(-t) is a step,
        # so the proposal is built for a slightly noisy value (the estimate stays exact)
        sdc_design = sdc if sdc > 0.0 else 1e-3 * (float(np.abs(anu).max()) + abs(b)) + 1e-300
        settings = (DEFENSIVE, FLOOR, MERGE, MAX_BETA, PRUNE)
        K, n_groups = self._components(aq, anu, kappa, b, sdc_design, y, self._w.s.size, settings, w)
        if K == 0:  # every design point beyond MAX_BETA
            return 0.0, 0.0, FLOOR_BOUND
        args = (K, n_groups, c, y, aq, anu, kappa, b, sdc)
        # the pilot's strata even over the components (the defensive share kept), not the FORM
        # masses: those can starve the component that carries the error, and the pilot then
        # cannot see it (step 5)
        design_kernels.stratum_counts(np.ones(K), w.s.size, DEFENSIVE, FLOOR, w.counts, w.starts)
        self._stage(0, *args)  # the pilot
        self._pilot_shares(K)
        p, se = self._stage(1, *args)
        return p, se, 0.0

    def _stage(self, i: int, K, n_groups, c, y, aq, anu, kappa, b, sdc) -> tuple[float, float]:
        """Sample stage ``i``'s points in its strata and estimate (value, standard error)."""
        w, (X, u), log_u = self._work[i], self._stages[i], self._log_u[i]
        t, g, h, den, tail, keep = self._vecs[i]
        self._sample(K, n_groups, aq, kappa, u[c], log_u[c], X[c], w, keep, g, h)
        E, GU = w.E, w.GU[:K]
        np.exp(E, out=E)
        np.exp(GU, out=GU)
        return self._finish(
            E,
            w.U[:K],
            GU,
            w.zeta,
            anu,
            b,
            sdc,
            y,
            keep,
            w.log_mass,
            w.factor,
            K,
            w.counts[: K + 1],
            w.starts[: K + 2],
            t,
            g,
            h,
            den,
            tail,
            w.sig,
            w.LR,
        )

    def _pilot_shares(self, K: int) -> None:
        """The estimate's strata from the pilot's terms: each component's share of the
        error, sum_n h_n r_nk with r_nk its responsibility for point n (its term in the
        mixture density over the whole), the defensive share kept and every component at
        least FLOOR of the rest (the FORM shares if the pilot saw no error)."""
        w1, w2 = self._work
        _, _, h, den, _, _ = self._vecs[0]
        n1 = h.size
        with np.errstate(over="ignore", invalid="ignore"):
            log_r = log_ndtr(-w1.U[:K]) - w1.log_mass[:K, None] + w1.LR[:K]
            r = np.exp(log_r) * (w1.factor[:K] * w1.counts[1 : K + 1] / n1)[:, None] / den
            mass = r @ h
        if not (np.isfinite(mass.sum()) and mass.sum() > 0.0):
            mass = w1.counts[1 : K + 1].astype(np.float64)
        design_kernels.stratum_counts(mass, w2.s.size, DEFENSIVE, FLOOR, w2.counts, w2.starts)
