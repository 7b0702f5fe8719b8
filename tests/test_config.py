"""Config validation: every bad value is a ConfigError naming its key."""

import pytest

from attnsim.config import KEYS, Config, ConfigError, from_mapping, load_toml, make_config, parse_set


def test_config_defaults_match_spec_table():
    c = Config()
    assert (c.n, c.T, c.d, c.signal_norm, c.sigma, c.rho) == (20, 8, 2000, 20.0, 1.0, 0.1)
    assert (c.noise_rate, c.label_noise, c.lr, c.steps, c.train) == (0.2, "balanced", 5e-3, 1000, "W,p")
    assert (c.init_W, c.init_p, c.loss, c.engine, c.integrator) == (
        "kaiming_uniform",
        "zeros",
        "logistic",
        "auto",
        "gd",
    )
    assert c.W_scale == pytest.approx((3 * 2000) ** -0.5)
    assert c.p_scale == pytest.approx(2000**-0.5)
    assert set(c.to_dict()) == set(KEYS)


@pytest.mark.parametrize(
    "text,canonical",
    [("W,p", "W,p"), ("Wp", "W,p"), ("pnu", "p,nu"), ("nu, W", "W,nu"), ("p", "p"), ("W,p,nu", "W,p,nu")],
)
def test_config_train_normalization(text, canonical):
    assert Config(train=text).train == canonical


BAD = [
    ({"dd": 3}, "did you mean 'd'"),
    ({"n": 1}, "n:"),
    ({"n": 2.5}, "n:"),
    ({"n": True}, "n:"),
    ({"T": 2}, "T:"),
    ({"d": 1}, "d:"),
    ({"signal_norm": -1}, "signal_norm:"),
    ({"sigma": 0}, "sigma:"),
    ({"rho": float("nan")}, "rho:"),
    ({"lr": float("inf")}, "lr:"),
    ({"lr": "abc"}, "lr:"),
    ({"noise_rate": 1.0}, "noise_rate:"),
    ({"label_noise": "random"}, "label_noise:"),
    ({"train": ""}, "train:"),
    ({"train": "Wq"}, "train:"),
    ({"train": "W"}, "train:"),
    ({"init_W": "orthogonal"}, "init_W:"),
    ({"init_W_scale": 0.0}, "init_W_scale:"),
    ({"loss": "hinge"}, "loss:"),
    ({"engine": "gpu"}, "engine:"),
    ({"flow_method": "BDF"}, "flow_method:"),
    ({"log_every": 0}, "log_every:"),
    ({"log_points": 1}, "log_points:"),
    ({"pop_points": 1000}, "pop_points:"),
    ({"benign_error": 1.0}, "benign_error:"),
    ({"gen_score": 0.0}, "gen_score:"),
    ({"steps": -1}, "steps:"),
    ({"shuffle_roles": "maybe"}, "shuffle_roles:"),
    ({"n_relevant": 0}, "n_relevant:"),
]


@pytest.mark.parametrize("values,needle", BAD)
def test_config_rejects_bad_values_naming_the_key(values, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        from_mapping(values)


def test_config_train_W_allowed_with_gaussian_p():
    assert Config(train="W", init_p="gaussian").train == "W"


def test_parse_set_types_and_errors():
    assert parse_set(["d=500", "lr=1e-3", "shuffle_roles=true", "train=p,nu", "steps=1e6"]) == {
        "d": 500,
        "lr": 1e-3,
        "shuffle_roles": True,
        "train": "p,nu",
        "steps": 1e6,
    }
    assert make_config(sets=["steps=1e6"]).steps == 1_000_000
    for bad in ("lr", "=3", "lr=", " =1"):
        with pytest.raises(ConfigError, match="--set"):
            parse_set([bad])
    with pytest.raises(ConfigError, match="did you mean 'signal_norm'"):
        parse_set(["signal_nrm=3"])


def test_toml_files(tmp_path):
    good = tmp_path / "c.toml"
    good.write_text('d = 500\ntrain = "p"\nsignal_norm = 10\n')
    c = make_config(good, ["d=600"])
    assert (c.d, c.train, c.signal_norm) == (600, "p", 10.0)
    bad = tmp_path / "bad.toml"
    bad.write_text("d = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_toml(tmp_path / "missing.toml")
    unknown = tmp_path / "u.toml"
    unknown.write_text("stepz = 3\n")
    with pytest.raises(ConfigError, match="did you mean 'steps'"):
        make_config(unknown)


def test_config_hash_is_stable_across_releases_and_sensitive():
    # pinned: records and run folders are keyed by it, so it must not drift within a
    # schema version (schema 4 added the key clean_twin: 4caec8fb7d before)
    assert Config().hash() == "373a3dde36"
    assert Config(seed=1).hash() == "1a444a40be"
    assert Config(d=2001).hash() != Config().hash()


@pytest.mark.parametrize(
    "word,expected",
    [("dd", "d"), ("signal_nrm", "signal_norm"), ("stepz", "steps"), ("Signal_Norm", "signal_norm"),
     ("lr_", "lr"), ("bogus_key", None), ("foo", None), ("sig", None)],
)  # fmt: skip
def test_suggestions_only_for_close_typos(word, expected):
    from attnsim.config import KEYS, suggest

    assert suggest(word, KEYS) == expected
