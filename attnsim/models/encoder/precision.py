"""The encoder's precision twin (SPEC §16): the one-layer encoder trained beside the
run in float32 or bfloat16, operation by operation in the order of the official
``main_one_layer.py`` graph and its autograd backward.

The run's own kernels take the CLS path through algebra of their own (kappa = W_k^T q,
the attention-weighted mean of the normalized tokens); the twin instead computes what
torch computes for the CLS output: LN1 of every token, q of the CLS token and k, v of
every token (one product with W_qkv), q k^T times d^-1/2, softmax, the attention's
mean of v, the residual, LN2, the MLP (addmm, exact GELU, addmm), the residual, LNf
and the head; then the loss ``mean(log(1 + exp(-y f)))``. The rows of positions other
than the CLS token after the attention never reach the output (their gradients are
exactly 0), so the twin does not form them.

Rounding follows torch's operation boundaries: every product of matrices is a
float32 BLAS product (float32 sums; in bfloat16 its result is rounded), every
elementwise operation rounds once, and the one-kernel operations of torch (LayerNorm,
softmax, GELU and their backward kernels) compute inside in float64 here and round
their results once (torch computes inside in float32: the two differ by float32
rounding of their internals, not of their results). SGD's ``add_`` and AdamW's
tensor operations round as the attention twin's do (:mod:`attnsim.models.attention.precision_kernels`).
Plain NumPy: the twin's cost is its products, O(n T d^2) per step, as torch's.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

from ..base import ClassifierStepper, Observation, Outcome
from ..formats import FORMATS, UNIT_ROUNDOFF, round_bf16, to_format

LN_EPS = 1e-5


class EncoderTwin(ClassifierStepper):
    """GD or AdamW on the encoder in the format ``fmt``.

    X : (n, T, d) tokens; y : (n,) labels; P0 : the run's initial parameters (rounded
    to the format here); lr; skip; rel : (n, T) relevant-token indicator; adam :
    (beta1, beta2, eps, weight_decay) or None for SGD. ``first_saturated``: the first
    state in which the CLS query's largest attention score of some sample is exactly 1
    in the format (-1 until one)."""

    problem = None  # its states are measured by the run's own evaluator

    def __init__(self, X, y, P0, lr, skip, fmt, rel, adam=None):
        self.fmt, self.lr, self.skip = fmt, float(lr), bool(skip)
        self.dtype, self.bf = FORMATS[fmt]
        self.unit_roundoff = UNIT_ROUNDOFF[fmt]
        self.X, self.y = to_format(X, fmt), to_format(y, fmt)
        n, T, d = self.X.shape
        self.n, self.T, self.d = n, T, d
        self.P = {k: to_format(v, fmt) for k, v in P0.items()}
        self.adam = adam
        self.moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in self.P.items()} if adam else {}
        self._init_records(n, rel, T)
        self.marks = [-1]
        self.cancelled = False
        self._cache = None

    # -- rounding ----------------------------------------------------------------------------------

    def _r(self, a) -> np.ndarray:
        """A result in the twin's format: cast to its type (one rounding), then bfloat16's."""
        if not self.bf:
            return np.asarray(a, dtype=self.dtype)
        return round_bf16(np.array(a, dtype=self.dtype))

    def _c(self, x: float):
        """A Python number as torch casts it when it meets one of the twin's tensors."""
        return self._r(np.array(x, dtype=np.float64))[()]

    def _ln(self, x, g, b):
        """LayerNorm over the last axis: (result, nhat, rstd), one rounding of the result."""
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=-1, keepdims=True)
        rstd = 1.0 / np.sqrt(((x64 - mean) ** 2).mean(axis=-1, keepdims=True) + LN_EPS)
        nhat = (x64 - mean) * rstd
        return self._r(nhat * g + b), nhat, rstd

    def _ln_back(self, dy, g, nhat, rstd):
        """LayerNorm's backward kernel: (dx, dg, db), each rounded once."""
        dy64 = dy.astype(np.float64)
        gh = dy64 * g
        dx = rstd * (gh - gh.mean(axis=-1, keepdims=True) - nhat * (gh * nhat).mean(axis=-1, keepdims=True))
        lead = tuple(range(dy.ndim - 1))
        return self._r(dx), self._r((dy64 * nhat).sum(axis=lead)), self._r(dy64.sum(axis=lead))

    # -- forward and backward ----------------------------------------------------------------------

    def _forward(self) -> dict:
        if self._cache is not None:
            return self._cache
        P, r, d = self.P, self._r, self.d
        n = self.n
        h0 = np.concatenate([np.broadcast_to(P["cls"], (n, 1, d)), self.X], axis=1)  # (n, T + 1, d)
        u, nh1, rs1 = self._ln(h0, P["ln1_g"], P["ln1_b"])
        Wq, Wk, Wv = P["W_qkv"][:d], P["W_qkv"][d : 2 * d], P["W_qkv"][2 * d :]
        q = r(u[:, 0] @ Wq.T)  # (n, d): the CLS query
        k, v = r(u @ Wk.T), r(u @ Wv.T)  # (n, T + 1, d)
        dots = r(np.einsum("nd,ntd->nt", q, k))
        dots = r(dots * self._c(d**-0.5))
        z64 = dots.astype(np.float64)
        e = np.exp(z64 - z64.max(axis=1, keepdims=True))
        a = r(e / e.sum(axis=1, keepdims=True))  # softmax, one kernel
        out = r(np.einsum("nt,ntd->nd", a, v))
        h = r(out + h0[:, 0]) if self.skip else out
        h2, nh2, rs2 = self._ln(h, P["ln2_g"], P["ln2_b"])
        pre = r(h2 @ P["W1"].T + P["b1"])  # addmm: the bias is the product's initial sum
        p64 = pre.astype(np.float64)
        cdf = 0.5 * (1.0 + erf(p64 / math.sqrt(2.0)))
        gr = r(p64 * cdf)  # exact GELU, one kernel
        mlp = r(gr @ P["W2"].T + P["b2"])
        zz = r(mlp + h) if self.skip else mlp
        zf, nhf, rsf = self._ln(zz, P["lnf_g"], P["lnf_b"])
        f = r(zf @ P["head_w"].T + P["head_b"])[:, 0]
        ex = r(np.exp(-self.y * f))
        b = r(self._c(1.0) + ex)
        L = r(r(np.log(b)).mean(dtype=self.dtype))
        self._cache = dict(h0=h0, u=u, nh1=nh1, rs1=rs1, q=q, k=k, v=v, a=a, dots=dots, h=h, h2=h2, nh2=nh2)
        self._cache |= dict(rs2=rs2, pre=p64, cdf=cdf, gr=gr, zf=zf, nhf=nhf, rsf=rsf, f=f, ex=ex, b=b, L=L)
        return self._cache

    def _backward(self, c: dict) -> dict[str, np.ndarray]:
        P, r, d, n = self.P, self._r, self.d, self.n
        G = {}
        gl = self._c(1.0 / n)
        gb = r(r(gl / c["b"]) * c["ex"])
        df = (-self.y * gb)[:, None]  # (n, 1): exact
        dzf = r(df @ P["head_w"])
        G["head_w"], G["head_b"] = r(df.T @ c["zf"]), r(df.sum(axis=0))
        dz, G["lnf_g"], G["lnf_b"] = self._ln_back(dzf, P["lnf_g"], c["nhf"], c["rsf"])
        dgr = r(dz @ P["W2"])
        G["W2"], G["b2"] = r(dz.T @ c["gr"]), r(dz.sum(axis=0))
        p64 = c["pre"]
        dr = r(dgr * (c["cdf"] + p64 * np.exp(-0.5 * p64 * p64) / math.sqrt(2.0 * math.pi)))  # GeluBackward
        dh2 = r(dr @ P["W1"])
        G["W1"], G["b1"] = r(dr.T @ c["h2"]), r(dr.sum(axis=0))
        dh, G["ln2_g"], G["ln2_b"] = self._ln_back(dh2, P["ln2_g"], c["nh2"], c["rs2"])
        if self.skip:
            dh = r(dh + dz)  # the two uses of h, accumulated
        da = r(np.einsum("nd,ntd->nt", dh, c["v"]))
        dv = r(np.einsum("nt,nd->ntd", c["a"], dh))
        a64, da64 = c["a"].astype(np.float64), da.astype(np.float64)
        dd = r(a64 * (da64 - (da64 * a64).sum(axis=1, keepdims=True)))  # SoftmaxBackward, one kernel
        dd = r(dd * self._c(d**-0.5))
        dq = r(np.einsum("nt,ntd->nd", dd, c["k"]))
        dk = r(np.einsum("nt,nd->ntd", dd, c["q"]))
        dqkv = np.zeros((n, self.T + 1, 3 * d), dtype=self.dtype)
        dqkv[:, 0, :d], dqkv[:, :, d : 2 * d], dqkv[:, :, 2 * d :] = dq, dk, dv
        flat, u = dqkv.reshape(-1, 3 * d), c["u"].reshape(-1, d)
        G["W_qkv"] = r(flat.T @ u)
        du = r(flat @ P["W_qkv"]).reshape(n, self.T + 1, d)
        dh0, G["ln1_g"], G["ln1_b"] = self._ln_back(du, P["ln1_g"], c["nh1"], c["rs1"])
        dcls = r(dh0[:, 0] + dh) if self.skip else dh0[:, 0]
        G["cls"] = r(dcls.sum(axis=0)).reshape(1, 1, d)
        return G

    # -- the updates -------------------------------------------------------------------------------

    def _sgd(self, G: dict) -> int:
        """torch's ``add_(g, alpha=-lr)`` per tensor (one rounding; bfloat16 rounds alpha
        too); returns how many entries changed."""
        lr = float(self._c(self.lr))
        changed = 0
        for k, g in G.items():
            x = self.P[k]
            new = self._r(x.astype(np.float64) - lr * g.astype(np.float64))
            changed += int(np.count_nonzero(new != x))
            self.P[k] = new
        return changed

    def _adamw(self, G: dict, t: int) -> None:
        """torch.optim.AdamW's single-tensor step, each tensor operation rounded (the
        attention twin's ``_adamw``, in NumPy)."""
        b1, b2, eps, wd = self.adam
        c, r = self._c, self._r
        decay, w1, cb2, w2, ceps = c(1.0 - self.lr * wd), c(1.0 - b1), c(b2), c(1.0 - b2), c(eps)
        size, bc2 = c(self.lr / (1.0 - b1**t)), c(math.sqrt(1.0 - b2**t))
        f64 = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731  (a product of two is exact)
        for k, g in G.items():
            x, (m, v) = self.P[k], self.moments[k]
            x = r(x * decay)  # one operation of the format: one rounding (float32 arithmetic)
            dm = f64(r(g - m))
            if w1 < 0.5:  # lerp_: a fused multiply-add
                m = r(dm * float(w1) + m)
            else:
                m = r(-dm * float(c(1.0) - w1) + g)
            v = r(v * cb2)
            v = r(f64(r(w2 * g)) * g + v)  # addcmul_: fused
            den = r(r(r(np.sqrt(v)) / bc2) + ceps)
            self.P[k] = r(x + r(-size * m) / den)
            self.moments[k] = (m, v)

    def _advance(self, step0: int, nsteps: int) -> tuple[Outcome, int]:
        if self.cancelled:
            self.detail = f"the {self.fmt} twin was stopped at step {step0} (its run ended)"
            return Outcome.STALLED, int(step0)
        for step in range(int(step0), int(step0 + nsteps)):
            c = self._forward()
            if not math.isfinite(float(c["L"])):
                self.detail = f"diverged at step {step}: the {self.fmt} twin's training loss is not finite"
                return Outcome.DIVERGED, step
            f = c["f"].astype(np.float64)
            fitted = self.y * f > 0
            self.fit_since = np.where(fitted, np.where(self.fit_since < 0, step, self.fit_since), -1)
            self.S_acc += self.relevant_increments(c["a"][:, 1:].astype(np.float64))
            if self.marks[0] < 0 and bool((c["a"].max(axis=1) == 1).any()):
                self.marks[0] = step
            G = self._backward(c)
            self._cache = None
            if self.adam is None:
                if self._sgd(G) == 0:
                    return Outcome.FROZEN, step
            else:
                self._adamw(G, step + 1)
        return Outcome.FINISHED, int(step0 + nsteps)

    # -- what the driver reads ---------------------------------------------------------------------

    @property
    def first_saturated(self) -> int:
        return int(self.marks[0])

    def watch_run(self, state) -> None:
        """The run's states are not compared coordinate by coordinate (no q = W p)."""

    def watched(self) -> None:
        return None

    def rewatch(self, seen: None) -> None:
        """Nothing to take: :meth:`watch_run` keeps nothing."""

    def q_rel_dev(self) -> None:
        return None

    def nan_note(self) -> str:
        return ""

    def observe(self) -> Observation:
        c = self._forward()
        a = c["a"].astype(np.float64)
        logits = c["dots"].astype(np.float64)[:, 1:]
        return Observation(logits, None, a[:, 1:], c["f"].astype(np.float64), float(c["L"]))

    def state(self) -> dict[str, np.ndarray]:
        """The parameters as float64 arrays holding the twin's values."""
        return {k: v.astype(np.float64) for k, v in self.P.items()}

    def final_state(self) -> dict[str, np.ndarray]:
        return self.state()

    def extra_metrics(self) -> dict[str, float]:
        a = self._forward()["a"]
        return {
            "score_cls": float(a[:, 0].astype(np.float64).mean()),
            "saturated_fraction": float(np.mean(a.max(axis=1) == 1)),
        }

    def _restore_arrays(self, arrays) -> None:
        self.P = {k: to_format(v, self.fmt) for k, v in arrays.items()}
        self._cache = None

    def _snapshot_extra(self):
        return {k: (m.copy(), v.copy()) for k, (m, v) in self.moments.items()}, list(self.marks)

    def _restore_extra(self, extra) -> None:
        moments, marks = extra
        self.moments = {k: (m.copy(), v.copy()) for k, (m, v) in moments.items()}
        self.marks = list(marks)
