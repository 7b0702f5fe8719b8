"""Record what attnsim computes for a fixed set of runs, and compare two such records.

    python scripts/compare_outputs.py record OUT.json     # runs the cases with the installed attnsim
    python scripts/compare_outputs.py diff A.json B.json  # exit 1 if any number or field differs

The cases: the default run, a dense run, a gradient flow, the encoder on its parity fixture,
the max-margin limit, every optimizer (GD, normalized GD, AdamW) in the engines they run in,
StableMax, the precision twins, online SGD and the population flow, the encoder's optimizers
and twin, positional/semantic attention (GD and AdamW), single-location regression, linear
attention in context, and a small sweep (its records), plus the figure numbers files in figures/.
Every result.json field is compared exactly, except those that measure this machine or this
checkout (timings, versions, thread settings, the git revision); every trajectory array by a
SHA-256 of its bytes. Used to show that a change of structure changes no number.
"""

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "default": [],
    "dense": ["--set", "d=300", "--set", "engine=dense", "--set", "steps=2000"],
    "flow": ["--set", "d=500", "--set", "integrator=flow", "--set", "steps=1e8", "--set", "log_scale=log"],
    "train_p_nu": ["--set", "d=400", "--set", "train=p,nu", "--set", "noise_rate=0.2"],
    "limit": ["--set", "d=300", "--set", "limit=true", "--set", "steps=3000"],
    "encoder": [
        "--data",
        str(ROOT / "tests/data/peer_encoder_small.npz"),
        "--set",
        "model=encoder",
        "--set",
        "steps=30",
        "--set",
        "lr=0.05",
    ],  # fmt: skip
    "adam": ["--set", "d=120", "--set", "optimizer=adam", "--set", "steps=300", "--set", "lr=0.002"],
    "normalized": [
        "--set",
        "d=300",
        "--set",
        "optimizer=normalized",
        "--set",
        "steps=500",
        "--set",
        "lr=0.05",
    ],
    "normalized_dense": ["--set", "d=150", "--set", "engine=dense", "--set", "optimizer=normalized"],
    "train_p_xw": ["--set", "d=300", "--set", "train=p", "--set", "init_W=identity", "--set", "steps=3000"],
    "implicit": ["--set", "d=5000", "--set", "engine=implicit", "--set", "init_W=gaussian"],
    "stablemax": ["--set", "d=300", "--set", "attention=stablemax", "--set", "steps=800"],
    "twin_f32": ["--set", "d=150", "--set", "precision_twin=float32", "--set", "steps=400"],
    "twin_bf16_adam": [
        "--set",
        "d=100",
        "--set",
        "precision_twin=bfloat16",
        "--set",
        "optimizer=adam",
        "--set",
        "steps=200",
        "--set",
        "lr=0.002",
    ],  # fmt: skip
    "online": [
        "--set",
        "integrator=online",
        "--set",
        "batch=16",
        "--set",
        "train=p",
        "--set",
        "init_W=identity",
        "--set",
        "d=2000",
        "--set",
        "steps=300",
        "--set",
        "lr=0.01",
    ],  # fmt: skip
    "population": [
        "--set",
        "integrator=population",
        "--set",
        "train=p",
        "--set",
        "init_W=identity",
        "--set",
        "steps=200",
        "--set",
        "lr=0.05",
    ],  # fmt: skip
    "magen": ["--preset", "magen2025", "--set", "d=400", "--set", "n=20", "--set", "steps=40"],
    "encoder_adam": [
        "--set",
        "model=encoder",
        "--set",
        "d=24",
        "--set",
        "mlp_dim=12",
        "--set",
        "steps=40",
        "--set",
        "optimizer=adam",
        "--set",
        "lr=0.001",
        "--set",
        "test_n=64",
    ],  # fmt: skip
    "encoder_normalized": [
        "--set",
        "model=encoder",
        "--set",
        "d=24",
        "--set",
        "mlp_dim=12",
        "--set",
        "steps=40",
        "--set",
        "optimizer=normalized",
        "--set",
        "lr=0.01",
        "--set",
        "test_n=64",
    ],  # fmt: skip
    "encoder_twin": [
        "--set",
        "model=encoder",
        "--set",
        "d=24",
        "--set",
        "mlp_dim=12",
        "--set",
        "steps=40",
        "--set",
        "precision_twin=float32",
        "--set",
        "test_n=64",
    ],  # fmt: skip
    "positional_semantic": ["--set", "model=positional_semantic", "--set", "d=100", "--set", "alpha=1",
                            "--set", "steps=200", "--set", "pop_points=1024", "--set", "test_n=200"],
    "positional_semantic_adam": ["--set", "model=positional_semantic", "--set", "d=60", "--set", "n=90",
                                 "--set", "init=positional", "--set", "optimizer=adam", "--set", "lr=0.01",
                                 "--set", "steps=100", "--set", "pop_points=512"],
    "single_location": ["--set", "model=single_location", "--set", "init=sphere", "--set", "steps=3000"],
    "single_location_softmax": ["--set", "model=single_location", "--set", "integrator=gd", "--set", "d=40",
                                "--set", "n=100", "--set", "attention=softmax", "--set", "attention_scale=2",
                                "--set", "steps=100", "--set", "lr=0.02", "--set", "test_n=500"],
    "linear_icl": ["--set", "model=linear_icl", "--set", "d=12", "--set", "task_ratio=0.5"],
    "linear_icl_flow": ["--set", "model=linear_icl", "--set", "d=8", "--set", "integrator=flow",
                        "--set", "steps=1e5", "--set", "log_scale=log", "--set", "task_ratio=inf"],
    "linear_attention": ["--set", "model=linear_attention", "--set", "init_scale=1e-4", "--set", "steps=1e6"],
    "linear_attention_gd": ["--set", "model=linear_attention", "--set", "integrator=gd", "--set", "n=500",
                            "--set", "parametrization=merged", "--set", "init=published", "--set", "lr=0.5",
                            "--set", "steps=2000", "--set", "init_scale=0.01"],
}  # fmt: skip
SWEEP = """[sweep]
name = "cmp"
seeds = [0, 1]
[base]
d = 300
steps = 1500
[grid]
signal_norm = [5, 20]
n = [10, 20]
"""
MACHINE = {
    "elapsed_s",
    "setup_s",
    "evaluation_s",
    "startup_s",
    "versions",
    "threads",
    "git",
    "elapsed",
    "wall_s",
    "cpu_s",
}


def _clean(value):
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in MACHINE}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _arrays(path: Path) -> dict:
    with np.load(path) as z:
        return {k: hashlib.sha256(np.ascontiguousarray(z[k]).tobytes()).hexdigest()[:16] for k in z.files}


def _attnsim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "attnsim.cli", *args], check=True, stdout=subprocess.DEVNULL)


def record(out: Path) -> None:
    got: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES.items():
            _attnsim("run", "--out", f"{tmp}/{name}", *args)
            run = Path(tmp, name)
            got[name] = {"result": _clean(json.loads((run / "result.json").read_text()))}
            for npz in sorted(run.glob("*.npz")):
                got[name][npz.name] = _arrays(npz)
        Path(tmp, "cmp.toml").write_text(SWEEP)
        _attnsim("sweep", f"{tmp}/cmp.toml", "--out", f"{tmp}/sw", "--workers", "1")
        for rec in sorted(Path(tmp, "sw", "cmp", "records").glob("*.json")):
            got[f"sweep/{rec.name}"] = _clean(json.loads(rec.read_text()))
    for txt in sorted((ROOT / "figures").glob("*.txt")):
        got[f"figures/{txt.name}"] = txt.read_text().splitlines()
    out.write_text(json.dumps(got, indent=1, sort_keys=True))


def _walk(a, b, where: str, out: list) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}/{k}: only in {'B' if k not in a else 'A'}")
            else:
                _walk(a[k], b[k], f"{where}/{k}", out)
    elif a != b:
        out.append(f"{where}: {str(a)[:200]} != {str(b)[:200]}")


def diff(a: Path, b: Path) -> int:
    out: list[str] = []
    _walk(json.loads(a.read_text()), json.loads(b.read_text()), "", out)
    print("\n".join(out) if out else "identical")
    return 1 if out else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["record"] and len(sys.argv) == 3:
        record(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["diff"] and len(sys.argv) == 4:
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
