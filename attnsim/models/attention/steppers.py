"""The attention model's steppers: GD segments in the W form and the X W form,
and the gradient-flow vector field, around the kernels of :mod:`.kernels`
(plain Python: the classes validate, coerce and own the kernels' buffers)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import cho_solve, solve_triangular

from ...optimizers.base import Optimizer, Outer
from ...runtime.workspace import PROCESS
from ..base import ClassifierStepper, Observation, Outcome
from .buffers import (
    XW_MAX_TOKENS,
    XW_MIN_LOG_GAP,
    Data,
    attention_code,
    f64,
    loss_kind_code,
    work_for,
)
from .kernels import (
    _flow_rhs,
    _forward,
    _forward_backward,
    _gd_segment,
    _gd_segment_xw,
    _in_loop_records,
    _outputs,
    _relevant_increments,
)
from .linalg import is_identity, made_once, token_gram
from .state_kernels import _sq_dist
from .token_blocks import PassBlocks, pass_blocks


def outputs(
    z: ArrayLike, u: ArrayLike, y: ArrayLike, loss: str = "logistic", attention: str = "softmax"
) -> tuple[np.ndarray, np.ndarray, float]:
    """Scores s (n, T) (softmax or StableMax), outputs f (n,) and mean loss from logits z
    and values u (n, T)."""
    z, u, y = f64(z), f64(u), f64(y)
    n, T = z.shape
    if u.shape != z.shape or y.shape != (n,):
        raise ValueError(f"shapes z {z.shape}, u {u.shape}, y {y.shape} do not match")
    s = np.empty(n * T)
    f = np.empty(n)
    L = _outputs(z.reshape(-1), u.reshape(-1), y, T, loss_kind_code(loss), attention_code(attention), s, f)
    return s.reshape(n, T), f, L


def loss_and_grads(
    X: ArrayLike,
    y: ArrayLike,
    W: ArrayLike,
    p: ArrayLike,
    nu: ArrayLike,
    loss: str = "logistic",
    attention: str = "softmax",
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Mean loss and (grad_W, grad_p, grad_nu) by the kernels; X is (n, T, k)."""
    X, y, W, p, nu = map(f64, (X, y, W, p, nu))
    n, T, k = X.shape
    if W.shape[0] != k or W.shape[1] != p.size or nu.size != k or y.size != n:
        raise ValueError(f"shapes X {X.shape}, W {W.shape}, p {p.shape}, nu {nu.shape} do not match")
    X2 = np.ascontiguousarray(X.reshape(n * T, k))
    data = Data(X2, y, np.zeros(n * T), T, loss_kind_code(loss), attention=attention_code(attention))
    work = work_for(n * T, n, k, p.size)
    L = _forward_backward(data, W, p, nu, work, True, True)
    g = work.g.copy()
    return L, np.outer(g, p), W.T @ g, work.gnu.copy()


class ModelArrays(NamedTuple):
    """One attention problem as its steppers take it.

    X2 : (n*T, k) tokens.  y : (n,) labels.  W : (k, r), p : (r,), nu : (k,).
    T : tokens per sample.  lr : step size.  train : subset of {"W", "p", "nu"}.
    loss : "logistic" or "linear".  rel : (n*T,) relevant-token indicator.
    attention : "softmax" or "stablemax".
    """

    X2: ArrayLike
    y: ArrayLike
    W: ArrayLike
    p: ArrayLike
    nu: ArrayLike
    T: int
    lr: float
    train: Collection[str]
    loss: str
    rel: ArrayLike
    attention: str = "softmax"


class AttentionModel:
    """One attention problem in engine coordinates (:class:`ModelArrays`), with the
    buffers the kernels share. W, p, nu are copies, updated in place by subclasses."""

    def __init__(self, arrays: ModelArrays):
        X2, y, W, p, nu, T, lr, train, loss, rel, attention = arrays
        X2, y = f64(X2), f64(y)
        self.W, self.p, self.nu = f64(W).copy(), f64(p).copy(), f64(nu).copy()
        self.T, self.lr = int(T), float(lr)
        self.train = (*(b in train for b in ("W", "p", "nu")),)
        nT, k = X2.shape
        n, r = y.size, self.p.size
        rel = f64(rel).reshape(-1)
        if self.W.shape != (k, r) or self.nu.size != k or nT != n * self.T or rel.size != nT:
            raise ValueError("AttentionModel: inconsistent shapes")
        self.data = Data(
            X2, y, rel, self.T, loss_kind_code(loss), not PROCESS.forked, attention_code(attention)
        )
        self.work = work_for(nT, n, k, r)
        self.W0 = self.W.copy()

    def observe(
        self, W: np.ndarray | None = None, p: np.ndarray | None = None, nu: np.ndarray | None = None
    ) -> Observation:
        """The training-set view of a state (default: the current one)."""
        W = self.W if W is None else W
        p = self.p if p is None else p
        nu = self.nu if nu is None else nu
        L = _forward(self.data, W, p, nu, self.work, True)  # a kernel: overflow gives inf/NaN, no warning
        return self._observation(L)

    def _observation(self, L: float) -> Observation:
        """The Observation of the outputs the last forward pass left in ``work`` (copies)."""
        n, T, wk = self.data.y.size, self.T, self.work
        return Observation(
            wk.z.reshape(n, T).copy(),
            wk.u.reshape(n, T).copy(),
            wk.s.reshape(n, T).copy(),
            wk.f.copy(),
            float(L),
        )

    def extra_metrics(
        self, W: np.ndarray | None = None, p: np.ndarray | None = None, nu: np.ndarray | None = None
    ) -> dict[str, float]:
        """|p| and |W - W(0)| (engine coordinates preserve both norms)."""
        W = self.W if W is None else f64(W)
        p = self.p if p is None else p
        return {"p_norm": math.sqrt(p @ p), "W_dev": math.sqrt(_sq_dist(W, self.W0))}

    def relevant_increments(self, s: np.ndarray) -> np.ndarray:
        """(n,) s_rel (1 - s_rel) of scores ``s`` (n, T)."""
        out = np.empty(self.data.y.size)
        _relevant_increments(f64(s).reshape(-1), self.data.rel, self.T, out, False)
        return out


FUSED = ("gd", "normalized")  # the optimizers the GD kernels run themselves


class Segment(AttentionModel, ClassifierStepper):
    """Gradient descent: repeated :func:`_gd_segment` calls; the kernel keeps the
    in-loop records ``fit_since`` and ``S_acc`` (see its docstring)."""

    def __init__(self, arrays: ModelArrays, optimizer: str = "gd") -> None:
        super().__init__(arrays)
        if optimizer not in FUSED:  # PluginSegment for the others
            raise ValueError(f"optimizer: {optimizer!r} (gd or normalized)")
        self.normalized = optimizer == "normalized"
        self._init_records(self.data.y.size)

    def _advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        """Apply ``nsteps`` updates starting at state ``step0``; (status, step)."""
        st, step = _gd_segment(
            self.data,
            self.W,
            self.p,
            self.nu,
            self.train,
            self.lr,
            self.normalized,
            step0,
            nsteps,
            self.work,
            self.fit_since,
            self.S_acc,
        )
        return int(st), int(step)

    def state(self) -> dict[str, np.ndarray]:
        return {"W": self.W, "p": self.p, "nu": self.nu}


class PluginSegment(Segment):
    """Steps of a plug-in optimizer (:mod:`attnsim.optimizers`: AdamW, l_p mirror descent, ...)
    in the W form: each step a kernel call for the loss and the gradients of the state, then the
    optimizer's update of each trained block (W by the factors of g p^T: :class:`Outer`). A step
    costs O(k r) here; the loop's ~10 us per step in Python does not show at the dense engine's
    sizes. The optimizer's own state (AdamW's moments) is part of what a snapshot keeps."""

    def __init__(self, arrays: ModelArrays, optimizer: Optimizer) -> None:
        super().__init__(arrays)
        self.opt = optimizer
        trained = dict(zip(("W", "p", "nu"), self.train))
        self.opt.start({k: v for k, v in self.state().items() if trained[k]})

    def _advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        """As :func:`_gd_segment`: FINISHED, DIVERGED, and FROZEN when a zero gradient leaves
        the state where it is (the optimizer ``rests_at_zero``; AdamW's moments still move it)."""
        train_W, train_p, train_nu = self.train
        wk = self.work
        for step in range(step0, step0 + nsteps):
            L = _forward_backward(self.data, self.W, self.p, self.nu, wk, train_nu or step == step0, train_nu)
            if not math.isfinite(L):
                return Outcome.DIVERGED, step
            _in_loop_records(self.data, wk, step, self.fit_since, self.S_acc)
            grads = {}
            if train_W:
                grads["W"] = Outer(wk.g, self.p.copy())  # of the state before p moves
            if train_p:
                np.dot(wk.g, self.W, wk.gp)  # p's gradient at this state, before W moves
                grads["p"] = wk.gp
            if train_nu:
                grads["nu"] = wk.gnu
            if self.opt.rests_at_zero and not (np.any(wk.g) or (train_nu and np.any(wk.gnu))):
                return Outcome.FROZEN, step
            self.opt.update(self.state(), grads, step + 1)  # the update's number, as torch counts it
        return Outcome.FINISHED, step0 + nsteps

    def _snapshot_extra(self) -> object:
        return self.opt.snapshot()

    def _restore_extra(self, extra: object) -> None:
        self.opt.restore(extra)


_NO_BLOCKS = PassBlocks(np.zeros(0), np.zeros((0, 4), dtype=np.int64), np.zeros((0, 0)))


class SegmentXW(Segment):
    """Gradient descent in the X W form (module docstring): the kernel updates
    B = X W and p; :meth:`state` gives an :class:`XWState` (W rebuilt from B
    only if asked for), :meth:`observe` and :meth:`extra_metrics` work from B.
    nu must be fixed. Build it with :func:`make_segment`, which checks that
    K = X X^T is well conditioned."""

    def __init__(
        self,
        arrays: ModelArrays,
        K: np.ndarray | None = None,
        chol: np.ndarray | None = None,
        optimizer: str = "gd",
        shared: dict | None = None,
    ):
        super().__init__(arrays, optimizer=optimizer)
        if self.train[2]:
            raise ValueError("SegmentXW: nu must be fixed (train without nu)")
        X = self.data.X2
        self.fixed_W = not self.train[0]  # W = W(0) throughout: B = B(0), and K is never needed
        if self.fixed_W:
            self.K, self.chol = np.zeros((0, 0)), None
        else:
            self.K, self.chol = token_gram(X) if K is None else (K, chol)
            if self.chol is None:
                raise ValueError("SegmentXW: K = X X^T is singular or ill-conditioned")
        # B(0) = X W(0): X itself when W(0) is the identity (W(0) = I in the reduced engine);
        # never written (B is a copy of it), so a twin's stepper takes the run's (``shared``)
        self.B0 = (
            X
            if is_identity(self.W0)
            else made_once(shared, "B0", (X, arrays.W), lambda: np.ascontiguousarray(X @ self.W0))
        )
        self.B = self.B0 if self.fixed_W else self.B0.copy()  # (W fixed: B is never written)
        # W fixed: B as the pass reads it (its nonzero part, when triangular); else unused
        self.blocks = pass_blocks(self.B, self.T) if self.fixed_W else _NO_BLOCKS
        self.v = np.empty(X.shape[0])
        np.dot(X, self.nu, self.work.u)
        self._fresh = True  # self.W is the W of self.B

    def _advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        self._fresh = self.fixed_W
        st, step = _gd_segment_xw(
            self.data,
            self.B,
            self.K,
            self.p,
            self.train[:2],
            self.lr,
            self.normalized,
            step0,
            nsteps,
            self.work,
            self.v,
            self.fit_since,
            self.S_acc,
            self.blocks,
        )
        return int(st), int(step)

    def _back(self, dB: np.ndarray) -> np.ndarray:
        """X^T K^-1 dB: the change of W (or of W p) that changes B (or B p) by dB."""

        return self.data.X2.T @ cho_solve((self.chol, True), dB, check_finite=False)

    def rebuild(self, B: np.ndarray) -> np.ndarray:
        """The W of B: W(0) + X^T K^-1 (B - B(0)) (a k x k solve and product: 1-2 ms at k = 162)."""
        return self.W0 + self._back(B - self.B0)

    def q_of(self, B: np.ndarray, p: np.ndarray) -> np.ndarray:
        """W p of the W of B, without W: W(0) p + X^T K^-1 (B p - B(0) p)."""
        return self.W0 @ p + self._back(B @ p - self.B0 @ p)

    def state(self) -> XWState:
        """The current state, detached from later steps; W is rebuilt only if asked for."""
        if self._fresh:  # a W that never changes is shared, not copied
            W = self.W if self.fixed_W else self.W.copy()
            return XWState(self, None, self.p.copy(), self.nu.copy(), W=W)
        return XWState(self, self.B.copy(), self.p.copy(), self.nu.copy())

    def observe(
        self, W: np.ndarray | None = None, p: np.ndarray | None = None, nu: np.ndarray | None = None
    ) -> Observation:
        if W is not None:
            return super().observe(W, p, nu)
        wk = self.work
        np.dot(self.B, self.p, wk.z)  # z = X W p = B p; wk.u holds X nu (nu is fixed)
        L = _outputs(wk.z, wk.u, self.data.y, self.T, self.data.loss_kind, self.data.attention, wk.s, wk.f)
        return self._observation(L)

    def final_state(self) -> XWState:
        return self.state()  # already detached from later steps

    def extra_metrics(
        self, W: np.ndarray | None = None, p: np.ndarray | None = None, nu: np.ndarray | None = None
    ) -> dict[str, float]:
        if W is not None or self._fresh:
            return super().extra_metrics(W, p, nu)

        # |W - W(0)|_F^2 = tr(dB^T K^-1 X X^T K^-1 dB) = |L^-1 dB|_F^2, K = L L^T
        Y = solve_triangular(self.chol, self.B - self.B0, lower=True, check_finite=False).ravel()
        return {"p_norm": math.sqrt(self.p @ self.p), "W_dev": math.sqrt(Y @ Y)}

    def snapshot(self) -> tuple:
        B = None if self.fixed_W else self.B.copy()
        return B, self.p.copy(), self.nu.copy(), self.fit_since.copy(), self.S_acc.copy()

    def restore(self, snap: tuple) -> None:
        for dst, src in zip((self.B, self.p, self.nu, self.fit_since, self.S_acc), snap):
            if src is not None:
                dst[...] = src
        self._fresh = self.fixed_W


class XWState(Mapping):
    """A state of the X W form ("W", "p", "nu"), detached from later steps:
    W is rebuilt from B when first asked for (a run's last log point usually
    needs only q = W p, :meth:`q`)."""

    def __init__(
        self, seg: SegmentXW, B: np.ndarray | None, p: np.ndarray, nu: np.ndarray, W: np.ndarray | None = None
    ):
        self._seg, self._B, self._W = seg, B, W
        self._arrays = {"p": p, "nu": nu}

    def __getitem__(self, key: str) -> np.ndarray:
        if key != "W":
            return self._arrays[key]
        if self._W is None:
            self._W = self._seg.rebuild(self._B)
        return self._W

    def __iter__(self):
        return iter(("W", "p", "nu"))

    def __len__(self) -> int:
        return 3

    def q(self) -> np.ndarray:
        """W p (engine coordinates)."""
        p = self._arrays["p"]
        return self._W @ p if self._W is not None else self._seg.q_of(self._B, p)


def state_q(state: Mapping) -> np.ndarray:
    """q = W p of a stepper's state (an :class:`XWState` gives it without rebuilding W, a
    state with a "q" entry holds it)."""
    if isinstance(state, XWState):
        return state.q()
    return state["q"] if "q" in state else state["W"] @ state["p"]


def make_segment(
    arrays: ModelArrays,
    log_gap: float,
    optimizer: str | Optimizer = "gd",
    shared: dict | None = None,
) -> Segment:
    """The GD stepper of a problem: the X W form (:class:`SegmentXW`) when nu
    is fixed and there are no more tokens than rows of W (n*T <= k, at most
    ``XW_MAX_TOKENS``), and, if W is trained, K = X X^T is well conditioned and
    log points are on average ``log_gap`` >= ``XW_MIN_LOG_GAP`` steps apart (a log
    point costs what the form saves in about 70 steps: W is rebuilt from B; with W
    fixed there is nothing to rebuild, and a step reads B once where the W form reads
    X once and W twice); otherwise the W form (:class:`Segment`). ``shared``: a dict of the
    problem's in which K, its factor and B(0) are kept for the next stepper of the same
    X and W(0) (a run's clean-label twin). ``optimizer``: "gd" or "normalized" (the fused kernels),
    or a plug-in :class:`attnsim.optimizers.base.Optimizer` (:class:`PluginSegment`, the W form)."""
    arrays = arrays._replace(X2=f64(arrays.X2))
    nT, k = arrays.X2.shape
    train = arrays.train
    if isinstance(optimizer, Optimizer):  # a plug-in's update of each block: the W form
        return PluginSegment(arrays, optimizer)
    if "nu" not in train and nT <= min(k, XW_MAX_TOKENS):
        if "W" not in train:  # p alone: B = X W(0) never changes, no K to form, no W to rebuild
            return SegmentXW(arrays, optimizer=optimizer, shared=shared)
    if "nu" not in train and log_gap >= XW_MIN_LOG_GAP and nT <= min(k, XW_MAX_TOKENS):
        K, chol = made_once(shared, "gram", (arrays.X2,), lambda: token_gram(arrays.X2))
        if chol is not None:
            return SegmentXW(arrays, K=K, chol=chol, optimizer=optimizer, shared=shared)
    return Segment(arrays, optimizer=optimizer)


_F64 = np.dtype(np.float64)


class EvaluationBudgetExceeded(RuntimeError):
    """The flow solver evaluated the vector field more often than allowed."""


class FlowField(AttentionModel):
    """The gradient-flow vector field of one problem, for scipy's solve_ivp.

    ``pack``/``unpack`` convert between (W, p, nu, S) and the flat state.
    At most ``max_evals`` evaluations per field (:class:`EvaluationBudgetExceeded`
    after that): when the logits are huge the adaptive step size can shrink to
    a tiny fraction of t and the solver would otherwise crawl for hours.
    """

    max_evals = 500_000  # legitimate flows to 1e14 steps need 5 000 - 15 000
    # a span crossed less than STALL_FRACTION of after STALL_EVALS evaluations in it stalls then (a
    # legitimate flow crosses a span in a few thousand)
    STALL_EVALS, STALL_FRACTION = 10_000, 1e-9

    def __init__(self, arrays: ModelArrays) -> None:
        super().__init__(arrays)
        self.evals = 0
        self._rhs = _flow_rhs
        self.span, self.span_evals = None, 0  # the solver's span (begin), evaluations before it

    def begin(self, span: tuple[float, float]) -> None:
        """The solver starts integrating over ``span`` (the stall check's reference)."""
        self.span, self.span_evals = span, self.evals

    def pack(self, W: np.ndarray, p: np.ndarray, nu: np.ndarray, S: np.ndarray) -> np.ndarray:
        tw, tp, tn = self.train
        parts = ([W.ravel()] if tw else []) + ([p] if tp else []) + ([nu] if tn else []) + [S]
        return np.concatenate(parts)

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(W, p, nu, S) views of a flat state (untrained blocks: the fixed arrays)."""
        k, r = self.W.shape
        tw, tp, tn = self.train
        o = 0
        W = theta[: k * r].reshape(k, r) if tw else self.W
        o += k * r if tw else 0
        p = theta[o : o + r] if tp else self.p
        o += r if tp else 0
        nu = theta[o : o + k] if tn else self.nu
        o += k if tn else 0
        return W, p, nu, theta[o:]

    def __call__(self, t: float, theta: np.ndarray) -> np.ndarray:
        self.evals += 1
        if self.evals > self.max_evals:
            raise EvaluationBudgetExceeded(t)
        if self.evals - self.span_evals == self.STALL_EVALS and self.span is not None:
            a, b = self.span
            if t - a < self.STALL_FRACTION * (b - a):
                raise EvaluationBudgetExceeded(t)
        if not (isinstance(theta, np.ndarray) and theta.dtype == _F64 and theta.flags.c_contiguous):
            theta = np.ascontiguousarray(theta, dtype=np.float64)  # the solver's states already are
        out = np.empty(theta.shape)
        # X nu once while nu is fixed (it is in every evaluation's work.u after that)
        self._rhs(
            self.data, theta, self.W, self.p, self.nu, self.train, self.lr, self.work, self.evals == 1, out
        )
        return out


def warmup() -> None:
    """Compile (or load from the cache) the kernels of this module on a tiny
    problem, with the argument types real runs use."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 3, 4))
    y = np.array([1.0, -1.0])
    W, p, nu = rng.standard_normal((4, 4)), rng.standard_normal(4), rng.standard_normal(4)
    outputs(X[:, :, 0], X[:, :, 1], y)
    seg = Segment(ModelArrays(X.reshape(6, 4), y, W, p, nu, 3, 1e-3, ("W", "p"), "logistic", np.ones(6)))
    seg.advance(0, 1)
    seg.relevant_increments(seg.observe().s)
