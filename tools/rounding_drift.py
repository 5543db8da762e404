"""How far a re-recording of the committed variance demo trace's first chunk drifts from it.

    python tools/rounding_drift.py [--set KEY=VALUE ...] [-o DIR]

Records the chunk from the committed header's config (with the ``--set`` overrides applied,
e.g. ``threads=2`` for another summation order on this CPU, ``compressor.params.alpha=2.2``
for a changed compressor) and prints the relative difference of the elements sent at the
first step and over the chunk, the figures that
``tests/reports/test_demo_traces.py::test_first_chunk_agrees_with_the_committed_trace``
bounds (docs/testing.md, "Bit-exact tests").
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from vgcsim.commands.demo import DEMO_TRACES
from vgcsim.core.config import apply_overrides, config_from_dict
from vgcsim.traces.io import read_trace
from vgcsim.traces.training.record import record
from vgcsim.traces.training.record_config import RecordConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("-o", "--out", type=Path, help="trace folder (default: a temporary one)")
    args = parser.parse_args()
    committed = read_trace(DEMO_TRACES / "variance")
    cfg = config_from_dict(RecordConfig, committed.header["config"])
    n = cfg.chunk_steps
    cfg = apply_overrides(dataclasses.replace(cfg, steps=n), args.set)
    with tempfile.TemporaryDirectory() as tmp:
        run = read_trace(record(cfg, args.out or Path(tmp) / "run"))
        got = run.payloads.groupby("step")["sent"].sum()
    want = committed.payloads[committed.payloads["step"] < n].groupby("step")["sent"].sum()
    differs = got[got != want]
    first = int(differs.index[0]) if len(differs) else None
    print(f"first differing step: {first}")
    print(f"first step: {got.iloc[0] / want.iloc[0] - 1:+.4%}")
    print(f"chunk of {n} steps: {got.sum() / want.sum() - 1:+.4%}")


if __name__ == "__main__":
    main()
