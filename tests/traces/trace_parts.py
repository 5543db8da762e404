"""Shared by the trace-validation tests: a trace taken apart into editable copies of its
header and tables, and the problems :func:`check_trace` finds once it is put back together."""

from __future__ import annotations

import copy

from vgcsim.traces.io import Trace
from vgcsim.traces.validate import check_trace

SAMPLE = "tests/data/sample_trace"


def trace_parts(t: Trace) -> dict:
    """Deep copies of ``t``'s header and tables, to break one invariant at a time."""
    return {
        "header": copy.deepcopy(t.header),
        "payloads": t.payloads.copy(),
        "steps": t.steps.copy(),
        "evals": t.evals.copy(),
    }


def trace_problems(parts: dict) -> list[str]:
    """What ``check_trace`` says of ``parts`` put back together as the sample trace."""
    trace = Trace(SAMPLE, parts["header"], parts["payloads"], parts["steps"], parts["evals"])
    return check_trace(trace)
