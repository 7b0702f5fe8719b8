"""The real-data protocol (the paper's Table 2) as a sweep over (n, eta, seed), and its table (SPEC §14)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..config import ConfigError
from ..data.dataset import DataError
from ..data.files import read_npz
from ..data.real import BUILTIN, features_source, open_data
from ..results import write_csv_table
from ..run import check_run
from ..sweep.run import run_sweep
from ..sweep.spec import NAME_RE, parse_sweep

if TYPE_CHECKING:  # names in annotations only
    from ..sweep.store import SweepReport

PROTOCOL_SAVE = ["train_loss", "train_acc_noisy", "test_acc", "test_loss", "score_max"]
TABLE_COLUMNS = (
    "n",
    "eta",
    "noise",
    "seeds",
    "train_loss",
    "train_acc",
    "noisy_fitted",
    "test_acc",
    "test_acc_sd",
    "test_loss",
    "baseline_acc",
    "baseline_acc_sd",
    "score_max",
)


def noise_model(config: dict) -> str:
    """How a run's labels were flipped: "iid" (each with probability eta) or
    "count" (round(n eta) at random); "-" without label noise."""
    if config["noise_rate"] == 0:
        return "-"
    return "iid" if config["label_noise"] == "iid" else "count"


DEFAULT_NS = [20, 200, 1000]  # the training-set sizes of ``attnsim real`` without --n


def protocol_sweep(
    data: str,
    ns: list[int] | None,
    etas: list[float],
    seeds: list[int],
    base: dict,
    name: str | None = None,
) -> tuple[dict, list[str]]:
    """The sweep mapping of the protocol (n x eta x seeds on ``data``) and
    messages. ``ns`` None is :data:`DEFAULT_NS` less the sizes the pool cannot
    give (said in a message); an n given beyond the pool is refused. Logging on
    a log grid, so delayed generalization shows at any horizon."""
    for key, vals in (("--n", ns or []), ("--eta", etas)):
        if len(set(vals)) < len(vals):
            raise ConfigError(f"{key}: duplicate values {list(vals)}")
    if isinstance(data, str) and data in BUILTIN:
        opened = open_data(data)
    else:
        arrays = read_npz(Path(data))
        if "features" not in arrays:
            raise DataError(
                f"{data}: the protocol needs token features: 'digits', or an .npz with arrays "
                "features (N, T, d) and labels (N,)"
            )
        opened = features_source(Path(data), arrays)
    for key, what in opened.decided_keys().items():
        if key in base:
            raise ConfigError(f"{key}: {what} decides it; do not --set it")
    pool = opened.pool_size()
    if pool < 1:
        raise DataError(f"{data}: no samples left for training after {opened.n_pretrain} + {opened.n_test}")
    messages, kept = [], []
    held = (
        f"the training pool of {data} holds {pool} samples (after {opened.n_pretrain} for the head and "
        f"{opened.n_test} for the test)"
    )
    if ns is None:
        kept = [n for n in DEFAULT_NS if n <= pool] or [pool]
        if kept != DEFAULT_NS:
            messages.append(f"n: {held}: running n = {', '.join(map(str, kept))}")
    for n in ns or []:
        if n > pool:
            raise ConfigError(f"n: {n}: {held}; use n up to {pool}")
        kept.append(n)
    stem = Path(data).stem if not opened.builtin else data
    name = name or "real_" + "".join(c if NAME_RE.fullmatch(c) else "_" for c in stem)
    # the clean-label twin of a run is the eta = 0 run of the same n and seed (the same
    # split, head, samples and initialization), so it is not trained twice
    mapping = {
        "sweep": {"name": name, "seeds": list(seeds), "save": PROTOCOL_SAVE, "data": data},
        "base": {"log_scale": "log", "log_points": 60, "pop_log_points": 60, "clean_twin": False, **base},
        "grid": {"n": kept, "noise_rate": [float(e) for e in etas]},
    }
    # one point opened and planned now: a key the protocol cannot run with (a data model of
    # its own, an engine that draws its own data) is refused before any point runs
    first = {**mapping["base"], "n": kept[0], "noise_rate": float(etas[0]), "seed": seeds[0]}
    check_run(first, data)
    return mapping, messages


def protocol_table(records: list[dict]) -> list[dict]:
    """One row per (n, eta): means over seeds (test accuracy and the head-only
    baseline, the test accuracy at step 0, also their standard deviations);
    ``noisy_fitted`` is the fraction of flipped labels the model fits;
    ``score_max`` the mean largest attention score of the training samples
    at the end; ``noise`` the noise model (:func:`noise_model`)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("status") == "ok":
            key = (r["config"]["n"], r["config"]["noise_rate"], noise_model(r["config"]))
            groups.setdefault(key, []).append(r)
    rows = []
    for (n, eta, noise), recs in sorted(groups.items()):
        f = [r["final"] for r in recs]
        base = [r["trajectory"]["test_acc"][0] for r in recs]
        noisy = [x["train_acc_noisy"] for x in f if x["n_noisy"]]
        rows.append(
            {
                "n": n,
                "eta": eta,
                "noise": noise,
                "seeds": len(recs),
                "train_loss": float(np.mean([x["train_loss"] for x in f])),
                "train_acc": float(np.mean([x["train_acc"] for x in f])),
                "noisy_fitted": float(np.mean(noisy)) if noisy else float("nan"),
                "test_acc": float(np.mean([x["test_acc"] for x in f])),
                "test_acc_sd": float(np.std([x["test_acc"] for x in f], ddof=1))
                if len(f) > 1
                else float("nan"),
                "test_loss": float(np.mean([x["test_loss"] for x in f])),
                "baseline_acc": float(np.mean(base)),
                "baseline_acc_sd": float(np.std(base, ddof=1)) if len(base) > 1 else float("nan"),
                "score_max": float(np.mean([x.get("score_max", float("nan")) for x in f])),
            }
        )
    return rows


def protocol_notes(rows: list[dict]) -> list[str]:
    """Lines for the rows whose test accuracy sits below the head-only baseline by more
    than the seeds' spread: why attention training can lose accuracy here."""
    notes = []
    for r in rows:
        spread = max(r["test_acc_sd"], r["baseline_acc_sd"], 0.0) if r["seeds"] > 1 else 0.0
        if not r["test_acc"] < r["baseline_acc"] - spread:
            continue
        notes.append(
            f"n={r['n']}, eta={r['eta']:g}: test accuracy {r['test_acc']:.3f} is below the head-only "
            f"baseline {r['baseline_acc']:.3f} (the fixed head on uniform attention, step 0): the head "
            f"is fitted once on the pretraining split and never retrained, and attention trained on "
            f"{r['n']} samples selects the tokens that fit them"
            + (f" (flipped labels included: {r['noisy_fitted']:.2f} of them fitted)" if r["eta"] > 0 else "")
            + ", not those the test samples need"
        )
    return notes


def write_table(rows: list[dict], path: Path) -> Path:
    """The table as CSV (atomically)."""
    return write_csv_table(path, TABLE_COLUMNS, rows)


def format_table(rows: list[dict]) -> str:
    """The table as Markdown (docs/real-data.md's and the command's)."""
    head = (
        "| n | eta | noise | seeds | train loss | train acc | noisy fitted | test acc (± sd) "
        "| head-only baseline | max attention |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        noisy = "–" if r["noisy_fitted"] != r["noisy_fitted"] else f"{r['noisy_fitted']:.2f}"
        test = f"{r['test_acc']:.3f} ± {r['test_acc_sd']:.3f}"
        baseline = f"{r['baseline_acc']:.3f} ± {r['baseline_acc_sd']:.3f}"
        lines.append(
            f"| {r['n']} | {r['eta']:g} | {r['noise']} | {r['seeds']} | {r['train_loss']:.3g} "
            f"| {r['train_acc']:.3f} | {noisy} | {test} | {baseline} | {r['score_max']:.3f} |"
        )
    return "\n".join(lines)


def run_protocol(
    data: str,
    ns: list[int] | None,
    etas: list[float],
    seeds: list[int],
    base: dict,
    out: str | Path,
    workers: int | None = None,
    progress: bool | None = None,
    name: str | None = None,
) -> tuple[SweepReport, list[dict], list[str]]:
    """The protocol on ``data`` as a resumable sweep under ``out``: returns
    (sweep report, table rows, messages) and writes ``table.csv`` beside the records."""
    mapping, messages = protocol_sweep(data, ns, etas, seeds, base, name)
    report = run_sweep(parse_sweep(mapping), out, workers=workers, progress=progress)
    rows = protocol_table(report.records())
    write_table(rows, report.root / "table.csv")
    return report, rows, messages + report.messages
