"""Numba kernels of the tail of the population error, second part: the
importance points of :mod:`.tail` from its mixture components (truncated
normals by Wichura's quantile), folded, and the exponentials' arguments.

Every ``@njit`` function here calls only functions of this file.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ....runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ....runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH

# Wichura's AS 241 (PPND16, Appl. Statist. 37, 477-484, 1988): the normal quantile to about
# 1e-16 relative, by rational functions in q = p - 1/2 (|q| <= 0.425) or in
# r = sqrt(-log(min(p, 1 - p))) (r <= 5, and beyond). Highest power first.
_AS241_A = (
    2.5090809287301226727e3,
    3.3430575583588128105e4,
    6.7265770927008700853e4,
    4.5921953931549871457e4,
    1.3731693765509461125e4,
    1.9715909503065514427e3,
    1.3314166789178437745e2,
    3.3871328727963666080e0,
)
_AS241_B = (
    5.2264952788528545610e3,
    2.8729085735721942674e4,
    3.9307895800092710610e4,
    2.1213794301586595867e4,
    5.3941960214247511077e3,
    6.8718700749205790830e2,
    4.2313330701600911252e1,
    1.0,
)
_AS241_C = (
    7.74545014278341407640e-4,
    2.27238449892691845833e-2,
    2.41780725177450611770e-1,
    1.27045825245236838258e0,
    3.64784832476320460504e0,
    5.76949722146069140550e0,
    4.63033784615654529590e0,
    1.42343711074968357734e0,
)
_AS241_D = (
    1.05075007164441684324e-9,
    5.47593808499534494600e-4,
    1.51986665636164571966e-2,
    1.48103976427480074590e-1,
    6.89767334985100004550e-1,
    1.67638483018380384940e0,
    2.05319162663775882187e0,
    1.0,
)
_AS241_E = (
    2.01033439929228813265e-7,
    2.71155556874348757815e-5,
    1.24266094738807843860e-3,
    2.65321895265761230930e-2,
    2.96560571828504891230e-1,
    1.78482653991729133580e0,
    5.46378491116411436990e0,
    6.65790464350110377720e0,
)
_AS241_F = (
    2.04426310338993978564e-15,
    1.42151175831644588870e-7,
    1.84631831751005468180e-5,
    7.86869131145613259100e-4,
    1.48753612908506148525e-2,
    1.36929880922735805310e-1,
    5.99832206555887937690e-1,
    1.0,
)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _horner8(c, x):
    acc = (((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]
    return ((acc * x + c[5]) * x + c[6]) * x + c[7]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _normal_quantile(p, log_p):
    """Phi^{-1}(p) from p and its logarithm (AS 241; the tail from log_p, so
    p far below the smallest double is fine)."""
    if log_p < -2.5902671654458267:  # p < 0.075: the lower tail, from log p
        r = math.sqrt(-log_p)
    else:
        q = p - 0.5
        if abs(q) <= 0.425:
            r = 0.180625 - q * q
            return q * _horner8(_AS241_A, r) / _horner8(_AS241_B, r)
        r = math.sqrt(-math.log1p(-p))  # the upper tail
    if r <= 5.0:
        v = _horner8(_AS241_C, r - 1.6) / _horner8(_AS241_D, r - 1.6)
    else:
        v = _horner8(_AS241_E, r - 5.0) / _horner8(_AS241_F, r - 5.0)
    return -v if log_p < -0.6931471805599453 else v


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _truncated_normals(u, log_u, starts, K, log_mass, s):
    """s for the points of strata 1..K: normals truncated to > beta_k, by the
    inverse of their upper tail, s = -Phi^{-1}(u Phi(-beta_k)) (log Phi(-beta_k)
    = log_mass[k-1]; u in (0, 1] with its logarithm log_u)."""
    for k in range(1, K + 1):
        lm = log_mass[k - 1]
        scale = math.exp(lm)
        for n in range(starts[k], starts[k + 1]):
            s[n] = -_normal_quantile(u[n] * scale, log_u[n] + lm)


def normal_quantile(p: np.ndarray) -> np.ndarray:
    """Phi^{-1}(p) elementwise (1-d; as scipy.special.ndtri), by :func:`_normal_quantile`."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_p = np.log(p)
    out = np.empty_like(p)
    starts = np.array([0, 0, p.size])
    _truncated_normals(p, log_p, starts, 1, np.zeros(1), out)
    return -out


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _tail_arguments(
    X,
    s,
    starts,
    A,
    rep,
    members,
    offsets,
    n_groups,
    aq,
    kappa,
    G,
    off,
    K,
    zeta,
    keep,
    E,
    U,
    GU,
    c,
    s_work,
    sig,
    gi,
    LR,
):
    """The importance points, folded into the fundamental domain D (each
    group's largest coordinate in its representative's place: the integrand
    is symmetric within groups), into zeta (T, N); keep (N,): 0 for a point of
    a component favouring group g's representative (rep[k] = g) that drew
    another member of g largest (outside D before folding: it counts with
    value 0), else 1. Then the arguments of the exponentials the estimate
    needs (NumPy takes them in place): the shifted logits aq + kappa zeta - max
    into E (T, N) and -u_k^2 / 2 into GU (K, N), with u_k = off_k + G_k . zeta,
    each component's linearized t, into U (K, N).

    The points of stratum k >= 1 (columns starts[k]..starts[k+1]-1) are
    X[:T] + (s - X . a) a[:T], a = A[k]: the (T+1)-dim normals X (T+1, N) with
    their coordinate along a replaced by s (drawn > beta_k), the last
    coordinate dropped; stratum 0 (defensive) is X[:T]. c, s_work: (N,) work arrays.
    A widened copy (sig[k] > 1: :func:`.design_kernels._inflated_copies`) has group gi's
    coordinates (but the member it favours) scaled by sig[k] before folding; its u is taken at
    the point scaled back, and LR[k] (K, N) gets the log of its density's other factor,
    |zeta_gi|^2 (1 - 1/sig^2) / 2 - (its scaled coordinates) log sig (0 for the others)."""
    T, N = zeta.shape
    for k in range(K + 1):
        lo, hi = starts[k], starts[k + 1]
        cv = c[lo:hi]
        if k == 0:
            for n in range(hi - lo):
                cv[n] = 0.0
        else:
            sv = s[lo:hi]
            for n in range(hi - lo):
                cv[n] = sv[n]
            for t in range(T + 1):
                a = A[k, t]
                xv = X[t, lo:hi]
                for n in range(hi - lo):
                    cv[n] -= a * xv[n]
        for t in range(T):
            a = A[k, t]
            xv, zv = X[t, lo:hi], zeta[t, lo:hi]
            for n in range(hi - lo):
                zv[n] = xv[n] + cv[n] * a
        g_rep = rep[k - 1] if k > 0 else -1
        if k > 0 and sig[k - 1] > 1.0:  # a widened copy: its group's coordinates scaled
            start = offsets[gi] + 1 if g_rep == gi else offsets[gi]
            for m in range(start, offsets[gi + 1]):
                zv = zeta[members[m], lo:hi]
                for n in range(hi - lo):
                    zv[n] *= sig[k - 1]
        kv = keep[lo:hi]
        for n in range(hi - lo):
            kv[n] = 1.0
        for g in range(n_groups):  # fold: each group's largest coordinate into its first member's place
            first, last = offsets[g], offsets[g + 1]
            if last - first < 2:
                continue
            head = zeta[members[first], lo:hi]
            big, old = c[lo:hi], s_work[lo:hi]  # the running maximum; the first member's value
            for n in range(hi - lo):
                big[n] = head[n]
                old[n] = head[n]
            for m in range(first + 1, last):
                zv = zeta[members[m], lo:hi]
                for n in range(hi - lo):
                    big[n] = max(big[n], zv[n])
            for m in range(first + 1, last):  # the (first) largest member takes the first's old value
                zv = zeta[members[m], lo:hi]
                for n in range(hi - lo):
                    hit = zv[n] == big[n] and head[n] != big[n]
                    zv[n] = old[n] if hit else zv[n]
                    head[n] = big[n] if hit else head[n]
            if g == g_rep:  # a point of this component outside D before folding counts as 0
                for n in range(hi - lo):
                    kv[n] = 0.0 if old[n] != big[n] else kv[n]
    top = c  # reused: the largest logit of each point
    for n in range(N):
        top[n] = -math.inf
    for t in range(T):
        a, zv, ev = aq[t], zeta[t], E[t]
        for n in range(N):
            v = a + kappa * zv[n]
            ev[n] = v
            top[n] = max(top[n], v)
    for t in range(T):
        ev = E[t]
        for n in range(N):
            ev[n] -= top[n]
    for m in range(K):
        uv, gv = U[m], GU[m]
        o = off[m]
        for n in range(N):
            uv[n] = o
        for t in range(T):
            g, zv = G[m, t], zeta[t]
            for n in range(N):
                uv[n] += g * zv[n]
        lv = LR[m]
        for n in range(N):
            lv[n] = 0.0
        if sig[m] > 1.0:  # a widened copy, density q(D^-1 zeta) / det D: u at D^-1 zeta, and
            inv = 1.0 / sig[m]  # log of phi(D^-1 zeta) / (phi(zeta) det D) into LR
            start = offsets[gi] + 1 if rep[m] == gi else offsets[gi]
            for mm in range(start, offsets[gi + 1]):
                t = members[mm]
                g, zv = G[m, t], zeta[t]
                for n in range(N):
                    uv[n] -= (1.0 - inv) * g * zv[n]
                    lv[n] += 0.5 * (1.0 - inv * inv) * zv[n] * zv[n]
            shrink = (offsets[gi + 1] - start) * math.log(sig[m])
            for n in range(N):
                lv[n] -= shrink
        for n in range(N):
            gv[n] = -0.5 * uv[n] * uv[n]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _tail_sample(K, n_groups, aq, kappa, u, log_u, X, w, keep, c, s_work):
    """One class of :mod:`.tail` up to the exponentials, after its ``K``
    components (:func:`.design_kernels._tail_components`): their points' truncated
    coordinates (:func:`_truncated_normals`), the
    folded points and the exponentials' arguments (:func:`_tail_arguments`),
    and each component's factor in the mixture density on the fundamental
    domain (1, or 1/|g| for one favouring group g's first member). Returns
    ``K``."""
    members, offsets, G, rep, off, log_mass, A, starts = (
        w.members,
        w.offsets,
        w.G,
        w.rep,
        w.off,
        w.log_mass,
        w.A,
        w.starts,
    )
    s, zeta, E, U, GU, factor = w.s, w.zeta, w.E, w.U, w.GU, w.factor
    _truncated_normals(u, log_u, starts, K, log_mass, s)
    _tail_arguments(
        X,
        s,
        starts,
        A,
        rep,
        members,
        offsets,
        n_groups,
        aq,
        kappa,
        G,
        off,
        K,
        zeta,
        keep,
        E,
        U,
        GU,
        c,
        s_work,
        w.sig,
        w.inflate[0],
        w.LR,
    )
    for m in range(K):
        g = rep[m]
        factor[m] = 1.0 / (offsets[g + 1] - offsets[g]) if g >= 0 else 1.0
    return K
