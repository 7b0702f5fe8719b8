"""Figure 11: the encoder's train loss, test loss and regime over the
(signal strength, dimension) plane at 1000 steps (the paper's appendix
heatmaps, on the grid the figure budget allows: see GRID), with SNR contours;
test loss on 1000 fresh samples."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from .common import save, sweep_records, write_numbers
from .fig3_heatmaps import plot_panels

GRID = {"signal_norm": [5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0], "d": [250, 500, 750, 1000, 1250]}


def records(quick: bool, cache: Path) -> list[dict]:
    grid = {"signal_norm": [5.0, 20.0, 100.0], "d": [64, 128]} if quick else GRID
    base = {"model": "encoder", "steps": 200 if quick else 1000, "log_every": 1000, "pop_log_points": 2}
    if quick:
        base.update(mlp_dim=64, test_n=200)
    return sweep_records(cache, "fig11_encoder_heatmap", base, grid, seeds=[0])


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    plot_panels(axes, recs, test_key="test_loss", test_title="test loss (1000 fresh samples)")
    fig.suptitle("one-layer Transformer encoder, 1000 steps (mlp_dim 2000)", fontsize=10)
    fig.tight_layout()
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    ds = sorted({r["config"]["d"] for r in recs})
    c = recs[0]["config"]
    lines = [f"grid: |mu| in {mus} x d in {ds} (mlp_dim {c['mlp_dim']}, {c['steps']} steps, seed 0)"]
    for r in sorted(recs, key=lambda r: (r["config"]["d"], r["config"]["signal_norm"])):
        f = r["final"]
        lines.append(
            f"d={r['config']['d']}, |mu|={r['config']['signal_norm']:g}: train loss {f['train_loss']:.3g}, "
            f"test loss {f['test_loss']:.3g}, test accuracy {f['test_acc']:.3f}, regime {f['regime']}"
        )
    return [
        save(fig, outdir / "fig11_encoder_heatmaps.png"),
        write_numbers(outdir, "fig11_encoder_heatmaps", lines),
    ]
