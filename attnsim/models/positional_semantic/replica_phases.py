"""The phase diagram of the replica theory (:mod:`.replica`): a branch followed along alpha by
continuation, which branch wins at a point (the lower free energy Phi), the transition alpha_c(omega)
where the semantic and positional branches' Phi cross, and the spinodals where a branch stops
existing."""

from __future__ import annotations

import math

from .replica import Settings, Solution, iterate


def curve(alphas, branch: str, omega: float = 0.3, start: tuple | None = None, **kw) -> list[Solution]:
    """The branch along ``alphas`` by continuation: each alpha starts from the previous answer
    (the first from ``start``, the branch's published start by default), the way the published
    omega = 0.5 and agnostic files were made (with ``rule="published", published_stop=1e-3``;
    the omega = 0.3 files start every alpha afresh). A failed alpha restarts the next afresh."""
    out = []
    for alpha in alphas:
        sol = iterate(Settings(alpha=float(alpha), omega=omega), branch, start=start, **kw)
        out.append(sol)
        start = sol.state() if sol.converged else None
    return out


def classify(sem: Solution, pos: Solution) -> str:
    """The branch the empirical-risk minimizer follows: the larger Phi (smaller train objective)."""
    if sem.converged and pos.converged:
        return "semantic" if sem.Phi > pos.Phi else "positional"
    return "semantic" if sem.converged else "positional" if pos.converged else "none"


def transition(omega: float, lo: float, hi: float, xtol: float = 1e-3, **kw) -> float | None:
    """alpha_c(omega): where the semantic and positional branches' Phi cross, by Brent's method
    on [lo, hi] (None when both do not exist at both ends or the sign does not change)."""
    from scipy.optimize import brentq  # lazy: only the phase boundaries need it

    settings = kw.pop("settings", {})

    def gap(alpha):
        s = Settings(alpha=alpha, omega=omega, **settings)
        sem, pos = (iterate(s, b, **kw) for b in ("semantic", "positional"))
        if not (sem.converged and pos.converged):
            raise ValueError(alpha)
        return sem.Phi - pos.Phi

    try:
        g_lo, g_hi = gap(lo), gap(hi)
        if g_lo * g_hi > 0:
            return None
        return float(brentq(gap, lo, hi, xtol=xtol))
    except ValueError:  # a branch that does not exist at some alpha of the search
        return None


def alive(sol: Solution) -> bool:
    """Whether a branch's answer is still that branch: semantic with theta / sqrt(q sigma^2) above
    0.05, positional with m above 0.01 (else it fell onto another branch)."""
    if not sol.converged:
        return False
    if sol.branch == "semantic":
        return sol.theta / math.sqrt(sol.q * sol.settings.sigma**2) > 0.05
    if sol.branch == "positional":
        return sol.m > 0.01
    return True


def spinodal(omega: float, branch: str, alphas, **kw) -> tuple[float | None, float | None]:
    """Where ``branch`` stops existing along ``alphas`` (ordered away from where it exists):
    (the last alpha at which it is :func:`alive`, the first at which it is not); (last, None)
    when it lives through the whole scan, (None, first) when it is dead at the start."""
    last = None
    for alpha in alphas:
        if not alive(iterate(Settings(alpha=float(alpha), omega=omega), branch, **kw)):
            return last, float(alpha)
        last = float(alpha)
    return last, None
