"""Sweeps: a declarative grid of configurations x seeds, run by long-lived
workers into a resumable store of records.

A sweep file (TOML)::

    [sweep]
    name = "heatmap"           # records go to <out>/<name>/ (default out: sweeps/)
    seeds = [0]                # a list, or an int n meaning 0..n-1
    save = ["train_loss"]      # optional trajectory arrays kept in each record
    data = "digits"            # optional: what run --data takes, for every point

    [base]                     # config keys shared by every point
    steps = 1000

    [grid]                     # config keys to vary: lists or ranges
    signal_norm = {start = 5, stop = 100, num = 39}     # inclusive linspace
    d = {start = 250, stop = 5000, step = 125}           # inclusive arange

Instead of a grid, explicit points: ``[[point]]`` tables of config keys (each
with the base keys, for every seed), e.g. the three settings of figure 2.

Everything is validated before anything runs, each point included (a point
that could never run is refused up front).

Each point is one JSON record named by a hash of its full resolved config and
the schema version, written atomically (temporary file + rename) by the
process that computed it as soon as it is finished: kill a sweep at any
moment and nothing finished is lost, nothing half-written is read; rerunning
skips finished points, retries failed ones and recomputes damaged records
(moved aside to ``records/damaged/``). A lock per record (``flock``, released
when its holder dies) lets two sweeps share one folder without computing a
point twice. Points are grouped by what the reduced engine's setup depends on
(d, seed, ...) and each group goes to one worker, so a group pays for its
setup once. A worker that dies (the out-of-memory killer sends SIGKILL) is
replaced and its unfinished points are re-queued; a point that kills two
workers is recorded as failed. ``records.csv`` is a tidy table of the
current sweep file's records.
"""

from .run import run_sweep
from .spec import SweepSpec, parse_sweep, read_spec, record_key
from .store import Store, load_records
from .tables import load_spec, load_sweep, load_trajectories, write_csv

__all__ = [
    "Store",
    "SweepSpec",
    "load_records",
    "load_spec",
    "load_sweep",
    "load_trajectories",
    "parse_sweep",
    "read_spec",
    "record_key",
    "run_sweep",
    "write_csv",
]
