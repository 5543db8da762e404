"""Golden report tables from the committed result tables in tests/data/golden/results.

Run from the repository root to (re)write the golden CSVs after a deliberate change:

    .venv/bin/python tests/reports/reports_golden.py --write

The test (test_golden.py) recomputes the same tables and compares them with the files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
RESULTS = sorted((GOLDEN / "results").glob("*/results.parquet"))
TRACE = ROOT / "tests" / "data" / "sample_trace"
#: Eval curve of a dense run on the sample trace's workload (command in the golden README).
DENSE_EVALS = GOLDEN / "evals" / "dense_digits.csv"
#: Time-to-accuracy targets: the default (dense final − 1 point, which the variance trace
#: misses) and one that both runs reach.
TTA_TARGETS = (None, 0.85)


def compute() -> dict[str, pd.DataFrame]:
    """Every result-derived report table of the committed results."""
    from vgcsim.reports import tables
    from vgcsim.reports.render import load_inputs
    from vgcsim.traces.io import read_trace

    inputs = load_inputs([p.parent for p in RESULTS])
    res, labels = inputs.results, inputs.labels
    wi = tables.what_if(res, labels)
    dense = pd.read_csv(DENSE_EVALS)
    evals = {"dense_digits": dense, TRACE.name: read_trace(TRACE).evals}
    tta = pd.concat(
        [
            tables.time_to_accuracy(
                res,
                evals,
                tables.default_target_accuracy(dense) if target is None else target,
                dense_trace="dense_digits",
                labels=labels,
            )
            for target in TTA_TARGETS
        ],
        ignore_index=True,
    )
    return {
        "time_to_accuracy": tta,
        "what_if": wi,
        "speedup_matrix": tables.speedup_matrix(wi),
        "crossover": tables.crossover(res, labels),
        "breakdown": tables.breakdown(res, labels),
        "agreement": tables.agreement(res),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="write the golden CSVs")
    args = parser.parse_args(argv)
    out = GOLDEN / "tables"
    for name, frame in compute().items():
        if args.write:
            out.mkdir(parents=True, exist_ok=True)
            frame.to_csv(out / f"{name}.csv", index=False)
        print(f"{name}: {len(frame)} rows")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
