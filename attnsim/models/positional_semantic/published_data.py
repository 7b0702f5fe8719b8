"""Cui et al.'s published numbers (NeurIPS 2024; repository SPOC-group/positional-and-semantic-
attention, snapshot 0b867fa), shipped as data in ``published/`` (its README: files, columns, units):
the gradient-descent table (mean and sd over 24 runs per row, d = 1000) and the replica fixed
points per branch. Read here for the parity benchmark and the figure."""

from __future__ import annotations

import csv
from pathlib import Path

DATA = Path(__file__).resolve().parent / "published"
METRICS = {  # attnsim's name -> the published column
    "gen_error": "attention_gen_error_mean",
    "magnetization": "attention_mag_mean",
    "theta": "attention_theta_mean",
    "train_objective": "attention_train_error_mean",
    "linear_gen_error": "linear_gen_error_mean",
}
BRANCHES = {"semantic": "", "positional": "_para", "agnostic": "_agno"}

# the published transition line at sigma = 0.5 (their "spinodal" list: alpha_c per omega)
TRANSITION = {
    0.0: 0.5480511155124588,
    0.1: 0.7071599112677189,
    0.15: 0.8180015676221762,
    0.2: 0.9277860822926854,
    0.25: 1.06,
    0.3: 1.2410177405149914,
    0.35: 1.4541109691229464,
    0.4: 1.7505718608649372,
    0.425: 1.93929723421423,
}


def gd_table(sigma: float = 0.5, weight_decay: float = 0.01) -> dict:
    """(init, alpha, omega) -> {metric: (mean, sd)} of the published GD runs (``init`` semantic for
    their informed = True, positional for False; alpha and omega rounded to 6 digits)."""
    out = {}
    with open(DATA / "results_mean_standardA.csv") as fm, open(DATA / "results_std_standardA.csv") as fs:
        for m, s in zip(csv.DictReader(fm), csv.DictReader(fs)):
            if float(m["sigma"]) != sigma or float(m["attention_lmbda"]) != weight_decay:
                continue
            init = "semantic" if m["informed"] == "True" else "positional"
            key = (init, round(float(m["alpha"]), 6), round(float(m["omega"]), 6))
            out[key] = {name: (float(m[col]), float(s[col])) for name, col in METRICS.items()}
    return out


def replica_rows(omega: float, branch: str, sigma: float = 0.5) -> list[dict[str, float]]:
    """A branch's published replica solutions as stored (columns q, m, V, theta, mse, alpha,
    lambda, Phi in the theory's units; the file's order, alpha descending); [] where the folder
    has no such file."""
    path = DATA / f"repl_softmax_Mixed_sig{sigma:g}_lamb0.01_omega{omega:g}{BRANCHES[branch]}.csv"
    if not path.is_file():
        return []
    with open(path) as fh:
        return [{k: float(v) for k, v in r.items() if k} for r in csv.DictReader(fh)]


def theory(omega: float, branch: str, sigma: float = 0.5) -> dict[str, list[float]]:
    """A branch's replica solutions over alpha, in the empirical units (gen error = mse/2,
    theta = theta/sigma^2, magnetization = m); {} where the folder has no such file."""
    rows = sorted(replica_rows(omega, branch, sigma), key=lambda r: r["alpha"])
    if not rows:
        return {}
    return {
        "alpha": [r["alpha"] for r in rows],
        "gen_error": [r["mse"] / 2 for r in rows],
        "theta": [r["theta"] / sigma**2 for r in rows],
        "magnetization": [r["m"] for r in rows],
    }
