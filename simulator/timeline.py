"""Chrome / Perfetto trace JSON of simulated steps: one track per rank and one per link.

The output is the Trace Event Format (``{"traceEvents": [...]}``) that ui.perfetto.dev and
chrome://tracing open: complete events (``"ph": "X"``) with microsecond ``ts``/``dur``, and
metadata events naming processes and threads. Each (world size, method) pair is two
processes — "P=… dense: ranks" (a thread per rank: forward, backward, codec, collective
rounds) and "P=… dense: links" (a thread per directed link that carried traffic: one event per
flow with its bytes and endpoints). Several steps of one pair follow each other on the time
axis.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vgcsim.simulator.replay import StepTimeline

__all__ = ["chrome_trace", "write_chrome_trace"]

_US = 1e6


def chrome_trace(timelines: Sequence[StepTimeline]) -> dict[str, Any]:
    """Build the Trace Event Format dict for ``timelines``."""
    events: list[dict[str, Any]] = []
    pids: dict[tuple[int, str, str], int] = {}
    offsets: dict[tuple[int, str], float] = {}
    named_threads: set[tuple[int, int]] = set()

    def pid_of(p: int, method: str, what: str) -> int:
        key = (p, method, what)
        if key not in pids:
            pids[key] = len(pids) + 1
            events.append(
                {
                    "name": "process_name",
                    "ph": "M",
                    "pid": pids[key],
                    "tid": 0,
                    "args": {"name": f"P={p} {method}: {what}"},
                }
            )
            events.append(
                {
                    "name": "process_sort_index",
                    "ph": "M",
                    "pid": pids[key],
                    "tid": 0,
                    "args": {"sort_index": pids[key]},
                }
            )
        return pids[key]

    def thread(pid: int, tid: int, name: str) -> None:
        if (pid, tid) not in named_threads:
            named_threads.add((pid, tid))
            events.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
            )

    for tl in timelines:
        key = (tl.world_size, tl.method)
        t0 = offsets.get(key, 0.0)
        ranks = pid_of(tl.world_size, tl.method, "ranks")
        links = pid_of(tl.world_size, tl.method, "links")
        for span in tl.spans:
            thread(ranks, span.rank, f"rank {span.rank}")
            events.append(
                {
                    "name": span.name,
                    "cat": tl.method,
                    "ph": "X",
                    "pid": ranks,
                    "tid": span.rank,
                    "ts": (t0 + span.start_s) * _US,
                    "dur": max(span.end_s - span.start_s, 0.0) * _US,
                    "args": {"step": tl.step},
                }
            )
        for channel, start, end, nbytes, src, dst in tl.link_intervals:
            thread(links, channel, tl.channel_names[channel])
            events.append(
                {
                    "name": f"{src}->{dst}",
                    "cat": "flow",
                    "ph": "X",
                    "pid": links,
                    "tid": channel,
                    "ts": (t0 + start) * _US,
                    "dur": max(end - start, 0.0) * _US,
                    "args": {"bytes": nbytes, "src_rank": src, "dst_rank": dst, "step": tl.step},
                }
            )
        offsets[key] = t0 + tl.step_s
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(timelines: Sequence[StepTimeline], path: str | Path) -> Path:
    """Write ``timelines`` as a Chrome/Perfetto trace JSON file; return its path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(chrome_trace(timelines)), encoding="utf-8")
    return out
