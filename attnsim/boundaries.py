"""Boundaries on phase diagrams (SPEC §15): a theory boundary from a function of the axes or a
CSV of points, drawn on given Axes; the crossings of a measured fraction interpolated between
grid cells; power laws fitted to those crossings, with their errors, and their description.
Nothing here creates or saves a figure (:mod:`attnsim.plotting` re-exports these)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ._meta import PlotError

if TYPE_CHECKING:  # names in annotations only
    from matplotlib.axes import Axes


# -- theory boundaries on phase diagrams ---------------------------------------------


def boundary_points(
    boundary: Callable[[np.ndarray], np.ndarray] | str | Path, along: ArrayLike, independent: str = "x"
) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) points of a boundary: a function of one axis evaluated ``along``
    it (``independent``: which axis ``along`` is on; the function returns the
    other), or a CSV file of x, y points (a header line allowed), as groups
    publishing exact-asymptotics curves give them."""
    if callable(boundary):
        t = np.asarray(along, dtype=float)
        other = np.asarray(boundary(t), dtype=float)
        return (t, other) if independent == "x" else (other, t)
    try:
        pts = np.loadtxt(boundary, delimiter=",", ndmin=2, comments="#", skiprows=_header_rows(boundary))
    except (OSError, ValueError) as exc:
        raise PlotError(f"boundary: {boundary}: not a CSV of x, y points ({exc})") from None
    if pts.shape[1] != 2:
        raise PlotError(f"boundary: {boundary}: needs two columns (x, y), has {pts.shape[1]}")
    return pts[:, 0], pts[:, 1]


def _header_rows(path: str | Path) -> int:
    with open(path) as fh:
        first = fh.readline().split(",")[0].strip()
    try:
        float(first)
    except ValueError:
        return 1
    return 0


def draw_boundary(
    ax: Axes,
    boundary: Callable[[np.ndarray], np.ndarray] | str | Path,
    along: ArrayLike = (),
    independent: str = "x",
    **style: Any,
) -> None:
    """Draw a theory boundary (see :func:`boundary_points`) on a phase diagram,
    keeping the axes' limits; ``style`` goes to ``ax.plot`` (label, colour, ...)."""
    x, y = boundary_points(boundary, along, independent)
    lims = ax.get_xlim(), ax.get_ylim()
    ax.plot(x, y, **{"color": "w", "ls": "--", "lw": 1.5, **style})
    ax.set_xlim(*lims[0])
    ax.set_ylim(*lims[1])


def cell_edges(v: ArrayLike) -> np.ndarray:
    """Cell edges (len + 1) of geometrically spaced cell centres, for pcolormesh on log axes."""
    lv = np.log(np.asarray(v, dtype=float))
    mid = (lv[1:] + lv[:-1]) / 2
    return np.exp(np.concatenate([[2 * lv[0] - mid[0]], mid, [2 * lv[-1] - mid[-1]]]))


def boundary_crossings(
    ns: ArrayLike, snr: ArrayLike, good: np.ndarray, edge: str = "lower"
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a phase diagram (one n, SNR increasing) the crossing into the
    ``good`` cells (``edge = "upper"``: out of them, after the last good cell),
    half-way (geometrically) between the cells on either side: (the n values
    with a crossing, their crossing SNRs)."""
    ns, snr = np.asarray(ns, dtype=float), np.asarray(snr, dtype=float)
    rows, cross = [], []
    for i, n in enumerate(ns):
        hit = np.flatnonzero(np.asarray(good[i], dtype=bool))
        if not hit.size:
            continue
        j = hit[0] - 1 if edge == "lower" else hit[-1]
        if 0 <= j < snr.size - 1:
            rows.append(n)
            cross.append(np.sqrt(snr[j] * snr[j + 1]))
    return np.array(rows), np.array(cross)


def fit_power_boundary(
    ns: ArrayLike, snr: ArrayLike, good: np.ndarray, power: float, edge: str = "lower"
) -> float:
    """c of the boundary SNR = c n^power fitted to a phase diagram: the median
    of crossing * n^-power over the rows' crossings (:func:`boundary_crossings`;
    NaN without any). n SNR^2 = c and SNR sqrt(n) = c are one family (power -1/2)."""
    rows, cross = boundary_crossings(ns, snr, good, edge)
    return float(np.median(cross * rows ** (-power))) if rows.size else float("nan")


def interpolated_crossings(
    rows: ArrayLike, x: ArrayLike, score: np.ndarray, edge: str = "lower"
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a phase diagram (x increasing) where ``score`` (rows, x)
    crosses 0 at the edge of its good cells (score >= 0): ``lower``, into the
    first good cell; ``upper``, out of the last one. The crossing is
    interpolated linearly in score and log x between the two cells, so an edge
    moves continuously with the data instead of by whole cells (score: a
    log error ratio, a fraction minus one half, ...). Rows without a crossing
    inside the grid are left out: (the rows with one, their crossing x)."""
    rows, lx = np.asarray(rows, dtype=float), np.log(np.asarray(x, dtype=float))
    score = np.asarray(score, dtype=float)
    out_rows, cross = [], []
    for i, row in enumerate(rows):
        good = np.flatnonzero(score[i] >= 0)
        if not good.size:
            continue
        j = good[0] - 1 if edge == "lower" else good[-1]
        if not 0 <= j < lx.size - 1 or not np.all(np.isfinite(score[i, j : j + 2])):
            continue
        s0, s1 = score[i, j], score[i, j + 1]
        t = s0 / (s0 - s1) if s0 != s1 else 0.5
        out_rows.append(row)
        cross.append(float(np.exp(lx[j] + t * (lx[j + 1] - lx[j]))))
    return np.array(out_rows), np.array(cross)


def fit_power_law(rows: ArrayLike, cross: ArrayLike, power: float | None = None) -> dict:
    """A boundary cross = c rows^b fitted to crossings by least squares in logs.

    With ``power`` the exponent is held there and only c is fitted (its
    geometric-mean value); without, b is free too, with its standard error
    from the residuals (three crossings at least; with two the line passes
    through them and b has no error, with one there is no exponent). Returns
    ``c``, ``b``, ``b_se``, ``rms`` (residuals in decades) and ``points``."""
    r, c = np.log(np.asarray(rows, dtype=float)), np.log(np.asarray(cross, dtype=float))
    n = r.size
    out = {"c": float("nan"), "b": float("nan"), "b_se": float("nan"), "rms": float("nan"), "points": int(n)}
    if n == 0:
        return out
    if power is not None or n == 1:
        b = float(power) if power is not None else float("nan")
        a = float(np.mean(c - (b if power is not None else 0.0) * r))
        resid = c - a - (b * r if power is not None else 0.0)
    else:
        b, a = np.polyfit(r, c, 1)
        resid = c - a - b * r
        if n > 2:
            out["b_se"] = float(np.sqrt(np.sum(resid**2) / (n - 2) / np.sum((r - r.mean()) ** 2)))
    out.update(c=float(np.exp(a)), b=float(b), rms=float(np.sqrt(np.mean(resid**2)) / np.log(10)))
    return out


def describe_fit(fit: dict, what: str = "n") -> str:
    """One line for a numbers file: the fitted form with what its data carry."""
    if fit["points"] == 0:
        return "no crossing inside the grid"
    if fit["points"] == 1:
        return f"c = {fit['c']:.3g} (a constant fitted at one point: it cannot test the form)"
    exp = f"{what}^{fit['b']:.3g}" + (f" +- {fit['b_se']:.2g}" if np.isfinite(fit["b_se"]) else "")
    return f"c = {fit['c']:.3g}, {exp}, rms residual {fit['rms']:.2g} decades over {fit['points']} crossings"
