"""Numba kernels of the precision twin (SPEC §16): the attention model trained in
float32 or bfloat16, operation by operation as PyTorch computes it on a CPU.

The twin follows the graph of the official loop, ``z = (X @ W) @ p``
(``graph = official``; or ``z = X @ (W @ p)``, ``graph = qform``, the same
model written with q = W p first: O(d^2 + n T d) per step instead of O(n T d^2)),
``s = softmax(z)`` (or StableMax, written as Prieto et al.'s reference code,
``w = where(z < 0, 1 / (1 - z + 1e-30), z + 1)``, ``s = w / w.sum(-1, keepdim=True)``;
the 1e-30 never changes a value, since 1 - z >= 1), ``f = sum(s * (X @ nu))``,
``loss = mean(log(1 + exp(-y f)))``, and its autograd backward, rounding every
result to the twin's format:

- float32: every array is float32 and every operation rounds to float32, as
  Numba's float32 arithmetic does; products of matrices go to BLAS (sgemm /
  sgemv: float32 accumulation, as torch's float32 matmul).
- bfloat16: the arrays hold bfloat16 values in float32; each torch operation
  is computed in float32 from them and its result rounded to bfloat16 (8
  mantissa bits, round to nearest even), as torch's CPU kernels do (their
  matmuls, sums and softmax accumulate in float32 and round once at the end).

The parameter updates round once per torch operation (SGD's ``add_`` is a
fused multiply-add; AdamW's five tensor operations each round). The
in-loop records (first fitted step, cumulative relevant score) and the
saturation count are measurements, kept in float64.

Every ``@njit`` function here calls only functions of this file.

Kept in one module past 500 lines: a Numba function and everything it calls live in one file
(numba's on-disk cache does not notice edits to callees in other files).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ...runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ...runtime.numba_cache import CACHE, ERROR_MODEL

GD, ADAMW = 0, 1


@intrinsic
def _fma(typingctx, a, b, c):
    """a b + c. All three float32: one fused multiply-add (LLVM's ``llvm.fma``, which
    vectorizes), rounded once, as torch's float32 kernels do (``add_`` with alpha, checked
    against torch 2.13 in a tie; ``lerp_`` and ``addcmul_``: :func:`_adamw`). Otherwise in
    float64, float64(a) float64(b) + float64(c): a product of two float32 numbers is exact
    there, so stored in float32 this is the fused multiply-add's result but in
    double-rounding ties. An intrinsic has no Python body: with NUMBA_DISABLE_JIT=1 the
    twin's kernels cannot run as plain Python (the twin refuses that setting by name)."""
    if not all(isinstance(t, types.Float) for t in (a, b, c)):
        return None
    single = a == b == c == types.float32

    def codegen(context, builder, sig, args):
        if single:
            f = ir.FloatType()
            fma = builder.module.declare_intrinsic("llvm.fma", [f], ir.FunctionType(f, [f, f, f]))
            return builder.call(fma, args)
        x, y, z = (context.cast(builder, v, t, types.float64) for v, t in zip(args, sig.args))
        return builder.fadd(builder.fmul(x, y), z)

    return (types.float32 if single else types.float64)(a, b, c), codegen


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _bf16(a):
    """Round the float32 array ``a`` (any shape, contiguous) to bfloat16 in place:
    round to nearest, ties to even; NaN stays NaN, overflow goes to inf."""
    b = a.reshape(-1).view(np.uint32)
    for i in range(b.size):
        x = np.int64(b[i])
        if (x & 0x7F800000) == 0x7F800000:  # inf or NaN
            if x & 0x007FFFFF:
                b[i] = np.uint32((x | 0x00400000) & 0xFFFF0000)
            continue
        x += 0x7FFF + ((x >> 16) & 1)
        b[i] = np.uint32(x & 0xFFFF0000)


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _stablemax(z, wk, bf, T):
    """StableMax of each sample's logits into wk.s, as torch computes the reference code:
    w = z + 1 or 1 / (1 - z) (each operation rounded), the sum S per sample (accumulated in
    the twin's type), s = w / S; keeps w and S for the backward pass."""
    w, S, s = wk.w, wk.S, wk.s
    one = wk.consts[1]
    for j in range(z.size):
        w[j] = one - z[j] if z[j] < 0 else z[j] + one
    if bf:
        _bf16(w)
    for j in range(z.size):
        if z[j] < 0:
            w[j] = one / w[j]
    if bf:
        _bf16(w)
    for i in range(S.size):
        tot = wk.consts[0]
        for t in range(i * T, i * T + T):
            tot += w[t]
        S[i] = tot
    if bf:
        _bf16(S)
    for i in range(S.size):
        for t in range(i * T, i * T + T):
            s[t] = w[t] / S[i]


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _stablemax_backward(z, gs, gz, wk, bf, T):
    """Autograd's backward of :func:`_stablemax`: DivBackward (gs / S, and -gs ((w / S) / S)
    summed into S's gradient), SumBackward, WhereBackward, then ReciprocalBackward
    (-grad r^2) and RsubBackward (-grad) on the negative logits: each product rounded."""
    w, S, s, tmp = wk.w, wk.S, wk.s, wk.m
    zero, one = wk.consts[0], wk.consts[1]
    for i in range(S.size):
        for t in range(i * T, i * T + T):
            gz[t] = gs[t] / S[i]  # the gradient of w through the quotient
            tmp[t] = s[t] / S[i]  # (w / S) / S, w / S being the forward's s
    if bf:
        _bf16(gz)
        _bf16(tmp)
    for j in range(z.size):
        tmp[j] = gs[j] * tmp[j]
    if bf:
        _bf16(tmp)
    for i in range(S.size):  # S's gradient: the sum of -gs (w / S) / S over the sample's tokens
        tot = wk.consts[0]
        for t in range(i * T, i * T + T):
            tot += -tmp[t]
        wk.gS[i] = tot
    if bf:
        _bf16(wk.gS)
    for i in range(S.size):
        for t in range(i * T, i * T + T):
            gz[t] = gz[t] + wk.gS[i]  # the two gradients of w accumulated
    if bf:
        _bf16(gz)
    for j in range(z.size):
        if z[j] < 0:
            tmp[j] = w[j] * w[j]
    if bf:
        _bf16(tmp)
    for j in range(z.size):
        if z[j] < 0:
            gz[j] = gz[j] * tmp[j]
    if bf:
        _bf16(gz)
    # the branch torch.where discards still runs backward: at a logit of exactly 1 its
    # 1 / (0 + 1e-30) squared overflows float32, and 0 * inf makes that gradient NaN
    r = one / wk.consts[2]
    rr = r * r
    for j in range(z.size):
        if z[j] == one:
            gz[j] = gz[j] + (zero * rr)


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _forward(X, y, W, p, nu, wk, fresh_A, fresh_u, bf, T, qform, stable=False):
    """The twin's forward pass: fills A = X W (when ``fresh_A``) and z = A p, or
    (``qform``) q = W p and z = X q; u (when ``fresh_u``), s (softmax, or StableMax
    when ``stable``), m = s u, f and the loss terms e = exp(-y f), b = 1 + e;
    returns the mean loss (in the twin's format)."""
    A, z, u, s, m, f, e, b, lterm = wk.A, wk.z, wk.u, wk.s, wk.m, wk.f, wk.e, wk.b, wk.lterm
    zero, one = wk.consts[0], wk.consts[1]  # in the twin's type: sums accumulate in it
    n = y.size
    if qform:
        np.dot(W, p, wk.q)
        if bf:
            _bf16(wk.q)
        np.dot(X, wk.q, z)
    else:
        if fresh_A:
            np.dot(X, W, A)
            if bf:
                _bf16(A)
        np.dot(A, p, z)
    if bf:
        _bf16(z)
    if fresh_u:
        np.dot(X, nu, u)
        if bf:
            _bf16(u)
    for i in range(0 if stable else n):  # softmax over each sample's tokens (max subtracted, as torch)
        base = i * T
        zmax = z[base]
        for t in range(1, T):
            zmax = max(zmax, z[base + t])
        ssum = zero
        for t in range(base, base + T):
            s[t] = math.exp(z[t] - zmax)
            ssum += s[t]
        inv = one / ssum  # torch multiplies by the sum's reciprocal
        for t in range(base, base + T):
            s[t] = s[t] * inv
    if stable:
        _stablemax(z, wk, bf, T)
    if bf:
        _bf16(s)
    for j in range(n * T):
        m[j] = s[j] * u[j]
    if bf:
        _bf16(m)
    for i in range(n):
        fi = zero
        for t in range(i * T, i * T + T):
            fi += m[t]
        f[i] = fi
    if bf:
        _bf16(f)
    for i in range(n):
        e[i] = math.exp(-y[i] * f[i])
    if bf:
        _bf16(e)
    for i in range(n):
        b[i] = one + e[i]
    if bf:
        _bf16(b)
    total = zero
    for i in range(n):
        lterm[i] = math.log(b[i])
    if bf:
        _bf16(lterm)
    for i in range(n):
        total += lterm[i]
    wk.scalar[0] = total / (zero + n)
    if bf:
        _bf16(wk.scalar)
    return wk.scalar[0]


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _backward(X, y, W, p, wk, want_W, want_nu, bf, T, qform, fused=False, stable=False):
    """Autograd's backward of :func:`_forward`'s graph: gp = A^T dz and, when asked,
    gW = X^T (dz p^T), gnu = X^T du; or (``qform``) gq = X^T dz, gp = W^T gq and
    gW = gq p^T (``fused``: gq alone; :func:`_fused_w_step` does the rest)."""
    z, u, s, e, b = wk.z, wk.u, wk.s, wk.e, wk.b
    gb, gz, gs, gu = wk.gb, wk.gz, wk.gs, wk.gu
    zero, one = wk.consts[0], wk.consts[1]
    n = y.size
    wk.scalar[0] = one / (zero + n)  # MeanBackward: 1 / n
    if bf:
        _bf16(wk.scalar)
    gl = wk.scalar[0]
    for i in range(n):
        gb[i] = gl / b[i]  # LogBackward
    if bf:
        _bf16(gb)
    for i in range(n):
        gb[i] = gb[i] * e[i]  # ExpBackward (1 + e passes the gradient through)
    if bf:
        _bf16(gb)
    for i in range(n):
        gb[i] = -y[i] * gb[i]  # dL/df (exact: y = +-1)
    for i in range(n):
        for t in range(i * T, i * T + T):
            gs[t] = gb[i] * u[t]
            gu[t] = gb[i] * s[t]
    if bf:
        _bf16(gs)
        _bf16(gu)
    if stable:
        _stablemax_backward(z, gs, gz, wk, bf, T)
    for i in range(0 if stable else n):  # SoftmaxBackward: s (g - sum_t g_t s_t)
        base = i * T
        dot = zero
        for t in range(base, base + T):
            dot += gs[t] * s[t]
        for t in range(base, base + T):
            gz[t] = s[t] * (gs[t] - dot)
    if bf and not stable:
        _bf16(gz)
    if qform:
        np.dot(gz, X, wk.gq)
        if bf:
            _bf16(wk.gq)
        if fused:
            want_W = False
        else:
            np.dot(wk.gq, W, wk.gp)
        if bf:
            _bf16(wk.gp)
        if want_W:
            gq, gW = wk.gq, wk.gW
            for a in range(gq.size):
                for c in range(p.size):
                    gW[a, c] = gq[a] * p[c]
            if bf:
                _bf16(gW)
    else:
        np.dot(gz, wk.A, wk.gp)
        if bf:
            _bf16(wk.gp)
    if want_W and not qform:
        gA = wk.gA
        for j in range(z.size):
            for a in range(p.size):
                gA[j, a] = gz[j] * p[a]
        if bf:
            _bf16(gA)
        np.dot(X.T, gA, wk.gW)
        if bf:
            _bf16(wk.gW)
    if want_nu:
        np.dot(gu, X, wk.gnu)
        if bf:
            _bf16(wk.gnu)


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _sgd(x, g, lr, bf):
    """torch's ``x.add_(g, alpha=-lr)``: one fused multiply-add per entry, rounded to
    the format (for bfloat16 tensors torch rounds alpha to bfloat16 too: ``lr`` comes
    so). ``g`` is overwritten by the new values; returns how many entries changed
    (0: the update rounds away entirely)."""
    xf = x.reshape(-1)
    gf = g.reshape(-1)
    for j in range(xf.size):
        gf[j] = _fma(-lr, gf[j], xf[j])
    if bf:
        _bf16(gf)
    changed = 0
    for j in range(xf.size):
        if gf[j] != xf[j]:
            changed += 1
        xf[j] = gf[j]
    return changed


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _fused_w_step(W, gq, p, gp, lr, bf, row):
    """The q-form's W pass, once over W: gp = W^T gq from the W of this state (summed in
    the twin's type, row after row) and W's SGD update by the gradient gq p^T (each
    product rounded to the format, then the fused multiply-add, as the unfused
    graph rounds them); ``row`` (d,) is scratch. Returns how many entries of W changed."""
    k, r = W.shape
    for c in range(r):
        gp[c] = gq[0] - gq[0]
    changed = 0
    if not bf:  # one vectorized loop per row (float32: 8-wide fused multiply-adds)
        for a in range(k):
            g = gq[a]
            for c in range(r):
                w = W[a, c]
                gp[c] += w * g
                new = W.dtype.type(_fma(-lr, g * p[c], w))
                changed += new != w
                W[a, c] = new
        return changed
    for a in range(k):  # bfloat16: each row's products, then its new values, rounded at once
        g = gq[a]
        for c in range(r):
            gp[c] += W[a, c] * g
            row[c] = g * p[c]
        _bf16(row)
        for c in range(r):
            row[c] = _fma(-lr, row[c], W[a, c])
        _bf16(row)
        for c in range(r):
            changed += row[c] != W[a, c]
            W[a, c] = row[c]
    _bf16(gp)
    return changed


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _adamw(x, g, mom, vel, scal, bf):
    """torch.optim.AdamW's single-tensor step on CPU, each tensor operation rounded
    to the format as torch computes it (measured against torch 2.13, float32)::

        x.mul_(1 - lr wd)                     x = x c
        m.lerp_(g, 1 - b1)                    m = fma(w1, g - m, m)   (w1 < 1/2)
        v.mul_(b2).addcmul_(g, g, 1 - b2)     v = v b2;  v = fma(w2 g, g, v)
        den = (v.sqrt() / bc2).add_(eps)      three roundings
        x.addcdiv_(m, den, value=-size)       x = x + (-size m) / den

    bfloat16 tensors compute each operation in float32 and round its result.
    ``scal`` = (1 - lr wd, 1 - b1, b2, 1 - b2, eps, size, bc2) in the twin's dtype:
    the Python floats torch computes in float64 and casts when they meet a tensor.
    ``g`` is overwritten by ``den`` (not needed after the moments)."""
    decay, w1, b2, w2, eps, size, bc2 = scal[0], scal[1], scal[2], scal[3], scal[4], scal[5], scal[6]
    xf, gf, mf, vf = x.reshape(-1), g.reshape(-1), mom.reshape(-1), vel.reshape(-1)
    lerp_low = w1 < 0.5
    w1c = xf.dtype.type(1.0) - w1  # torch's other branch: end - (end - self) (1 - weight)
    for j in range(xf.size):
        xf[j] = xf[j] * decay
        dm = gf[j] - mf[j]
        if lerp_low:
            mf[j] = _fma(w1, dm, mf[j])
        else:
            mf[j] = _fma(-dm, w1c, gf[j])
        vf[j] = vf[j] * b2
    if bf:
        _bf16(xf)
        _bf16(mf)
        _bf16(vf)
    for j in range(xf.size):
        vf[j] = _fma(w2 * gf[j], gf[j], vf[j])
        gf[j] = math.sqrt(vf[j])  # den
    if bf:
        _bf16(vf)
        _bf16(gf)
    for j in range(xf.size):
        gf[j] = gf[j] / bc2
    if bf:
        _bf16(gf)
    for j in range(xf.size):
        gf[j] = gf[j] + eps
    if bf:
        _bf16(gf)
    for j in range(xf.size):
        xf[j] = xf[j] + (-size * mf[j]) / gf[j]
    if bf:
        _bf16(xf)


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _records(y, f, s, rel, T, step, fit_since, S_acc, sat):
    """The in-loop records of the state at ``step`` (float64): first step of each
    sample's current run of fitted states, cumulative s_rel (1 - s_rel), and the
    number of samples whose largest score is exactly 1 in the twin's format."""
    n = y.size
    count = 0
    for i in range(n):
        if np.float64(y[i]) * np.float64(f[i]) > 0.0:
            if fit_since[i] < 0:
                fit_since[i] = step
        else:
            fit_since[i] = -1
        sr = 0.0
        top = s[i * T]
        for t in range(i * T, i * T + T):
            sr += rel[t] * np.float64(s[t])
            top = max(top, s[t])
        S_acc[i] += sr * (1.0 - sr)
        if top == 1:
            count += 1
    sat[0] = count
    return count


@njit(cache=CACHE, nogil=True, error_model=ERROR_MODEL)
def _twin_steps(
    X, y, W, p, nu, wk, flags, hyper, scal, moments, rel, T, fit_since, S_acc, marks, step0, nsteps
):
    """``nsteps`` updates of the twin from state ``step0``. ``flags`` = (train_W,
    train_p, train_nu, bf16, optimizer, qform); ``hyper`` = (lr, b1, b2, eps, wd) in
    float64; ``scal`` (7,) a buffer in the twin's dtype for AdamW's scalars;
    ``moments`` = (mW, vW, mp, vp, mnu, vnu) for AdamW; ``marks`` = (first
    saturated step or -1, saturated count of the last state seen, first step whose
    StableMax gradient is NaN or -1). Returns
    (status, step): (0, step0 + nsteps); (1, tau) when the loss at state tau is
    not finite; (2, tau) when GD's update of state tau rounds away in every entry
    (every later state is state tau)."""
    train_W, train_p, train_nu, bf, opt = flags[0] != 0, flags[1] != 0, flags[2] != 0, flags[3] != 0, flags[4]
    qform, stable = flags[5] != 0, flags[6] != 0
    mW, vW, mp, vp, mnu, vnu = moments
    sat = marks[1:2]
    lr = scal[0]  # GD: lr as torch's SGD casts it to the tensors' type (set by the caller)
    for step in range(step0, step0 + nsteps):
        L = _forward(
            X, y, W, p, nu, wk, train_W or step == step0, train_nu or step == step0, bf, T, qform, stable
        )
        _records(y, wk.f, wk.s, rel, T, step, fit_since, S_acc, sat)
        if marks[0] < 0 and marks[1] > 0:
            marks[0] = step
        if not math.isfinite(L):
            return 1, step
        fused = qform and opt == GD and train_W
        _backward(X, y, W, p, wk, train_W, train_nu, bf, T, qform, fused, stable)
        if stable and marks[2] < 0 and not math.isfinite(wk.gz.sum()):
            marks[2] = step  # a logit of exactly 1 (see _stablemax_backward)
        if opt == GD:
            changed = 0
            if fused:
                changed += _fused_w_step(W, wk.gq, p, wk.gp, lr, bf, wk.row)
            elif train_W:
                changed += _sgd(W, wk.gW, lr, bf)
            if train_p:
                changed += _sgd(p, wk.gp, lr, bf)
            if train_nu:
                changed += _sgd(nu, wk.gnu, lr, bf)
            if changed == 0:
                return 2, step
        else:
            t = step + 1  # the update's number, as torch counts it
            lr64, b1, b2, eps, wd = hyper[0], hyper[1], hyper[2], hyper[3], hyper[4]
            scal[0] = 1.0 - lr64 * wd
            scal[1] = 1.0 - b1
            scal[2] = b2
            scal[3] = 1.0 - b2
            scal[4] = eps
            scal[5] = lr64 / (1.0 - b1**t)
            scal[6] = math.sqrt(1.0 - b2**t)
            if train_W:
                _adamw(W, wk.gW, mW, vW, scal, bf)
            if train_p:
                _adamw(p, wk.gp, mp, vp, scal, bf)
            if train_nu:
                _adamw(nu, wk.gnu, mnu, vnu, scal, bf)
    return 0, step0 + nsteps
