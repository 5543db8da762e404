"""The Chrome / Perfetto timeline against the Trace Event Format, event by event.

The reference is the format's specification (Trace Event Format, the "JSON Object Format"):
a ``traceEvents`` list; complete events ``"ph": "X"`` with ``pid``, ``tid``, ``ts`` and
``dur`` in microseconds; metadata events ``"ph": "M"`` named ``process_name`` /
``process_sort_index`` / ``thread_name`` with their value in ``args``; ``displayTimeUnit``.
The steps are built by hand with dyadic times (exact in microseconds), and the whole event list
expected is written out.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from vgcsim.simulator.paths.plan import RankSpan
from vgcsim.simulator.replay import StepTimeline
from vgcsim.simulator.timeline import chrome_trace, write_chrome_trace


def _step(world_size, method, step, step_s, spans, intervals, names=("h0->sw", "sw->h1")):
    n = len(names)
    return StepTimeline(
        world_size=world_size,
        method=method,
        step=step,
        step_s=step_s,
        spans=spans,
        link_intervals=intervals,
        channel_names=list(names),
        link_bytes=np.zeros(n),
        link_busy_s=np.zeros(n),
    )


def _meta(name, pid, tid, args):
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _timelines():
    # P = 2 dense, step 0 (0.5 s) then step 1 (0.25 s); then P = 4 vgc, step 0
    s0 = _step(
        2,
        "dense",
        0,
        0.5,
        [
            RankSpan(0, "forward", 0.0, 0.125),
            RankSpan(0, "backward", 0.125, 0.375),
            RankSpan(1, "forward", 0.0, 0.25),
        ],
        [(1, 0.125, 0.375, 1024.0, 0, 1)],
    )
    # a span whose end precedes its start is drawn with duration 0
    s1 = _step(
        2, "dense", 1, 0.25, [RankSpan(1, "codec", 0.0625, 0.03125)], [(0, 0.0, 0.0625, 64.0, 1, 0)]
    )
    s2 = _step(4, "vgc", 0, 1.0, [RankSpan(3, "allgatherv", 0.5, 0.75)], [])
    return [s0, s1, s2]


def test_chrome_trace_events_follow_the_trace_event_format():
    doc = chrome_trace(_timelines())
    assert set(doc) == {"traceEvents", "displayTimeUnit"}
    assert doc["displayTimeUnit"] == "ns"
    expected = [
        # process ids number the (P, method, track) triples from 1 in order of appearance
        _meta("process_name", 1, 0, {"name": "P=2 dense: ranks"}),
        _meta("process_sort_index", 1, 0, {"sort_index": 1}),
        _meta("process_name", 2, 0, {"name": "P=2 dense: links"}),
        _meta("process_sort_index", 2, 0, {"sort_index": 2}),
        # a thread is named once, before its first event
        _meta("thread_name", 1, 0, {"name": "rank 0"}),
        {
            "name": "forward",
            "cat": "dense",
            "ph": "X",
            "pid": 1,
            "tid": 0,
            "ts": 0.0,
            "dur": 125000.0,
            "args": {"step": 0},
        },
        {
            "name": "backward",
            "cat": "dense",
            "ph": "X",
            "pid": 1,
            "tid": 0,
            "ts": 125000.0,
            "dur": 250000.0,
            "args": {"step": 0},
        },
        _meta("thread_name", 1, 1, {"name": "rank 1"}),
        {
            "name": "forward",
            "cat": "dense",
            "ph": "X",
            "pid": 1,
            "tid": 1,
            "ts": 0.0,
            "dur": 250000.0,
            "args": {"step": 0},
        },
        _meta("thread_name", 2, 1, {"name": "sw->h1"}),
        {
            "name": "0->1",
            "cat": "flow",
            "ph": "X",
            "pid": 2,
            "tid": 1,
            "ts": 125000.0,
            "dur": 250000.0,
            "args": {"bytes": 1024.0, "src_rank": 0, "dst_rank": 1, "step": 0},
        },
        # step 1 of the same pair starts where step 0 ended (0.5 s)
        {
            "name": "codec",
            "cat": "dense",
            "ph": "X",
            "pid": 1,
            "tid": 1,
            "ts": 562500.0,
            "dur": 0.0,
            "args": {"step": 1},
        },
        _meta("thread_name", 2, 0, {"name": "h0->sw"}),
        {
            "name": "1->0",
            "cat": "flow",
            "ph": "X",
            "pid": 2,
            "tid": 0,
            "ts": 500000.0,
            "dur": 62500.0,
            "args": {"bytes": 64.0, "src_rank": 1, "dst_rank": 0, "step": 1},
        },
        # a new (P, method) pair: two new processes, its own time axis from 0
        _meta("process_name", 3, 0, {"name": "P=4 vgc: ranks"}),
        _meta("process_sort_index", 3, 0, {"sort_index": 3}),
        _meta("process_name", 4, 0, {"name": "P=4 vgc: links"}),
        _meta("process_sort_index", 4, 0, {"sort_index": 4}),
        _meta("thread_name", 3, 3, {"name": "rank 3"}),
        {
            "name": "allgatherv",
            "cat": "vgc",
            "ph": "X",
            "pid": 3,
            "tid": 3,
            "ts": 500000.0,
            "dur": 250000.0,
            "args": {"step": 0},
        },
    ]
    assert doc["traceEvents"] == expected


def test_empty_timeline_list_gives_no_events():
    assert chrome_trace([]) == {"traceEvents": [], "displayTimeUnit": "ns"}


def test_write_chrome_trace_creates_folders_and_writes_the_json(tmp_path):
    out = write_chrome_trace(_timelines(), tmp_path / "a" / "b" / "timeline.json")
    assert out == tmp_path / "a" / "b" / "timeline.json"
    assert json.loads(out.read_text(encoding="utf-8")) == chrome_trace(_timelines())


def test_link_table_keeps_links_that_carried_bytes():
    # three channels: 2^10 bytes over 0.25 s, nothing, 1 byte over 2^-20 s; step 0.5 s
    tl = StepTimeline(
        world_size=2,
        method="dense",
        step=3,
        step_s=0.5,
        spans=[],
        link_intervals=[],
        channel_names=["h0->sw", "sw->h0", "sw->h1"],
        link_bytes=np.array([1024.0, 0.0, 1.0]),
        link_busy_s=np.array([0.25, 0.0, 2.0**-20]),
    )
    expected = pd.DataFrame(
        {
            "world_size": [2, 2],
            "method": ["dense", "dense"],
            "step": [3, 3],
            "link": ["h0->sw", "sw->h1"],
            "bytes": [1024.0, 1.0],
            "busy_s": [0.25, 2.0**-20],
            "utilization": [0.5, 2.0**-19],
        }
    )
    pd.testing.assert_frame_equal(tl.link_table(), expected)


def test_link_table_of_an_instant_step_has_zero_utilization():
    tl = StepTimeline(2, "dense", 0, 0.0, [], [], ["h0->sw"], np.array([8.0]), np.array([0.0]))
    table = tl.link_table()
    assert table["utilization"].tolist() == [0.0]
    assert table["link"].tolist() == ["h0->sw"]
