"""Numba kernels of the tail of the population error, first part: the design
points of the importance sampler of :mod:`.tail` (Newton on planes of the
limit-state surface) and the mixture components built on them.

Every ``@njit`` function here calls only functions of this file: ``_erfcx``
is a copy of :func:`.moment_kernels._erfcx` for that reason (numba's cache
does not notice edits to callees in other files; tests/test_attention_population.py
checks the two agree bit for bit). Kept in one module for that reason too: the design search,
the components and their widened copies all call ``_t_grad`` and ``_log_upper``; split, each
part would need its own copy of them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ....runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ....runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH

_SQRTPI = math.sqrt(math.pi)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
PLANE_ITERS = 40  # Newton iterations of a design point at most (converged in 5-10 at the defaults)


INFLATE_MIN = 8  # groups of at least this many tokens get widened components (:func:`_inflated_copies`)
CURVE_MIN = 0.05  # the curvature along the group above which a component gets a widened copy
CURVE_MAX = 0.5  # the curvature the widening follows at most (a variance of at most 2)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _erfcx(a):
    """Scaled complementary error function e^{a^2} erfc(a), for a >= 0 without
    overflow: directly below 6 (erfc keeps its relative accuracy there), else
    the asymptotic series 1/(a sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2a^2)^k,
    summed while its terms shrink (error below e^{-36})."""
    if a < 6.0:
        return math.exp(a * a) * math.erfc(a)
    inv = 0.5 / (a * a)
    term = 1.0
    acc = 1.0
    for k in range(1, 40):
        nxt = -term * (2 * k - 1) * inv
        if abs(nxt) >= abs(term) or abs(nxt) < 1e-17:
            break
        term = nxt
        acc += term
    return acc / (a * _SQRTPI)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _log_upper(t):
    """log Phi(-t) for any finite t (the scaled erfc beyond t = 3, so no underflow)."""
    return _log_upper_mills(t)[0]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _log_upper_mills(t):
    """(log Phi(-t), phi(t) / Phi(-t)): the latter is the derivative of -log Phi(-t)."""
    a = t * _SQRT1_2
    if t > 3.0:
        ex = _erfcx(a)
        return math.log(0.5 * ex) - 0.5 * t * t, _SQRT_2_PI / ex
    up = 0.5 * math.erfc(a)
    return math.log(up), _INV_SQRT2PI * math.exp(-0.5 * t * t) / up


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _softmax(aq, kappa, zeta, s):
    """s = softmax(aq + kappa zeta), stably (the largest logit subtracted first)."""
    T = zeta.size
    top = -math.inf
    for i in range(T):
        s[i] = aq[i] + kappa * zeta[i]
        top = max(top, s[i])
    tot = 0.0
    for i in range(T):
        s[i] = math.exp(s[i] - top)
        tot += s[i]
    for i in range(T):
        s[i] /= tot


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _t_grad(zeta, aq, an, kappa, b, sdc, y, s, grad):
    """t(zeta) = y m / (sdc |s|) of one class at the standardized logit noises
    zeta (T,), and its gradient into ``grad`` (s: a (T,) work array).

    With s = softmax(aq + kappa zeta), values v = an + b zeta, m = s . v and
    Q = s . s: dm/dzeta_u = kappa s_u (v_u - m) + b s_u and
    dQ/dzeta_u = 2 kappa s_u (s_u - Q), so dt = y dm / D - t dQ / (2 Q), D = sdc sqrt(Q).
    """
    T = zeta.size
    _softmax(aq, kappa, zeta, s)
    m = 0.0
    Q = 0.0
    for i in range(T):
        m += s[i] * (an[i] + b * zeta[i])
        Q += s[i] * s[i]
    D = sdc * math.sqrt(Q)
    t = y * m / D
    for u in range(T):
        dm = kappa * s[u] * (an[u] + b * zeta[u] - m) + b * s[u]
        dQ = 2.0 * kappa * s[u] * (s[u] - Q)
        grad[u] = y * dm / D - t * dQ / (2.0 * Q)
    return t


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _psi_plane(u, w, d1, d2, aq, an, kappa, b, sdc, y, zeta, s):
    """psi = -|zeta|^2 / 2 + log Phi(-t) at zeta = u d1 + w d2 with its first
    and second derivatives in (u, w): (psi, psi_u, psi_w, psi_uu, psi_uw, psi_ww).

    Along a direction d the softmax moves as s' = kappa s (d - dbar), dbar = s . d,
    and the values v = an + b zeta as v' = b d; so m = s . v has
    m' = kappa s . ((d - dbar) v) + b dbar, Q = s . s has Q' = 2 s . s', and
    for a second direction e, s'' = kappa (s'_e (d - dbar) - s dbar'_e) with
    dbar'_e = s'_e . d, m'' = s'' . v + b (s'_d . e + s'_e . d),
    Q'' = 2 (s'_d . s'_e + s . s''). With t = c m Q^(-1/2), c = y / sdc, and
    log Phi(-t)' = -lam t', '' = -lam (lam - t) t' t' - lam t'' (lam the
    inverse Mills ratio) the rest is the chain rule.
    """
    T = zeta.size
    for i in range(T):
        zeta[i] = u * d1[i] + w * d2[i]
    _softmax(aq, kappa, zeta, s)
    m = Q = m1 = m2 = b1 = b2 = 0.0
    for i in range(T):
        vi = an[i] + b * zeta[i]
        m += s[i] * vi
        Q += s[i] * s[i]
        b1 += s[i] * d1[i]
        b2 += s[i] * d2[i]
    # first derivatives of m and Q along d1, d2; second ones along (d1 d1), (d1 d2), (d2 d2)
    q1 = q2 = m11 = m12 = m22 = q11 = q12 = q22 = 0.0
    c11 = c12 = c22 = 0.0  # dbar'
    for i in range(T):
        s1 = kappa * s[i] * (d1[i] - b1)
        s2 = kappa * s[i] * (d2[i] - b2)
        vi = an[i] + b * zeta[i]
        m1 += s1 * vi
        m2 += s2 * vi
        q1 += 2.0 * s[i] * s1
        q2 += 2.0 * s[i] * s2
        c11 += s1 * d1[i]
        c12 += s2 * d1[i]  # d/d2 of dbar_1
        c22 += s2 * d2[i]
    m1 += b * b1
    m2 += b * b2
    for i in range(T):
        s1 = kappa * s[i] * (d1[i] - b1)
        s2 = kappa * s[i] * (d2[i] - b2)
        vi = an[i] + b * zeta[i]
        s11 = kappa * (s1 * (d1[i] - b1) - s[i] * c11)
        s12 = kappa * (s2 * (d1[i] - b1) - s[i] * c12)
        s22 = kappa * (s2 * (d2[i] - b2) - s[i] * c22)
        m11 += s11 * vi + 2.0 * b * s1 * d1[i]
        m12 += s12 * vi + b * (s1 * d2[i] + s2 * d1[i])
        m22 += s22 * vi + 2.0 * b * s2 * d2[i]
        q11 += 2.0 * (s1 * s1 + s[i] * s11)
        q12 += 2.0 * (s1 * s2 + s[i] * s12)
        q22 += 2.0 * (s2 * s2 + s[i] * s22)
    c = y / sdc
    r = 1.0 / math.sqrt(Q)
    t = c * m * r
    t1 = c * (m1 * r - 0.5 * m * r * r * r * q1)
    t2 = c * (m2 * r - 0.5 * m * r * r * r * q2)
    r3, r5 = r * r * r, r * r * r * r * r
    t11 = c * (m11 * r - m1 * r3 * q1 - 0.5 * m * r3 * q11 + 0.75 * m * r5 * q1 * q1)
    t12 = c * (m12 * r - 0.5 * (m1 * q2 + m2 * q1) * r3 - 0.5 * m * r3 * q12 + 0.75 * m * r5 * q1 * q2)
    t22 = c * (m22 * r - m2 * r3 * q2 - 0.5 * m * r3 * q22 + 0.75 * m * r5 * q2 * q2)
    psi, lam = _log_upper_mills(t)
    curv = lam * (lam - t)
    zz = z1 = z2 = 0.0
    for i in range(T):
        zz += zeta[i] * zeta[i]
        z1 += zeta[i] * d1[i]
        z2 += zeta[i] * d2[i]
    n11 = n12 = n22 = 0.0
    for i in range(T):
        n11 += d1[i] * d1[i]
        n12 += d1[i] * d2[i]
        n22 += d2[i] * d2[i]
    return (
        psi - 0.5 * zz,
        -z1 - lam * t1,
        -z2 - lam * t2,
        -n11 - curv * t1 * t1 - lam * t11,
        -n12 - curv * t1 * t2 - lam * t12,
        -n22 - curv * t2 * t2 - lam * t22,
    )


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _plane_optimum(d1, d2, plane, u, w, aq, an, kappa, b, sdc, y, zeta, s):
    """The maximum of psi over the plane zeta = u d1 + w d2 (``plane``; else
    the line zeta = u d1, w = 0) by Newton's method from (u, w) (the exact
    Hessian of :func:`_psi_plane`, shifted to be negative definite; steps at
    most 3 long; backtracking): (u, w, psi)."""
    if not plane:
        w = 0.0
    psi, gu, gw, huu, huw, hww = _psi_plane(u, w, d1, d2, aq, an, kappa, b, sdc, y, zeta, s)
    for _ in range(PLANE_ITERS):
        huu, huw, hww = -huu, -huw, -hww  # positive definite at a maximum
        if not plane:
            gw, huw, hww = 0.0, 0.0, 1.0
        tr = huu + hww
        det = huu * hww - huw * huw
        low = 0.5 * (tr - math.sqrt(max(tr * tr - 4.0 * det, 0.0)))
        if not low > 1e-3:
            shift = 1e-3 - low if low == low else 1.0
            huu += shift
            hww += shift
            det = huu * hww - huw * huw
        du = (hww * gu - huw * gw) / det
        dw = (huu * gw - huw * gu) / det
        size = math.sqrt(du * du + dw * dw)
        if size > 3.0:
            du *= 3.0 / size
            dw *= 3.0 / size
        slope = gu * du + gw * dw
        step = 1.0
        moved = False
        for _ in range(40):
            new = _psi_plane(u + step * du, w + step * dw, d1, d2, aq, an, kappa, b, sdc, y, zeta, s)
            if new[0] >= psi + 1e-4 * step * slope:
                u += step * du
                w += step * dw
                psi, gu, gw, huu, huw, hww = new
                moved = True
                break
            step *= 0.5
        if not moved or step * size < 1e-7 * (1.0 + abs(u) + abs(w)):
            break
    return u, w, psi


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _centered(v, out):
    """out = v minus its mean, normalized: a direction orthogonal to (1, ..., 1),
    along which the softmax does not move (shifting every logit alike costs
    |zeta|^2 and changes nothing but the values' b zeta part)."""
    T = v.size
    mean = 0.0
    for i in range(T):
        mean += v[i]
    mean /= T
    norm = 0.0
    for i in range(T):
        out[i] = v[i] - mean
        norm += out[i] * out[i]
    norm = math.sqrt(norm)
    for i in range(T):
        out[i] = out[i] / norm if norm > 0.0 else 0.0  # v constant: no direction


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _token_groups(aq, an, members, offsets):
    """Group the tokens of one class into exchangeable groups, tokens of equal
    (aq, an) (the integrand is symmetric under permutations within each):
    group g holds tokens members[offsets[g]:offsets[g+1]] in increasing order,
    its first one the group's representative. Returns the number of groups."""
    T = aq.size
    done = np.zeros(T, np.bool_)
    pos = 0
    n = 0
    for i in range(T):
        if done[i]:
            continue
        offsets[n] = pos
        for j in range(i, T):
            if not done[j] and aq[j] == aq[i] and an[j] == an[i]:
                done[j] = True
                members[pos] = j
                pos += 1
        n += 1
    offsets[n] = pos
    return n


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _arc_points(dg, dj, lead, aq, an, kappa, b, sdc, y, zeta, s, Z, G, t0, K):
    """Rows K and K + 1 of Z, G, t0: the maximum of psi over the plane of the anchor's
    direction dg and a rising direction dj, and on dj's line alone, from starts set by the
    anchor's lead ``lead`` in mean logit over the rising token."""
    T = aq.size
    a = (lead + 2.0) / (2.0 * kappa) if kappa > 0.0 else 12.0
    a = min(max(a, 0.3), 12.0)
    u, w, _ = _plane_optimum(dg, dj, True, -a, a, aq, an, kappa, b, sdc, y, zeta, s)
    for i in range(T):
        Z[K, i] = u * dg[i] + w * dj[i]
    w, _, _ = _plane_optimum(dj, dj, False, 2.0 * a, 0.0, aq, an, kappa, b, sdc, y, zeta, s)
    for i in range(T):
        Z[K + 1, i] = w * dj[i]
    for h in range(2):
        t0[K + h] = _t_grad(Z[K + h], aq, an, kappa, b, sdc, y, s, G[K + h])


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _margin_token(aq, an, y):
    """The token that carries the margin: y an_t s_t largest at zeta = 0 (the anchor's)."""
    top = aq.max()
    r, best = 0, -math.inf
    for i in range(aq.size):
        v = math.exp(aq[i] - top) * y * an[i]
        if v > best:
            best, r = v, i
    return r


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _design_points(aq, an, kappa, b, sdc, y, members, offsets, n_groups, Z, G, t0, rep):
    """Design points of one class's error integrand phi(zeta) Phi(-t(zeta)):
    the origin; the maximum of psi = -|zeta|^2/2 + log Phi(-t) on the line of
    the anchor group's direction (the group of the token that carries the
    margin, y an_t s_t largest at zeta = 0, falling together against all the
    other tokens: directions are centered, :func:`_centered`); then for the
    representative j of each other group the maximum of psi over the plane
    spanned by that direction and token j's (rising as well), and on the
    line of token j's direction (rising alone): the failure boundary is
    curved, and these points cover its arc. Writes points Z (K, T), gradients of t there
    G (K, T), t there t0 (K,) and rep (K,): the group whose representative
    the point favours (-1: symmetric within every group); returns K (at most 2 T)."""
    T = aq.size
    s = np.empty(T)
    zeta = np.zeros(T)
    r = _margin_token(aq, an, y)
    eg = np.zeros(T)
    anchor = 0
    for g in range(n_groups):
        for m in range(offsets[g], offsets[g + 1]):
            if members[m] == r:
                anchor = g
    for m in range(offsets[anchor], offsets[anchor + 1]):
        eg[members[m]] = 1.0
    dg = np.empty(T)
    _centered(eg, dg)  # the anchor group falling against all the others
    for i in range(T):
        Z[0, i] = 0.0
    t0[0] = _t_grad(Z[0], aq, an, kappa, b, sdc, y, s, G[0])
    rep[0] = -1
    gap = (aq[r] - aq.min() + 2.0) / kappa if kappa > 0.0 else 12.0
    u, _, _ = _plane_optimum(dg, dg, False, -min(max(gap, 0.3), 12.0), 0.0, aq, an, kappa, b, sdc, y, zeta, s)
    for i in range(T):
        Z[1, i] = u * dg[i]
    t0[1] = _t_grad(Z[1], aq, an, kappa, b, sdc, y, s, G[1])
    rep[1] = -1
    K = 2
    if T < 3:  # two tokens: one contrast, the line above holds every design point
        return K
    ej = np.zeros(T)
    dj = np.empty(T)
    for g in range(n_groups):
        if g == anchor:
            continue
        j = members[offsets[g]]
        ej[j] = 1.0
        _centered(ej, dj)  # token j rising against all the others
        ej[j] = 0.0
        # token j rising with the anchor falling, and alone: the two ends of the boundary's arc
        _arc_points(dg, dj, aq[r] - aq[j], aq, an, kappa, b, sdc, y, zeta, s, Z, G, t0, K)
        rep[K] = rep[K + 1] = g if offsets[g + 1] - offsets[g] > 1 else -1
        K += 2
    # every member of a group of two or more rising together: one member's rise shares the
    # margin's lost weight with its exchangeable twins, and the failure where they rise at
    # once lies between the single-member points above (symmetric within groups)
    for g in range(n_groups):
        size = offsets[g + 1] - offsets[g]
        if g == anchor or size < 2:
            continue
        for m in range(offsets[g], offsets[g + 1]):
            ej[members[m]] = 1.0
        _centered(ej, dj)
        for m in range(offsets[g], offsets[g + 1]):
            ej[members[m]] = 0.0
        _arc_points(dg, dj, aq[r] - aq[members[offsets[g]]], aq, an, kappa, b, sdc, y, zeta, s, Z, G, t0, K)
        rep[K] = rep[K + 1] = -1
        K += 2
    return K


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _inflated_copies(aq, an, kappa, b, sdc, y, members, offsets, n_groups, K, w):
    """Widened copies of the first K components along the largest group of ``INFLATE_MIN`` or
    more exchangeable tokens (not the margin's): where log Phi(-t) curves upwards along one of
    its members' noises by c > ``CURVE_MIN`` at a component's design point (the integrand then
    falls like e^{-(1 - c) zeta^2 / 2} there, slower than any skew normal), a copy of the
    component with that group's coordinates scaled by sig = (1 - min(c, CURVE_MAX))^(-1/2)
    (the member a component favours left alone). Writes w.inflate[0] (the group, -1: none) and
    w.sig (1 for the first K, the scale for the copies, appended after them); returns the new K."""
    T = aq.size
    w.inflate[0] = -1
    for m in range(K):
        w.sig[m] = 1.0
    r = _margin_token(aq, an, y)
    gi, size = -1, 0
    for g in range(n_groups):
        n_g = offsets[g + 1] - offsets[g]
        holds_r = False
        for m in range(offsets[g], offsets[g + 1]):
            holds_r = holds_r or members[m] == r
        if n_g >= INFLATE_MIN and n_g > size and not holds_r:
            gi, size = g, n_g
    if gi < 0:
        return K
    w.inflate[0] = gi
    s, grad, z = np.empty(T), np.empty(T), np.empty(T)
    h = 1e-3
    K1 = K
    L = np.empty(3)
    for m in range(K):
        j = members[offsets[gi] + 1] if w.rep[m] == gi else members[offsets[gi]]
        for q in range(3):
            for i in range(T):
                z[i] = w.Z[m, i]
            z[j] += (q - 1) * h
            L[q] = _log_upper(_t_grad(z, aq, an, kappa, b, sdc, y, s, grad))
        c = (L[2] - 2.0 * L[1] + L[0]) / (h * h)
        if not (c > CURVE_MIN) or K1 >= w.sig.size:
            continue
        for i in range(T):
            w.Z[K1, i] = w.Z[m, i]
            w.G[K1, i] = w.G[m, i]
        w.off[K1], w.beta[K1], w.rep[K1], w.log_mass[K1] = w.off[m], w.beta[m], w.rep[m], w.log_mass[m]
        w.sig[K1] = 1.0 / math.sqrt(1.0 - min(c, CURVE_MAX))
        K1 += 1
    return K1


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def stratum_counts(mass, N, defensive, floor, counts, starts):
    """The strata of N points for components of (relative) masses ``mass`` (K,): ``defensive``
    of them for N(0, I) (stratum 0), the rest in proportion to the masses, each component's
    share at least ``floor``; writes counts (K + 1) and their first points starts (K + 2)."""
    K = mass.size
    tot = 0.0
    for m in range(K):
        tot += mass[m]
    tot_share = 0.0
    share = np.empty(K)
    for m in range(K):
        share[m] = max(mass[m] / tot, floor)
        tot_share += share[m]
    used = 0
    for m in range(K):
        counts[m + 1] = int(math.floor((1.0 - defensive) * share[m] / tot_share * N))
        used += counts[m + 1]
    counts[0] = N - used
    starts[0] = 0
    for m in range(K + 1):
        starts[m + 1] = starts[m] + counts[m]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _tail_components(aq, an, kappa, b, sdc, y, N, settings, w):
    """The importance components of one class (:mod:`.tail`): the
    design points (:func:`_design_points`), their linearizations t ~ off_k +
    G_k . zeta with indices beta_k = off_k / sqrt(1 + |G_k|^2) and FORM
    masses log Phi(-beta_k); merged (points closer than ``merge``: the one of
    smaller beta stays), without those beyond ``max_beta`` or with a mass
    below ``prune`` times the largest, in increasing beta. Their shares of
    the N points (``settings`` = (defensive, floor, merge, max_beta, prune)):
    ``defensive`` for N(0, I) (stratum 0), the rest in proportion to the
    masses, each at least ``floor`` of it. Writes the token groups
    (members, offsets: :func:`_token_groups`), the kept
    components into the first K rows of Z, G, rep, off, beta, log_mass and
    rows 1..K of A ((-G_k, 1) / sqrt(1 + |G_k|^2): the normal of the
    half-space whose truncation gives component k), the stratum sizes counts
    (K + 1) and their first points starts (K + 2); returns (K, number of groups)."""
    defensive, floor, merge, max_beta, prune = settings
    members, offsets, Z, G, t0, rep = w.members, w.offsets, w.Z, w.G, w.t0, w.rep
    off, beta, log_mass, A, counts, starts = w.off, w.beta, w.log_mass, w.A, w.counts, w.starts
    T = aq.size
    n_groups = _token_groups(aq, an, members, offsets)
    K0 = _design_points(aq, an, kappa, b, sdc, y, members, offsets, n_groups, Z, G, t0, rep)
    for k in range(K0):
        gz = 0.0
        gg = 0.0
        for i in range(T):
            gz += G[k, i] * Z[k, i]
            gg += G[k, i] * G[k, i]
        off[k] = t0[k] - gz
        beta[k] = off[k] / math.sqrt(1.0 + gg)
        if not (beta[k] < max_beta and math.isfinite(gg)):
            beta[k] = math.inf
    order = np.argsort(beta[:K0])
    kept = np.empty(K0, np.int64)
    K = 0
    for k in order:
        if not beta[k] < math.inf:
            break
        near = False
        for m in range(K):
            dist = 0.0
            for i in range(T):
                dist += (Z[k, i] - Z[kept[m], i]) ** 2
            near = near or dist <= merge * merge
        if not near:
            kept[K] = k
            K += 1
    Zk, Gk = Z[kept[:K]].copy(), G[kept[:K]].copy()  # gather, then write back in order
    ok_, bk, rk = off[kept[:K]].copy(), beta[kept[:K]].copy(), rep[kept[:K]].copy()
    for m in range(K):
        for i in range(T):
            Z[m, i] = Zk[m, i]
            G[m, i] = Gk[m, i]
        off[m], beta[m], rep[m] = ok_[m], bk[m], rk[m]
        log_mass[m] = _log_upper(bk[m])
    top = log_mass[0] if K > 0 else 0.0
    cut = top + math.log(prune)
    for m in range(K):
        if log_mass[m] < cut:
            K = m
            break
    K = _inflated_copies(aq, an, kappa, b, sdc, y, members, offsets, n_groups, K, w)
    mass = np.empty(K)
    for m in range(K):
        mass[m] = math.exp(log_mass[m] - top)
    stratum_counts(mass, N, defensive, floor, counts, starts)
    for m in range(K):
        gg = 0.0
        for i in range(T):
            gg += G[m, i] * G[m, i]
        norm = math.sqrt(1.0 + gg)
        for i in range(T):
            A[m + 1, i] = -G[m, i] / norm
        A[m + 1, T] = 1.0 / norm
    return K, n_groups
