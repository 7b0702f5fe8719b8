"""The command line's grammar: every command, its arguments and their help (``attnsim --help``).
Imports nothing numerical: ``attnsim --version`` and ``--help`` start instantly."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

from ._meta import GRAD_TOL, __version__

GALLERY = "scripts/gallery"  # the figure code, in a checkout of attnsim (not installed with the package)


class UsageError(Exception):
    """Bad usage or input: exit code 2."""


def theory_models() -> list[str]:
    """The models whose registry line says they have a theory (``attnsim theory MODEL``)."""
    from . import registry  # lazy: plain data, no numerics

    return [name for name, entry in registry.MODELS.items() if entry.theory]


def find_gallery() -> Path | None:
    """The ``scripts`` folder that holds the figure code (``scripts/gallery``): the one named by
    ``ATTNSIM_FIGURE_CODE`` (a checkout's scripts folder, for a package installed from it), beside
    the package (a checkout, an editable install) or in the working folder, else None."""
    named = os.environ.get("ATTNSIM_FIGURE_CODE")
    if named and (Path(named) / "gallery" / "__init__.py").is_file():
        return Path(named)
    for root in (Path(__file__).resolve().parent.parent, Path.cwd()):
        if (root / GALLERY / "__init__.py").is_file():
            return root / "scripts"
    return None


def load_gallery() -> Any:
    """The figure code's package (``gallery``: NAMES, make), or UsageError saying where it lives."""
    where = find_gallery()
    if where is None:
        raise UsageError(
            f"figures: the figure code is not installed with the package; it is {GALLERY}/ in a "
            "checkout of attnsim's repository: run `attnsim figures` there (or point ATTNSIM_FIGURE_CODE "
            "at its scripts/)"
        )
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    return importlib.import_module("gallery")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise UsageError(f"{self.prog.removeprefix('attnsim').strip() or 'usage'}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="attnsim", description="Simulate token selection by softmax attention.")
    p.add_argument("--version", action="version", version=f"attnsim {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    r = sub.add_parser(
        "run",
        help="run one simulation and write its results",
        epilog="Config keys (TOML or --set key=value): 'attnsim keys' lists each with its default and "
        "allowed values; docs/usage.md says what they mean.",
    )
    r.add_argument(
        "config",
        nargs="?",
        help="TOML file with config keys, or a run's folder (or its result.json): that run again",
    )
    r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--engine", help="shorthand for --set engine=NAME")
    r.add_argument(
        "--preset",
        help="start from a sister paper's setting ('attnsim presets' lists them); --set keys override it",
    )
    r.add_argument("--out", help="output folder (default runs/<timestamp>-<config hash>); it must be empty")
    r.add_argument("--force", action="store_true", help="replace the run already in --out (its figures too)")
    r.add_argument(
        "--data",
        help=".npz file with X (n,T,d), y (n,) and more; or token features for the real-data protocol: "
        "'digits' (built in) or an .npz with features (N,T,d) and labels (N,)",
    )
    r.add_argument(
        "--plot",
        choices=("scores", "gaps", "metrics"),
        help="write a figure into the output folder: a classifier's example scores or gaps, another "
        "model's own metrics",
    )
    r.add_argument("--seeds", help="several seeds (0-4, 0,3,7): each run in OUT/seed-K, one summary of all")
    r.add_argument(
        "--workers",
        type=int,
        default=None,
        help="with --seeds: worker processes (default: every core once each has 4 seeds)",
    )
    r.add_argument("--csv", action="store_true", help="also write trajectory.csv (one row per log point)")
    r.add_argument("--save-scores", action="store_true", help="keep all per-sample scores")
    r.add_argument("--quiet", action="store_true", help="print nothing but warnings and errors")
    sw = sub.add_parser("sweep", help="run a grid of configurations x seeds (resumable)")
    sw.add_argument("file", help="sweep TOML file ([sweep], [base], [grid])")
    sw.add_argument("--out", default="sweeps", help="folder for the sweep's records (default sweeps/)")
    sw.add_argument("--workers", type=int, default=None, help="local worker processes (default: cores)")
    sw.add_argument("--scheduler", default=None, help="Dask distributed scheduler address")
    rl = sub.add_parser("real", help="the real-data protocol (the paper's Table 2) on token features")
    rl.add_argument("data", help="'digits' (built in; needs the real extra) or an .npz with features, labels")
    rl.add_argument(
        "--n", type=int, nargs="+", default=None, help="training set sizes (default: 20 200 1000 in the pool)"
    )
    rl.add_argument("--eta", type=float, nargs="+", default=[0.0, 0.2], help="label-noise rates")
    rl.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (each: its own split, head and flips)")
    rl.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    rl.add_argument("--out", default="sweeps", help="folder for the records and table.csv (default sweeps/)")
    rl.add_argument("--workers", type=int, default=None, help="local worker processes (default: cores)")
    names = f"(the figure code is {GALLERY}/ of a checkout)"
    if find_gallery() is not None:  # the names only: no matplotlib
        names = ", ".join(load_gallery().NAMES)
    fg = sub.add_parser("figures", help="regenerate the paper's figures (from a checkout)")
    fg.add_argument("names", nargs="*", metavar="NAME", help=f"figures to make (default: all): {names}")
    fg.add_argument("--quick", action="store_true", help="small grids (a smoke run)")
    fg.add_argument("--outdir", help="where the PNGs go (default figures/; with --quick runs/figures-quick/)")
    fg.add_argument(
        "--cache",
        default="sweeps/figures",
        help="sweep records reused between runs (default sweeps/figures/)",
    )
    pl = sub.add_parser(
        "plot",
        help="draw a finished run (scores, losses, errors), an --seeds folder or a sweep (a metric vs a "
        "key, or a heatmap over two)",
    )
    pl.add_argument("folder", help="a run's folder (result.json) or a sweep's (sweep.json, records/)")
    pl.add_argument("--metric", help="sweeps: the recorded metric on the y axis (default pop_error)")
    pl.add_argument(
        "--x",
        dest="x_key",
        metavar="KEY",
        help="sweeps: the config key on the x axis (default: the first grid key with several values); "
        "one line per value of the others",
    )
    pl.add_argument(
        "--y",
        dest="y_key",
        metavar="KEY",
        help="sweeps: a second config key: the sweep drawn as a heatmap over --x and KEY (a word-valued "
        "metric such as regime as a map of categories)",
    )
    pl.add_argument("--logx", action="store_true", help="sweeps: logarithmic x axis")
    pl.add_argument("--logy", action="store_true", help="sweeps: logarithmic y axis")
    pl.add_argument("--logz", action="store_true", help="heatmaps (--y): logarithmic colour scale")
    pl.add_argument(
        "--out",
        help="the figure to write, .png, .pdf or .svg (default: FOLDER/plot.png, or "
        "FOLDER/<metric>-vs-<key>[-logy].png)",
    )
    th = sub.add_parser(
        "theory",
        help="a model's theory at d -> infinity (its replica fixed point, its asymptotic errors)",
        description="A model's theory at d -> infinity, for a model that has one: positional_semantic's "
        "replica fixed point (Cui et al.'s Result 4.2: q, m, V, theta, mse and Phi in the published "
        "theory's units, empirical gen error = mse / 2, theta / sigma^2, train objective / d = -Phi). "
        "Exit 1, with no numbers, when its solver does not converge.",
    )
    th.add_argument("model", choices=theory_models(), help="the model whose theory to solve")
    th.add_argument(
        "--branch",
        choices=["semantic", "positional", "agnostic"],
        default=None,
        help="positional_semantic: the branch (default semantic)",
    )
    th.add_argument(
        "--rule",
        choices=["gauss-hermite", "published"],
        default=None,
        help="positional_semantic: gauss-hermite raises the order until the answer stops moving "
        "(default); published: the published notebook's fixed rules, start and stop (reproduces its "
        "rows, no accuracy claim)",
    )
    th.add_argument(
        "--int-tol",
        type=float,
        default=None,
        help="positional_semantic, gauss-hermite: the largest relative move of q, m, V, theta, mse and "
        "Phi between two orders that counts as converged (default 3e-2: the positional branch's "
        "integrand jumps where the proximal map changes minimum, and its q and V move by 2-3 percent "
        "between orders 12, 16 and 24; mse and Phi by under 1e-3)",
    )
    th.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the theory's keys (positional_semantic: alpha, omega, sigma, weight_decay or teacher_A, "
        "a 2 x 2 matrix)",
    )
    th.add_argument(
        "--transition",
        action="store_true",
        help="positional_semantic: alpha_c at the given omega, where the semantic and positional "
        "branches' free energies cross (Brent's method around the published line; --rule chooses the "
        "rules, published by default)",
    )
    th.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    sub.add_parser("keys", help="list every config key with its default and allowed values")
    sub.add_parser("presets", help="list the presets (sister papers' settings) with their sources")
    g = sub.add_parser("check-grad", help="compare analytic gradients with finite differences")
    g.add_argument("--h", type=float, default=1e-6, help="central-difference step")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--tol",
        type=float,
        default=GRAD_TOL,
        help=f"largest per-block relative error that passes (default {GRAD_TOL:g}; exit 1 above it)",
    )
    g.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model=encoder checks the encoder (and skip=false its variant without residuals)",
    )
    return p
