"""The replica theory's proximal map compiled: :func:`prox_compiled` is
:func:`.replica_maps.prox` (the same Newton method from the same starts, the same shift, line
search and stopping rules) run point by point in one Numba pass over the quadrature nodes, in
parallel. The vectorized NumPy version stays the reference (``tests/test_replica.py`` compares
them); this is the one the solver uses (``PROXIMAL["global"]``)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

MAX_ITER = 100  # Newton steps per start (replica_maps._newton's max_iter)
LINE_SEARCH = 40  # halvings of a Newton step


@njit(cache=True, inline="always", error_model="numpy")
def _sigmoid(u):
    e = math.exp(-abs(u))
    return 1.0 / (1.0 + e) if u >= 0 else e / (1.0 + e)


@njit(cache=True, inline="always", error_model="numpy")
def _energy(x, y, h1, h2, m00, m01, m10, m11, V, s2):
    """The energy at (x, y) and the softmax's diagonal (a, b) there: (E, a, b)."""
    a, b = _sigmoid(x * (x - y)), _sigmoid(y * (y - x))
    frob = (a - m00) ** 2 + (1 - a - m01) ** 2 + (1 - b - m10) ** 2 + (b - m11) ** 2
    return ((x - h1) ** 2 + (y - h2) ** 2) / V + s2 * frob, a, b


@njit(cache=True, error_model="numpy")
def _newton(x, y, h1, h2, m00, m01, m10, m11, V, s2):
    """replica_maps._newton at one point: (x, y, E, converged). The line search's accepted energy
    and softmax are the next step's (the same numbers the NumPy version computes again)."""
    floor = 1e-8 / V
    done = False
    E, a, b = _energy(x, y, h1, h2, m00, m01, m10, m11, V, s2)
    for _ in range(MAX_ITER):
        Fa = 2 * (2 * a - 1 - m00 + m01)
        Gb = 2 * (2 * b - 1 - m11 + m10)
        a1, b1 = a * (1 - a), b * (1 - b)
        a2, b2 = a1 * (1 - 2 * a), b1 * (1 - 2 * b)
        ux, uy = 2 * x - y, -x
        vx, vy = -y, 2 * y - x
        gx = 2 * (x - h1) / V + s2 * (Fa * a1 * ux + Gb * b1 * vx)
        gy = 2 * (y - h2) / V + s2 * (Fa * a1 * uy + Gb * b1 * vy)
        hxx = 2 / V + s2 * (4 * (a1 * ux) * (a1 * ux) + Fa * (a2 * ux * ux + a1 * 2.0)
                            + (4 * (b1 * vx) * (b1 * vx) + Gb * (b2 * vx * vx + b1 * 0.0)))  # fmt: skip
        hxy = s2 * (4 * (a1 * ux) * (a1 * uy) + Fa * (a2 * ux * uy + a1 * -1.0)
                    + (4 * (b1 * vx) * (b1 * vy) + Gb * (b2 * vx * vy + b1 * -1.0)))  # fmt: skip
        hyy = 2 / V + s2 * (4 * (a1 * uy) * (a1 * uy) + Fa * (a2 * uy * uy + a1 * 0.0)
                            + (4 * (b1 * vy) * (b1 * vy) + Gb * (b2 * vy * vy + b1 * 2.0)))  # fmt: skip
        half_tr, det_part = (hxx + hyy) / 2, math.sqrt(((hxx - hyy) / 2) ** 2 + hxy**2)
        lmin = half_tr - det_part
        shift = floor - lmin + 1e-3 / V if lmin <= floor else 0.0
        hxx, hyy = hxx + shift, hyy + shift
        det = hxx * hyy - hxy**2
        dx, dy = -(hyy * gx - hxy * gy) / det, -(hxx * gy - hxy * gx) / det
        slope = gx * dx + gy * dy
        if math.hypot(dx, dy) < 1e-10 * (1 + abs(x) + abs(y)):
            done = shift == 0.0  # else a saddle or a maximum: another start finds the minimum
            break
        t = 1.0
        found = False
        for _ in range(LINE_SEARCH):
            En, an, bn = _energy(x + t * dx, y + t * dy, h1, h2, m00, m01, m10, m11, V, s2)
            if not (En > E + 1e-4 * t * slope + 1e-13 * abs(E)):  # E's rounding allowed
                found = True
                break
            t = t / 2
        if not found:
            break  # no decrease: given up (not converged)
        x, y, E, a, b = x + t * dx, y + t * dy, En, an, bn
    return x, y, E, done


@njit(cache=True, parallel=True, error_model="numpy")  # 0/0 is NaN, as in NumPy
def _prox_all(h1, h2, M, V, s2, w1, w2, has_warm, track, x, y, E, ok):
    for i in prange(h1.size):
        m00, m01, m10, m11 = M[i, 0, 0], M[i, 0, 1], M[i, 1, 0], M[i, 1, 1]
        a1, a2 = h1[i], h2[i]
        best_x, best_y, best_E, best_ok = 0.0, 0.0, 0.0, False
        first = True
        for k in range(6 if has_warm else 5):
            if track and k != 5:  # tracking: the warm start alone
                continue
            if k == 0:
                x0, y0 = 0.0, 0.0
            elif k == 1:
                x0, y0 = a1, a2
            elif k == 2:
                x0, y0 = a2, a1
            elif k == 3:
                x0, y0 = a1, -a1
            elif k == 4:
                x0, y0 = -a2, a2
            else:
                x0, y0 = w1[i], w2[i]
            xs, ys, Es, oks = _newton(x0, y0, a1, a2, m00, m01, m10, m11, V, s2)
            if first or (oks and (not best_ok or Es < best_E)):
                best_x, best_y, best_E, best_ok = xs, ys, Es, oks
            first = False
        x[i], y[i], E[i], ok[i] = best_x, best_y, best_E, best_ok


def prox_compiled(h1, h2, M, V, s2, warm: tuple | None = None, track: bool = False):
    """:func:`.replica_maps.prox` compiled: the global minimizer of |z - h|^2 / V + s2 |S(z) - M|_F^2
    elementwise over h and M (..., 2, 2) (with ``track``, the minimum reached from ``warm`` alone).
    Returns (x, y, E, converged), each of h's broadcast shape."""
    if track and warm is None:
        raise ValueError("track: following the minima needs a warm start")
    h1, h2 = np.broadcast_arrays(h1, h2, M[..., 0, 0])[:2]
    shape = h1.shape
    Mf = np.ascontiguousarray(np.broadcast_to(M, (*shape, 2, 2)), dtype=np.float64).reshape(-1, 2, 2)
    a = np.ascontiguousarray(h1, dtype=np.float64).ravel()
    b = np.ascontiguousarray(h2, dtype=np.float64).ravel()
    if warm is not None:
        w1 = np.ascontiguousarray(np.broadcast_to(warm[0], shape), dtype=np.float64).ravel()
        w2 = np.ascontiguousarray(np.broadcast_to(warm[1], shape), dtype=np.float64).ravel()
    else:
        w1 = w2 = np.zeros(1)
    x, y, E = (np.empty(a.size) for _ in range(3))
    ok = np.empty(a.size, dtype=np.bool_)
    _prox_all(a, b, Mf, float(V), float(s2), w1, w2, warm is not None, track, x, y, E, ok)
    return x.reshape(shape), y.reshape(shape), E.reshape(shape), ok.reshape(shape)
