"""A model's training dynamics as the driver steps them (:mod:`attnsim.models.base` re-exports
these): how an advance ended (:class:`Outcome`), a state seen on the training set
(:class:`Observation`), the stepper of any model (:class:`Stepper`) and of a classifier of the
paper's kind, with the in-loop records its recorder reads (:class:`ClassifierStepper`)."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np


class Outcome(enum.IntEnum):
    """How a stepper's advance ended, and what a run says about it (kernels return
    these codes as plain integers)."""

    FINISHED = 0  # every requested step was taken
    DIVERGED = 1  # the loss or a parameter norm is not finite
    FROZEN = 2  # every gradient underflows to 0: later steps keep the state
    STALLED = 3  # an integrator could not make progress (the flow's step-size control)

    def message(
        self, step: float, lr: float | None = None, normalized: bool = False, detail: str = ""
    ) -> str:
        """The run's words for this outcome at ``step`` (``detail``: the stepper's own account)."""
        if self is Outcome.FINISHED:
            return f"finished at step {step:g}"
        if self is Outcome.FROZEN:
            head = f"frozen after step {step:g}: every gradient underflows to 0"
            if normalized:  # a smaller lr only delays it: the scores themselves are one-hot
                return f"{head} (every score but the top one below exp(-745)); later steps keep that state"
            return f"{head} (reduce lr)"
        if detail:
            return detail
        if self is Outcome.DIVERGED:
            lr_hint = "" if lr is None else f" (reduce lr={lr:g})"
            return f"diverged at step {step:g}: the training loss or a parameter norm is not finite{lr_hint}"
        return f"stalled at step {step:g}"


# Outcome's codes as plain integers: what Numba kernels return (int(Outcome(...)))
OK, DIVERGED, FROZEN = int(Outcome.FINISHED), int(Outcome.DIVERGED), int(Outcome.FROZEN)


class Observation(NamedTuple):
    """A state seen on the training set: (n, T) logits, values (None when the model
    has no per-token values) and scores, (n,) outputs, the mean loss."""

    z: np.ndarray
    u: np.ndarray | None
    s: np.ndarray
    f: np.ndarray
    loss: float


class Stepper(ABC):
    """A model's training dynamics as the driver steps them (any model: a classifier's
    steppers subclass :class:`ClassifierStepper`, which adds what the paper's recorder reads).

    Subclasses write :meth:`_advance` and :meth:`state`, and usually :meth:`extra_metrics`.

    Attributes
    ----------
    whole_spans : bool
        The stepper integrates each span between log points whole (a flow; the driver never
        cuts it for a progress bar) and reports its progress through ``progress``.
    progress : callable or None
        Set by the driver for a stepper with ``whole_spans``: called with the step reached.
    detail : str
        The stepper's own account of a DIVERGED or STALLED outcome ("" for the usual words).

    Examples
    --------
    A stepper of plain GD on a quadratic, the smallest a model can write::

        class Quadratic(Stepper):
            def __init__(self, A, w0, lr):
                self.A, self.w, self.lr = A, w0.copy(), lr

            def _advance(self, step0, nsteps):
                for k in range(int(nsteps)):
                    self.w -= self.lr * (self.A @ self.w)
                    if not np.isfinite(self.w).all():
                        return Outcome.DIVERGED, int(step0) + k
                return Outcome.FINISHED, int(step0) + int(nsteps)

            def state(self):
                return {"w": self.w}

            def extra_metrics(self):
                return {"loss": 0.5 * float(self.w @ self.A @ self.w)}
    """

    whole_spans: bool = False
    progress: Callable[[float], None] | None = None
    detail: str = ""

    def advance(self, step0: float, nsteps: float) -> tuple[Outcome, float]:
        """Move from state ``step0`` by ``nsteps`` steps: (outcome, step reached)."""
        status, reached = self._advance(step0, nsteps)
        return Outcome(int(status)), reached

    @abstractmethod
    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        """The steps themselves: (an :class:`Outcome` or its code, step reached)."""

    @abstractmethod
    def state(self) -> Mapping[str, np.ndarray]:
        """The current parameters (engine coordinates; may be the stepper's own arrays)."""

    def final_state(self) -> Mapping[str, np.ndarray]:
        """The current parameters as arrays that later steps do not change."""
        return {k: np.array(v, copy=True) for k, v in self.state().items()}

    def extra_metrics(self) -> dict[str, float]:
        """Model-specific scalars logged at every log point (norms, overlaps, a model's own losses)."""
        return {}

    def snapshot(self) -> Any:
        """A copy of the current state and records, for :meth:`restore`."""
        return dict(self.final_state()), self._snapshot_records(), self._snapshot_extra()

    def restore(self, snap: Any) -> None:
        """Go back to a state saved by :meth:`snapshot`."""
        arrays, records, extra = snap
        self._restore_arrays(arrays)
        self._restore_records(records)
        self._restore_extra(extra)

    def _restore_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Write a snapshot's parameters back (into the arrays :meth:`state` returns)."""
        live = self.state()
        for k, v in arrays.items():
            live[k][...] = v

    def _snapshot_records(self) -> Any:
        """The in-loop records a snapshot keeps (a classifier's: :class:`ClassifierStepper`)."""
        return None

    def _restore_records(self, records: Any) -> None:
        """The other half of :meth:`_snapshot_records`."""
        return None  # by default: nothing

    def _snapshot_extra(self) -> Any:
        """What else a snapshot keeps (an optimizer's moments, ...)."""
        return None

    def _restore_extra(self, extra: Any) -> None:
        """The other half of :meth:`_snapshot_extra`."""
        return None  # by default: nothing


class ClassifierStepper(Stepper):
    """The stepper of a classifier of the paper's kind: a :class:`Stepper` that also shows
    its state on the training set (:meth:`observe`) and keeps the in-loop records the
    paper's recorder (:class:`attnsim.observers.Recorder`) reads.

    Subclasses write :meth:`_advance`, :meth:`observe` and :meth:`state`, and call
    :meth:`_init_records` in their constructor (or provide ``fit_since`` and ``S_acc``
    themselves).

    Attributes
    ----------
    fit_since : ndarray, shape (n,)
        The first step of each sample's current run of fitted states, -1 while unfitted.
    S_acc : ndarray, shape (n,)
        The cumulative s_rel (1 - s_rel), in units of steps.
    rel : ndarray, shape (n, T), or None
        The relevant-token indicator.
    """

    fit_since: np.ndarray
    S_acc: np.ndarray
    rel: np.ndarray | None = None

    def _init_records(self, n: int, rel: np.ndarray | None = None, T: int | None = None) -> None:
        """Fresh in-loop records for ``n`` samples; ``rel`` (n*T or (n, T)): the relevant-token indicator."""
        self.fit_since = -np.ones(n, dtype=np.int64)
        self.S_acc = np.zeros(n)
        if rel is not None:
            self.rel = np.asarray(rel, dtype=np.float64).reshape(n, -1 if T is None else T)

    @abstractmethod
    def observe(self) -> Observation:
        """The current state on the training set."""

    def relevant_increments(self, s: np.ndarray) -> np.ndarray:
        """(n,) s_rel (1 - s_rel) of scores ``s`` (n, T), s_rel the score on the relevant tokens."""
        sr = (s * self.rel).sum(axis=1)
        return sr * (1.0 - sr)

    def _snapshot_records(self) -> Any:
        return self.fit_since.copy(), self.S_acc.copy()

    def _restore_records(self, records: Any) -> None:
        self.fit_since[...] = records[0]
        self.S_acc[...] = records[1]
