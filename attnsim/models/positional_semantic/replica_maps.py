"""The two numerical pieces of the replica theory (:mod:`.replica`): the quadrature rules for its
expectations over standard 2-D normals (a tensor Gauss-Hermite rule, and the published notebook's
quadpy rules written out), and the proximal map z*(h, t) = argmin_z |z - h|^2 / V +
sigma^2 |S(z) - M(t)|_F^2 of the T = 2 attention (a Newton method from several starts, vectorized
here and compiled in :mod:`.replica_kernels`: its global minimum, or the notebook's local one from
the origin)."""

from __future__ import annotations

import math

import numpy as np

# ------------------------------------------------------------------ quadrature rules
# Each rule: points (N, 2) and weights (N,) summing to 1, for the expectation over a standard 2-D
# normal. quadpy's rules integrate against exp(-|u|^2); a standard normal is u sqrt(2).


def _d4(a: float, b: float | None = None) -> list:
    if b is None:  # (+-a, 0), (0, +-a)
        return [(a, 0.0), (-a, 0.0), (0.0, a), (0.0, -a)]
    if a == b:  # (+-a, +-a)
        return [(a, a), (a, -a), (-a, a), (-a, -a)]
    return [(sa * a, sb * b) for sa in (1, -1) for sb in (1, -1)] + [
        (sb * b, sa * a) for sa in (1, -1) for sb in (1, -1)
    ]


def _normal_rule(groups: list, total: float) -> tuple[np.ndarray, np.ndarray]:
    pts, wts = [], []
    for w, points in groups:
        pts += points
        wts += [w] * len(points)
    return np.sqrt(2.0) * np.array(pts), np.array(wts) / total


def stroud_secrest_6() -> tuple[np.ndarray, np.ndarray]:
    """Stroud and Secrest's formula VI for exp(-|u|^2) on the plane (degree 7, 12 points; Math.
    Comp. 17, 1963): the published notebook's rule for the saddle-point equations."""
    s5 = math.sqrt(5.0)
    xi, eta = math.sqrt((9 - 3 * s5) / 8), math.sqrt((9 + 3 * s5) / 8)
    B, C = (5 + 2 * s5) / 45, (5 - 2 * s5) / 45
    return _normal_rule([(1 / 36, _d4(math.sqrt(3.0))), (B, _d4(xi, xi)), (C, _d4(eta, eta))], 1.0)


def rabinowitz_richter_2() -> tuple[np.ndarray, np.ndarray]:
    """Rabinowitz and Richter's formula 2 for exp(-|u|^2) (degree 11, 28 points; Math. Comp. 23,
    1969): the published notebook's rule for mse and Phi."""
    groups = [
        (0.8176645817675417e-3, _d4(2.757816396257008)),
        (0.4363323129985824e-1, _d4(1.732050807568877)),
        (0.5373255214498174e0, _d4(0.6280515301597559)),
        (0.3636102608321520e-2, _d4(1.224744871391589, 2.121320343559643)),
        (0.9817477042468103e-1, _d4(0.7071067811865475, 1.224744871391589)),
    ]
    return _normal_rule(groups, math.pi)


def gauss_hermite(order: int) -> tuple[np.ndarray, np.ndarray]:
    """The tensor product of the ``order``-point Gauss-Hermite rule (probabilists'): exact for
    polynomials of degree <= 2 order - 1 in each coordinate, order^2 points."""
    x, w = np.polynomial.hermite_e.hermegauss(order)
    w = w / w.sum()
    X, Y = np.meshgrid(x, x, indexing="ij")
    return np.column_stack([X.ravel(), Y.ravel()]), np.outer(w, w).ravel()


# ------------------------------------------------------------------ the proximal map


def _softmax2(z1: np.ndarray, z2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """softmax(z z^T) of z = (z1, z2) as its diagonal: row 1 is (a, 1 - a), row 2 (1 - b, b)."""
    u, v = z1 * (z1 - z2), z2 * (z2 - z1)
    return _sigmoid(u), _sigmoid(v)


def _sigmoid(u: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(u))
    return np.where(u >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _frob(a, b, M):
    """|S - M|_F^2 for S = [[a, 1 - a], [1 - b, b]] and M (..., 2, 2)."""
    return (
        (a - M[..., 0, 0]) ** 2
        + (1 - a - M[..., 0, 1]) ** 2
        + (1 - b - M[..., 1, 0]) ** 2
        + (b - M[..., 1, 1]) ** 2
    )


def _attention_energy(x, y, h1, h2, M, V, s2, order: int = 2):
    """E(z) = |z - h|^2 / V + s2 |S(z) - M|_F^2 elementwise, with its gradient and Hessian when
    ``order`` is 2 (value only for 0). Returns (E, gx, gy, hxx, hxy, hyy)."""
    a, b = _softmax2(x, y)
    E = ((x - h1) ** 2 + (y - h2) ** 2) / V + s2 * _frob(a, b, M)
    if order == 0:
        return E
    Fa = 2 * (2 * a - 1 - M[..., 0, 0] + M[..., 0, 1])  # dF/da, F'' = 4
    Gb = 2 * (2 * b - 1 - M[..., 1, 1] + M[..., 1, 0])
    a1, b1 = a * (1 - a), b * (1 - b)
    a2, b2 = a1 * (1 - 2 * a), b1 * (1 - 2 * b)
    ux, uy = 2 * x - y, -x  # u = x (x - y): u_xx = 2, u_xy = -1, u_yy = 0
    vx, vy = -y, 2 * y - x  # v = y (y - x): v_xx = 0, v_xy = -1, v_yy = 2
    gx = 2 * (x - h1) / V + s2 * (Fa * a1 * ux + Gb * b1 * vx)
    gy = 2 * (y - h2) / V + s2 * (Fa * a1 * uy + Gb * b1 * vy)

    def second(p, q, upq, vpq):
        ta = 4 * (a1 * p[0]) * (a1 * q[0]) + Fa * (a2 * p[0] * q[0] + a1 * upq)
        tb = 4 * (b1 * p[1]) * (b1 * q[1]) + Gb * (b2 * p[1] * q[1] + b1 * vpq)
        return s2 * (ta + tb)

    hxx = 2 / V + second((ux, vx), (ux, vx), 2.0, 0.0)
    hxy = second((ux, vx), (uy, vy), -1.0, -1.0)
    hyy = 2 / V + second((uy, vy), (uy, vy), 0.0, 2.0)
    return E, gx, gy, hxx, hxy, hyy


def _newton(x, y, h1, h2, M, V, s2, max_iter: int = 100):
    """Newton's method with a positive-definite shift and Armijo backtracking, elementwise from
    (x, y); returns (x, y, E, converged)."""
    x, y = x.copy(), y.copy()
    done = np.zeros(x.shape, dtype=bool)
    stuck = np.zeros(x.shape, dtype=bool)  # a line search that found no decrease: given up
    floor = 1e-8 / V
    for _ in range(max_iter):
        E, gx, gy, hxx, hxy, hyy = _attention_energy(x, y, h1, h2, M, V, s2)
        half_tr, det_part = (hxx + hyy) / 2, np.sqrt(((hxx - hyy) / 2) ** 2 + hxy**2)
        lmin = half_tr - det_part
        shift = np.where(lmin <= floor, floor - lmin + 1e-3 / V, 0.0)
        hxx, hyy = hxx + shift, hyy + shift
        det = hxx * hyy - hxy**2
        dx, dy = -(hyy * gx - hxy * gy) / det, -(hxx * gy - hxy * gx) / det
        slope = gx * dx + gy * dy
        # converged: a Newton step below 1e-10 relative at a positive-definite Hessian
        small = np.hypot(dx, dy) < 1e-10 * (1 + np.abs(x) + np.abs(y))
        done |= small & (shift == 0.0)
        stuck |= small & (shift > 0.0)  # a saddle or a maximum: another start finds the minimum
        active = ~(done | stuck)
        if not active.any():
            break
        t = np.where(active, 1.0, 0.0)
        for _ in range(40):
            En = _attention_energy(x + t * dx, y + t * dy, h1, h2, M, V, s2, order=0)
            bad = active & (En > E + 1e-4 * t * slope + 1e-13 * np.abs(E))  # E's rounding allowed
            if not bad.any():
                break
            t = np.where(bad, t / 2, t)
        else:
            stuck |= bad
            t = np.where(bad, 0.0, t)
        x, y = x + t * dx, y + t * dy
    E = _attention_energy(x, y, h1, h2, M, V, s2, order=0)
    return x, y, E, done


def prox(h1, h2, M, V, s2, warm: tuple | None = None, track: bool = False):
    """The global minimizer z* of |z - h|^2 / V + s2 |S(z) - M|_F^2, elementwise over h (...,) and
    M (..., 2, 2): Newton from the origin, from h, from h swapped, from (h1, -h1), (-h2, h2) and
    from ``warm`` (a previous answer), keeping the lowest minimum. With ``track``, Newton from
    ``warm`` alone: the minimum a previous answer's basin leads to (the solver checks it is the
    global one). Returns (x, y, E, converged)."""
    if track and warm is None:
        raise ValueError("track: following the minima needs a warm start")
    h1, h2 = np.broadcast_arrays(h1, h2, M[..., 0, 0])[:2]
    zero = np.zeros_like(h1)
    starts = [] if track else [(zero, zero), (h1, h2), (h2, h1), (h1, -h1), (-h2, h2)]
    if warm is not None:
        starts.append(warm)
    best = None
    for x0, y0 in starts:
        x, y, E, ok = _newton(np.array(x0, dtype=float), np.array(y0, dtype=float), h1, h2, M, V, s2)
        if best is None:
            best = [x, y, E, ok]
            continue
        better = ok & (~best[3] | (E < best[2]))
        for i, v in enumerate((x, y, E, ok)):
            best[i] = np.where(better, v, best[i])
    return tuple(best)


def prox_from_origin(h1, h2, M, V, s2, warm: tuple | None = None, track: bool = False):
    """The published notebook's proximal map: scipy's BFGS from the origin (finite-difference
    gradient, its default gradient tolerance 1e-5), point by point. It answers a local minimum
    when the origin's basin is not the global one, as it is on the agnostic branch's states
    (m = 0, V about 30): kept to reproduce the published rows, not to solve the theory. ``warm``
    and ``track`` are ignored (the notebook starts every point at the origin). Returns (x, y, E,
    converged)."""
    from scipy.optimize import minimize  # lazy: only this reproduction needs it

    h1, h2 = np.broadcast_arrays(h1, h2, M[..., 0, 0])[:2]
    x, y = np.empty(h1.shape), np.empty(h1.shape)
    ok = np.empty(h1.shape, dtype=bool)
    for i in np.ndindex(h1.shape):

        def energy(z, i=i):
            return float(_attention_energy(z[0], z[1], h1[i], h2[i], M[i], V, s2, order=0))

        res = minimize(energy, [0.0, 0.0])
        (x[i], y[i]), ok[i] = res.x, res.success or res.status == 2  # 2: precision loss near the minimum
    return x, y, _attention_energy(x, y, h1, h2, M, V, s2, order=0), ok


def prox_compiled(h1, h2, M, V, s2, warm: tuple | None = None, track: bool = False):
    """:func:`prox` compiled (:mod:`.replica_kernels`, loaded on first use: the rules above need no
    Numba): the same Newton method point by point in one parallel pass, 30-60 times faster."""
    from .replica_kernels import prox_compiled as compiled  # lazy

    return compiled(h1, h2, M, V, s2, warm, track)


# the proximal maps iterate() takes: the compiled global one, its NumPy reference, the notebook's
PROXIMAL = {"global": prox_compiled, "numpy": prox, "notebook": prox_from_origin}
