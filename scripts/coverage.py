"""How often the +-2 se intervals attnsim prints cover the truth, over independent redraws.

    python scripts/coverage.py                  # every state below, 300 redraws each
    python scripts/coverage.py default T32 -r 100

For each state (a run's final parameters) the population error is estimated with fresh
random points, again and again; the reference is the precision-weighted mean of 8 estimates
with 16 times the points. Prints, per state, the share of resolved redraws whose interval
covers the reference and the spread of (estimate - reference) / se (1 for an honest se).
The same for the Bayes error at shuffled positions (``bayes``), against its estimate with
16 times the points. docs/population.md quotes these numbers.
"""

import argparse

import numpy as np

import attnsim
from attnsim.data import bayes
from attnsim.models.attention.population import Population, population_points, state_scalars
from attnsim.models.attention.problem import state_q

STATES = {
    "default": {},
    "d1500_mu14": {"d": 1500, "signal_norm": 14, "steps": 3000, "seed": 5},
    "mu10": {"signal_norm": 10},
    "mu7": {"signal_norm": 7},
    "d4500_mu5": {"d": 4500, "signal_norm": 5},
    "p_nu_mu12": {"train": "p,nu", "signal_norm": 12},
    "mu30": {"signal_norm": 30},
    "T32": {
        "T": 32,
        "n_relevant": 2,
        "n_weak_aligned": 2,
        "n_weak_opposite": 2,
        "n": 100,
        "d": 12000,
        "signal_norm": 120.0,
        "train": "p",
        "init_W": "identity",
        "noise_rate": 0.6,
    },
}


def population_coverage(name: str, redraws: int) -> str:
    res = attnsim.simulate({"pop_log_points": 2, "log_every": 500, **STATES[name]})
    c = res.config
    st = res.state
    scalars = state_scalars(res.problem, None, st["p"], st["nu"], q=state_q(st))
    counts = (c["n_relevant"], c["n_weak_aligned"], c["n_weak_opposite"])
    roles = np.repeat(np.arange(4), (*counts, c["T"] - sum(counts)))

    def estimate(seed: int, points: int) -> dict:
        pts = population_points(roles.size, points, np.random.default_rng(seed))
        return Population(roles, c["rho"], c["sigma"], pts).evaluate(*scalars)

    ref = [estimate(10**6 + i, 16 * c["pop_points"]) for i in range(8)]
    v, s = np.array([r["pop_error"] for r in ref]), np.array([r["pop_error_se"] for r in ref])
    truth = float(np.sum(v / s**2) / np.sum(1 / s**2))
    z = []
    for i in range(redraws):
        r = estimate(i, c["pop_points"])
        if r["pop_error_resolved"] == 1.0:
            z.append((r["pop_error"] - truth) / r["pop_error_se"])
    z = np.array(z)
    return (
        f"{name}: error {truth:.4g}; resolved {z.size}/{redraws}; +-2 se covers {np.mean(abs(z) <= 2):.3f}; "
        f"z mean {z.mean():.2f}, sd {z.std():.2f}, beyond 3 se {int(np.sum(abs(z) > 3))}"
    )


def bayes_coverage(redraws: int) -> list[str]:
    lines = []
    for norm in (2.0, 10.0, 20.0):
        mu = (np.array([norm, 0.0]), np.array([0.0, norm]))
        args = (*mu, 1.0, 0.1, (1, 1, 1, 5))
        truth = bayes.shuffled_positions(*args, samples=16 * bayes.BAYES_SAMPLES, seed=1)["bayes_error"]
        z = []
        for i in range(redraws):
            r = bayes.shuffled_positions(*args, seed=1000 + i)
            z.append((r["bayes_error"] - truth) / r["bayes_error_se"])
        z = np.array(z)
        lines.append(
            f"bayes, shuffled, |mu| = {norm:g}: {truth:.4g}; +-2 se covers {np.mean(abs(z) <= 2):.3f}; "
            f"z mean {z.mean():.2f}, sd {z.std():.2f}"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("states", nargs="*", help=f"states: {', '.join(STATES)}, bayes (default: all)")
    ap.add_argument("-r", "--redraws", type=int, default=300)
    args = ap.parse_args()
    for name in args.states or [*STATES, "bayes"]:
        if name == "bayes":
            print("\n".join(bayes_coverage(args.redraws)), flush=True)
        else:
            print(population_coverage(name, args.redraws), flush=True)


if __name__ == "__main__":
    main()
