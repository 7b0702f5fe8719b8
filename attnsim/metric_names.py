"""The names a classifier run of the paper's kind writes (result.json's ``final`` and its
trajectory arrays) and what each means: the names every model's own metrics are checked against
(:func:`attnsim.registry.key_collisions`). A model may reuse one of these names only with this
meaning, word for word (``SHARED[name]`` in its registry line); any other name it declares must
be new. docs/results.md gives the same table for readers; ``tests/test_models.py`` checks that a
classifier run writes exactly these names.
"""

from __future__ import annotations

ROLES = ("relevant", "weak_aligned", "weak_opposite", "irrelevant")


def _with_se(name: str, meaning: str) -> dict[str, str]:
    return {
        name: meaning,
        f"{name}_se": f"the standard error of {name}",
        f"{name}_resolved": f"1 where {name} is resolved, 0 where it is an upper bound",
    }


CLASSIFIER_METRICS: dict[str, str] = {
    "train_loss": "the training loss: the mean over the training samples of the loss the run descends",
    "train_acc": "training accuracy against the observed labels",
    "train_acc_clean": "training accuracy on the clean samples",
    "train_acc_noisy": "training accuracy on the noisy samples against their flipped labels",
    "train_acc_noisy_true": "training accuracy on the noisy samples against their true labels",
    "n_fitted": "training samples fitted (margin > 0)",
    "n_fitted_clean": "clean training samples fitted",
    "n_fitted_noisy": "noisy training samples fitted",
    "n_clean": "clean training samples",
    "n_noisy": "noisy training samples",
    "test_loss": "the finite test set's mean loss",
    "test_acc": "the finite test set's accuracy",
    **{
        f"score_{g}_{r}": f"mean attention score of the {g} training samples on their {r} tokens"
        for g in ("clean", "noisy")
        for r in ROLES
    },
    "score_max": "mean largest attention score of the training samples",
    "score_cls": "mean attention score on the CLS token (the encoder)",
    "frakS_clean": "the paper's cumulative s_rel (1 - s_rel) over the clean samples",
    "frakS_noisy": "the paper's cumulative s_rel (1 - s_rel) over the noisy samples",
    "frakS_pos": "the paper's cumulative s_rel (1 - s_rel) over class +1",
    "frakS_neg": "the paper's cumulative s_rel (1 - s_rel) over class -1",
    "p_norm": "|p|",
    "W_dev": "|W - W(0)|_F",
    **_with_se("pop_error", "population error of a fresh clean sample"),
    "pop_loss": "population loss of a fresh clean sample",
    **{f"pop_score_{r}": f"fresh samples' mean attention score on their {r} tokens" for r in ROLES},
    **{
        f"gap_{g}_{stat}": f"the {stat} logit gap of the {g} samples' {tok} token"
        for g, tok in (("clean", "relevant"), ("noisy", "fitting"))
        for stat in ("min", "mean", "eff")
    },
    "pop_error_init": "the population error at step 0",
    "pop_error_uniform": "the population error with uniform attention and the initial head",
    **_with_se("bayes_error", "the Bayes error of the data model"),
    **_with_se("excess_error", "the population error in excess of the Bayes error"),
    **_with_se("error_clean_twin", "the error of the same run on clean labels"),
    **_with_se("label_noise_cost", "the error minus the clean-label twin's error"),
    "generalized": "excess error <= benign_error",
    "regime": "the label-overfitting regime (docs/results.md)",
    "regime_rule": "the rule the regime was decided by",
    "regime_borderline": "whether the excess error's +-2 se interval contains benign_error",
    "clean_twin": "why there is no clean-label twin's error",
    "mm_cos": "cos(q, q_mm): the direction's cosine to the max-margin direction (limit = true)",
    **(
        MEASURED_TIMES := {
            "t_memorize": "the step from which every training sample stays fitted (null: not within the run)",
            "t_select": "the step from which fresh samples' mean relevant-token score stays >= gen_score",
            "t_pop_loss_settled": "the step from which the population loss stays within 1% of its end value",
            "times_refined": "whether t_select and t_pop_loss_settled were located to the step",
        }
    ),
}

# arrays a classifier run saves beside its metrics (not metrics: per sample, per token, labels)
CLASSIFIER_ARRAYS = (
    "step",
    "example_scores",
    "example_index",
    "selected",
    "selected_role",
    "fit_step",
    "roles",
    "y",
    "y_clean",
)
TWIN_PREFIX = "twin_"  # a precision twin's arrays: every name above with this prefix

# a model reuses a name with its meaning: metrics={"train_loss": SHARED["train_loss"]}
SHARED = CLASSIFIER_METRICS


def reserved(name: str) -> str | None:
    """What ``name`` already means in a classifier run (None: a new name)."""
    if name in CLASSIFIER_METRICS:
        return CLASSIFIER_METRICS[name]
    if name in CLASSIFIER_ARRAYS:
        return f"the classifier runs' trajectory array {name}"
    if name.startswith(TWIN_PREFIX):
        return "a precision twin's trajectory array"
    return None
