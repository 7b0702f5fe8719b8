"""The Dataset every data source ends in, the roles of tokens and the run's random streams."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ROLE_NAMES = ("relevant", "weak_aligned", "weak_opposite", "irrelevant")
RELEVANT, WEAK_ALIGNED, WEAK_OPPOSITE, IRRELEVANT = range(4)


class DataError(ValueError):
    """A user-supplied data file is missing, unreadable or malformed."""


@dataclass
class Streams:
    data: np.random.Generator
    init: np.random.Generator
    test: np.random.Generator
    population: np.random.Generator


def make_streams(seed: int, pop_seed: int | None = None) -> Streams:
    """The run's Generator and its four child streams (see module docstring). ``pop_seed``
    (None: the population stream is the seed's fourth child) redraws the population
    estimator's points alone: a stream of its own, apart from every seed's children."""
    root = np.random.default_rng(seed)
    streams = Streams(*root.spawn(4))
    if pop_seed is not None:
        streams.population = np.random.default_rng(np.random.SeedSequence(pop_seed, spawn_key=(1 << 20,)))
    return streams


@dataclass
class Dataset:
    """Training (and optional test) tokens with labels and generative facts.

    Attributes
    ----------
    X : (n, T, d) training tokens, or None when the engine keeps them in its
        own coordinates (mu_pos, mu_neg and nu are then in those coordinates).
    y : (n,) observed labels in {-1, +1}.
    y_clean : (n,) true labels (equal to ``y`` when unknown).
    roles : (n, T) int role codes, or None when unknown.
    mu_pos, mu_neg : (d,) class signals, or None when unknown.
    sigma, rho : token noise standard deviation and weak-relevance factor, or None when unknown.
    nu : (d,) head vector.
    W0, p0 : initial weights supplied with the data (None: drawn from config).
    X_test, y_test : a supplied test set, or None.
    """

    X: np.ndarray | None
    y: np.ndarray
    y_clean: np.ndarray
    roles: np.ndarray | None
    mu_pos: np.ndarray | None
    mu_neg: np.ndarray | None
    sigma: float | None
    nu: np.ndarray
    rho: float | None = None
    W0: np.ndarray | None = None
    p0: np.ndarray | None = None
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    role_counts: tuple[int, int, int, int] | None = None
    source: str = "generated"
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # the encoder's initial parameters, by name

    @property
    def noisy(self) -> np.ndarray:
        return self.y != self.y_clean

    @property
    def n_noisy(self) -> int:
        return int(np.count_nonzero(self.noisy))

    def relevant_indicator(self, T: int) -> np.ndarray:
        """(n*T,) 1.0 at the relevant tokens, 0.0 elsewhere (all 0 without roles)."""
        if self.roles is None:
            return np.zeros(self.y.size * T)
        return (self.roles == RELEVANT).astype(np.float64).ravel()

    @property
    def population_reason(self) -> str | None:
        """Why population metrics cannot be computed, or None if they can."""
        if self.mu_pos is None or self.mu_neg is None or self.sigma is None:
            return "population metrics need mu_pos, mu_neg and sigma in the data file"
        if self.role_counts is None:
            return (
                "population metrics need the token roles (a roles array with the same roles in every sample)"
            )
        if self.rho is None and (self.role_counts[1] or self.role_counts[2]):
            return "population metrics need rho in the data file (the samples have weakly relevant tokens)"
        return None
