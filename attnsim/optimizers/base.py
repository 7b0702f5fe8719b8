"""What an optimizer supplies, and what a model's stepper may assume of it (SPEC §15).

Adding an optimizer
-------------------
1. A file ``attnsim/optimizers/<name>.py`` with

   - ``KEYS``: a frozen dataclass of the config keys only this optimizer reads, each with
     its default and ``field(metadata={"allowed": ..., "help": ...})`` (``attnsim keys``
     shows them), or None; the other optimizers refuse them away from their defaults;
   - ``check(cfg)``: a :class:`attnsim.ConfigError` for a value it cannot take;
   - ``OPTIMIZER``: a subclass of :class:`Optimizer` that writes :meth:`Optimizer.update`
     (and :meth:`Optimizer.start`, :meth:`Optimizer.snapshot`, :meth:`Optimizer.restore`
     when it keeps a state of its own).

   The config loads ``KEYS`` with every command, so the file imports nothing heavy at its
   top: NumPy and Numba load inside the methods (marked "lazy"), and Numba code lives in
   :mod:`attnsim.optimizers.kernels` (a Numba function and everything it calls in one file).
2. One line in :data:`attnsim.registry.OPTIMIZERS`: its name and module.

Nothing else changes. A model whose registry entry takes every optimizer
(``optimizers=registry.ANY``) runs it through its per-step stepper: the stepper computes
the gradient of every trained block with its own kernels and hands them to
:meth:`Optimizer.update`. Config validation refuses, in one line, an optimizer whose
``needs`` (parameter blocks) a model lacks, and a ``coordinatewise`` optimizer (one whose
step depends on the basis: per-coordinate moments, an l_p potential) in an engine that
rotates the coordinates (the attention model's reduced and implicit engines are exact for
rotation-invariant steps only). ``tests/test_optimizers.py`` runs every registered
optimizer through every model that declares it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple


class Outer(NamedTuple):
    """The gradient a b^T of a matrix block, given by its factors (the attention model's
    dL/dW = g p^T: formed only by an optimizer that needs every entry, :meth:`array`)."""

    a: Any
    b: Any

    def array(self) -> Any:
        from numpy import outer  # lazy: an optimizer's module loads with the config, before NumPy

        return outer(self.a, self.b)


def dense(g: Any) -> Any:
    """A gradient block as an array (an :class:`Outer` formed)."""
    return g.array() if isinstance(g, Outer) else g


class Optimizer(ABC):
    """An update rule for the trained parameter blocks of a model (one instance per stepper).

    ``lr``: the step size; ``weight_decay``: the coefficient the rule applies (0 where the
    model's use of this optimizer has none: ``attnsim.registry.weight_decay``); ``keys``: the
    run's config, for the optimizer's own keys.
    """

    name: ClassVar[str]
    coordinatewise: ClassVar[bool] = (
        False  # its step depends on the basis (exact in a model's own coordinates)
    )
    needs: ClassVar[tuple[str, ...]] = ()  # parameter blocks the rule acts on by name (mirror descent: "p")

    def __init__(self, keys: Any, lr: float, weight_decay: float = 0.0) -> None:
        self.lr, self.weight_decay = float(lr), float(weight_decay)

    @property
    def rests_at_zero(self) -> bool:
        """Whether a zero gradient leaves every parameter where it is (the state is then frozen:
        GD without decay, normalized GD); a rule that still moves (decay, moments) never freezes."""
        return self.weight_decay == 0.0

    def start(self, params: Mapping[str, Any]) -> None:
        """Make the state of its own the rule keeps for these blocks (moments, ...)."""
        return None

    @abstractmethod
    def update(self, params: Mapping[str, Any], grads: Mapping[str, Any], t: int) -> None:
        """Update ``params`` (block name -> float64 array, in place) by ``grads`` (block name ->
        array of the block's shape, or :class:`Outer`), the ``t``-th update (1, 2, ...). Blocks
        are updated in the order of ``grads``; a gradient is that of the state before this update."""

    def snapshot(self) -> Any:
        """A copy of the state of its own, for :meth:`restore` (a stepper's snapshot keeps it)."""
        return None

    def restore(self, snap: Any) -> None:
        return None
