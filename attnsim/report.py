"""What the command line shows of a run: its summary, the precision twin's and the limit's lines, and
check-grad's verdict (the figures of a run or a sweep folder: :mod:`attnsim.report_figures`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from . import metrics, registry
from ._meta import FRESH_INTEGRATORS, POPULATION_INTEGRATORS

if TYPE_CHECKING:  # names in annotations only
    from .results import Result


def _fmt(x, spec: str = ".4f") -> str:
    return "n/a" if x is None or x != x else format(x, spec)


def _regime_reason(f: dict, c: dict) -> str:
    """What the regime was decided on (SPEC §3)."""
    regime = f["regime"]
    if regime == "fresh_samples":
        return "every step saw fresh samples: nothing memorized, no label-overfitting verdict"
    if regime == "clean_labels":
        return "no noisy training label: no label-overfitting verdict"
    if regime not in ("benign", "harmful"):
        noisy, clean = f"{f['n_fitted_noisy']} of {f['n_noisy']}", f"{f['n_fitted_clean']} of {f['n_clean']}"
        return f"{noisy} noisy and {clean} clean samples fitted"
    side = "at most" if regime == "benign" else "above"
    excess = metrics.format_error(f["excess_error"], f["excess_error_se"], f.get("excess_error_resolved"))
    what = "the Bayes error" if f.get("regime_rule", "").startswith("excess") else "0 (no Bayes error)"
    border = "; borderline: its +-2 se interval contains the threshold" if f.get("regime_borderline") else ""
    return (
        f"every label fitted, the {f['n_noisy']} flipped ones included; error in excess of {what} "
        f"{excess}: {side} the benign threshold {c['benign_error']:g}{border}"
    )


def _generalization(f: dict, c: dict) -> str:
    """Whether the run generalizes, whatever its labels: its error within
    benign_error of the Bayes error (no verdict without an error measure)."""
    if f.get("generalized") is None:
        return "no error verdict (no population metrics, no test set)"
    if f["generalized"]:
        return f"error within {c['benign_error']:g} of the Bayes error"
    return f"error more than {c['benign_error']:g} above the Bayes error"


def _reference_line(f: dict) -> str | None:
    """The errors a reader judges the verdict by: the Bayes error, uniform
    attention, and the clean-label twin with the cost of label noise."""
    parts = []
    if f.get("bayes_error") == f.get("bayes_error"):
        exact = f.get("bayes_error_se") == 0.0
        parts.append(
            "Bayes error "
            + (
                f"{f['bayes_error']:.3g} (exact)"
                if exact
                else metrics.format_error(
                    f["bayes_error"], f["bayes_error_se"], f.get("bayes_error_resolved")
                )
            )
        )
    if f.get("pop_error_uniform") == f.get("pop_error_uniform"):
        parts.append(f"uniform attention {f['pop_error_uniform']:.3g}")
    twin = f.get("error_clean_twin")
    if twin == twin and twin is not None:
        cost = metrics.format_error(
            f["label_noise_cost"], f["label_noise_cost_se"], f.get("label_noise_cost_resolved")
        )
        twin_text = metrics.format_error(twin, f["error_clean_twin_se"], f.get("error_clean_twin_resolved"))
        ratio = ""
        err = f.get("pop_error") if f.get("pop_error") == f.get("pop_error") else None
        material = err is not None and err >= 1e-3 and f.get("label_noise_cost_resolved") == 1.0
        if material and twin > 0 and err >= 3 * twin:
            ratio = f", {err / twin:.3g}x the twin's error"
        parts.append(f"label noise costs {cost} (the same run with clean labels: {twin_text}{ratio})")
    return "errors: " + "; ".join(parts) if parts else None


def _data_line(res) -> str:
    c, f, th = res.config, res.final, res.theory
    snr = "" if th.get("snr") is None else f"; SNR={th['snr']:.4g}, n*SNR^2={th['n_snr2']:.4g}"
    blocks = registry.MODELS[c["model"]].blocks if c.get("model") in registry.MODELS else ()
    trained = c["train"] if set(c["train"].split(",")) <= set(blocks) else "every parameter"
    fit = f"train={trained}, lr={c['lr']:g}"
    if c.get("integrator") in FRESH_INTEGRATORS:
        quadrature = c["integrator"] in POPULATION_INTEGRATORS
        monitor = "the quadrature's samples" if quadrature else f"{c['n']} fresh samples"
        return (
            f"data: fresh samples, T={c['T']} d={c['d']} |mu|={c['signal_norm']:g} sigma={c['sigma']:g} "
            f"rho={c['rho']:g} noise_rate={c['noise_rate']:g}, {fit}{snr.split(',')[0]}; "
            f"train_* on {monitor} (no training set)"
        )
    source = res.data.get("source", "generated")
    if not source.startswith("generated"):  # only what the file says
        known = "" if th.get("snr") is None else f" |mu|={c['signal_norm']:g} sigma={c['sigma']:g}"
        size = f"n={c['n']} T={c['T']} d={c['d']}{known}"
        return f"data: {source}: {size}, {f['n_noisy']} noisy labels, {fit}{snr}"
    return (
        f"data: n={c['n']} T={c['T']} d={c['d']} |mu|={c['signal_norm']:g} sigma={c['sigma']:g} "
        f"rho={c['rho']:g} noise_rate={c['noise_rate']:g} ({c['label_noise']}: {f['n_noisy']} noisy), "
        f"{fit}{snr}"
    )


def format_summary(res: Result) -> str:
    """What ``attnsim run`` prints of a run (a model that is not a classifier says it itself)."""
    c, f, e = res.config, res.final, res.engine
    spec = _own_metrics(c)
    if spec is not None:
        version = res.versions.get("attnsim", "")
        head = f"attnsim {version}: {format_step(c['steps'])} steps of {_method(c)} in {res.elapsed_s:.2f} s"
        return "\n".join([f"{head} (start-up {res.startup_s:.2f} s)", *spec.summary(res),
                          f"computed with: engine {e['used']} ({e['reason']})"])  # fmt: skip
    lines = [
        f"attnsim {res.versions.get('attnsim', '')}: {format_step(c['steps'])} steps of {_method(c)} "
        f"in {res.elapsed_s:.2f} s (start-up {res.startup_s:.2f} s)",
        _data_line(res),
        f"train: loss {_fmt(f['train_loss'])}, acc {_fmt(f['train_acc'], '.3f')} "
        f"(clean {_fmt(f['train_acc_clean'], '.3f')}, noisy fitted {_fmt(f['train_acc_noisy'], '.3f')}, "
        f"noisy samples' true labels predicted {_fmt(f['train_acc_noisy_true'], '.3f')})",
    ]
    if f.get("test_acc") == f.get("test_acc"):
        lines.append(f"test:  loss {_fmt(f['test_loss'])}, acc {_fmt(f['test_acc'], '.4f')}")
    if f.get("pop_error") == f.get("pop_error"):
        lines.append(
            f"population: error "
            f"{metrics.format_error(f['pop_error'], f['pop_error_se'], f.get('pop_error_resolved'))} "
            f"(test accuracy {_fmt(1.0 - f['pop_error'], '.4f')}; "
            f"at init {_fmt(f['pop_error_init'], '.3g')}), "
            f"loss {_fmt(f['pop_loss'])}, relevant-token score on new samples "
            f"{_fmt(f.get('pop_score_relevant'), '.3f')}"
        )
    else:
        lines.append(f"population: n/a ({res.data.get('population')})")
    for g in ("clean", "noisy"):
        if f.get(f"score_{g}_relevant") == f.get(f"score_{g}_relevant"):
            lines.append(
                f"scores ({g}): relevant {_fmt(f[f'score_{g}_relevant'], '.3f')}, "
                f"weak aligned {_fmt(f[f'score_{g}_weak_aligned'], '.3f')}, "
                f"weak opposite {_fmt(f[f'score_{g}_weak_opposite'], '.3f')}, "
                f"irrelevant {_fmt(f[f'score_{g}_irrelevant'], '.3f')}"
            )
    lines.append(f"regime: {f['regime']} ({_regime_reason(f, c)}); {_generalization(f, c)}")
    reference = _reference_line(f)
    if reference is not None:
        lines.append(reference)
    lines.append(_times_line(c, f))
    if res.limit:
        lines.append(_limit_line(res.limit))
    if res.precision:
        lines.append(precision_line(res.precision))
    lines.append(f"computed with: engine {e['used']} ({e['reason']})")
    return "\n".join(lines)


def _times_line(c: dict, f: dict) -> str:
    """When the training set was memorized and when new samples' relevant token was selected
    (``final``'s t_memorize, t_select; each flagged as the first logged step past it unless the
    times were refined). Selection is a score event, not generalization: "delayed generalization"
    (the paper's) is said only of a run that generalizes (its error within benign_error of the
    Bayes error) and selects after it memorized; a selection at step 0 that uniform attention
    already gives (1/T >= gen_score, T = 2) is no event."""
    gen_score = c["gen_score"]
    fresh = f"relevant token selected on new samples (score >= {gen_score:g})"
    t_mem, t_sel = f.get("t_memorize"), f.get("t_select")
    memorized = (
        "memorized: no training set"
        if c.get("integrator") in FRESH_INTEGRATORS
        else _when("memorized", t_mem)
    )
    T = c.get("T") or 0
    if t_sel is not None and t_sel == 0 and T and 1.0 / T >= gen_score:
        selected = f"{fresh}: no event (uniform attention already scores 1/T = {1.0 / T:.3g})"
        t_sel = None
    else:
        selected = _when(fresh, t_sel, "from")
    line = f"times: {memorized}; {selected}"
    if t_mem and t_sel and t_sel > t_mem and f.get("generalized"):
        line += f"; delayed generalization: selected {t_sel / t_mem:.3g}x the memorization time"
    if (t_mem is not None or t_sel is not None) and not f.get("times_refined"):
        line += " (logged steps: each the first log point past the event; refine_times=true finds the step)"
    return line


def precision_line(pr: dict) -> str:
    """The precision twin in one line (SPEC §16)."""
    if pr.get("status") == "failed":
        return pr.get("reason") or f"precision twin ({pr['dtype']}): failed"
    pop = pr.get("pop_error")
    if pop is not None and pop == pop:
        err = metrics.format_error(pop, pr.get("pop_error_se"), pr.get("pop_error_resolved"))
        err = f"population error {err}"
    else:  # a model without population metrics: its test set, when it has one
        acc = pr.get("test_acc")
        err = "no population metrics" if acc is None or acc != acc else f"test error {1.0 - acc:.3g}"
    sat = pr.get("first_saturated_step")
    stop = pr.get("stopped_at")
    dep = pr.get("departure_step")
    parts = [
        f"precision twin ({pr['dtype']}): regime {pr.get('regime')}, {err}",
        "no score rounds to 1" if sat is None else f"a score first rounds to 1 at step {format_step(sat)}",
        f"{_fmt(pr.get('saturated_fraction'), '.0%')} of samples saturated at the end",
        "within 1% of the exact run throughout"
        if dep is None
        else f"departs (1%) by step {format_step(dep)}",
        _when("relevant token selected on new samples", pr.get("t_select"), "from"),
    ]
    if stop is not None:
        parts.append(f"stops moving after step {format_step(stop)}")
    return "; ".join(parts)


def _method(c: dict) -> str:
    """The training rule in words: the optimizer of discrete steps, or the flow."""
    if c.get("integrator") == "flow":
        return f"gradient flow ({c.get('flow_method', '')})"
    if c.get("integrator") in POPULATION_INTEGRATORS:
        batch = f", with online SGD's variance at batch {c['batch']}" if c.get("batch") else ""
        rule = "gradient flow" if c["integrator"] == "population_flow" else "gradient descent"
        return f"{rule} on the population risk{batch}"
    if c.get("integrator") == "online":
        return f"online SGD (a fresh batch of {c.get('batch') or c['n']} per step)"
    return {"gd": "gradient descent", "adam": "AdamW", "normalized": "normalized gradient descent"}.get(
        c.get("optimizer", "gd"), str(c.get("optimizer"))
    )


def format_step(t: float) -> str:
    """A step as a person reads it: whole steps as integers, located times (the flow,
    a refined crossing) to four significant figures."""
    if not float(t).is_integer():
        return f"{t:.4g}"
    if abs(t) >= 1e6 and float(f"{t:.4g}") == t:  # a round count of steps: 1e+14, not 15 digits
        return f"{t:.4g}"
    return f"{int(t)}"


def _when(what: str, t: float | None, at: str = "at") -> str:
    return f"{what}: never within the run" if t is None else f"{what} {at} step {format_step(t)}"


def _limit_line(lim: dict) -> str:
    """The max-margin limit's verdict in one line (result.json's ``limit`` section)."""
    if not lim.get("feasible", False):
        return f"max-margin limit ({lim.get('variable', '?')}): infeasible ({lim.get('message', '')})"
    err = metrics.format_error(lim.get("pop_error"), lim.get("pop_error_se"), lim.get("pop_error_resolved"))
    cert = lim.get("certificate") or {}
    return (
        f"max-margin limit ({lim.get('variable')}-SVM): population error {err}, relevant token "
        f"selected with probability {_fmt(lim.get('prob_relevant'), '.4f')}; cos to the run's "
        f"direction {_fmt(lim.get('cos'), '.4f')}; KKT residual {_fmt(lim.get('kkt'), '.1e')}, "
        f"{cert.get('n_violations', 0)} violation(s) of local optimality"
    )


def _own_metrics(c: dict):
    """The spec of a run's model when it is not a classifier (it prints and plots its own
    metrics); None for a classifier or a config naming no registered model."""
    spec = registry.spec(c["model"]) if c.get("model") in registry.MODELS else None
    return None if spec is None or spec.classifier else spec


def grad_verdict(errors: dict[str, dict], tol: float, width: int) -> int:
    """Print every block's errors and the verdict; the last line's last number
    is the worst per-block relative error (SPEC §8). Exit 1 above ``tol``."""
    worst, where = 0.0, ""
    lw = max((len(loss) for loss in errors), default=0)
    for loss, errs in errors.items():
        for block, e in errs.items():
            print(
                f"  {loss:{lw}s} {block:{width}s}: max |fd - analytic| {e['max_abs']:.2e}, "
                f"mean {e['mean_abs']:.2e}, relative {e['rel']:.2e}"
            )
            if not e["rel"] <= worst:  # NaN counts as the worst
                worst, where = e["rel"], f"{block} ({loss} loss)"
    ok = worst <= tol
    if not ok:
        print(
            f"attnsim: check-grad failed: block {where} has relative error {worst:.3g} > --tol {tol:g}",
            file=sys.stderr,
        )
    print(
        f"{'passed' if ok else 'FAILED'} at --tol {tol:g}; "
        f"worst per-block relative error (max |fd - analytic| / max |analytic|): {worst:.3e}"
    )
    return 0 if ok else 1
