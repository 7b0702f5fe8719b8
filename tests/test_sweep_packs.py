"""A large sweep's records packed into a few files (attnsim/sweep/packs.py): the same table as
its single records would give, kept beside the pack, resumed after a kill, damage recomputed."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from attnsim.sweep import load_sweep, packs
from attnsim.sweep.run import run_sweep
from attnsim.sweep.spec import parse_sweep
from attnsim.sweep.tables import _current_records, _flat, _table, sweep_table

BASE = {"n": 6, "T": 4, "d": 40, "steps": 10, "log_every": 5, "pop_points": 128, "pop_log_points": 2}


def _spec(seeds=6, norms=(2.0, 4.0, 8.0)):
    return parse_sweep(
        {"sweep": {"name": "p", "seeds": seeds}, "base": BASE, "grid": {"signal_norm": list(norms)}}
    )


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for c in a:
        if a[c].dtype == float:
            np.testing.assert_array_equal(a[c], b[c], err_msg=c)
        else:
            assert list(a[c]) == list(b[c]), c


def _from_records(root):
    _, recs, _ = _current_records(root)
    return _table([_flat(r) for r in recs])


@pytest.fixture
def small_packs(monkeypatch):
    monkeypatch.setattr(packs, "PACK_AT", 5)
    monkeypatch.setattr(sys.modules["attnsim.sweep.tables"], "_table_of", _dicts)


def _dicts(columns):
    """load_sweep's dict of NumPy columns (as without pandas), whichever is installed."""
    from attnsim.sweep.tables import _column

    return {c: _column(v) for c, v in columns.items()}


def test_a_large_sweep_ends_as_one_pack_with_its_table(tmp_path, small_packs):
    rep = run_sweep(_spec(), tmp_path, workers=1, progress=False)
    assert rep.ok == 18 and rep.computed == 18
    names = sorted(os.listdir(rep.store.dir))
    assert len(names) == 2 and names[0].startswith("pack-") and names[0].endswith(".jsonl")
    assert names[1] == names[0].replace(".jsonl", ".table")
    lines = (rep.store.dir / names[0]).read_bytes().splitlines()
    assert len(lines) == 18 and {line.split(b"\t")[0].decode() for line in lines} == set(rep.keys)
    kept = load_sweep(rep.root)  # from the kept table
    (rep.store.dir / names[1]).unlink()
    _same(kept, load_sweep(rep.root))  # from the packed records
    _same(kept, _from_records(rep.root))
    _, _, held = sweep_table(rep.root)
    assert held == {"points": 18, "records": 18, "failed": 0, "damaged": []}
    assert (rep.root / "records.csv").read_text().count("\n") == 19
    again = run_sweep(_spec(), tmp_path, workers=1, progress=False)
    assert again.computed == 0 and again.ok == 18


def test_a_small_sweep_keeps_one_file_per_record(tmp_path):
    rep = run_sweep(_spec(seeds=2), tmp_path, workers=1, progress=False)
    assert sorted(p.name for p in rep.store.dir.iterdir()) == sorted(f"{k}.json" for k in rep.keys)


def test_a_grown_grid_computes_only_its_new_points(tmp_path, small_packs):
    first = run_sweep(_spec(), tmp_path, workers=1, progress=False)
    grown = run_sweep(_spec(norms=(2.0, 4.0, 8.0, 16.0)), tmp_path, workers=1, progress=False)
    assert grown.computed == 6 and grown.ok == 24
    assert len(list(grown.store.dir.glob("pack-*.jsonl"))) == 1 and not list(grown.store.dir.glob("*.json"))
    old = {r["key"]: r["final"] for r in first.records()}
    assert all(r["final"] == old[r["key"]] for r in grown.records() if r["key"] in old)
    assert load_sweep(grown.root)["status"].size == 24


def test_a_damaged_packed_record_is_computed_again(tmp_path, small_packs):
    rep = run_sweep(_spec(), tmp_path, workers=1, progress=False)
    (pack,) = rep.store.dir.glob("pack-*.jsonl")
    lines = pack.read_bytes().splitlines(keepends=True)
    key, _, text = lines[3].partition(b"\t")
    lines[3] = key + b"\t" + text[: len(text) // 2] + b"\n"  # cut in half
    pack.write_bytes(b"".join(lines))
    again = run_sweep(_spec(), tmp_path, workers=1, progress=False)
    assert again.computed == 1 and again.ok == 18
    assert any("in a pack (not JSON)" in m for m in again.messages), again.messages
    (pack,) = again.store.dir.glob("pack-*.jsonl")
    recs = {r["key"]: r for r in again.records()}
    assert (
        json.loads(dict(line.split(b"\t", 1) for line in pack.read_bytes().splitlines())[key])
        == recs[key.decode()]
    )


def test_a_single_record_beside_the_pack_outdates_its_table(tmp_path, small_packs):
    rep = run_sweep(_spec(), tmp_path, workers=1, progress=False)
    rec = rep.records()[0]
    rec["final"]["pop_error"] = 0.25  # a point computed again by another sweep, say
    (rep.store.dir / f"{rec['key']}.json").write_text(json.dumps(rec))
    assert packs.read_table(rep.store.dir, "anything") is None
    assert load_sweep(rep.root)["pop_error"][0] == 0.25


_KILLED = """
import sys
from attnsim.sweep import packs, parse_sweep, run_sweep
packs.PACK_AT = 4
base = {**BASE, "steps": 2000}
spec = parse_sweep({"sweep": {"name": "p", "seeds": 40}, "base": base, "grid": {"signal_norm": [3.0]}})
run_sweep(spec, sys.argv[1], workers=1, progress=False)
""".replace("BASE", repr(BASE))


def test_a_killed_packing_sweep_resumes_without_recomputing(tmp_path, small_packs):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path)], start_new_session=True)
    recdir = tmp_path / "p" / "records"
    deadline = time.time() + 120
    while time.time() < deadline and not (recdir.exists() and any(recdir.glob("pack-*.jsonl"))):
        assert proc.poll() is None
        time.sleep(0.05)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {}
    for pack in recdir.glob("pack-*.jsonl"):
        before.update(dict(line.split(b"\t", 1) for line in pack.read_bytes().splitlines()))
    before.update({p.stem.encode(): p.read_bytes() for p in recdir.glob("*.json")})
    assert 4 <= len(before) < 40
    spec = parse_sweep(
        {"sweep": {"name": "p", "seeds": 40}, "base": {**BASE, "steps": 2000}, "grid": {"signal_norm": [3.0]}}
    )
    rep = run_sweep(spec, tmp_path, workers=1, progress=False)
    assert rep.computed == 40 - len(before) and rep.ok == 40
    recs = {r["key"]: r for r in rep.records()}
    assert all(recs[k.decode()] == json.loads(v) for k, v in before.items())  # kept, not recomputed
