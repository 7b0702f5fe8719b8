"""Figure 11: the encoder's train loss, test loss and regime over the
(signal strength, dimension) plane at 1000 steps (the paper's appendix
heatmaps, on the grid the figure budget allows: see
:data:`gallery.fig10_encoder_dynamics.GRID`), with SNR contours; test
loss on 1000 fresh samples."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from .common import save, write_numbers
from .fig3_heatmaps import plot_panels
from .fig10_encoder_dynamics import encoder_records, sweeps  # noqa: F401  (sweeps: figure 10's, read here)


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    _, recs = encoder_records(quick, cache)
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
