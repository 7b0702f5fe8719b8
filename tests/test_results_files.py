"""What a run writes, as a newcomer meets it: file modes under the umask, where the code
came from, quick figures that never overwrite the committed ones, and docs/results.md
listing every field."""

import os
import stat
from pathlib import Path

import attnsim
from attnsim.cli import main

SMALL = ["--set", "d=40", "--set", "n=6", "--set", "T=5", "--set", "steps=20", "--set", "pop_points=64"]


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_output_files_respect_the_umask(tmp_path, monkeypatch, capsys):
    from attnsim import results

    monkeypatch.setattr(results, "FILE_MODE", 0o666 & ~0o022)
    assert main(["run", *SMALL, "--out", str(tmp_path / "r"), "--plot", "scores", "--quiet"]) == 0
    for name in ("result.json", "trajectory.npz", "scores.png"):
        assert _mode(tmp_path / "r" / name) == 0o644, name
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        '[sweep]\nname = "m"\n[base]\nn = 6\nT = 5\nd = 40\nsteps = 10\npop_points = 64\n'
        "[grid]\nlr = [0.01]\n"
    )
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--workers", "1"]) == 0
    root = tmp_path / "sw" / "m"
    for p in [root / "records.csv", root / "sweep.json", *root.glob("records/*.json")]:
        assert _mode(p) == 0o644, p


def test_the_module_reads_the_real_umask():
    from attnsim import results

    mask = os.umask(0)
    os.umask(mask)
    assert results.FILE_MODE == 0o666 & ~mask


def test_results_record_where_the_code_came_from(tmp_path):
    r = attnsim.simulate({"n": 6, "T": 5, "d": 40, "steps": 5, "pop_points": 64})
    git = r.git
    assert git and (git.get("revision") or git.get("reason"))
    if git.get("revision"):
        assert len(git["revision"]) == 40 and git["source"]


def test_quick_figures_never_overwrite_the_committed_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figures").mkdir()
    assert main(["figures", "dynamics", "--quick", "--cache", str(tmp_path / "c")]) == 0
    assert not list((tmp_path / "figures").iterdir())
    assert (tmp_path / "runs" / "figures-quick" / "fig2_dynamics.png").exists()


def test_the_docs_list_every_field_of_result_json_final_and_the_trajectory():
    """The field lists of docs/results.md name every key a run writes (templated names such
    as ``score_<group>_<role>`` count for each of their instances)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()
    names = set(re.findall(r"`([A-Za-z_<>]+)`", text))
    patterns = [re.compile("^" + re.sub(r"<[a-z]+>", "[a-z_]+", n) + "$") for n in names if "<" in n]
    suffixed = {n.strip("_") for n in names if n.startswith("_")}

    def listed(key: str) -> bool:
        if key in names or any(p.match(key) for p in patterns):
            return True
        base, _, end = key.rpartition("_")
        return end in suffixed and (base in names or any(p.match(base) for p in patterns))

    res = attnsim.simulate({"n": 4, "T": 4, "d": 20, "steps": 5, "pop_points": 64, "limit": True})
    sections = {
        "result.json": res.to_json(),
        "final": res.final,
        "trajectory": res.trajectory,
        "data": res.data,
    }
    for section, keys in sections.items():
        missing = [k for k in keys if not listed(k)]
        assert not missing, f"docs/results.md does not list {section} fields {missing}"
