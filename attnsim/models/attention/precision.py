"""The precision twin (SPEC §16): the attention model trained beside the run in
float32 or bfloat16, as PyTorch's CPU code computes it.

:class:`PrecisionTwin` is a second stepper of the same problem (dense engine:
the twin's W is the d x d matrix torch holds). Its kernels
(:mod:`.precision_kernels`) follow the official loop's graph and round every
operation to the twin's format; see their docstring for which operation
accumulates in which format. The driver, the recorder and the population
metrics see it as any stepper: its states are handed out in float64 (the
values the format holds, exactly), so the population error of the twin's
parameters is as exact as the run's.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..base import ClassifierStepper, Observation, Outcome
from ..formats import FORMATS, UNIT_ROUNDOFF, to_format  # noqa: F401  (to_format: the twin's API)
from .precision_kernels import ADAMW, GD, _bf16, _forward, _twin_steps
from .state_kernels import _sq_dist
from .steppers import state_q

GRAPHS = ("qform", "official")  # z = X (W p), or the official loop's (X W) p


class TwinWork(NamedTuple):
    """The buffers every twin step overwrites, in the twin's dtype."""

    A: np.ndarray  # (n*T, d) X W
    z: np.ndarray  # (n*T,) logits
    u: np.ndarray  # (n*T,) token values X nu
    s: np.ndarray  # (n*T,) scores
    m: np.ndarray  # (n*T,) s u
    f: np.ndarray  # (n,) outputs
    e: np.ndarray  # (n,) exp(-y f)
    b: np.ndarray  # (n,) 1 + e
    lterm: np.ndarray  # (n,) log b
    gb: np.ndarray  # (n,) dL/df
    gs: np.ndarray  # (n*T,) dL/ds
    gu: np.ndarray  # (n*T,) dL/du
    gz: np.ndarray  # (n*T,) dL/dz
    gp: np.ndarray  # (d,)
    gnu: np.ndarray  # (d,)
    gA: np.ndarray  # (n*T, d) dL/dA = dz p^T
    gW: np.ndarray  # (d, d) X^T dA (qform: gq p^T)
    q: np.ndarray  # (d,) W p (qform)
    gq: np.ndarray  # (d,) X^T dz (qform)
    row: np.ndarray  # (d,) scratch of the fused W pass (qform)
    w: np.ndarray  # (n*T,) StableMax's weights z + 1 or 1 / (1 - z)
    S: np.ndarray  # (n,) StableMax's sums of weights
    gS: np.ndarray  # (n,) their gradients
    scalar: np.ndarray  # (1,) the mean loss, then 1 / n
    consts: np.ndarray  # (3,) 0, 1 and StableMax's 1e-30 in the twin's type


def twin_work(
    nT: int, n: int, d: int, dtype, train_W: bool, qform: bool, fused: bool, stable: bool, bf: bool = False
) -> TwinWork:
    shapes = dict.fromkeys(("z", "u", "s", "m", "gs", "gu", "gz"), (nT,))
    shapes |= dict.fromkeys(("f", "e", "b", "lterm", "gb"), (n,))
    shapes |= {"w": (nT if stable else 0,), "S": (n if stable else 0,), "gS": (n if stable else 0,)}
    shapes |= dict.fromkeys(("gp", "gnu", "q", "gq", "row"), (d,))
    shapes["A"] = (0, d) if qform else (nT, d)  # X W: the official graph only
    shapes["gA"] = (nT, d) if train_W and not qform else (0, d)  # dA and dW only when W trains
    shapes["gW"] = (d, d) if train_W and not fused else (0, 0)
    shapes["scalar"] = (1,)
    arrays = {name: np.zeros(shape, dtype=dtype) for name, shape in shapes.items()}
    consts = np.array([0, 1, 1e-30], dtype=dtype)
    if bf:
        _bf16(consts)
    return TwinWork(**arrays, consts=consts)


class PrecisionTwin(ClassifierStepper):
    """GD or AdamW on the attention model in the format ``fmt`` (dense engine).

    X2 : (n*T, d) tokens; y : (n,) labels; W0 : (d, d), p0, nu0 : (d,) the run's
    initial state (rounded to the format here); rel : (n*T,) relevant-token
    indicator; train : subset of {"W", "p", "nu"}; adam : (beta1, beta2, eps,
    weight_decay) or None for GD; graph : "qform" or "official"; attention : "softmax"
    or "stablemax"; problem : the problem
    in the twin's d coordinates that measures its states (None: the run's own);
    run_q_of : a run state's q in those coordinates (default: its q as it is).
    ``first_saturated`` : the first state in which some sample's largest score is
    exactly 1 in the format (-1 until one)."""

    def __init__(
        self,
        X2,
        y,
        W0,
        p0,
        nu0,
        T,
        rel,
        train,
        lr,
        fmt,
        adam=None,
        graph="qform",
        attention="softmax",
        problem=None,
        run_q_of=None,
    ):
        dtype, bf = FORMATS[fmt]
        self.fmt, self.T, self.lr = fmt, int(T), float(lr)
        self.unit_roundoff = UNIT_ROUNDOFF[fmt]
        self.X, self.y = to_format(X2, fmt), to_format(y, fmt)
        self.W, self.p, self.nu = to_format(W0, fmt), to_format(p0, fmt), to_format(nu0, fmt)
        self.W0 = self.W.copy()
        n, d = self.y.size, self.p.size
        tW, tp, tnu = ("W" in train), ("p" in train), ("nu" in train)
        if graph not in GRAPHS:
            raise ValueError(f"graph: {graph!r} (one of {', '.join(GRAPHS)})")
        self.graph = graph
        fused = graph == "qform" and adam is None  # W's gradient and update in one pass (no d x d dW)
        stable = attention == "stablemax"
        self.wk = twin_work(self.X.shape[0], n, d, dtype, tW, graph == "qform", fused, stable, bf)
        opt = GD if adam is None else ADAMW
        self.flags = np.array([tW, tp, tnu, bf, opt, graph == "qform", stable], dtype=np.int64)
        b1, b2, eps, wd = adam if adam is not None else (0.9, 0.999, 1e-8, 0.0)
        self.hyper = np.array([lr, b1, b2, eps, wd], dtype=np.float64)
        self.scal = np.zeros(7, dtype=dtype)
        shapes = ((d, d), (d, d), d, d, d, d) if adam is not None else ((0, 0), (0, 0), 0, 0, 0, 0)
        self.moments = tuple(np.zeros(s, dtype=dtype) for s in shapes)
        self.marks = np.array([-1, 0, -1], dtype=np.int64)
        self.rel_flat = np.ascontiguousarray(rel, dtype=np.float64).reshape(-1)
        self._init_records(n, self.rel_flat, self.T)
        self.run_q: list[np.ndarray] = []  # the run's q = W p at each log point (watch_run)
        self.twin_q: list[np.ndarray] = []  # the twin's, at each of its log points
        self.cancelled = False  # set from another thread: the next span ends the twin
        self.run_q_of = state_q if run_q_of is None else run_q_of  # a run state's q in the twin's coordinates
        self.problem = problem  # the problem in the twin's d coordinates (None: the run's)
        # the state in float64 (W's copy in one reused array: a fresh 32 MB one per log point at
        # d = 2000 cost its page faults), made once per state and shared by the log point's readers
        self._made, self._moved = None, 0
        self._W64 = np.empty(self.W.shape)
        self._W0_64 = None

    def watch_run(self, state) -> None:
        """The run's state at its next log point: its q is kept to measure the twin's
        distance from it at the same log point."""
        self.run_q.append(np.array(self.run_q_of(state), dtype=np.float64))

    def watched(self) -> list[np.ndarray]:
        """What :meth:`watch_run` kept of the run: its q at each log point."""
        return self.run_q

    def rewatch(self, run_q: list[np.ndarray]) -> None:
        """Take a kept run's :meth:`watched` as if this twin had watched that run."""
        self.run_q = run_q

    @property
    def first_saturated(self) -> int:
        return int(self.marks[0])

    def _advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        self._moved += 1
        if self.cancelled:
            self.detail = f"the {self.fmt} twin was stopped at step {step0} (its run ended)"
            return Outcome.STALLED, int(step0)
        if self.flags[4] == GD:
            self.scal[0] = self.lr
            if self.flags[3]:  # torch rounds SGD's alpha to a bfloat16 tensor's type
                _bf16(self.scal[:1])
        status, step = _twin_steps(
            self.X,
            self.y,
            self.W,
            self.p,
            self.nu,
            self.wk,
            self.flags,
            self.hyper,
            self.scal,
            self.moments,
            self.rel_flat,
            self.T,
            self.fit_since,
            self.S_acc,
            self.marks,
            int(step0),
            int(nsteps),
        )
        if status == 1:
            self.detail = f"diverged at step {step}: the {self.fmt} twin's training loss is not finite"
            self.detail += self.nan_note()
        return (Outcome.FINISHED, Outcome.DIVERGED, Outcome.FROZEN)[status], int(step)

    def nan_note(self) -> str:
        """Why the twin's gradient became NaN when the format, not the dynamics, made it so."""
        if self.marks[2] < 0:
            return ""
        return (
            f" (StableMax's gradient at step {self.marks[2]} is NaN, as torch's: a logit of exactly 1 "
            "makes the branch torch.where discards, 1 / (1 - z + 1e-30), overflow when squared in its "
            "backward)"
        )

    def observe(self) -> Observation:
        wk = self.wk
        bf, qform, stable = bool(self.flags[3]), bool(self.flags[5]), bool(self.flags[6])
        L = _forward(self.X, self.y, self.W, self.p, self.nu, wk, True, True, bf, self.T, qform, stable)
        n, T = self.y.size, self.T
        as64 = lambda a: np.asarray(a, dtype=np.float64).reshape(n, T)  # noqa: E731
        return Observation(as64(wk.z), as64(wk.u), as64(wk.s), wk.f.astype(np.float64), float(L))

    def state(self) -> dict[str, np.ndarray]:
        """W, p, q = W p and nu as float64 arrays holding the twin's values (q in float64:
        what the population metrics evaluate is the twin's parameters, exactly). W is an
        array the next state's W overwrites (:meth:`final_state` copies it)."""
        if self._made is None or self._made[0] != self._moved:
            np.copyto(self._W64, self.W)
            p, nu = self.p.astype(np.float64), self.nu.astype(np.float64)
            self._made = (self._moved, {"W": self._W64, "p": p, "q": self._W64 @ p, "nu": nu})
        return dict(self._made[1])

    def final_state(self) -> dict[str, np.ndarray]:
        out = self.state()
        out["W"] = out["W"].copy()
        return out

    def _restore_arrays(self, arrays) -> None:
        for k in ("W", "p", "nu"):
            getattr(self, k)[...] = arrays[k]
        self._made = None

    def _snapshot_extra(self):
        return tuple(m.copy() for m in self.moments), self.marks.copy()

    def _restore_extra(self, extra) -> None:
        moments, marks = extra
        for dst, src in zip(self.moments, moments):
            dst[...] = src
        self.marks[...] = marks

    def extra_metrics(self) -> dict[str, float]:
        """|p|, |W - W(0)| and the fraction of samples whose largest score is exactly 1
        (of the state the recorder has just observed)."""
        st = self.state()
        if self._W0_64 is None:
            self._W0_64 = self.W0.astype(np.float64)
        s = self.wk.s.reshape(self.y.size, self.T)
        out = {
            "p_norm": math.sqrt(st["p"] @ st["p"]),
            "W_dev": math.sqrt(_sq_dist(st["W"], self._W0_64)),
            "saturated_fraction": float(np.mean(s.max(axis=1) == 1)),
        }
        self.twin_q.append(st["q"])  # beside the run's, once both are done (q_rel_dev)
        return out

    def q_rel_dev(self) -> np.ndarray | None:
        """|q_twin - q_run| / |q_run| at each log point (0 where both are 0; None unless the
        run's q was watched at every log point)."""
        if len(self.run_q) != len(self.twin_q) or not self.twin_q:
            return None
        dev = np.empty(len(self.twin_q))
        for j, (q_twin, q_run) in enumerate(zip(self.twin_q, self.run_q)):
            gap, scale = float(np.linalg.norm(q_twin - q_run)), float(np.linalg.norm(q_run))
            dev[j] = gap / scale if scale > 0 else (0.0 if gap == 0 else math.inf)
        return dev
