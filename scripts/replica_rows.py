"""Every published replica row (Cui et al., theory/theory.ipynb; attnsim's copy in
attnsim/models/positional_semantic/published/) against attnsim's published-rule solver, two ways:

- notebook: the notebook as published: every alpha from the branch's start, stop 1e-4;
- as made: the way each file's rows show they were made: the omega = 0.3 semantic and positional
  files as the notebook; the omega = 0.5 files by continuation (each alpha from the previous
  answer) with a 1e-3 stop; the agnostic file the same, with the notebook's proximal map (BFGS from
  the origin) from (q, m, V, theta) = (0.1, 0, 26, 0) (its own start diverges).

Prints the worst relative error per column and file (m absolute; Phi left out at omega = 0.5,
whose files omit a constant of the teacher from it: tests/test_replica.py). About 2 minutes.

Usage: OPENBLAS_NUM_THREADS=1 python scripts/replica_rows.py
"""

import warnings

from attnsim.models.positional_semantic import replica as R
from attnsim.models.positional_semantic import replica_phases
from attnsim.models.positional_semantic.published_data import replica_rows

FILES = [(0.3, "semantic"), (0.3, "positional"), (0.5, "semantic"), (0.5, "positional"), (0.3, "agnostic")]
COLUMNS = ("q", "m", "V", "theta", "mse", "Phi")


def as_made(omega: float, branch: str, alphas: list) -> list:
    if omega == 0.3 and branch != "agnostic":
        return notebook(omega, branch, alphas)
    kw = {"rule": "published", "published_stop": 1e-3}
    if branch == "agnostic":
        kw |= {"proximal": "notebook", "start": (0.1, 0.0, 26.0, 0.0)}
    return replica_phases.curve(alphas, branch, omega=omega, **kw)


def notebook(omega: float, branch: str, alphas: list) -> list:
    return [R.iterate(R.Settings(alpha=a, omega=omega), branch, rule="published") for a in alphas]


def worst(sols: list, file: list, omega: float) -> dict:
    out = {}
    for sol, row in zip(sols, file):
        if not sol.converged:
            out["failed"] = out.get("failed", 0) + 1
            continue
        for k in COLUMNS:
            if k == "Phi" and omega == 0.5:
                continue
            if k in ("m", "theta") and abs(row[k]) < 1e-4:  # held at 0 on this branch: absolute
                err = abs(getattr(sol, k) - row[k])
            else:
                err = abs(getattr(sol, k) - row[k]) / abs(row[k])
            out[k] = max(out.get(k, 0.0), err)
    return out


def main() -> None:
    warnings.simplefilter("ignore", RuntimeWarning)  # a diverging start's overflow is reported, not printed
    print(f"{'file':<22} {'recipe':<9} " + " ".join(f"{k:>8}" for k in COLUMNS) + "  failed")
    for omega, branch in FILES:
        file = replica_rows(omega, branch)
        alphas = [r["alpha"] for r in file]
        for name, recipe in (("notebook", notebook), ("as made", as_made)):
            w = worst(recipe(omega, branch, alphas), file, omega)
            cells = " ".join(f"{w[k]:8.1e}" if k in w else f"{'-':>8}" for k in COLUMNS)
            print(f"omega {omega} {branch:<12} {name:<9} {cells}  {w.get('failed', 0)}", flush=True)


if __name__ == "__main__":
    main()
