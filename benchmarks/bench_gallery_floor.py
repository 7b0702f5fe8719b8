"""A lower bound of the CPU seconds every figure needs: the gallery's runs at their floors.

Reads every run ``python scripts/make_figures.py`` makes from the figures' own sweep
specs (nothing is run) and prices the runs whose step has a floor in this folder at
that floor, measured here per distinct size with one BLAS thread (as in a sweep
worker), times their steps:

- the encoder (figures 10-11): the nine BLAS passes of a GD step and the four
  matrix-vector passes over W_q and W_k (``bench_encoder.floor_passes``);
- the attention model with W trained by GD (k = r = min(d, n T + 2), the reduced rank,
  or the dense engine's d when d is smaller): the cheaper of the W form's and the X W
  form's floors (``floor_kernels.reduced_step_floor`` and ``reduced_xw_step_floor``),
  where its arrays stay within 8 MB (in cache; larger steps are streamed from memory
  and the floor kernels do not bound them: counted 0; so are runs with W fixed);
- a float32 precision twin: two passes over its float32 W per step
  (``floor_kernels.twin_step_floor``), beside the exact run's floor.

A clean-label twin doubles its run's steps. Everything else counts 0: gradient flow,
the limit, online SGD, AdamW, bfloat16 twins (they stop early), the setups, the
population evaluations and the drawing. So the sum is a lower bound: the gallery
cannot take less CPU on this machine whatever its code, and on C cores no fewer wall
seconds than that over C. SPEC §9's target is 10 minutes on 2 cores (1200 CPU s).

Usage::

    python benchmarks/bench_gallery_floor.py [--json FILE] [--figures FILE]

``--figures``: the JSON of ``bench_figures.py`` (the measured CPU seconds per figure),
printed beside the bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # as in a sweep worker's runs; before NumPy

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # floor_kernels, bench_encoder (attnsim: the installed package)
import floor_kernels as FK  # noqa: E402

IN_CACHE = 1 << 20  # floats: the attention floors bound steps whose arrays stay within 8 MB
ATTENTION = "attention GD, (n T, k)"
ENCODER = "encoder GD, (d, mlp_dim, n)"
TWIN = "float32 twin, d"


def per_call(fn, budget: float = 0.1, reps: int = 15) -> float:
    """Seconds per call of ``fn()``: the fastest of ``reps`` blocks of about ``budget`` s each
    (the floor is what the machine can do: a slower block was slowed by its neighbours;
    many short blocks find the machine's quiet moments)."""
    fn()
    t = time.perf_counter()
    fn()
    calls = max(1, int(budget / max(time.perf_counter() - t, 1e-7)))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls)
    return float(min(times))


def encoder_floor(d: int, m: int, n: int) -> float:
    from bench_encoder import floor_passes

    _, with_query = floor_passes(d, m, n)
    return per_call(with_query)


def attention_floor(nT: int, k: int) -> float:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((nT, k))
    W, p, c = rng.standard_normal((k, k)) * 0.01, rng.standard_normal(k), rng.standard_normal(nT) * 1e-3
    q, z, g, gp = np.empty(k), np.empty(nT), np.empty(k), np.empty(k)
    steps = 50
    w_form = per_call(lambda: FK.reduced_step_floor(X, W, p, c, 1e-12, steps, q, z, g, gp)) / steps
    B, K, v = rng.standard_normal((nT, k)) * 0.01, X @ X.T, np.empty(nT)
    xw_form = per_call(lambda: FK.reduced_xw_step_floor(B, K, p, c, 1e-12, steps, z, v, gp)) / steps
    return min(w_form, xw_form)


def twin_floor(d: int) -> float:
    rng = np.random.default_rng(0)
    f = np.float32
    W, p = rng.standard_normal((d, d)).astype(f), rng.standard_normal(d).astype(f)
    q, g, gp = np.empty(d, f), (rng.standard_normal(d) * 1e-3).astype(f), np.empty(d, f)
    steps = 10
    return per_call(lambda: FK.twin_step_floor(W, p, q, g, gp, f(1e-9), steps)) / steps


def tokens_of(spec) -> int | None:
    """T of a sweep's real dataset (None: generated data, T from the config)."""
    if spec.data is None:
        return None
    from attnsim.data.real import open_data

    source = open_data(spec.data)
    return int(source.shape[1] if hasattr(source, "shape") else source.X.shape[1])


def priced(cfg, T: int) -> list[tuple[str, tuple, int]]:
    """(class, size, steps at that floor) for each bounded part of one run."""
    twin = 2 if cfg.clean_twin and cfg.noise_rate > 0 else 1
    if cfg.integrator != "gd" or cfg.limit or cfg.batch:
        return []
    if cfg.model == "encoder":
        return [(ENCODER, (cfg.d, cfg.mlp_dim, cfg.n), twin * cfg.steps)]
    out = []
    nT = cfg.n * T
    k = min(cfg.d, nT + 2)
    if cfg.optimizer == "gd" and "W" in cfg.train_set and max(nT, k) * k <= IN_CACHE:
        out.append((ATTENTION, (nT, k), twin * cfg.steps))
    if cfg.precision_twin == "float32":
        out.append((TWIN, (cfg.d,), cfg.steps))
    return out


def measure_floors(keys: list[tuple], rounds: int) -> dict[tuple, float]:
    """Seconds per step of each floor: the fastest over ``rounds`` rounds that visit every
    floor in turn (a lower bound must come from the machine's quiet moments; one window of
    a second or two can be slow throughout: 10.1 against 11.5 µs in two page runs)."""
    fns = {ENCODER: encoder_floor, ATTENTION: attention_floor, TWIN: twin_floor}
    seen: dict[tuple, list[float]] = {key: [] for key in keys}
    for _ in range(rounds):
        for kind, size in keys:
            seen[(kind, size)].append(fns[kind](*size))
    for (kind, size), vals in seen.items():
        print(f"  floor of {kind} = {size}: {min(vals) * 1e6:.1f} µs per step "
              f"(rounds: {', '.join(f'{v * 1e6:.1f}' for v in vals)})", flush=True)  # fmt: skip
    return {key: min(vals) for key, vals in seen.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="also write the table as JSON here")
    ap.add_argument("--figures", type=Path, help="bench_figures.py's JSON: measured CPU s per figure")
    ap.add_argument(
        "--rounds", type=int, default=3, help="rounds over every floor; each floor's fastest counts"
    )
    args = ap.parse_args()
    import importlib

    from threadpoolctl import threadpool_limits

    from attnsim.cli_args import load_gallery

    NAMES = load_gallery().NAMES
    from attnsim.sweep import parse_sweep

    measured = json.loads(args.figures.read_text())["rows"] if args.figures and args.figures.exists() else {}
    parts_of: dict[str, list] = {}  # per figure: (runs, bounded runs, [(key, steps)])
    counted: set = set()
    for name, module in NAMES.items():
        mod = importlib.import_module(f"gallery.{module}")
        runs, bounded, parts = 0, 0, []
        for mapping in getattr(mod, "sweeps", lambda q: [])(False):
            spec = parse_sweep(mapping)
            if spec.name in counted:  # a sweep two figures read counts for the first
                continue
            counted.add(spec.name)
            T_data = tokens_of(spec)
            for cfg in spec.points():
                runs += 1
                priced_parts = priced(cfg, T_data or cfg.T)
                bounded += bool(priced_parts)
                parts += [((kind, size), steps) for kind, size, steps in priced_parts]
        parts_of[name] = (runs, bounded, parts)
    keys = list(dict.fromkeys(key for _, _, parts in parts_of.values() for key, _ in parts))
    with threadpool_limits(limits=1, user_api="blas"):
        floors = measure_floors(keys, max(1, args.rounds))
    rows = {}
    for name, (runs, bounded, parts) in parts_of.items():
        row = {"runs": runs, "bounded": bounded, "floor_s": 0.0, "by_class": {}}
        for (kind, size), steps in parts:
            s = steps * floors[(kind, size)]
            row["floor_s"] += s
            row["by_class"][kind] = row["by_class"].get(kind, 0.0) + s
        row["measured_cpu_s"] = measured.get(name, {}).get("cpu_s")
        rows[name] = row
    total = sum(r["floor_s"] for r in rows.values())
    cpu = sum(r["measured_cpu_s"] or 0.0 for r in rows.values())
    print(f"\n{'figure':22s} {'runs':>5s} {'bounded':>8s} {'floor CPU s':>12s} {'measured CPU s':>15s}")
    for name, r in rows.items():
        m = "" if r["measured_cpu_s"] is None else f"{r['measured_cpu_s']:.1f}"
        print(f"{name:22s} {r['runs']:5d} {r['bounded']:8d} {r['floor_s']:12.1f} {m:>15s}")
    print(f"in all: at least {total:.0f} CPU s at the floors (>= {total / 2 / 60:.1f} min on 2 cores); "
          f"measured {cpu:.0f} CPU s in the runs")  # fmt: skip
    if args.json:
        per_step = {f"{kind} = {', '.join(map(str, size))}": v * 1e6 for (kind, size), v in floors.items()}
        out = {"benchmark": "gallery_floor", "rows": rows, "floor_s": total, "measured_cpu_s": cpu,
               "floors_us": per_step}  # fmt: skip
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
