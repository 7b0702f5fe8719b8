"""Multi-head linear attention trained in context (Zhang, Singh, Latham and Saxe, ICML 2025; SPEC
§21b): the saddles against the authors' published values, the reduced predictor against the whole
attention, the closed-form population loss against Monte Carlo, the blocks the initialization
zeroes against the symmetry that keeps them at 0, ATTN_M against a two-layer network on cubic
features, the plateaus of a flow from a small initialization, and what the model refuses."""

import contextlib
import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

import attnsim
from attnsim.cli import main
from attnsim.config import Config, ConfigError
from attnsim.data.dataset import make_streams
from attnsim.models.linear_attention import reference as R
from attnsim.models.linear_attention.model import initial
from attnsim.models.linear_attention.spec import Problem

ZHANG = Path(__file__).resolve().parent / "data" / "zhang2025"


def _params(rng, kind, H=3, r=2, D=4):
    if kind == "merged":
        return {"c": rng.standard_normal(H), "B": rng.standard_normal((H, D, D))}
    return {
        "c": rng.standard_normal(H),
        "K": rng.standard_normal((H, r, D)),
        "Q": rng.standard_normal((H, r, D)),
    }


def test_saddle_losses_reproduce_the_published_values():
    with open(ZHANG / "saddle_losses.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    D, N = int(rows[0]["D"]), int(rows[0]["N"])
    ours = R.saddle_losses(R.eigenvalues(D, "linear"), N)
    for row in rows:
        assert abs(ours[int(row["m"])] - float(row["loss"])) < 1e-12


def test_the_saddles_are_stationary_points_of_the_closed_form_loss():
    """T learning the top m eigen-directions (T_dd = lambda_d / s_d there, 0 elsewhere) has zero
    gradient in T's learned block and the loss L(M_m); the global minimum is T* = Sigma_u^-1 Lambda."""
    lam = R.eigenvalues(5, "linear")
    mom = R.Moments.population(lam, 9)
    s = (lam.sum() / 9) * lam + (1 + 1 / 9) * lam**2
    for m in range(6):
        t = np.where(np.arange(5) < m, lam / s, 0.0)
        T = np.diag(t)
        assert abs(mom.loss(T) - R.saddle_losses(lam, 9)[m]) < 1e-14
        G = mom.grad_T(T)
        assert np.abs(np.diag(G)[:m]).max(initial=0.0) < 1e-14


@pytest.mark.parametrize("kind", ["separate", "merged"])
def test_the_reduced_predictor_is_the_whole_attention(kind):
    """ATTN(X)_{D+1, N+1} of whole sequences, with the reduced parameters embedded in W^V and
    W^KQ, equals <T, u x_q^T> to rounding: on that subspace ATTN_M is a two-layer linear network on
    the cubic feature (the authors' equivalence)."""
    rng = np.random.default_rng(0)
    X, Y, xq, _ = R.draw(500, 7, R.eigenvalues(4, "linear"), rng)
    p = _params(rng, kind)
    WV, WKQ = R.embed(p, kind, 4)
    whole = R.attention(X, Y, xq, WV, WKQ)
    reduced = np.einsum("pa,ab,pb->p", R.cubic_features(X, Y, xq), R.product(p, kind), xq)
    np.testing.assert_allclose(whole, reduced, rtol=1e-12, atol=1e-13)


@pytest.mark.slow
def test_population_loss_against_monte_carlo_with_whole_sequences():
    """The closed form against the mean squared error of the whole attention over 10^6 sequences."""
    rng = np.random.default_rng(1)
    lam = R.eigenvalues(3, "linear")
    p = {
        "c": 0.7 * rng.standard_normal(2),
        "K": rng.standard_normal((2, 1, 3)),
        "Q": rng.standard_normal((2, 1, 3)),
    }
    want = R.Moments.population(lam, 5).loss(R.product(p, "separate"))
    WV, WKQ = R.embed(p, "separate", 3)
    errs = []
    for _ in range(10):
        X, Y, xq, yq = R.draw(100_000, 5, lam, rng)
        errs.append((yq - R.attention(X, Y, xq, WV, WKQ)) ** 2)
    e = np.concatenate(errs)
    z = (e.mean() - want) / (e.std() / math.sqrt(e.size))
    assert abs(z) < 4, (e.mean(), want, z)


@pytest.mark.slow
def test_the_zeroed_blocks_gradients_vanish_by_the_tasks_sign_symmetry():
    """At a reduced state, Monte Carlo estimates (10^6 whole sequences) of the loss's gradient in
    the value's x-part and the key-query's label row are 0 within 4 standard errors, while the
    trained blocks' are not: the population flow never leaves the reduced parameters."""
    rng = np.random.default_rng(2)
    lam = R.eigenvalues(3, "linear")
    p = {"c": np.array([0.8]), "B": rng.standard_normal((1, 3, 3))}
    WV, WKQ = R.embed(p, "merged", 3)
    N, D = 5, 3
    sums = {"value_x": [], "kq_label": [], "value_label": []}
    for _ in range(10):
        X, Y, xq, yq = R.draw(100_000, N, lam, rng)
        r = -2.0 * (yq - R.attention(X, Y, xq, WV, WKQ))
        S = np.zeros((X.shape[0], D + 1, N + 1))
        S[:, :D, :N] = np.swapaxes(X, 1, 2)
        S[:, D, :N] = Y
        S[:, :D, N] = xq
        G = S @ np.swapaxes(S, 1, 2) / N
        q = S[:, :, N]
        GKq = np.einsum("pjk,kl,pl->pj", G, WKQ[0], q)  # d f / d W^V[D, j]
        vG = np.einsum("j,pjk->pk", WV[0, D], G)  # d f / d W^KQ[a, b] = (v G)_a q_b
        sums["value_x"].append(r[:, None] * GKq[:, :D])
        sums["value_label"].append(r * GKq[:, D])
        sums["kq_label"].append(r[:, None] * vG[:, D, None] * q[:, :D])
    for name, parts in sums.items():
        g = np.concatenate(parts)
        z = np.abs(g.mean(axis=0)) / (g.std(axis=0) / math.sqrt(g.shape[0]))
        if name == "value_label":
            assert z > 10, z
        else:
            assert np.all(z < 4), (name, z)


def test_merged_gd_equals_a_two_layer_network_on_cubic_features():
    """ATTN_M trained by GD on 200 sequences from the run's initialization, against a two-layer
    linear network on the flattened cubic features written here (first layer B_i, second c_i): the
    same losses along 30 steps to float64 rounding."""
    keys = {"model": "linear_attention", "d": 3, "context": 5, "heads": 2, "parametrization": "merged",
            "integrator": "gd", "n": 200, "steps": 30, "lr": 0.5, "init_scale": 0.3, "log_scale": "linear",
            "log_every": 1}  # fmt: skip
    res = attnsim.simulate(keys)
    cfg = Config(**keys)
    st = make_streams(cfg.seed)
    X, Y, xq, yq = R.draw(200, 5, R.eigenvalues(3, "linear"), st.data)
    Z = (R.cubic_features(X, Y, xq)[:, :, None] * xq[:, None, :]).reshape(200, 9)
    p = initial(cfg, st.init)
    W1, w2 = p["B"].reshape(2, 9), p["c"].copy()
    losses = []
    for _ in range(31):
        h = Z @ W1.T
        r = h @ w2 - yq
        losses.append(float(np.mean(r * r)))
        g2 = 2 * h.T @ r / 200
        g1 = 2 * np.outer(w2, r @ Z) / 200
        W1, w2 = W1 - 0.5 * g1, w2 - 0.5 * g2
    np.testing.assert_allclose(res.trajectory["train_loss"], losses, rtol=1e-12)


def test_a_rank_one_flow_from_a_small_init_visits_every_saddle_at_its_level():
    """ATTN_S, rank one, D = 3, three heads, from init 1e-6: the population loss sits at
    L(M_0) ... L(M_3) in order, each to 1e-6, the last the global minimum."""
    res = attnsim.simulate({"model": "linear_attention", "d": 3, "heads": 3, "init_scale": 1e-6,
                            "steps": 10**8, "log_points": 300})  # fmt: skip
    saddles = R.saddle_losses(R.eigenvalues(3, "linear"), 31)
    levels = res.final["plateaus"]
    assert len(levels) == 4 and len(res.final["plateau_steps"]) == 3
    np.testing.assert_allclose(levels, saddles, rtol=0, atol=1e-6)
    assert abs(res.final["population_loss"] - saddles[-1]) < 1e-10


@pytest.mark.parametrize("kind", ["separate", "merged"])
def test_init_published_takes_the_authors_sgd_steps(kind):
    """The authors' forward pass has no 1/N: their prediction is N times attnsim's at the same
    weights. Their full-batch SGD at lr eta from attnsim's initial weights divided by N^(1/3)
    (ATTN_S) or N^(1/2) (ATTN_M), mapped back, is attnsim's GD at lr eta N^(2/3) or eta N, step by
    step; and init=published draws their net.py's scales times that factor."""
    N, eta, steps, s = 31, 0.02, 50, (0.5 if kind == "separate" else 0.05)
    keys = {"model": "linear_attention", "parametrization": kind, "init": "published", "init_scale": s,
            "integrator": "gd", "n": 300, "context": N, "steps": steps, "log_scale": "linear",
            "log_every": 1, "heads": 3}  # fmt: skip
    a = 3 if kind == "separate" else 2  # the product's factors
    res = attnsim.simulate({**keys, "lr": eta * N ** (2 / a)})
    problem = Problem(Config(**keys), make_streams(0))  # the run's draws
    p = {k: v / N ** (1 / a) for k, v in problem.params0.items()}
    mom = problem.train
    theirs = []
    for _ in range(steps + 1):
        T = N * R.product(p, kind)  # their prediction at weights p
        theirs.append(mom.loss(T))
        g = R.grads(p, kind, N * mom.grad_T(T))  # the chain rule through their factor N
        p = {k: p[k] - eta * g[k] for k in p}
    np.testing.assert_allclose(res.trajectory["train_loss"], theirs, rtol=1e-10)
    # the scales: separate c ~ s / sqrt(H (D+1)^2), K, Q ~ s / sqrt(H r (D+1)); merged all s
    rng = np.random.default_rng(0)
    cfg = Config(**{**keys, "heads": 4000, "d": 2})
    w = initial(cfg, rng)
    want = {"c": s / math.sqrt(4000 * 9), "K": s / math.sqrt(4000 * 3)} if kind == "separate" else {
        "c": s, "B": s}  # fmt: skip
    for k, sd in want.items():
        assert abs(np.std(w[k]) / (sd * N ** (1 / a)) - 1) < 0.05


def test_gd_at_small_lr_follows_the_flow():
    base = {"model": "linear_attention", "d": 3, "heads": 2, "init_scale": 0.2, "log_scale": "linear"}
    flow = attnsim.simulate({**base, "steps": 40, "lr": 0.5, "log_every": 40})
    gaps = []
    for lr in (0.5, 0.25, 0.125):
        gd = attnsim.simulate(
            {**base, "integrator": "gd", "steps": round(20 / lr), "lr": lr, "log_every": 1000}
        )
        gaps.append(abs(gd.final["population_loss"] - flow.final["population_loss"]))
    assert gaps[0] > gaps[1] > gaps[2] and 1.5 < gaps[0] / gaps[1] < 2.5


def test_theory_command_prints_the_saddles():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["theory", "linear_attention", "--set", "d=4", "--set", "context=31", "--json"]) == 0
    got = json.loads(out.getvalue())
    assert abs(got["saddle_losses"][1] - 0.6405797101449273) < 1e-14
    assert got["global_minimum"] == got["saddle_losses"][-1]


@pytest.mark.parametrize(
    "keys,word",
    [
        ({"parametrization": "merged", "rank": 2}, "rank: a merged key-query matrix has no rank"),
        ({"rank": 9}, "rank: at most d = 4"),
        ({"n": 100}, "n: model=linear_attention reads it under integrator=gd only, not flow"),
        ({"n": 1, "integrator": "gd"}, "n: must be an integer >= 2"),
        ({"heads": 0}, "heads: must be an integer >= 1"),
        ({"signal_norm": 2.0}, "signal_norm: model=linear_attention does not read it"),
    ],
)
def test_what_the_model_refuses_is_refused_by_name(keys, word):
    with pytest.raises(ConfigError, match=word):
        Config(model="linear_attention", **keys)
