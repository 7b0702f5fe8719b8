"""The precision twin's record in a result (SPEC §16): its logged arrays under the
prefix ``twin_``, and the ``precision`` section of result.json, which compares the
twin, trained in float32 or bfloat16, with the exact run beside it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._meta import SimulationError

DEPARTURE = 0.01  # the twin has departed once its train loss or q = W p differs by 1 % relative

# the twin's own numbers beside the run's (each a key of the twin's final metrics)
_FINAL_KEYS = (
    "pop_error",
    "pop_error_se",
    "pop_error_resolved",
    "test_acc",
    "train_acc",
    "regime",
    "generalized",
    "excess_error",
    "excess_error_se",
    "n_fitted_clean",
    "n_fitted_noisy",
)


def departure_step(run: dict[str, np.ndarray], twin: dict[str, np.ndarray]) -> int | None:
    """The first logged step at which the twin's train loss, or its q = W p, differs
    from the run's by ``DEPARTURE`` relative (None: never on the log grid)."""
    loss, twin_loss = run["train_loss"], twin["train_loss"]
    m = min(loss.size, twin_loss.size)
    off = np.abs(twin_loss[:m] - loss[:m]) > DEPARTURE * np.abs(loss[:m])
    if "q_rel_dev" in twin:
        off |= twin["q_rel_dev"][:m] > DEPARTURE
    hit = np.flatnonzero(off)
    return int(run["step"][hit[0]]) if hit.size else None


def twin_arrays(twin: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The twin's logged arrays under the run's names with the prefix ``twin_``
    (its log grid is the run's: ``step`` is not repeated)."""
    return {f"twin_{k}": v for k, v in twin.items() if k not in ("step", "y", "y_clean", "roles")}


def section(
    twin: Any, traj: Any, run_arrays: dict[str, np.ndarray], final: dict[str, Any], times: dict[str, Any]
) -> dict[str, Any]:
    """The ``precision`` section: the twin's format, its first saturated step, the
    fraction of samples saturated at the end, the step it departs from the run and
    where it stopped moving, its selection and memorization times, regime and population error
    (``final``, ``times``: the twin's own final metrics and measured event times)."""
    arrays = traj.arrays
    sat = arrays.get("saturated_fraction")
    out: dict[str, Any] = {
        "dtype": twin.fmt,
        "unit_roundoff": twin.unit_roundoff,
        "first_saturated_step": None if twin.first_saturated < 0 else twin.first_saturated,
        "saturated_fraction": None if sat is None else float(sat[-1]),
        "departure_step": departure_step(run_arrays, arrays),
        "stopped_at": traj.frozen_at,
        "status": traj.status,
        "t_select": times.get("t_select"),
        "t_memorize": times.get("t_memorize"),
    }
    out.update({k: final[k] for k in _FINAL_KEYS if k in final})
    out["warnings"] = list(dict.fromkeys(traj.warnings))
    return out


def frozen_message(fmt: str, step: int, saturated: float) -> str:
    """The twin's own account of a state no update moves."""
    why = (
        f"{saturated:.0%} of the training samples have a score of exactly 1, whose gradients vanish, "
        "and the others' updates fall below half a unit of the entries they add to"
        if saturated > 0
        else "no score is 1: every update falls below half a unit of the entry it adds to (the "
        "absorption is in the parameters, not in the softmax)"
    )
    return (
        f"precision twin ({fmt}): stops moving after step {step:g}: every update rounds away in {fmt} "
        f"({why}); later steps keep that state"
    )


def train(twin: Any, train_on: Callable, problem: Any) -> tuple:
    """The twin trained along the run's log grid with the run's observers (its population
    metrics evaluate the twin's parameters, in the twin's own problem's coordinates):
    ``train_on(problem, stepper)`` is the run's training, quiet (its warnings are returned,
    never warned: it may run on another thread). Returns (twin, trajectory or None, the
    reason it has none: a twin that diverges ends alone, the run keeps its results)."""
    try:
        traj = train_on(twin.problem or problem, twin)
    except SimulationError as exc:
        note = twin.nan_note()  # the format's own reason, when it has one
        text = str(exc) if note in str(exc) else f"{exc}{note}"
        return twin, None, f"precision twin ({twin.fmt}): {text}"
    if traj.frozen_at is not None:
        sat = traj.arrays.get("saturated_fraction", np.zeros(1))[-1]
        traj.warnings = [frozen_message(twin.fmt, traj.frozen_at, float(sat))]
    else:
        # the recorder's words are a float64 run's: its scores were the twin's format's
        said_of = lambda w: w.replace("in float64", f"in {twin.fmt}")  # noqa: E731
        traj.warnings = [f"precision twin ({twin.fmt}): {said_of(w)}" for w in traj.warnings]
    return twin, traj, None


TWIN_KEYS = ("precision_twin", "precision_graph")  # the twin's own config keys: the exact run ignores them


def without_twin(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config's keys but the precision twin's own: what the exact run beside it depends on."""
    return {k: v for k, v in config.items() if k not in TWIN_KEYS}


def exact_key(cfg: Any, save_scores: bool) -> str:
    """The exact run beside a precision twin as a key: :func:`without_twin` of its config,
    and whether scores are saved."""
    return json.dumps([without_twin(cfg.to_dict()), bool(save_scores)], sort_keys=True)


def watched(twin: Any, problem: Any) -> tuple:
    """What a kept exact run hands the next twin: the twin's format, what it saw of the
    run at each log point, and the facts the run's stepper wrote in ``problem.info``."""
    return twin.fmt, twin.watched(), dict(problem.info)


def beside_kept(twin: Any, kept: tuple, train_on: Callable, problem: Any) -> tuple:
    """:func:`train` of a twin beside an exact run kept from a point of the same config
    with another format (nothing of the run steps again: its twin's view of it is
    :func:`watched`'s), on this thread; the engine's facts are the run's, with a note
    that it was trained once for both."""
    fmt, seen, info = kept
    twin.rewatch(seen)
    out = train(twin, train_on, problem)
    problem.info.update(info)
    problem.info["exact_run"] = (
        f"shared: trained once in this process, beside the {fmt} twin of the same config (the exact "
        "run does not depend on its twin); elapsed_s counts this twin alone"
    )
    return out


class Beside:
    """The twin trained beside the run (:class:`attnsim.runtime.threads.Beside`: on a thread
    of its own, or after the run with one thread, where each run computes its population
    metrics on its own thread and two at once would take turns on one core); ``result()``
    gives :func:`train`'s value, ``cancel()`` stops the twin at its next span."""

    def __init__(self, twin: Any, train_on: Callable, problem: Any):
        from .runtime.threads import Beside as OnThread  # lazy: only a twin's run gets here

        self.twin = twin
        self._job = OnThread(lambda: train(twin, train_on, problem))

    def result(self) -> tuple:
        return self._job.result()

    def cancel(self) -> None:
        """Stop the twin at its next span (the run failed), and wait for it."""
        self.twin.cancelled = True
        self._job.abandon()


def assemble(trained: tuple, run_arrays: dict, final_of, times_of) -> dict[str, Any]:
    """The ``precision`` section, the twin's arrays added to ``run_arrays`` under ``twin_``;
    ``final_of(arrays)`` and ``times_of(traj)`` compute a trajectory's final metrics and
    measured event times as the run's own."""
    twin, traj, reason = trained
    if traj is None:
        return {"dtype": twin.fmt, "status": "failed", "reason": reason, "warnings": [reason]}
    dev = twin.q_rel_dev()  # |q_twin - q| / |q| at each log point, once both runs are done
    if dev is not None:
        traj.arrays["q_rel_dev"] = dev
    arrays = dict(traj.arrays)
    arrays["fit_step"] = traj.fit_step
    arrays["y"], arrays["y_clean"] = run_arrays["y"], run_arrays["y_clean"]
    out = section(twin, traj, run_arrays, final_of(arrays), times_of(traj))
    run_arrays.update(twin_arrays(arrays))
    return out
