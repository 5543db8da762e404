"""Fuzz the readers: hypothesis-generated trace headers, trace tables, cluster files, ``--set``
options and result tables, fed to ``vgcsim`` in process (trace validate/info, predict,
simulate, trace synth, report). Every run must end with exit 0, or exit 2 and one line
``vgcsim <command>: error: ...`` (``trace validate`` may list several problems under it);
any other exception is a bug and fails the test with its traceback.

Deterministic (``derandomize``): the same cases run everywhere. Case counts are in
``EXAMPLES``; together they are more than 700.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import shutil
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vgcsim.cli import main
from vgcsim.traces.synth import SynthConfig, synth_trace

pytestmark = pytest.mark.slow

EXAMPLES = {"header": 300, "table": 170, "cluster": 140, "options": 90, "results": 30}

_COUNTER = itertools.count()


def _settings(n: int):
    return settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


def _run(argv: list[str]) -> int:
    """``main(argv)``: exit 0, or exit 2 with one error line; anything else raises."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with warnings.catch_warnings(), redirect_stdout(out), redirect_stderr(err):
            warnings.simplefilter("ignore")  # numeric warnings are not the command's output
            rc = main(argv)
    except SystemExit as exc:  # argparse's usage errors exit 2 by themselves
        assert exc.code == 2, (argv, exc.code, err.getvalue())
        return 2
    text = err.getvalue()
    assert rc in (0, 2), (argv, rc, text)
    assert "Traceback" not in text, (argv, text)
    if rc == 2:
        errors = [line for line in text.splitlines() if line.startswith("vgcsim ")]
        assert len(errors) >= 1 and ": error: " in errors[0], (argv, text)
        if argv[:2] != ["trace", "validate"]:
            assert len(errors) == 1 and text.count("\n") == 1, (argv, text)
    return rc


# -- a tiny valid trace and result table every case starts from ------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    layers = root / "layers.json"
    layers.write_text(json.dumps([{"name": "w", "shape": [64, 8]}, {"name": "b", "shape": [64]}]))
    cfg = SynthConfig(
        layers=str(layers),
        workers=2,
        steps=4,
        chunk_steps=2,
        flops_per_sample=1e6,
        encodings=("packed32", "coo64", "bitmap", "gap_elias_gamma"),
    )
    trace = synth_trace(cfg, root / "trace")
    results = root / "results"
    assert (
        _run(
            ["predict", str(trace), "--cluster", "10GbE", "--world-sizes", "2", "-o", str(results)]
        )
        == 0
    )
    return {"root": root, "trace": trace, "results": results}


def _fresh(base, name: str) -> Path:
    return base["root"] / f"{name}{next(_COUNTER)}"


def _reader_argv(kind: int, run: Path, out: Path) -> list[str]:
    return [
        ["trace", "validate", str(run)],
        ["trace", "info", str(run), "--json"],
        ["predict", str(run), "--cluster", "10GbE", "--world-sizes", "2", "-o", str(out)],
        [
            "simulate",
            str(run),
            "--cluster",
            "10GbE",
            "--world-sizes",
            "2",
            "--set",
            "max_steps=1",
            "-o",
            str(out),
        ],
    ][kind % 4]


# -- values ---------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, 1, -1, 2**63, 2**31])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)

HEADER_PATHS = (
    "workers", "batch_size_per_worker", "flops_per_sample", "dense_bytes_per_step", "chunk_steps",
    "status", "stop_reason", "synthetic", "schema_version", "kind", "encodings", "encodings.0",
    "primary_encoding", "layers", "layers.0", "layers.0.numel", "layers.0.shape", "layers.0.index",
    "layers.1.name", "compressor", "compressor.name", "compressor.params", "config", "config.steps",
    "seeds", "versions", "git_commit", "machine", "steps_recorded", "created_utc", "extra",
)  # fmt: skip


def _set_path(doc, path: str, value, delete: bool) -> None:
    *parents, last = path.split(".")
    for part in parents:
        doc = doc[int(part)] if isinstance(doc, list) else doc.get(part)
        if not isinstance(doc, (dict, list)):
            return
    key = int(last) if isinstance(doc, list) else last
    if isinstance(doc, list) and key >= len(doc):
        return
    if delete:
        doc.pop(key) if isinstance(doc, list) else doc.pop(key, None)
    else:
        doc[key] = value


@given(
    path=st.sampled_from(HEADER_PATHS),
    value=json_values,
    delete=st.booleans(),
    kind=st.integers(0, 3),
)
@_settings(EXAMPLES["header"])
def test_fuzz_headers(base, path, value, delete, kind):
    run = _fresh(base, "h")
    run.mkdir()
    for table in ("payloads", "steps"):
        (run / table).symlink_to(base["trace"] / table)
    header = json.loads((base["trace"] / "header.json").read_text())
    _set_path(header, path, value, delete)
    (run / "header.json").write_text(json.dumps(header))  # NaN/Infinity written as Python does
    _run(_reader_argv(kind, run, _fresh(base, "o")))


CELLS = st.sampled_from([math.nan, math.inf, -math.inf, -1, 0, 1, 0.5, 1e300, 2**62, "x", None])


@given(
    table=st.sampled_from(["payloads", "steps"]),
    column=st.sampled_from(
        [
            "step",
            "worker",
            "layer",
            "numel",
            "sent",
            "bits_packed32",
            "bits_gap_elias_gamma",
            "loss",
            "lr",
            "density",
            "compute_s",
            "decode_s",
            "new",
        ]
    ),  # fmt: skip
    op=st.sampled_from(["cell", "column", "drop", "dup_row", "drop_row", "rm_chunk", "dup_chunk"]),
    value=CELLS,
    row=st.integers(0, 20),
    kind=st.integers(0, 3),
)
@_settings(EXAMPLES["table"])
def test_fuzz_tables(base, table, column, op, value, row, kind):
    run = _fresh(base, "t")
    shutil.copytree(base["trace"], run)
    parts = sorted((run / table).glob("part-*.parquet"))
    part = parts[row % len(parts)]
    if op == "rm_chunk":
        part.unlink()
    elif op == "dup_chunk":
        shutil.copy(part, run / table / "part-000099.parquet")
    else:
        df = pd.read_parquet(part)
        i = row % len(df)
        if op == "cell" and column in df.columns:
            df[column] = df[column].astype(object)
            df.loc[i, column] = value
        elif op == "column":
            df[column] = [value] * len(df)
        elif op == "drop" and column in df.columns:
            df = df.drop(columns=[column])
        elif op == "dup_row":
            df = pd.concat([df, df.iloc[[i]]], ignore_index=True)
        elif op == "drop_row":
            df = df.drop(index=i)
        try:
            df.to_parquet(part, index=False)
        except Exception:  # a mix pyarrow cannot store: write the column as text instead
            df[column] = df[column].astype(str)
            df.to_parquet(part, index=False)
    _run(_reader_argv(kind, run, _fresh(base, "o")))


# -- cluster files --------------------------------------------------------------------------

numbers = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**65), 2**65)
quantities = numbers | st.sampled_from(["10Gbps", "5us", "1e-320", "0", "-1Gbps", "12.5GB/s", "x"])
link_tables = st.sampled_from(["10GbE", "IB-EDR", "NVLink2", "nope"]) | st.fixed_dictionaries(
    {},
    optional={
        "preset": st.sampled_from(["10GbE", "1GbE", "x"]) | numbers,
        "bandwidth": quantities,
        "latency": quantities,
        "gamma_s_per_byte": numbers,
        "efficiency": numbers,
        "framing": st.sampled_from(["tcp-mtu1500", "none", "x"]),
        "mtu": numbers,
    },
)
graph_links = st.lists(
    st.fixed_dictionaries(
        {"a": st.sampled_from(["a", "b", "c", "sw"]), "b": st.sampled_from(["a", "b", "c", "sw"])},
        optional={
            "preset": st.sampled_from(["10GbE", "x"]),
            "bandwidth": quantities,
            "latency": quantities,
        },
    ),
    max_size=4,
)
topologies = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(
            ["star", "leaf_spine", "hierarchical", "ring", "torus2d", "graph", "mesh"]
        )
    },
    optional={
        "hosts_per_leaf": numbers,
        "spines": numbers,
        "oversubscription": numbers,
        "placement": st.sampled_from(["packed", "spread", "x"]),
        "rows": numbers,
        "hosts": st.lists(st.sampled_from(["a", "b", "c"]), max_size=3),
        "links": graph_links,
        "radix": numbers,
    },
)
clusters = st.fixed_dictionaries(
    {},
    optional={
        "base": st.sampled_from(["10GbE", "dgx1-IB-EDR", "x"]) | numbers,
        "link": link_tables,
        "intra_link": link_tables,
        "device": st.sampled_from(["V100", "cpu", "x"])
        | st.fixed_dictionaries(
            {},
            optional={
                "preset": st.sampled_from(["V100", "x"]),
                "peak_flops": quantities,
                "efficiency": numbers,
                "memory_bandwidth": quantities,
                "launch_overhead": quantities,
            },
        ),
        "topology": topologies,
        "compute": st.sampled_from(["model", "trace", "x"]),
        "compute_scale": numbers,
        "gpus_per_node": numbers,
        "unknown": numbers,
    },
)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return (
            "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
        )
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _toml(doc: dict) -> str:
    top = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    tables = [
        f"[{json.dumps(k)}]\n"
        + "\n".join(f"{json.dumps(a)} = {_toml_value(b)}" for a, b in v.items())
        for k, v in doc.items()
        if isinstance(v, dict)
    ]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


@given(cluster=clusters, simulate=st.booleans())
@_settings(EXAMPLES["cluster"])
def test_fuzz_cluster_files(base, cluster, simulate):
    f = _fresh(base, "c").with_suffix(".toml")
    f.write_text(_toml(cluster))
    command = "simulate" if simulate else "predict"
    extra = ["--set", "max_steps=1"] if simulate else []
    _run(
        [
            command,
            str(base["trace"]),
            "--cluster",
            str(f),
            "--world-sizes",
            "2",
            *extra,
            "-o",
            str(_fresh(base, "o")),
        ]
    )


# -- --set options (predict, simulate, trace synth) -----------------------------------------

OPTION_KEYS = {
    "predict": ["overlap", "bucket_bytes", "seed", "rule", "encoding", "dense_encodings", "size_exchange", "x"],
    "simulate": ["jitter", "seed", "rule", "mode", "semantics", "path", "bucket_bytes", "max_steps", "backward_fraction", "dense_encodings", "x"],
    "synth": ["workers", "steps", "chunk_steps", "density", "target_ratio", "batch_size_per_worker", "flops_per_sample", "layer_cv", "step_cv", "encodings", "seed", "decay_steps", "x"],
}  # fmt: skip
option_values = st.sampled_from(
    ["nan", "inf", "-1", "0", "1e308", "1e-320", "2", "0.5", "none", "[]", "[1]", "x", "true", "1e400", "99999999999999999999999"]
) | st.text(max_size=6)  # fmt: skip


@given(command=st.sampled_from(sorted(OPTION_KEYS)), data=st.data())
@_settings(EXAMPLES["options"])
def test_fuzz_options(base, command, data):
    key = data.draw(st.sampled_from(OPTION_KEYS[command]))
    value = data.draw(option_values)
    out = str(_fresh(base, "o"))
    setting = ["--set", f"{key}={value}"]
    if command == "synth":
        layers = str(base["root"] / "layers.json")
        argv = [
            "trace",
            "synth",
            "--layers",
            layers,
            "--steps",
            "2",
            "--workers",
            "2",
            *setting,
            "-o",
            out,
        ]
    elif command == "simulate":
        argv = [
            "simulate",
            str(base["trace"]),
            "--cluster",
            "10GbE",
            "--world-sizes",
            "2",
            "--set",
            "max_steps=1",
            *setting,
            "-o",
            out,
        ]
    else:
        argv = [
            "predict",
            str(base["trace"]),
            "--cluster",
            "10GbE",
            "--world-sizes",
            "2",
            *setting,
            "-o",
            out,
        ]
    _run(argv)


# -- result tables (report) -----------------------------------------------------------------


@given(
    column=st.sampled_from(["step_s", "comm_s", "world_size", "step", "method", "speedup_vs_dense", "payload_bytes_max", "trace"]),
    value=CELLS,
    header_field=st.sampled_from(["none", "traces", "cluster", "options", "schema_version", "kind"]),
    header_value=json_values,
)  # fmt: skip
@_settings(EXAMPLES["results"])
def test_fuzz_result_tables(base, column, value, header_field, header_value):
    run = _fresh(base, "r")
    shutil.copytree(base["results"], run)
    df = pd.read_parquet(run / "results.parquet")
    df[column] = df[column].astype(object)
    df.loc[0, column] = value
    try:
        df.to_parquet(run / "results.parquet", index=False)
    except Exception:
        df[column] = df[column].astype(str)
        df.to_parquet(run / "results.parquet", index=False)
    if header_field != "none":
        h = json.loads((run / "results.json").read_text())
        h[header_field] = header_value
        (run / "results.json").write_text(json.dumps(h))
    _run(["report", str(run), "-o", str(_fresh(base, "o"))])
