"""The second hostile pass (docs: what a careful user tries): every case it found mishandled, as
a test that names its id. Each fails on the code the pass tried (70b8a38) and passes here: a
refusal in one line naming the key, a divergence said as one, a rerun that decides its derived
keys again."""

import json
import subprocess
import sys

import numpy as np
import pytest

from attnsim._meta import ConfigError
from attnsim.cli import main
from attnsim.config import Config
from attnsim.models.positional_semantic import replica
from attnsim.models.positional_semantic.replica import Settings

PS = ["--set", "model=positional_semantic", "--set", "d=20", "--set", "alpha=1", "--set", "steps=5",
      "--set", "pop_points=64", "--set", "test_n=10"]  # fmt: skip
COMPILING = "attnsim: compiling the kernels"
TINY = ["--set", "n=6", "--set", "T=4", "--set", "d=20", "--set", "steps=5", "--set", "pop_points=64"]


def _sets(**kw):
    return [a for k, v in kw.items() for a in ("--set", f"{k}={v}")]


def _refused(capsys, argv, *words, code=2):
    """The command exits ``code`` with one line on stderr holding every word, and no traceback
    (besides the notice a run prints when it compiles its kernels: a cold cache)."""
    assert main(argv) == code
    err = [x for x in capsys.readouterr().err.strip().splitlines() if not x.startswith(COMPILING)]
    assert len(err) == 1 and "Traceback" not in err[0], err
    for w in words:
        assert w in err[0], err[0]
    return err[0]


# -- A: the third model's numeric keys ----------------------------------------------------------


@pytest.mark.parametrize("wd, lr", [(1e300, 0.15), (100, 0.15), (0.01, 1e10)])
def test_A37_A38_A39_gd_decay_that_grows_the_weights_is_refused_naming_weight_decay(tmp_path, capsys, wd, lr):
    line = _refused(capsys, ["run", "--out", str(tmp_path / "r"), *PS, *_sets(weight_decay=wd, lr=lr)],
                    "weight_decay", ">= 2")  # fmt: skip
    assert "lr" in line
    assert not (tmp_path / "r").exists()


def test_A39_an_unstable_step_stops_the_run_naming_the_step_and_lr(tmp_path, capsys):
    line = _refused(capsys, ["run", "--out", str(tmp_path / "r"), *PS, *_sets(lr=1e10, weight_decay=0)],
                    "diverged at step", "reduce lr=1e+10", code=1)  # fmt: skip
    assert "grew" in line
    assert not (tmp_path / "r").exists()


def test_A39_a_stable_step_still_runs(tmp_path):
    assert main(["run", "--out", str(tmp_path / "r"), "--quiet", *PS, *_sets(lr=0.15, steps=30)]) == 0


@pytest.mark.parametrize("n", [2000, 100])
def test_A69_A70_n_given_beside_alpha_is_refused_even_at_its_default(capsys, tmp_path, n):
    _refused(capsys, ["run", "--out", str(tmp_path / "r"), *PS, "--set", f"n={n}"], "n:", "alpha")
    with pytest.raises(ConfigError, match="set n or alpha"):
        Config(model="positional_semantic", d=20, alpha=1, n=n)


def test_A69_alpha_alone_and_n_alone_still_decide_n():
    assert Config(model="positional_semantic", d=20, alpha=1).n == 20
    assert Config(model="positional_semantic", d=20, alpha=1, n=20).n == 20
    assert Config(model="positional_semantic", d=20).n == 2000
    assert Config(model="positional_semantic", d=20, alpha=1).replace(d=40).n == 40


def test_T26_n_in_a_toml_beside_alpha_is_refused(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('model = "positional_semantic"\nd = 20\nalpha = 1\nn = 2000\n')
    _refused(capsys, ["run", str(path), "--out", str(tmp_path / "r")], "n:", "alpha")


# -- B: teacher_A ------------------------------------------------------------------------------


def test_B09_teacher_A_is_capped_where_the_population_error_is_still_finite(tmp_path, capsys):
    _refused(capsys, ["run", "--out", str(tmp_path / "r"), *PS, "--set", "teacher_A=[[1e99,0],[0,1]]"],
             "teacher_A", "1e+60")  # fmt: skip
    assert main(["run", "--out", str(tmp_path / "ok"), *PS, "--set", "teacher_A=[[1e60,0],[0,1]]"]) == 0
    final = json.loads((tmp_path / "ok" / "result.json").read_text())["final"]
    assert np.isfinite(final["gen_error"]) and np.isfinite(final["gen_error_se"])


# -- C: other models' keys and flags -----------------------------------------------------------


@pytest.mark.parametrize("how", [["--set", "preset=magen2025"], ["--preset", "magen2025"]])
def test_C46_C47_another_models_preset_is_refused_naming_the_preset(tmp_path, capsys, how):
    _refused(capsys, ["run", "--out", str(tmp_path / "r"), *PS, *how], "preset", "magen2025",
             "model=attention")  # fmt: skip


@pytest.mark.parametrize("kind", ["gaps", "scores"])
def test_C50_scores_and_gaps_plots_are_refused_for_a_model_without_them(tmp_path, capsys, kind):
    _refused(capsys, ["run", "--out", str(tmp_path / "r"), *PS, "--plot", kind], f"--plot {kind}",
             "--plot metrics")  # fmt: skip
    assert not (tmp_path / "r").exists()


def test_C50_a_classifier_draws_scores_not_metrics(tmp_path, capsys):
    _refused(capsys, ["run", "--out", str(tmp_path / "r"), *TINY, "--plot", "metrics"], "--plot scores")


@pytest.mark.parametrize("sets, key", [(["flow_rtol=1e-6"], "flow_rtol"), (["log_points=5"], "log_points")])
def test_C36_C38_keys_the_run_does_not_read_are_refused(tmp_path, capsys, sets, key):
    for base in (PS, TINY):
        _refused(capsys, ["run", "--out", str(tmp_path / "r"), *base, "--set", sets[0]], key)


# -- D: mirror descent -------------------------------------------------------------------------


@pytest.mark.parametrize("p", ["1.0000001", "1e300", "1.001", "101"])
def test_D04_D06_mirror_p_where_its_maps_under_or_overflow_is_refused(tmp_path, capsys, p):
    _refused(capsys, ["run", "--out", str(tmp_path / "r"), *TINY, *_sets(optimizer="mirror", mirror_p=p)],
             "mirror_p", "[1.01, 100]")  # fmt: skip


def test_D13_mirror_descent_without_a_trained_query_is_refused(tmp_path, capsys):
    _refused(capsys, ["run", "--out", str(tmp_path / "r"), *TINY, *_sets(optimizer="mirror", train="nu")],
             "train=nu", "mirror")  # fmt: skip


def test_D21_mirror_descent_with_the_l2_max_margin_limit_is_refused(tmp_path, capsys):
    _refused(capsys, ["run", "--out", str(tmp_path / "r"), *TINY, *_sets(optimizer="mirror", limit="true")],
             "limit", "l_p")  # fmt: skip


def test_D_mirror_inside_its_range_runs(tmp_path):
    for p in ("1.01", "100"):
        out = tmp_path / p
        assert main(["run", "--out", str(out), "--quiet", *TINY, *_sets(optimizer="mirror", mirror_p=p)]) == 0


# -- E: check-grad -----------------------------------------------------------------------------


@pytest.mark.parametrize("h", ["1e-300", "1e-12", "0.5"])
def test_E27_check_grad_refuses_a_step_that_drowns_the_difference(capsys, h):
    _refused(capsys, ["check-grad", "--h", h], "--h", "[1e-10, 0.01]")


# -- G: rerunning a saved run ------------------------------------------------------------------


@pytest.fixture(scope="module")
def ps_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("saved") / "r"
    assert main(["run", "--out", str(out), "--quiet", *PS]) == 0
    return out


def _config(folder):
    return json.loads((folder / "result.json").read_text())["config"]


def test_G03_a_rerun_with_another_d_decides_n_again(ps_run, tmp_path):
    assert main(["run", str(ps_run), "--out", str(tmp_path / "r"), "--quiet", "--set", "d=40"]) == 0
    c = _config(tmp_path / "r")
    assert (c["n"], c["d"], c["alpha"]) == (40, 40, 1.0)


def test_G04_a_rerun_with_another_alpha_decides_n_again(ps_run, tmp_path):
    assert main(["run", str(ps_run), "--out", str(tmp_path / "r"), "--quiet", "--set", "alpha=2"]) == 0
    c = _config(tmp_path / "r")
    assert (c["n"], c["d"], c["alpha"]) == (40, 20, 2.0)


def test_G12_a_rerun_with_seeds_replaces_the_saved_seed(ps_run, tmp_path):
    assert main(["run", str(ps_run), "--out", str(tmp_path / "r"), "--quiet", "--seeds", "0-1"]) == 0
    assert [_config(tmp_path / "r" / f"seed-{k}")["seed"] for k in (0, 1)] == [0, 1]


def test_G_a_rerun_with_another_d_takes_the_default_scales_of_the_new_d(tmp_path):
    saved = tmp_path / "c"
    assert main(["run", "--out", str(saved), "--quiet", *TINY]) == 0
    assert main(["run", str(saved), "--out", str(tmp_path / "r"), "--quiet", "--set", "d=40"]) == 0
    c = _config(tmp_path / "r")
    assert c["init_W_scale"] == pytest.approx(1 / np.sqrt(3 * 40))
    assert main(["run", str(saved), "--out", str(tmp_path / "same"), "--quiet"]) == 0
    same = json.loads((tmp_path / "same" / "result.json").read_text())
    first = json.loads((saved / "result.json").read_text())
    assert same["config"] == first["config"] and same["final"] == first["final"]


@pytest.mark.parametrize("version, words", [(999, "newer attnsim"), ("five", "not a version"), (-1, "not a")])
def test_G21_a_result_of_an_unknown_schema_is_refused(ps_run, tmp_path, capsys, version, words):
    folder = tmp_path / "future"
    folder.mkdir()
    for f in ps_run.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    meta = json.loads((folder / "result.json").read_text())
    meta["schema_version"] = version
    (folder / "result.json").write_text(json.dumps(meta))
    _refused(capsys, ["run", str(folder), "--out", str(tmp_path / "r")], words)
    _refused(capsys, ["plot", str(folder), "--out", str(tmp_path / "p.png")], words)


# -- F: theory ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets", [["alpha=1e300"], ["sigma=1e150"], ["weight_decay=1e300"], ["teacher_A=[[1e50,0],[0,1]]"]]
)
def test_F07_F14_F16_F20_theory_beyond_float64_says_not_converged_in_words(capsys, sets):
    assert main(["theory", "positional_semantic", "--set", sets[0]]) == 1
    err = capsys.readouterr().err
    assert "not converged" in err
    assert "Warning" not in err and "Traceback" not in err and ".py:" not in err, err


def test_F07_the_solver_returns_not_converged_for_a_huge_alpha():
    with np.errstate(all="raise"):  # nothing is left to NumPy's warnings
        sol = replica.iterate(Settings(alpha=1e300), order=8, max_iter=5)
    assert not sol.converged and "overflow" in sol.message


# -- T: TOML nesting ---------------------------------------------------------------------------


@pytest.mark.parametrize("depth, key", [(5000, "T"), (500, "teacher_A"), (300, "teacher_A")])
def test_T29_T30_a_value_nested_too_deep_is_one_line(tmp_path, capsys, depth, key):
    path = tmp_path / "deep.toml"
    path.write_text(f'model = "positional_semantic"\n{key} = ' + "[" * depth + "]" * depth + "\n")
    line = _refused(capsys, ["run", str(path), "--out", str(tmp_path / "r")])
    assert len(line) < 300


def test_T29_a_set_value_nested_too_deep_is_one_line(tmp_path, capsys):
    deep = "[" * 3000 + "]" * 3000
    line = _refused(capsys, ["run", "--out", str(tmp_path / "r"), "--set", f"teacher_A={deep}"], "nested")
    assert len(line) < 300


# -- R: resources ------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform != "linux", reason="ulimit -v is POSIX; the check reads RLIMIT_AS")
def test_R05_an_address_space_too_small_for_the_libraries_is_one_line(tmp_path):
    code = "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (400 * 2**20, -1));"
    code += "from attnsim.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "run", "--out", str(tmp_path / "r"), *TINY],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and "ulimit -v" in lines[0], done.stderr
    assert not (tmp_path / "r").exists()
