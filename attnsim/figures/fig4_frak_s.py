"""Figure 4: cumulative-frakS ratios over (d, |mu|) in the paper's first-version
experiment (train p only, W = I, lr = 1e-4, 10^4 steps).

frakS = sum over steps of s_rel (1 - s_rel), summed per group. Shown as ratios
of per-sample means: clean vs noisy samples, and clean samples of class +1 vs
class -1, each divided by its value after the first step (where all samples
still attend uniformly, so the normalized ratio starts at 1).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .common import grid_of, save, sweep_records, write_numbers

SAVE = ["frakS_clean", "frakS_noisy", "frakS_pos", "frakS_neg"]


def records(quick: bool, cache: Path) -> list[dict]:
    if quick:
        grid = {"d": [250, 1000, 3000, 5000], "signal_norm": [5.0, 20.0, 50.0, 100.0]}
        steps = 2000
    else:
        grid = {
            "d": {"start": 250, "stop": 5000, "step": 250},
            "signal_norm": {"start": 5, "stop": 100, "step": 5},
        }
        steps = 10_000
    base = {"train": "p", "init_W": "identity", "lr": 1e-4, "steps": steps, "log_every": 1,
            "log_scale": "log", "log_points": 3, "pop_log_points": 2, "engine": "reduced"}  # fmt: skip
    return sweep_records(cache, "fig4_frak_s", base, grid, seeds=[0], save=SAVE)


def ratio(rec: dict, num: str, den: str, counts: tuple[float, float]) -> float:
    tr = rec["trajectory"]
    a, b = np.asarray(tr[num], dtype=float) / counts[0], np.asarray(tr[den], dtype=float) / counts[1]
    first = 1  # the first logged step after 0 (frakS is 0 at step 0)
    return float((a[-1] / b[-1]) / (a[first] / b[first]))


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    lines: list[str] = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    for ax, (num, den, title) in zip(
        axes,
        (("frakS_clean", "frakS_noisy", "clean / noisy (per sample)"),
         ("frakS_pos", "frakS_neg", "class +1 / class -1 (clean samples)")),
    ):  # fmt: skip

        def value(r, num=num, den=den):
            n, k = r["config"]["n"], r["final"]["n_noisy"]
            counts = (n - k, k) if den == "frakS_noisy" else ((n - k) / 2, (n - k) / 2)
            return ratio(r, num, den, counts)

        xs, ys, Z = grid_of(recs, "signal_norm", "d", value)
        im = ax.pcolormesh(xs, ys, np.log10(Z), shading="nearest", cmap="RdBu_r", vmin=-1, vmax=1)
        plt.colorbar(im, ax=ax, label="log10 normalized ratio")
        ax.set_title(f"cumulative frakS ratio: {title}", fontsize=10)
        ax.set_xlabel("|mu|")
        ax.set_ylabel("d")
        for cols, where in ((xs <= xs[len(xs) // 4], "small |mu|"), (xs >= xs[-len(xs) // 4], "large |mu|")):
            part = Z[:, cols]
            lines.append(f"{title}, {where}: normalized ratio {np.nanmin(part):.3g}-{np.nanmax(part):.3g} "
                         f"(median {np.nanmedian(part):.3g})")  # fmt: skip
    fig.suptitle("train p only, W = I, lr = 1e-4, 10^4 steps", fontsize=10)
    fig.tight_layout()
    return [save(fig, outdir / "fig4_frak_s.png"), write_numbers(outdir, "fig4_frak_s", lines)]
