"""The encoder as attnsim runs it: the ModelSpec (its planning needs the config alone;
the stepper, kernels and reference load with the methods that run the model, "lazy" below)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...config import Config
from ...data.dataset import Dataset, Streams
from ...registry import ENCODER_ARRAYS as PARAMS
from ..base import GradCheck, ModelSpec

if TYPE_CHECKING:  # names in annotations only
    from ...runtime.workspace import Workspace


class EncoderSpec(ModelSpec):
    name = "encoder"
    integrators = ("gd",)  # what its problem builds a stepper for
    warm_configs = {
        "gd": {"model": "encoder", "n": 4, "T": 4, "d": 12, "mlp_dim": 6, "steps": 2, "test_n": 2}
    }

    def gradient_cases(self, engine: str) -> list[tuple[str, dict]]:
        small = {**self.warm_configs["gd"], "test_n": 0, "lr": 0.05}
        return [
            ("skip logistic", small),
            ("skip linear", {**small, "loss": "linear"}),
            ("no skip", {**small, "skip": False}),
        ]

    def plan(self, cfg: Config, user_data: bool) -> tuple[str, str]:
        return "dense", "the encoder runs in d dimensions (only the CLS path is computed)"

    def memory_estimate(self, cfg: Config, engine: str, save_scores: bool = False) -> list:
        n, T, d = cfg.n, cfg.T, cfg.d
        params = 3.0 * d * d + 2.0 * d * cfg.mlp_dim
        return [
            (
                "d, mlp_dim",
                f"the encoder's parameters, gradients and a copy (3 x {params:.3g} floats)",
                24 * params,
            ),
            ("n, T, d", "the training tokens and their LayerNorm (3 n*T*d floats)", 24.0 * n * T * d),
            (
                "test_n, T, d",
                f"the test set (test_n*T*d = {cfg.test_n:.3g}*{T}*{d} floats)",
                8.0 * cfg.test_n * T * d,
            ),
        ] + (
            []
            if cfg.precision_twin == "none"
            else [
                (
                    "precision_twin, n, T, d",
                    "the precision twin's parameters, gradients and moments (4 x params) and its every-token "
                    "LayerNorm, keys, values and their gradients (about 12 n*(T+1)*d floats, float64 inside)",
                    4.0 * 4 * params + 8.0 * 12 * n * (T + 1) * d,
                )
            ]
        )

    def step_flops(self, cfg: Config, engine: str) -> float:
        return 12.0 * cfg.n * cfg.d * (cfg.d + cfg.mlp_dim)

    def setup_key(self, cfg: Config) -> tuple:
        return (cfg.seed, cfg.n, cfg.T, cfg.d, cfg.mlp_dim)

    def warm_up(self) -> None:
        from . import passes  # lazy

        passes.warmup()

    def build(
        self, cfg: Config, ds: Dataset | None, streams: Streams, engine: str, reason: str, ws: Workspace
    ) -> tuple:
        from ...data.synthetic import data_keys, generate  # lazy
        from .model import EncoderProblem  # lazy

        if ds is None:
            ds = generate(data_keys(cfg), streams)
        return EncoderProblem(cfg, ds, streams, reason), ds

    def precision_twin(self, problem: Any, cfg: Config, rel: Any, y: Any) -> Any:
        if cfg.precision_twin == "none":
            return None
        from .precision import EncoderTwin  # lazy: only a twin's run loads it

        adam = (cfg.adam_beta1, cfg.adam_beta2, cfg.adam_eps, cfg.weight_decay)
        return EncoderTwin(
            problem.ds.X,
            y,
            problem.P0,
            cfg.lr,
            cfg.skip,
            cfg.precision_twin,
            rel,
            adam=adam if cfg.optimizer == "adam" else None,
        )

    def population_note(self, ds: Dataset, problem: Any) -> str:
        return (
            "none for the encoder (no closed form): test metrics come from a finite test set of "
            f"{problem.info.get('test_n')} independent samples"
        )

    def check_grad(self, cfg: Config, seed: int, h: float) -> GradCheck:
        from ..base import finite_difference_errors  # lazy
        from . import passes as K  # lazy
        from .reference import encoder_loss, random_encoder  # lazy

        X, y, P = random_encoder(seed)
        n, T, d = X.shape
        m = P["W1"].shape[0]
        head = [
            f"encoder (skip={cfg.skip}): central differences of the all-positions reference loss against the",
            f"CLS-path gradients, h = {h:g}, n={n} T={T} d={d} mlp_dim={m}, parameters away from init",
        ]
        names = list(PARAMS)
        errors = {
            loss: finite_difference_errors(
                lambda *v, loss=loss: encoder_loss(X, y, dict(zip(names, v)), cfg.skip, loss),
                lambda *v, loss=loss: [
                    K.loss_and_grads(X, y, dict(zip(names, v)), cfg.skip, loss)[1][k] for k in names
                ],
                {k: P[k] for k in names},
                h=h,
            )
            for loss in ("logistic", "linear")
        }
        return GradCheck(head, errors)


SPEC = EncoderSpec()
