"""Population metrics of a fresh clean sample (SPEC §5).

Given q = W p and nu, each token's (z_t, u_t) = (x_t . q, x_t . nu) of a fresh
sample is a 2-D Gaussian with mean (a_t . q, a_t . nu), a_t the token's mean
vector, and covariance sigma^2 [[|q|^2, q.nu], [q.nu, |nu|^2]]; tokens are
independent. Writing z_t = a_t.q + sigma |q| zeta_t with zeta ~ N(0, I_T),

    f | zeta ~ N( sum_t s_t (a_t.nu + sigma (q^.nu) zeta_t),
                  sigma^2 (|nu|^2 - (q^.nu)^2) sum_t s_t^2 ),   q^ = q/|q|,

so P(y f < 0) = E_zeta[Phi(-y mean / sd)]: a T-dimensional Gaussian integral
whose mass, when it is small, sits far out in zeta; it is estimated by
importance sampling around its design points (:mod:`.tail`). The bulk
quantities are averages over randomized quasi-Monte Carlo points
(``N_SCRAMBLES`` independent random linear scrambles with digital shifts of a
Sobol sequence, drawn once per run): the expected loss adds the exact average
over f given zeta (a Taylor series, Gauss-Hermite or a closed-form series, by
the conditional sd), and the expected score of each role comes from the same
points. The hard-attention limit (:meth:`Population.hard_limit`) is a sum of
one-dimensional integrals, done by quadrature.

Evaluation is vectorized over the points: the softmax weights factor into
e^{a_t.q - max} (per class) times e^{sigma |q| zeta_t - max} (per point,
shared by both classes), so one exponential per point and token (NumPy) and
passes of multiply-adds (:func:`.moment_kernels.conditional_moments`;
the irrelevant tokens, of mean zero, through three sums shared by the classes)
give every class's normalizer, mean and sum of squared scores; the expected
loss per point follows in SIMD Numba loops (Gauss-Hermite with
each point's own node count, all nodes of all points through one exp and one log1p).
At q = 0 attention is uniform and the integrand is constant: the closed form
Phi(-|mu| / (sigma sqrt(2T))) (default roles) comes out exactly with error 0.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import ndtr

from ....data.dataset import ROLE_NAMES
from ....data.synthetic import role_coefficients
from ....runtime.workspace import Workspace
from . import moment_kernels, pop_kernels
from .hard_limit import hard_limit_terms
from .loss import TAYLOR_SD, expected_softplus
from .sobol import sobol_normals
from .tail import RESOLVED_REL, TailError, tail_points

UNDERFLOW = 1e-140  # factored softmax sums below this are recomputed directly (their squares stay normal)


def tail_count(points: int) -> int:
    """Importance points per class of the error's tail estimator (:mod:`.tail`)
    for ``pop_points`` quasi-random points: a quarter of them, at least 64."""
    return max(points // 4, 64)


def population_points(T: int, points: int, rng: np.random.Generator) -> tuple:
    """Every random number of a run's population metrics, from its population
    stream ``rng`` in this order: the (N_SCRAMBLES, points / N_SCRAMBLES, T)
    scrambled Sobol normals of the bulk metrics (:func:`sobol_normals`), then
    the tail estimator's normals and uniforms (:func:`.tail.tail_points`)."""
    zeta = sobol_normals(T, points, rng)
    return (zeta, *tail_points(T, tail_count(points), rng))


def cached_points(ws: Workspace, seed: Any, T: int, points: int, rng: np.random.Generator) -> tuple:
    """:func:`population_points` for a run whose population stream comes from
    ``seed`` (the run's seed and pop_seed; the stream is used for nothing else, so the points depend only
    on seed, T and points); sweeps reuse them across runs."""
    key = (seed, T, points)
    if key not in ws.points:
        ws.remember(ws.points, key, population_points(T, points, rng))
    return ws.points[key]


# -- the population metrics -----------------------------------------------------------


class Population:
    """Population metrics for one role layout and noise level.

    Parameters
    ----------
    roles : (T,) role code of each token of a fresh sample.
    rho : weak-relevance factor.  sigma : token noise sd.
    points : the random numbers of :func:`population_points` (the bulk QMC
        points, then the tail estimator's), or a function that returns them,
        called at the first evaluation (:func:`cached_population`: a run's
        points are then drawn on the background thread that evaluates, while
        its steps start).
    loss : "logistic" or "linear".
    attention : "softmax", or "stablemax": each point's scores directly (StableMax is not
        shift invariant, so the factoring below does not apply) and the error from the
        quasi-random points, not the tail estimator (:meth:`_stable_error`).
    """

    def __init__(
        self,
        roles: np.ndarray,
        rho: float,
        sigma: float,
        points: tuple | Callable[[], tuple],
        loss: str = "logistic",
        attention: str = "softmax",
    ):
        self.roles = np.asarray(roles, dtype=np.int64)
        self.rho, self.sigma, self.loss = float(rho), float(sigma), loss
        self.stable = attention == "stablemax"
        # token mean a_t = c_own * mu_y + c_other * mu_{-y}: as (class, token, [mu+, mu-]) coefficients
        self.c_own, self.c_other = role_coefficients(self.roles, rho)
        self._coef = np.stack(
            [np.stack([self.c_own, self.c_other], 1), np.stack([self.c_other, self.c_own], 1)]
        )
        self._role_sum = (self.roles[None, :] == np.arange(4)[:, None]).astype(np.float64)  # (4, T)
        self._score_keys = tuple(f"pop_score_{r}" for r in ROLE_NAMES)
        # one evaluation at a time: they share the work arrays below (a run's, its clean-label and
        # precision twins' may be asked for from their threads at once)
        self._busy = threading.Lock()
        self._draw = points if callable(points) else None
        if self._draw is None:
            self._take_points(*points)

    def _take_points(self, zeta: np.ndarray, tail_X: np.ndarray, tail_u: np.ndarray) -> None:
        """The points and the arrays sized by them."""
        R, M, T = zeta.shape
        if T != self.roles.size or tail_X.shape[1] != T + 1:
            raise ValueError(f"Population: points have {T} coordinates, roles {self.roles.size}")
        self.R, self.M = R, M
        # token-major (T, N): reductions over tokens run along contiguous rows
        self.zeta = np.ascontiguousarray(zeta.reshape(R * M, T).T)
        # each point's largest coordinate subtracted once: sigma |q| >= 0 times it is
        # the largest random logit part, so e^{sigma |q| D} never overflows
        self._D = self.zeta - self.zeta.max(axis=0)
        self.tail = TailError(tail_X, tail_u)
        self._work_arrays()

    def _work_arrays(self) -> None:
        # a reused (T, N) work array: fresh temporaries of this size are mapped
        # from the OS on every call, and the page faults cost more than the math
        self._E = np.empty_like(self.zeta)
        N = self.zeta.shape[1]
        self._moments = np.empty((4, 2, N))  # reused work arrays: the conditional moments,
        self._terms = np.empty((4, 2 * N))  # ... the per-point terms

    def _points(self) -> None:
        """Draw the points now if they were left for the first evaluation."""
        if self._draw is not None:
            self._take_points(*self._draw())
            self._draw = None

    def class_means(
        self, q_mu_pos: float, q_mu_neg: float, nu_mu_pos: float, nu_mu_neg: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(2, T) mean logits a_t . q and mean values a_t . nu, class +1 then -1."""
        both = self._coef @ np.array([[q_mu_pos, nu_mu_pos], [q_mu_neg, nu_mu_neg]])  # (2, T, 2)
        return both[:, :, 0], both[:, :, 1]

    def error_arguments(
        self,
        q_mu_pos: float,
        q_mu_neg: float,
        q_nu: float,
        qq: float,
        nu_mu_pos: float,
        nu_mu_neg: float,
        nunu: float,
    ) -> tuple:
        """(aq, anu, kappa, b, sdc) of a state with |q| > 0, what :class:`.tail.TailError` takes:
        the (2, T) mean logits and values per class, the logit noise scale sigma |q|, the
        value-logit coupling sigma q^.nu and the conditional value sd."""
        aq, anu = self.class_means(q_mu_pos, q_mu_neg, nu_mu_pos, nu_mu_neg)
        qn = math.sqrt(qq)
        qhat_nu = q_nu / qn
        sig = self.sigma
        return aq, anu, sig * qn, sig * qhat_nu, sig * math.sqrt(max(nunu - qhat_nu**2, 0.0))

    def evaluate(
        self,
        q_mu_pos: float,
        q_mu_neg: float,
        q_nu: float,
        qq: float,
        nu_mu_pos: float,
        nu_mu_neg: float,
        nunu: float,
    ) -> dict:
        """Error (with standard error and whether it is resolved), loss and
        per-role scores from the scalars q.mu+, q.mu-, q.nu, |q|^2, nu.mu+,
        nu.mu-, |nu|^2. The error comes from the tail estimator
        (:class:`.tail.TailError`), the loss and the scores from the
        quasi-random points."""
        with self._busy:
            return self._evaluate(q_mu_pos, q_mu_neg, q_nu, qq, nu_mu_pos, nu_mu_neg, nunu)

    def _evaluate(self, q_mu_pos, q_mu_neg, q_nu, qq, nu_mu_pos, nu_mu_neg, nunu) -> dict:
        self._points()
        sig = self.sigma
        qn = math.sqrt(max(qq, 0.0))
        if qn > 0.0:
            args = self.error_arguments(q_mu_pos, q_mu_neg, q_nu, qq, nu_mu_pos, nu_mu_neg, nunu)
            err_r, loss_r, score = self._scrambles(0, self.R, *args, error=self.stable)
            score /= self.R
            out = self._stable_error(err_r) if self.stable else self.tail.estimate(*args)
        else:  # uniform attention: the integrand does not depend on zeta; one point, exact
            aq, anu = self.class_means(q_mu_pos, q_mu_neg, nu_mu_pos, nu_mu_neg)
            args = (aq, anu, 0.0, 0.0, sig * math.sqrt(max(nunu, 0.0)))
            err_r, loss_r, score = self._scrambles(0, 1, *args, points=1)
            loss_r = np.repeat(loss_r, self.R)
            out = {"pop_error": float(err_r[0]), "pop_error_se": 0.0, "pop_error_resolved": 1.0}
        out["pop_loss"] = math.fsum(loss_r.tolist()) / self.R
        out.update(zip(self._score_keys, (self._role_sum @ score).tolist()))
        return out

    def _scrambles(
        self, r0: int, r1: int, aq, anu, sq, b, sdc, points: int | None = None, error: bool = True
    ):
        """Scrambles r0..r1-1 (the first ``points`` points when given): per
        scramble (error, loss) means (the error only with ``error``), and the
        token scores summed over scrambles (each a mean over its points and
        both classes)."""
        M = self.M if points is None else points
        cols = slice(r0 * self.M, r0 * self.M + (r1 - r0) * M)
        x, sd, t, score = self._conditional(cols, aq, anu, sq, b, sdc)
        linear = self.loss == "linear"
        lo_sd, top_sd = (0.0, 0.0) if linear else (float(sd.min()), float(sd.max()))
        # the Taylor loss unless every point needs another rule (as when nu is trained);
        # a NaN sd keeps it, so a NaN state gives a NaN loss (reported as divergence)
        err, loss = pop_kernels.point_terms(
            t, x, sd, linear, taylor=not lo_sd > TAYLOR_SD, work=self._terms[:, : t.size], error=error
        )
        if error and self.stable:
            self._largest_share = float(err.max() / max(err.sum(), 1e-300))
        if top_sd > TAYLOR_SD:
            if lo_sd > TAYLOR_SD:
                loss = expected_softplus(x, sd)
            else:
                hard = sd > TAYLOR_SD
                loss[hard] = expected_softplus(x[hard], sd[hard])
        return *pop_kernels.scramble_means(err, loss, r1 - r0, M), score / M

    def _stable_error(self, err_r: np.ndarray) -> dict:
        """StableMax's error from the quasi-random points' per-scramble means: resolved
        when its standard error is at most ``RESOLVED_REL`` of it and no point carries
        more than 1 % of it; otherwise an upper bound, the mean + 5 se + 4 / N
        (N all points: a region of the noises no point fell in has probability below
        4 / N with probability 1 - e^-4 over the scrambles)."""
        R = err_r.size
        mean = float(err_r.mean())
        se = float(err_r.std(ddof=1) / math.sqrt(R))
        ok = mean > 0.0 and se <= RESOLVED_REL * mean and self._largest_share <= 0.01
        if ok:
            return {"pop_error": mean, "pop_error_se": se, "pop_error_resolved": 1.0}
        bound = min(mean + 5.0 * se + 4.0 / (R * self.M), 1.0)
        return {"pop_error": bound, "pop_error_se": se, "pop_error_resolved": 0.0}

    def _conditional(self, cols: slice, aq, anu, sq, b, sdc):
        """For the points ``cols``, per class and point (2, N): the loss argument
        x = -y mean, the sd of f and t = y mean / sd given zeta; and each
        token's score (T,) summed over points, averaged over classes."""
        if self.stable:
            return self._conditional_stable(self.zeta[:, cols], aq, anu, sq, b, sdc)
        zeta, E = self.zeta[:, cols], self._E[:, cols]
        np.multiply(self._D[:, cols], sq, out=E)  # the logits' random part, shifted
        np.exp(E, out=E)  # (T, N) per point, shared by both classes
        if not E.flags.c_contiguous:  # some of the points (q = 0): contiguous, so one kernel signature loads
            zeta, E = np.ascontiguousarray(zeta), np.ascontiguousarray(E)
        wa = np.exp(aq - aq.max(axis=1, keepdims=True))  # (2, T) per class
        # (2, N): 1 / softmax normalizer, y mean, sd of f and t (+-inf where sd = 0: f is exact given zeta)
        out = self._moments if E.shape[1] == self._moments.shape[2] else None
        inv, ym, sd, t, bad = moment_kernels.conditional_moments(E, zeta, wa, anu, b, sdc, UNDERFLOW, out)
        if sdc == 0.0:
            t[ym == 0.0] = 0.0  # Phi(0) = 1/2: a tie
        score = ((E @ inv.T) * wa.T).sum(axis=1)
        for c, col in zip(*np.nonzero(inv == 0.0)) if bad else ():  # underflowed: direct softmax
            z = aq[c] + sq * zeta[:, col]
            e = np.exp(z - z.max())
            se = e.sum()
            ym[c, col] = (1.0 - 2.0 * c) * (e @ anu[c] + b * (e @ zeta[:, col])) / se
            sd[c, col] = sdc * math.sqrt(e @ e) / se
            y_m, s_d = ym[c, col], sd[c, col]
            t[c, col] = y_m / s_d if s_d > 0.0 else (math.copysign(math.inf, y_m) if y_m != 0.0 else 0.0)
            score += e / se
        x = np.negative(ym, out=ym)
        return x, sd, t, score / 2

    def _conditional_stable(self, zeta: np.ndarray, aq, anu, sq, b, sdc):
        """:meth:`_conditional` for StableMax: per class the logits a_t.q + sigma |q| zeta_t
        of every point (T, N), their weights z + 1 (z >= 0) or 1 / (1 - z), normalized."""
        N = zeta.shape[1]
        x, sd, t = np.empty((2, N)), np.empty((2, N)), np.empty((2, N))
        score = np.zeros(zeta.shape[0])
        for c in range(2):
            z = aq[c][:, None] + sq * zeta
            w = np.where(z >= 0.0, z + 1.0, 1.0 / (1.0 - np.minimum(z, 0.0)))
            s = w / w.sum(axis=0)
            ym = (1.0 - 2.0 * c) * (anu[c] @ s + b * np.einsum("tn,tn->n", s, zeta))
            sd[c] = sdc * np.sqrt(np.einsum("tn,tn->n", s, s))
            with np.errstate(divide="ignore", invalid="ignore"):
                t[c] = np.where(sd[c] > 0.0, ym / sd[c], np.copysign(np.inf, ym))
            t[c][(sd[c] == 0.0) & (ym == 0.0)] = 0.0  # Phi(0) = 1/2: a tie
            x[c] = -ym
            score += s.sum(axis=1)
        return x, sd, t, score / 2

    def hard_limit(
        self,
        q_mu_pos: float,
        q_mu_neg: float,
        q_nu: float,
        qq: float,
        nu_mu_pos: float,
        nu_mu_neg: float,
        nunu: float,
    ) -> dict:
        """The population metrics as |q| -> infinity along q (softmax -> argmax),
        by one-dimensional quadrature (:func:`hard_limit_terms`): the error,
        ``relevant_prob`` (the probability that a fresh clean sample selects a
        relevant token) and the probability of each role being selected. The
        ``_se`` entries are the quadrature's error bounds."""
        aq, anu = self.class_means(q_mu_pos, q_mu_neg, nu_mu_pos, nu_mu_neg)
        qn = math.sqrt(max(qq, 0.0))
        if not qn > 0.0:
            raise ValueError("the hard-attention limit needs a direction q != 0")
        sig = self.sigma
        qhat_nu = q_nu / qn
        b, sdc = sig * qhat_nu, sig * math.sqrt(max(nunu - qhat_nu**2, 0.0))
        err = err_bound = 0.0
        roles = np.zeros(4)
        role_bound = np.zeros(4)
        for c, y in enumerate((1.0, -1.0)):
            sel, sel_b, e, e_b = hard_limit_terms(aq[c] / (sig * qn), anu[c], b, sdc, y)
            err += 0.5 * e.sum()
            err_bound += 0.5 * e_b.sum()
            np.add.at(roles, self.roles, 0.5 * sel)
            np.add.at(role_bound, self.roles, 0.5 * sel_b)
        out = {
            "pop_error": float(err),
            "pop_error_se": float(err_bound),
            "pop_error_resolved": float(err > 0.0 and err_bound <= RESOLVED_REL * err),
            "relevant_prob": float(roles[0]),
            "relevant_prob_se": float(role_bound[0]),
        }
        out.update({f"prob_{name}": float(roles[code]) for code, name in enumerate(ROLE_NAMES)})
        return out


def cached_population(
    ws: Workspace,
    seed: Any,
    roles: np.ndarray,
    rho: float,
    sigma: float,
    points: int,
    loss: str,
    rng: np.random.Generator,
    attention: str = "softmax",
) -> Population:
    """The :class:`Population` of a run (its points from :func:`cached_points`,
    drawn at its first evaluation: ``rng`` serves nothing else), shared by the
    runs of a process that ask for the same one: a sweep's points differ in
    signal strength, which enters only the scalars each evaluation takes. Its
    work arrays are reused like the kernels' (one evaluation at a time per
    process; a run collects its evaluations before it returns)."""
    key = (seed, tuple(int(r) for r in roles), float(rho), float(sigma), points, loss, attention)
    if key not in ws.populations:
        zeta = functools.partial(cached_points, ws, seed, len(roles), points, rng)
        ws.remember(ws.populations, key, Population(roles, rho, sigma, zeta, loss, attention))
    return ws.populations[key]


def state_scalars(
    problem: Any, W: np.ndarray | None, p: np.ndarray, nu: np.ndarray, q: np.ndarray | None = None
) -> tuple[float, ...]:
    """The seven scalars :meth:`Population.evaluate` takes, of an engine-coordinate
    state of ``problem`` (q = W p when given): q.mu+, q.mu-, q.nu, |q|^2, nu.mu+, nu.mu-, |nu|^2."""
    qk, qq = problem.q_norm2(W, p, q)
    vals = (
        qk @ problem.mu_pos,
        qk @ problem.mu_neg,
        qk @ nu,
        qq,
        nu @ problem.mu_pos,
        nu @ problem.mu_neg,
        nu @ nu,
    )
    return tuple(float(v) for v in vals)


def uniform_error(signal_norm: float, sigma: float, T: int) -> float:
    """Closed-form population error at q = 0 for the default roles (SPEC §3)."""
    return float(ndtr(-signal_norm / (sigma * np.sqrt(2 * T))))
