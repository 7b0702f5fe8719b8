"""The performance targets against what the benchmarks measured: one row per
target a benchmark measures (SPEC §9's, and the stricter ones set since),
its value read from the benchmark's JSON, whether it is met, and, where a
benchmark measures one, the bound no code can beat (a lower bound of seconds,
an upper bound of a speed-up: a target beyond its bound cannot be met with the
work it asks for). ``run_all.py`` puts the table
at the top of docs/performance.md; each row links the section with the details.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple


class Target(NamedTuple):
    what: str
    bench: str  # the benchmark whose JSON holds the value (its section on the page)
    value: Callable[[dict], float]  # the measured value from that JSON
    unit: str  # "x", "s", "%" or "n" (a count)
    limit: float
    at_least: bool = False  # the value must be >= limit (else <=)
    bound: Callable[[dict], float] | None = None  # a bound of the value (upper for at_least, else lower)
    bound_bench: str | None = None  # the benchmark whose JSON gives the bound (default: ``bench``)


def _floor_row(name: str) -> Callable[[dict], float]:
    return lambda j: j["rows"][name]["x_floor"]


def _encoder(d: int) -> Callable[[dict], float]:
    return lambda j: next(r["x_floor"] for r in j["rows"] if r["d"] == d)


def _startup(name: str, key: str = "s") -> Callable[[dict], float]:
    return lambda j: j["rows"][name][key]


def _implicit_8000(j: dict) -> float:
    row = j["d"]["8000"]
    return row["torch-official"] / row["implicit"]


def _seeds_ratio(j: dict) -> float:
    if j["seeds"] != "0-199":
        return math.nan
    return j["rows"][j["baseline"]]["s"] / j["rows"]["this checkout (workers: default)"]["s"]


def _seeds_bound(j: dict) -> float:
    """The most any code can gain over the baseline: every seed's unavoidable work (its floor, one
    core) spread over the cores."""
    if j["seeds"] != "0-199" or "floor" not in j:
        return math.nan
    return j["rows"][j["baseline"]]["s"] / (200 * j["floor"]["per_seed_s"] / j["cores"])


def _gallery_bound(j: dict) -> float:
    return j["floor_s"] / 2  # CPU seconds over the two cores


def _fig3(key: str, per_core: bool = False) -> Callable[[dict], float]:
    return lambda j: j["rows"]["fig3"][key] / (j["rows"]["fig3"]["cores"] if per_core else 1)


def _replica_slowest(resolved: bool | None):
    """The slowest solve of the published grid (``--scan``), of the resolved points or of all."""

    def slowest(j: dict) -> float:
        scan = [r for r in j["scan"] or [] if resolved is None or r["converged"] == resolved]
        return max(r["s"] for r in scan) if scan else math.nan

    return slowest


# attnsim run and a fresh run's elapsed_s are reported on the page without a target (SPEC §9): the
# start-up is bought with Numba's and NumPy's public interfaces only (0.1-0.3 s above the patched loader)
XW = "reduced GD step, X W form"
POP = "population evaluation (floor with the tail's design search and mixture weights)"
TARGETS = (
    Target("the default run against the official loop, the run without its setup", "engines",
           lambda j: j["default"]["reduced"]["x_official_without_setup"], "x", 250, at_least=True),
    Target("the default run against the official loop, whole", "engines",
           lambda j: j["default"]["reduced"]["x_official"], "x", 100, at_least=True),
    Target("the implicit engine at d = 8000 against the official loop", "engines", _implicit_8000, "x",
           5000, at_least=True),
    Target("10⁶ steps of the default run, seconds", "engines", lambda j: j["steps"]["1000000"]["s"], "s", 60),
    Target("reduced GD step, W form, × its floor", "floors", _floor_row("reduced GD step, W form"), "x", 1.5),
    Target("reduced GD step, X W form, × its floor", "floors", _floor_row(XW), "x", 1.5),
    Target("flow vector field, × its floor", "floors", _floor_row("flow vector field"), "x", 1.3),
    Target("population evaluation, × a floor with the tail's design search", "floors", _floor_row(POP), "x",
           1.5),
    Target("encoder step at d = mlp_dim = 500, × the nine passes", "encoder", _encoder(500), "x", 1.3),
    Target("encoder step at d = mlp_dim = 1000, × the nine passes", "encoder", _encoder(1000), "x", 1.3),
    Target("encoder step at d = mlp_dim = 2000, × the nine passes", "encoder", _encoder(2000), "x", 1.3),
    Target("an encoder run's cost beyond its steps, seconds", "encoder", lambda j: j["fixed"]["fixed_s"], "s",
           0.3),
    Target("`attnsim --version`, × the import floor", "startup", _startup("attnsim --version", "x_floor"),
           "x", 0.6),
    Target("the 39 × 39 heatmap from scratch, wall seconds", "heatmap", _fig3("wall_s"), "s", 25,
           bound=_fig3("floor_cpu_s", per_core=True)),
    Target("the heatmap with 10 seeds per cell, wall seconds", "heatmap", _fig3("seeds_wall_s"), "s", 240,
           bound=_fig3("seeds_floor_cpu_s", per_core=True)),
    Target("a sweep's CPU inside its simulations", "heatmap", lambda j: 100 * _fig3("inside_sweep")(j), "%",
           90, at_least=True),
    Target("every figure from an empty cache, wall seconds", "figures", lambda j: j["wall_s"], "s", 600,
           bound=_gallery_bound, bound_bench="gallery_floor"),
    Target("positional/semantic GD step at d = 1000, × its floor", "positional_semantic",
           lambda j: next(r["x_floor"] for r in j["rows"] if r["d"] == 1000), "x", 1.5),
    Target("positional/semantic GD step at d = 1000, the published loop (float32) over attnsim",
           "positional_semantic", lambda j: next(r["x_float32"] for r in j["rows"] if r["d"] == 1000),
           "x", 1.0, at_least=True),
    Target("`attnsim run --seeds 0-199`, × revision 70b8a38", "seeds", _seeds_ratio, "x", 4.0, at_least=True,
           bound=_seeds_bound),
    Target("the slowest resolved replica fixed point of the published grid, seconds on one core", "replica",
           _replica_slowest(True), "s", 1.0),
    Target("the slowest replica answer of the published grid, not resolved included, seconds", "replica",
           _replica_slowest(None), "s", 1.0),
    Target("replica fixed points, × revision 70b8a38 (the least gain)", "replica",
           lambda j: min(r["base_s"] / r["head_s"] for r in j["rows"]) if "base_s" in j["rows"][0]
           else math.nan, "x", 10, at_least=True),
    Target("the test suite on a fresh clone (`bash .ci/run`), × revision 70b8a38", "suite",
           lambda j: j["ratio"] if j["baseline"] == "70b8a38" else math.nan, "x", 0.5),
    Target("a 100 000-point sweep: `load_sweep`, seconds", "sweep_store",
           lambda j: j["load_s"] if j["points"] >= 100_000 else math.nan, "s", 10),
    Target("a 100 000-point sweep: files left in records/", "sweep_store",
           lambda j: len(j["files"]) if j["points"] >= 100_000 else math.nan, "n", 10),
)  # fmt: skip


def _fmt(v: float, unit: str) -> str:
    if unit == "x":
        return f"{v:.0f}×" if v >= 100 else f"{v:.2f}×"
    if unit == "%":
        return f"{v:.1f} %"
    if unit == "n":
        return f"{v:.0f}"
    return f"{v:.3g} s" if v < 1000 else f"{v:.0f} s"


def evaluate(t: Target, results: dict) -> tuple[str, str, str, str]:
    """(measured, target, status, lower bound) of one target; dashes where its benchmark has not run."""
    limit = ("≥ " if t.at_least else "≤ ") + _fmt(t.limit, t.unit)
    data = results.get(t.bench)
    try:
        v = float(t.value(data))
    except (KeyError, TypeError, StopIteration, ZeroDivisionError):
        return "—", limit, "not measured", ""
    if math.isnan(v):  # measured at another size (--quick)
        return "—", limit, "not measured", ""
    where = t.bound_bench or t.bench
    b = math.nan
    if t.bound is not None and results.get(where) is not None:
        try:
            b = float(t.bound(results[where]))
        except (KeyError, TypeError, ZeroDivisionError):
            b = math.nan
    met = v >= t.limit if t.at_least else v <= t.limit
    if met:
        status = "met"
    elif not math.isnan(b) and (b < t.limit if t.at_least else b > t.limit):
        side = "upper bound is below" if t.at_least else "lower bound is above"
        status = f"**not met**: its {side} the target"
    else:
        status = "**not met**"
    return (
        _fmt(v, t.unit),
        limit,
        status,
        "" if math.isnan(b) else ("≤ " if t.at_least else "≥ ") + _fmt(b, t.unit),
    )


def section(results: dict, titles: dict) -> list[str]:
    """The targets table (``results``: each benchmark's JSON by its name; ``titles``: its section's title)."""
    lines = [
        "| target | measured | target | status | bound | details |",
        "|---|---:|---:|---|---:|---|",
    ]
    for t in TARGETS:
        measured, limit, status, bound = evaluate(t, results)
        title = titles.get(t.bench, t.bench)
        anchor = "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")
        lines.append(f"| {t.what} | {measured} | {limit} | {status} | {bound} | [{title}](#{anchor}) |")
    return lines
