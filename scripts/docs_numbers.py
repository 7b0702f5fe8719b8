"""Every number the README and docs quote, computed again and looked for where it is quoted.

Each part recomputes its numbers and lists the quotes they make (a text and the files that must
hold it, verbatim); a quote missing from a file is printed with what the file should say, and
the script exits 1. tests/test_docs_numbers.py runs the quick parts.

Parts:
  default      the default run's summary (README, docs/model.md) and the README's prose about it
  large_noise  the harmful setting (d = 4500, |mu| = 5): README, docs/results.md, docs/usage.md
  figures      docs/figures.md's figure-5 times against the figure's own summary
               (figures/fig5_delayed.txt, written by `attnsim figures delayed`)
  tests        the README's test count (pytest --collect-only)
  cui DIR      docs/positional-semantic.md's table of seeds 0-23 against the sweep in DIR
               (`python benchmarks/bench_cui2024_parity.py --seeds 0-23 --out DIR` computes it)

Usage::

    python scripts/docs_numbers.py [default large_noise figures tests] [--cui DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent


class Quote(NamedTuple):
    what: str  # what the number is
    text: str  # as the docs must print it
    files: tuple[str, ...]  # relative to the repository


def sci(x: float, digits: int = 2) -> str:
    """1.8e-4 (not 1.8e-04): the docs' short scientific form, ``digits`` significant digits."""
    mant, _, exp = f"{x:.{digits - 1}e}".partition("e")
    return f"{mant}e{int(exp)}"


def default_run() -> list[Quote]:
    """The default run: its summary as ``attnsim run`` prints it (all but the first line, whose
    times are the machine's) and the README's prose about it."""
    import attnsim
    from attnsim.report import format_summary

    res = attnsim.simulate()
    f = res.final
    lines = format_summary(res).splitlines()[1:]
    quotes = [
        Quote(f"default summary line {i + 2}", line, ("README.md", "docs/model.md"))
        for i, line in enumerate(lines)
    ]
    cost = f["pop_error"] - f["bayes_error"]
    quotes += [
        Quote("default: excess error", f"within\n{sci(cost, 1)} of the Bayes error", ("README.md",)),
        Quote("default: Bayes error", f"({sci(f['bayes_error'])}: the best any classifier", ("README.md",)),
        Quote("default: uniform attention", f"errs {sci(f['pop_error_init'])}, and the same", ("README.md",)),
        Quote(
            "default: clean-label twin",
            f"*clean-label twin*) {sci(f['error_clean_twin'])}, so",
            ("README.md",),
        ),
        Quote("default: label noise costs", f"four flipped labels costs {sci(cost, 1)}.", ("README.md",)),
    ]
    return quotes


def large_noise() -> list[Quote]:
    """The paper's harmful setting, d = 4500 and |mu| = 5."""
    import attnsim

    f = attnsim.simulate(d=4500, signal_norm=5).final
    err, bayes, twin, init = f["pop_error"], f["bayes_error"], f["error_clean_twin"], f["pop_error_init"]
    return [
        Quote("large noise: error", f"the error is {err:.3g}", ("README.md", "docs/results.md")),
        Quote("large noise: Bayes error", f"Bayes error of {sci(bayes)}", ("README.md",)),
        Quote("large noise: Bayes error", f"Bayes error of\n{sci(bayes)}: harmful", ("docs/results.md",)),
        Quote("large noise: clean-label twin", f"clean labels errs {twin:.3g}", ("docs/results.md",)),
        Quote("large noise: uniform attention", f"uniform attention {init:.3g}.", ("docs/results.md",)),
        Quote(
            "large noise: the Python example",
            f"# ('{f['regime']}', {err:.3g}, {bayes:.3g}, {twin:.3g})",
            ("docs/usage.md",),
        ),
    ]


def figures() -> list[Quote]:
    """Figure 5's times at (2000, 10), from the summary the figure wrote beside itself."""
    text = (ROOT / "figures/fig5_delayed.txt").read_text()
    m = re.search(r"d=2000, \|mu\|=10: memorized at (\d+), relevant token selected at (\d+)", text)
    if m is None:
        raise SystemExit("figures/fig5_delayed.txt: no (2000, 10) line; run `attnsim figures delayed`")
    memorized, selected = int(m[1]), int(m[2])
    return [
        Quote("figure 5: memorized", f"is fitted by step {memorized} and", ("docs/figures.md",)),
        Quote(
            "figure 5: selected", f"passes 0.5 at step {selected:,}".replace(",", " "), ("docs/figures.md",)
        ),
        Quote(
            "figure 5: ratio", f"{round(selected / memorized)}× later than memorization", ("docs/figures.md",)
        ),
    ]


def test_count() -> list[Quote]:
    """The README's count of the suite's tests."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    m = re.search(r"(\d+) tests? collected", out)
    if m is None:
        raise SystemExit(f"pytest --collect-only printed no count:\n{out[-2000:]}")
    return [Quote("the suite's test count", f"for {m[1]} tests", ("README.md",))]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_cui", ROOT / "benchmarks/bench_cui2024_parity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quoted(x: float, like: str) -> str:
    """x printed with as many decimals as the docs' ``like``."""
    decimals = len(like.partition(".")[2])
    return f"{x:.{decimals}f}"


def cui(folder: str) -> list[Quote]:
    """docs/positional-semantic.md's table of seeds 0-23: every mean, sd, z and z_cv it shows, to
    the digits it shows, from the records of the benchmark's sweep in ``folder``."""
    import numpy as np

    from attnsim import load_sweep
    from attnsim.models.positional_semantic.published_data import gd_table

    bench = _bench()
    table = load_sweep(Path(folder) / "cui2024_parity_d1000")
    rows = [i for i in range(len(table["status"])) if table["status"][i] == "ok"]
    pub = gd_table()
    doc = (ROOT / "docs/positional-semantic.md").read_text()
    names = {
        "gen error": "gen_error",
        "θ": "theta",
        "magnetization": "magnetization",
        "train objective": "train_objective",
        "linear gen error": "linear_gen_error",
    }
    quotes, row = [], None
    pattern = r"^\|([^|]*)\| ([^|]+) \| ([\d.]+) ± ([\d.]+) \| [^|]+ \| ([−\d.]+) \| ([−\d.]+) \|$"
    for m in re.finditer(pattern, doc.split("Seeds 0–23 (`--seeds 0-23`")[-1].split("(a selection")[0], re.M):
        label, metric, mean_s, sd_s, z_s, zcv_s = m.groups()
        if label.strip():
            init, _, rest = label.strip().partition(", α = ")
            alpha_s, _, omega_s = rest.partition(", ω = ")
            row = (init, float(alpha_s), float(omega_s))
        init, alpha, omega = row
        a = float(bench.ALPHAS[np.argmin(abs(bench.ALPHAS - alpha))])
        pick = [
            i
            for i in rows
            if table["config.init"][i] == init
            and table["config.alpha"][i] == a
            and table["config.omega"][i] == omega
            and table["config.seed"][i] < 24
        ]
        key = names[metric]
        y = np.array([table[key][i] for i in pick])
        c = np.array([table["teacher_norm"][i] for i in pick])
        pm, ps = pub[(init, round(a, 6), omega)][key]
        z = (y.mean() - pm) / math.sqrt(y.var(ddof=1) / y.size + ps**2 / 24)
        fit, fit_se = bench.controlled(y, c)
        z_cv = (fit - pm) / math.sqrt(fit_se**2 + ps**2 / 24)
        sd = float(f"{y.std(ddof=1):.2g}")
        text = f"{_quoted(y.mean(), mean_s)} ± {_quoted(sd, sd_s)}"
        where = ("docs/positional-semantic.md",)
        what = f"{init} α={alpha} ω={omega} {metric}"
        quotes.append(Quote(f"{what}: mean ± sd ({len(pick)} seeds)", text, where))
        for name, value, like in (("z", z, z_s), ("z_cv", z_cv, zcv_s)):
            quotes.append(
                Quote(
                    f"{what}: {name}",
                    _quoted(value, like.replace("−", "-")).replace("-", "−"),
                    where,
                )
            )
    if not quotes:
        raise SystemExit("docs/positional-semantic.md: its table of seeds 0-23 was not found")
    return quotes


PARTS: dict[str, Callable[[], list[Quote]]] = {
    "default": default_run,
    "large_noise": large_noise,
    "figures": figures,
    "tests": test_count,
}


def missing(quotes: list[Quote]) -> list[tuple[Quote, str]]:
    """The quotes a file does not hold, with that file."""
    texts: dict[str, str] = {}
    out = []
    for q in quotes:
        for name in q.files:
            if name not in texts:
                texts[name] = (ROOT / name).read_text()
            if q.text not in texts[name]:
                out.append((q, name))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", choices=[*PARTS, []], help="default: all of them")
    ap.add_argument("--cui", metavar="DIR", help="check the Cui et al. table against the sweep in DIR")
    args = ap.parse_args(argv)
    quotes: list[Quote] = []
    for name in args.parts or list(PARTS):
        quotes += PARTS[name]()
    if args.cui:
        quotes += cui(args.cui)
    wrong = missing(quotes)
    for q, name in wrong:
        print(f"{name}: {q.what}: should say {q.text!r}")
    print(f"{len(quotes) - len({q for q, _ in wrong})} of {len(quotes)} quoted numbers match")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
