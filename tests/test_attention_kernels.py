"""Kernels against the NumPy reference and against finite differences."""

import numpy as np
import pytest

from attnsim.models.attention import kernels as K
from attnsim.models.attention import reference as model
from attnsim.models.attention import steppers
from attnsim.models.attention.reference import random_instance
from attnsim.models.base import finite_difference_errors

LOSSES = ("logistic", "linear")
MODES = ("W", "p", "nu", "W,p", "p,nu", "W,nu", "W,p,nu")


ATTENTIONS = ("softmax", "stablemax")


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("shape", [(4, 5, 6, 7), (3, 8, 10, 4), (5, 2, 3, 3)])
def test_loss_and_grads_match_reference(loss, shape, attention):
    n, T, k, r = shape
    X, y, W, p, nu = random_instance(1, n, T, k, r)
    L, gW, gp, gnu = steppers.loss_and_grads(X, y, W, p, nu, loss, attention)
    assert L == pytest.approx(model.loss(X, y, W, p, nu, loss, attention), rel=1e-13)
    for a, b in zip((gW, gp, gnu), model.grads(X, y, W, p, nu, loss, attention)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("loss", LOSSES)
def test_grads_match_central_differences_per_block(loss, attention):
    X, y, W, p, nu = random_instance(2)
    assert np.all(p != 0)
    if attention == "stablemax":  # logits of both signs, away from StableMax's kink at 0
        p = 3.0 * p
        z = X @ (W @ p)
        assert (z > 0.05).any() and (z < -0.05).any() and np.abs(z).min() > 1e-3
    errs = finite_difference_errors(
        lambda W_, p_, nu_: model.loss(X, y, W_, p_, nu_, loss, attention),
        lambda W_, p_, nu_: model.grads(X, y, W_, p_, nu_, loss, attention),
        {"W": W, "p": p, "nu": nu},
    )
    for block, e in errs.items():
        assert e["rel"] < 1e-7, (block, e)
        assert e["mean_abs"] < 1e-9, (block, e)


def test_finite_difference_helper_detects_a_wrong_gradient():
    X, y, W, p, nu = random_instance(3)
    errs = finite_difference_errors(
        lambda W_, p_, nu_: model.loss(X, y, W_, p_, nu_),
        lambda W_, p_, nu_: [1.01 * g for g in model.grads(X, y, W_, p_, nu_)],
        {"W": W, "p": p, "nu": nu},
    )
    assert all(e["rel"] > 1e-3 for e in errs.values())


def test_outputs_are_stable_for_huge_logits():
    z = np.array([[1e4, 0.0, -1e4], [800.0, 800.0, 0.0]])
    u = np.array([[1.0, 2.0, 3.0], [1.0, 3.0, 0.0]])
    s, f, L = steppers.outputs(z, u, np.array([1.0, -1.0]))
    np.testing.assert_allclose(s, [[1, 0, 0], [0.5, 0.5, 0]], atol=1e-300)
    np.testing.assert_allclose(f, [1.0, 2.0])
    assert np.isfinite(L)
    # softplus far in the tails
    _, _, L2 = steppers.outputs(np.zeros((1, 1)), np.array([[1e3]]), np.array([-1.0]))
    assert L2 == pytest.approx(1e3)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("train", MODES)
def test_one_gd_step_equals_theta_minus_lr_grad(train, loss):
    X, y, W, p, nu = random_instance(4)
    n, T, k = X.shape
    seg = steppers.Segment(
        steppers.ModelArrays(X.reshape(n * T, k), y, W, p, nu, T, 0.3, train.split(","), loss, np.ones(n * T))
    )
    status, step = seg.advance(0, 1)
    assert (status, step) == (K.OK, 1)
    ref = model.gd_step(X, y, W, p, nu, 0.3, train.split(","), loss)
    for a, b in zip((seg.W, seg.p, seg.nu), ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_the_parallel_w_pass_is_a_gd_step():
    """At k r >= PAR_MIN the W pass runs in row chunks on every thread: one step of
    the stepper against the readable reference's GD step."""
    X, y, W, p, nu = random_instance(3, n=4, T=3, k=600, r=500)
    n, T, k = X.shape
    assert k * W.shape[1] >= K.PAR_MIN
    seg = steppers.Segment(
        steppers.ModelArrays(
            X.reshape(n * T, k), y, W, p, nu, T, 0.1, ("W", "p"), "logistic", np.zeros(n * T)
        )
    )
    seg.advance(0, 1)
    W1, p1, _ = model.gd_step(X, y, W, p, nu, 0.1, ("W", "p"))
    np.testing.assert_allclose(seg.W, W1, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(seg.p, p1, rtol=1e-12, atol=1e-13)


def test_in_loop_records_match_a_naive_loop():
    X, y, W, p, nu = random_instance(5, n=6, T=4, k=5, r=5)
    n, T, k = X.shape
    rel = np.zeros((n, T))
    rel[:, 0] = 1.0
    seg = steppers.Segment(
        steppers.ModelArrays(X.reshape(n * T, k), y, W, p, nu, T, 2.0, ("W", "p"), "logistic", rel)
    )
    seg.advance(0, 7)
    seg.advance(7, 13)
    fit_since = -np.ones(n, dtype=int)
    S = np.zeros(n)
    for step in range(20):
        _, s, _, f = model.forward(X, W, p, nu)
        fitted = y * f > 0
        fit_since = np.where(fitted, np.where(fit_since < 0, step, fit_since), -1)
        S += s[:, 0] * (1 - s[:, 0])
        W, p, nu = model.gd_step(X, y, W, p, nu, 2.0, ("W", "p"))
    np.testing.assert_array_equal(seg.fit_since, fit_since)
    np.testing.assert_allclose(seg.S_acc, S, rtol=1e-10)
    np.testing.assert_allclose(seg.W, W, rtol=1e-10)


def test_divergence_is_reported_with_its_step():
    X, y, W, p, nu = random_instance(6)
    n, T, k = X.shape
    seg = steppers.Segment(
        steppers.ModelArrays(
            X.reshape(n * T, k), y, W, p, nu, T, 1e200, ("W", "p", "nu"), "linear", np.ones(n * T)
        )
    )
    status, step = seg.advance(0, 50)
    assert status == K.DIVERGED
    assert 0 < step < 50


def test_frozen_state_is_reported():
    # one-hot attention on tokens whose value equals the output: every c_it = 0
    X = np.zeros((2, 2, 2))
    X[:, 0, 0] = 1.0
    y = np.array([1.0, -1.0])
    W, p, nu = np.eye(2), np.array([1e4, 0.0]), np.zeros(2)
    seg = steppers.Segment(
        steppers.ModelArrays(X.reshape(4, 2), y, W, p, nu, 2, 0.1, ("W", "p"), "logistic", np.ones(4))
    )
    status, step = seg.advance(0, 10)
    assert (status, step) == (K.FROZEN, 0)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("train", ["W,p", "W", "p"])
def test_the_x_w_form_follows_the_w_form(train, loss):
    """B = X W in place of W (nu fixed): the same trajectory, in-loop records,
    observations and norms, and snapshots that restore it."""
    X, y, W, p, nu = random_instance(8, n=5, T=3, k=17, r=13)
    X2, rel = X.reshape(15, 17), np.tile([1.0, 0.0, 0.0], 5)
    args = steppers.ModelArrays(X2, y, W, p, nu, 3, 0.7, train.split(","), loss, rel)
    a, b = steppers.Segment(args), steppers.SegmentXW(args)
    for step0, nsteps in ((0, 7), (7, 20), (27, 33)):
        assert a.advance(step0, nsteps) == b.advance(step0, nsteps) == (K.OK, step0 + nsteps)
        sa, sb = a.state(), b.state()
        for key in ("W", "p", "nu"):
            np.testing.assert_allclose(sb[key], sa[key], rtol=1e-11, atol=1e-12, err_msg=key)
        np.testing.assert_array_equal(b.fit_since, a.fit_since)
        np.testing.assert_allclose(b.S_acc, a.S_acc, rtol=1e-12)
        np.testing.assert_allclose(b.observe().f, a.observe().f, rtol=1e-10, atol=1e-13)
        assert b.extra_metrics()["W_dev"] == pytest.approx(a.extra_metrics()["W_dev"], rel=1e-10, abs=1e-13)
    snap = b.snapshot()
    W_then = b.state()["W"].copy()
    b.advance(60, 5)
    b.restore(snap)
    np.testing.assert_allclose(b.state()["W"], W_then, rtol=1e-13, atol=1e-14)


def _triangular_tokens(n, T, tail, seed=0):
    """Tokens as the reduced engine keeps generated ones: a lower-triangular (n T, n T)
    factor (positive diagonal), then ``tail`` dense signal columns."""
    rng = np.random.default_rng(seed)
    L = np.tril(rng.standard_normal((n * T, n * T)))
    L[np.diag_indices(n * T)] = np.abs(L.diagonal()) + 30.0
    return np.ascontiguousarray(np.concatenate([L, rng.standard_normal((n * T, tail))], axis=1))


def test_the_p_pass_reads_a_triangular_b_in_halves_as_the_products_it_replaces():
    """W fixed: _p_pass over token_blocks' halves of a lower-triangular B (each block up
    to its last nonzero column, the signal columns beside) gives z = B p, its loss and
    gp = B^T c as NumPy computes them; a B that is not triangular, or that fits in a few
    blocks, is read whole (its blocks a view of B, the products as before)."""
    from attnsim.models.attention.token_blocks import HALF_MIN, pass_blocks

    n, T = 64, 8
    B = _triangular_tokens(n, T, tail=2)
    assert B.size >= HALF_MIN
    y = np.where(np.arange(n) % 2, 1.0, -1.0)
    p = np.random.default_rng(1).standard_normal(B.shape[1]) * 0.05
    pb = pass_blocks(B, T)
    assert pb.flat.size < 0.75 * B.size and pb.tail.shape == (n * T, 2) and pb.blocks[:, 3].max() == n * T
    seg = steppers.SegmentXW(steppers.ModelArrays(B, y, np.eye(B.shape[1]), p, np.ones(B.shape[1]), T, 0.1,
                                                  ["p"], "logistic", np.zeros(n * T)))  # fmt: skip
    assert np.array_equal(seg.blocks.flat, pb.flat)
    wk = seg.work
    total = K._p_pass(seg.data, pb.flat, pb.blocks, pb.tail, p, wk)
    np.testing.assert_allclose(wk.z, B @ p, rtol=1e-13, atol=1e-13)
    u = B @ np.ones(B.shape[1])
    _, f, L = steppers.outputs(wk.z.reshape(n, T), u.reshape(n, T), y)
    assert total / n == pytest.approx(L, rel=1e-13)
    np.testing.assert_allclose(wk.gp, B.T @ wk.c, rtol=1e-12, atol=1e-15 * np.abs(B.T @ wk.c).max())
    whole = pass_blocks(B + np.triu(np.full(B.shape, 1e-300), 1), T)  # one entry above is enough
    assert whole.tail.shape[1] == 0 and whole.flat.size == B.size
    small = _triangular_tokens(8, 8, tail=2)
    assert np.shares_memory(pass_blocks(small, 8).flat, small)


def test_an_x_w_state_is_detached_and_gives_q_without_w():
    """state() of the X W form keeps what it was when taken (later steps do
    not move it), its q() is W p, and W is rebuilt only when asked for."""
    X, y, W, p, nu = random_instance(10, n=5, T=3, k=17, r=13)
    seg = steppers.SegmentXW(
        steppers.ModelArrays(X.reshape(15, 17), y, W, p, nu, 3, 0.7, ("W", "p"), "logistic", np.ones(15))
    )
    seg.advance(0, 12)
    st = seg.state()
    assert st._W is None  # not rebuilt yet
    q = st.q()
    seg.advance(12, 30)
    np.testing.assert_allclose(q, st["W"] @ st["p"], rtol=1e-11, atol=1e-13)
    ref = steppers.Segment(
        steppers.ModelArrays(X.reshape(15, 17), y, W, p, nu, 3, 0.7, ("W", "p"), "logistic", np.ones(15))
    )
    ref.advance(0, 12)
    np.testing.assert_allclose(st["W"], ref.W, rtol=1e-11, atol=1e-12)
    assert set(st) == {"W", "p", "nu"}
    final = seg.final_state()  # detached as it is: no copy needed
    p_then = final["p"].copy()
    seg.advance(42, 5)
    np.testing.assert_array_equal(final["p"], p_then)


def test_make_segment_uses_the_x_w_form_only_where_it_pays_and_is_exact():
    X, y, W, p, nu = random_instance(9, n=5, T=3, k=17, r=13)
    X2, rel = X.reshape(15, 17), np.ones(15)
    make = lambda X2_, train, gap: steppers.make_segment(
        steppers.ModelArrays(X2_, y, W, p, nu, 3, 0.1, train, "logistic", rel), gap
    )
    assert type(make(X2, ("W", "p"), 500)) is steppers.SegmentXW
    assert (
        type(make(X2, ("W", "p"), 150)) is steppers.Segment
    )  # log points too close: rebuilding W costs more
    assert type(make(X2, ("W", "p", "nu"), 500)) is steppers.Segment  # nu trained
    near = X2.copy()
    near[5] = near[4] + 1e-5 * near[3]  # K = X X^T ill-conditioned: W could not be rebuilt exactly
    assert type(make(near, ("W", "p"), 500)) is steppers.Segment
    X3, y3, W3, p3, nu3 = random_instance(9, n=5, T=4, k=17, r=13)  # n T = 20 > k: more tokens than rows of W
    seg = steppers.make_segment(
        steppers.ModelArrays(
            X3.reshape(20, 17), y3, W3, p3, nu3, 4, 0.1, ("W", "p"), "logistic", np.ones(20)
        ),
        500,
    )
    assert type(seg) is steppers.Segment


@pytest.mark.parametrize("train", [("W", "p"), ("p",)])
def test_a_twins_x_w_stepper_reuses_the_runs_k_and_b0_and_steps_to_the_same_bits(train):
    """A problem's second X W stepper of the same X and W(0) (a run's clean-label twin)
    takes K, its factor and B(0) from the first instead of forming them again; it steps
    exactly as one that formed its own, and another X or W(0) forms its own."""
    X, y, W, p, nu = random_instance(11, n=5, T=3, k=17, r=13)
    X2, rel = X.reshape(15, 17), np.ones(15)
    arrays = lambda y_, X2_=X2, W_=W: steppers.ModelArrays(X2_, y_, W_, p, nu, 3, 0.1, train, "logistic", rel)
    shared: dict = {}
    run = steppers.make_segment(arrays(y), 500, shared=shared)
    twin = steppers.make_segment(arrays(-y), 500, shared=shared)
    alone = steppers.make_segment(arrays(-y), 500)
    assert type(run) is type(twin) is steppers.SegmentXW
    assert twin.B0 is run.B0 and alone.B0 is not run.B0
    if "W" in train:
        assert twin.K is run.K and twin.chol is run.chol and alone.K is not run.K
    for seg in (run, twin, alone):
        seg.advance(0, 40)
    np.testing.assert_array_equal(twin.B, alone.B)
    np.testing.assert_array_equal(twin.p, alone.p)
    assert not np.array_equal(twin.p, run.p)  # other labels, another path: nothing was mixed up
    other = steppers.make_segment(arrays(y, X2_=X2.copy()), 500, shared=shared)
    assert other.B0 is not run.B0 and ("W" not in train or other.K is not run.K)
    np.testing.assert_array_equal(other.B0, run.B0)


def test_the_x_w_form_reports_divergence_and_frozen_states():
    X, y, W, p, nu = random_instance(6, n=4, T=3, k=14, r=9)
    seg = steppers.SegmentXW(
        steppers.ModelArrays(X.reshape(12, 14), y, W, p, nu, 3, 1e200, ("W", "p"), "linear", np.ones(12))
    )
    status, step = seg.advance(0, 50)
    assert status == K.DIVERGED and 0 < step < 50
    # nu = 0: every token value and output is 0, so every c_it = 0
    seg = steppers.SegmentXW(
        steppers.ModelArrays(X.reshape(12, 14), y, W, p, 0 * nu, 3, 0.1, ("W", "p"), "logistic", np.ones(12))
    )
    assert seg.advance(0, 10) == (K.FROZEN, 0)


@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (3, 5), (162, 163)])
def test_sq_dist_is_the_squared_distance_in_its_stated_order(shape):
    """|a - b|^2 as eight interleaved partial sums and a tail, added in the
    order the docstring gives; equal to NumPy's sum to rounding."""
    from attnsim.models.attention.state_kernels import _sq_dist

    rng = np.random.default_rng(sum(shape))
    a, b = rng.standard_normal(shape), rng.standard_normal(shape)
    d = (a - b).ravel()
    m = d.size // 8
    lanes = [0.0] * 8
    for lane in range(8):  # the partial sums in the kernel's order, one term at a time
        acc = 0.0
        for i in range(m):
            acc += d[8 * i + lane] * d[8 * i + lane]
        lanes[lane] = acc
    tail = 0.0
    for v in d[8 * m :]:
        tail += v * v
    ref = (
        ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
    ) + tail
    assert _sq_dist(np.ascontiguousarray(a), np.ascontiguousarray(b)) == ref
    assert _sq_dist(a, b) == pytest.approx(float(np.sum(d * d)), rel=1e-13)


@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 13])
def test_relevant_increments_sum_each_sample_in_token_order(n):
    """s_rel (1 - s_rel) per sample, its relevant mass summed token by token in order,
    bit for bit, whether four samples run side by side or one alone (n not a multiple of
    4); ``add`` adds to what ``out`` holds, the same bits as adding afterwards."""
    rng = np.random.default_rng(n)
    T = 5
    s = rng.random(n * T)
    rel = (rng.random(n * T) < 0.4).astype(float)
    ref = np.empty(n)
    for i in range(n):
        sr = 0.0
        for t in range(i * T, i * T + T):
            sr += rel[t] * s[t]
        ref[i] = sr * (1.0 - sr)
    out = np.full(n, np.nan)
    K._relevant_increments(s, rel, T, out, False)
    assert np.array_equal(out, ref)
    acc = rng.standard_normal(n)
    expect = acc + ref
    K._relevant_increments(s, rel, T, acc, True)
    assert np.array_equal(acc, expect)
