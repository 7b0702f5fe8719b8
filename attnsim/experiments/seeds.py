"""One configuration over several seeds (``attnsim run --seeds 0-4``): each seed's run
saved in its own folder, and one summary of their spread (means, standard deviations,
the regimes counted)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from .. import registry
from .._meta import ConfigError
from ..models.own import spread

if TYPE_CHECKING:  # names in annotations only
    from ..results import Result

MAX_SEEDS = 1000  # a run command for more is a sweep (resumable, in parallel)


def parse_seeds(text: str) -> list[int]:
    """``"0-4"``, ``"0,3,7"`` or a mix (``"0-2,9"``) as a list of distinct seeds >= 0."""
    seeds: list[int] = []
    for part in text.replace(" ", "").split(","):
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)  # ASCII digits: "５" is not a seed
        if not m:
            raise ConfigError(f"--seeds: {text!r}: write seeds as 0-4, 0,3,7 or 0-2,9")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ConfigError(f"--seeds: {part}: the range runs downwards")
        if hi - lo + 1 + len(seeds) > MAX_SEEDS:
            raise ConfigError(f"--seeds: more than {MAX_SEEDS} seeds; run them as a sweep (seeds = N)")
        seeds += range(lo, hi + 1)
    if len(set(seeds)) < len(seeds):
        raise ConfigError(f"--seeds: {text!r} names a seed twice")
    return seeds


def seeds_summary(seeds: list[int], runs: list[Result]) -> str:
    """What ``attnsim run --seeds`` prints after every seed's run."""
    finals = [r.final for r in runs]
    head = f"{len(runs)} seeds ({_seed_text(seeds)}): mean +- standard deviation over seeds"
    spec = registry.spec(runs[0].config["model"])
    if not spec.classifier:  # a model with metrics of its own
        return "\n".join([head, *spec.seeds_summary(runs)])
    # t_select: the fresh-sample relevant score reaches gen_score for good (a selection event;
    # generalization is the risk's word)
    score = f"relevant token selected on new samples (score >= {runs[0].config.get('gen_score', 0.5):g})"
    regimes: dict[str, int] = {}
    for f in finals:
        regimes[f["regime"]] = regimes.get(f["regime"], 0) + 1
    lines = [
        head,
        f"  population error {spread([f.get('pop_error') for f in finals])}, "
        f"excess over Bayes {spread([f.get('excess_error') for f in finals])}",
        f"  train acc {spread([f.get('train_acc') for f in finals])}, "
        f"noisy fitted {spread([f.get('train_acc_noisy') for f in finals])}",
        f"  {_times('memorized', [r.final.get('t_memorize') for r in runs])}; "
        f"{_times(score, [r.final.get('t_select') for r in runs])}",
        "  regimes: " + ", ".join(f"{k} {v}" for k, v in sorted(regimes.items(), key=lambda kv: -kv[1])),
    ]
    return "\n".join(lines)


def _times(what: str, times: list) -> str:
    never = sum(1 for t in times if t is None)
    if never == len(times):
        return f"{what}: never within the run"
    done = np.array([t for t in times if t is not None], dtype=float)
    # steps in one format, mean and spread alike: 3874 +- 4940 (sd), 1.39e+04 +- 2.1e+03 past 1e6
    step = (lambda x: f"{x:.0f}") if done.max() < 1e6 else (lambda x: f"{x:.3g}")
    text = step(done.mean()) + (f" +- {step(done.std(ddof=1))} (sd)" if done.size > 1 else "")
    return f"{what} at step {text}" + (f" ({never} never within the run)" if never else "")


def _seed_text(seeds: list[int]) -> str:
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


__all__ = ["MAX_SEEDS", "parse_seeds", "seeds_summary", "spread"]
