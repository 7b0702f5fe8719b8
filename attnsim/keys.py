"""Every config key's allowed values and meaning: ``attnsim keys`` and the
key table of docs/usage.md (:class:`attnsim.config.Config` holds the keys
and their defaults)."""

from __future__ import annotations

from . import registry
from .config import KEYS, Config

# key -> (allowed values, meaning), for ``attnsim keys`` and docs/usage.md
KEY_HELP = {
    "n": ("integer >= 2", "training samples"),
    "T": ("integer >= the role tokens", "tokens per sample"),
    "d": ("integer >= 2", "embedding dimension"),
    "signal_norm": ("> 0", "|mu|, the norm of the class signals"),
    "sigma": ("> 0", "standard deviation of the token noise per coordinate"),
    "rho": ("finite", "weakly relevant tokens carry rho * mu"),
    "n_relevant": ("integer >= 1", "relevant tokens per sample"),
    "n_weak_aligned": ("integer >= 0", "weakly relevant tokens aligned with the label"),
    "n_weak_opposite": ("integer >= 0", "weakly relevant tokens opposite to the label"),
    "shuffle_roles": ("true, false", "random token positions for the roles"),
    "data_model": (
        "sakamoto2025, magen2025",
        "the tokens: the paper's roles with isotropic noise on every token, or Magen et al.'s T = 2 "
        "(signal token y mu exactly, noise token N(0, sigma^2 (I - P_mu)))",
    ),
    "noise_rate": ("[0, 1)", "fraction of flipped training labels"),
    "label_noise": ("balanced, exact, iid", "how the flipped labels are chosen"),
    "lr": ("> 0, finite, normal float64", "learning rate (the flow's time unit)"),
    "optimizer": (
        ", ".join(registry.OPTIMIZERS),
        "the update rule: gd (lr * gradient), normalized (lr * gradient / |gradient| per trained block), "
        "adam (torch's AdamW); every registered optimizer is a file attnsim/optimizers/<name>.py that says "
        "what it does",
    ),
    "weight_decay": (
        ">= 0 (default 0.01)",
        "AdamW's decoupled weight decay, x *= 1 - lr * weight_decay (and the L2 term of torch SGD's step "
        "for the models whose GD has one)",
    ),
    "steps": ("integer >= 0", "GD steps (or flow time in steps)"),
    "train": ("non-empty subset of W, p, nu", "the trained blocks"),
    "init_W": ("kaiming_uniform, gaussian, identity", "initialization of W"),
    "init_W_scale": ("> 0 (default 1/sqrt(3d))", "standard deviation of W(0)'s entries"),
    "init_p": ("zeros, gaussian", "initialization of p"),
    "init_p_scale": ("> 0 (default 1/sqrt(d))", "standard deviation of p(0)'s entries"),
    "init_nu": ("head, zeros", "nu(0): the official head (mu+ - mu-)/|mu+ - mu-|/|mu|, or 0"),
    "init_scale": (
        ">= 0",
        "the scale of a model's initial weights (linear_icl: Gamma(0) ~ N(0, init_scale^2/d); "
        "linear_attention: its weights' standard deviation)",
    ),
    "rank": (
        "integer >= 1",
        "the rank of a model's key-query product (positional_semantic: the columns of Q and Q*; "
        "linear_attention: of each head's key and query)",
    ),
    "init": (
        "a scheme the model declares: "
        + "; ".join(f"{m} {', '.join(e.inits)}" for m, e in registry.MODELS.items() if e.inits),
        "the initialization scheme of a model that has several (its first is its default)",
    ),
    "preset": ("a name from 'attnsim presets'", "start from a sister paper's setting; other keys override"),
    "loss": ("logistic, linear", "training loss"),
    "seed": ("integer >= 0", "seed of every random stream"),
    "test_n": ("integer >= 0", "test samples (0: population metrics only)"),
    "engine": (", ".join(("auto", *registry.engines())), "the exact coordinates the run uses"),
    "integrator": (
        "gd, flow, population, population_flow, online",
        "GD, gradient flow, GD or gradient flow on the population risk (n -> infinity; "
        "t = lr * step), or online SGD on fresh samples",
    ),
    "batch": (
        "integer >= 0 (0: n)",
        "online: fresh samples per step; population(_flow): > 0 adds online SGD's variance at dimension d",
    ),
    "flow_method": ("RK45, DOP853", "the flow's Runge-Kutta method"),
    "flow_rtol": ("> 0", "the flow's relative tolerance"),
    "flow_atol": ("> 0", "the flow's absolute tolerance"),
    "log_scale": ("linear, log", "spacing of the logged steps"),
    "log_every": ("integer >= 1", "steps between log points (linear)"),
    "log_points": ("integer >= 2", "log points (log)"),
    "pop_log_points": ("integer >= 2", "log points that also get population metrics"),
    "pop_points": ("power of two >= 16", "quasi-random points of the population metrics"),
    "pop_seed": (
        "integer >= 0, or unset",
        "redraws the population estimator's points alone (unset: they follow seed); "
        "the spread over pop_seeds is the estimator's own",
    ),
    "benign_error": ("(0, 1)", "excess error up to which overfitting is benign"),
    "gen_score": ("(0, 1)", "fresh relevant score that counts as generalizing"),
    "clean_twin": ("true, false", "train the clean-label twin"),
    "model": (", ".join(registry.MODELS), "the model"),
    "attention": (
        ", ".join(registry.capability("attentions")),
        "the scores' normalization: softmax, or StableMax (s(z) = z + 1 for z >= 0, 1 / (1 - z) below, "
        "normalized; Prieto et al. 2025)",
    ),
    "precision_twin": (
        "none, float32, bfloat16, float64",
        "train beside the run a twin rounded to this format as torch computes on CPU (float64: the "
        "twin's own operation order, a check)",
    ),
    "refine_times": (
        "auto, true, false",
        "locate t_select and t_pop_loss_settled between log points by stepping again (auto: with the "
        "flow or the limit; false: read them off the log grid, at its resolution, for cheap sweeps)",
    ),
}


# the models' and the optimizers' own keys: their help is in their keys dataclasses
KEY_HELP.update(
    {
        f.name: (f.metadata["allowed"], f.metadata["help"])
        for fs in (
            *(registry.key_fields(m) for m in registry.MODELS),
            *(registry.optimizer_fields(o) for o in registry.OPTIMIZERS),
        )
        for f in fs
    }
)


def _default_text(c: Config, key: str) -> str:
    """A key's default as ``attnsim keys`` shows it, with the models that change it."""
    text = "-" if getattr(c, key) is None else str(c.to_dict(resolved=False)[key])
    others = [f"model={m}: {e.defaults[key]}" for m, e in registry.MODELS.items() if key in e.defaults]
    return f"{text} ({'; '.join(others)})" if others else text


def describe_keys() -> str:
    """Every config key with its default, allowed values and meaning (``attnsim keys``)."""
    import textwrap  # lazy: only here

    c = Config()
    rows = [(k, _default_text(c, k), *KEY_HELP[k]) for k in KEYS]
    w = max(len(r[0]) for r in rows)
    lines = [f"{'key':{w}}  default (below it, indented: the meaning and the allowed values)"]
    for k, v, a, m in rows:
        lines += textwrap.wrap(
            f"{k:{w}}  {v}", WIDTH, subsequent_indent=" " * (w + 2), break_on_hyphens=False
        )
        lines += textwrap.wrap(f"{m}; allowed: {a}", WIDTH, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)


WIDTH = 100  # attnsim keys' lines: a terminal's width, not the longest default's
