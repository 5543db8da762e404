"""The paper scenario: sizes-only cost analysis, its tables and `vgcsim scenario`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.cluster import get_cluster
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.results import read_results
from vgcsim.models.collectives import COLLECTIVES
from vgcsim.models.scenario import (
    PAPER_METHODS,
    PaperScenarioConfig,
    best_rows,
    crossover_table,
    method_from_trace,
    paper_methods,
    paper_scenario,
    time_sources,
)


@pytest.fixture(scope="module")
def small():
    cfg = PaperScenarioConfig(
        nets=("resnet50",), links=("10GbE", "1GbE"), world_sizes=(2, 64, 1024)
    )
    df, info = paper_scenario(cfg)
    return cfg, df, info


def test_paper_ratios():
    assert {m.label: m.ratio for m in PAPER_METHODS} == {
        "variance α=2": 913.4,
        "hybrid α=2, τ=0.1": 12822.4,
        "QSGD 2 bit, d=128": 12.3,
    }
    # the tuple the scenario builds at each call is the public constant's
    assert paper_methods() == PAPER_METHODS
    assert [(m.compressor, m.encoding) for m in PAPER_METHODS] == [
        ("variance", "paper-ratio"),
        ("hybrid", "paper-ratio"),
        ("qsgd", "paper-ratio"),
    ]
    assert [m.source for m in PAPER_METHODS] == [
        "Tsuzuku, Imachi & Akiba 2018, table of compression ratios (variance-based, α=2, Adam)",
        "Tsuzuku, Imachi & Akiba 2018, table of compression ratios (hybrid, τ=0.1)",
        "Tsuzuku, Imachi & Akiba 2018, table of compression ratios (QSGD, 2 bit)",
    ]


def test_numbers_by_hand(small):
    cfg, df, info = small
    net = info["nets"][0]
    assert net["params"] == 25_557_032
    compute = 3 * 2 * 4.09e9 * 32 / (10.6e12 * 0.4)
    assert net["compute_s"] == pytest.approx(compute)
    link = get_cluster("10GbE").link
    n = 4 * 25_557_032
    p = 64
    rows = df[(df.cluster == "10GbE") & (df.world_size == p)]
    ring = rows[rows.collective == "allreduce/ring"].iloc[0]
    assert ring.comm_s == pytest.approx(
        2 * 63 * link.latency_s + 2 * 63 / 64 * n / (link.bandwidth_Bps * link.efficiency)
    )
    var = rows[(rows.compressor == "variance α=2") & (rows.collective == "allgatherv/ring")].iloc[0]
    m = n / 913.4
    assert var.payload_bytes_max == pytest.approx(m)
    assert var.comm_s == pytest.approx(
        63 * (link.latency_s + m / (link.bandwidth_Bps * link.efficiency))
    )
    dense_best = rows[rows.method == "dense"].step_s.min()
    assert var.speedup_vs_dense == pytest.approx(dense_best / (compute + var.comm_s))


def test_compression_pays_less_as_p_grows(small):
    _, df, _ = small
    best = best_rows(df)
    q = best[(best.compressor == "QSGD 2 bit, d=128") & (best.cluster == "10GbE")].sort_values(
        "world_size"
    )
    assert q.speedup_vs_dense.iloc[0] > 1 > q.speedup_vs_dense.iloc[-1]
    v = best[(best.compressor == "variance α=2") & (best.cluster == "1GbE")].sort_values(
        "world_size"
    )
    assert (v.speedup_vs_dense > 1).all()
    assert v.speedup_vs_dense.iloc[-1] < v.speedup_vs_dense.iloc[1]


def test_crossover_ratio_is_about_p_over_2_for_large_messages(small):
    cfg, df, _ = small
    cross = crossover_table(cfg, df)
    for r in cross.itertuples():
        assert r.crossover_ratio == pytest.approx(r.world_size / 2, rel=0.01)
        # at the tie the two communication times agree
        n = 4 * 25_557_032
        cluster = get_cluster(r.link)
        ar = COLLECTIVES[r.allreduce].time_s(np.full((1, r.world_size), n), cluster.link)[0]
        agv = COLLECTIVES[r.allgatherv].time_s(
            np.full((1, r.world_size), n / r.crossover_ratio), cluster.link
        )[0]
        assert agv == pytest.approx(ar, rel=1e-9)


def test_ratio_from_a_trace(tiny_trace):
    m = method_from_trace(tiny_trace)
    # dense 32·1250 bits; mean worker bits per step (960+1920+804+88+9600+32)/6
    assert m.ratio == pytest.approx(40000 / (13404 / 6))
    assert method_from_trace(tiny_trace, "hand2x").ratio == pytest.approx(m.ratio / 2)


def test_bad_config():
    with pytest.raises(UnknownNameError):
        PaperScenarioConfig(links=("2GbE",))
    with pytest.raises(UnknownNameError):
        PaperScenarioConfig(nets=("alexnet",))
    with pytest.raises(ConfigError):
        paper_scenario(PaperScenarioConfig(paper_ratios=False))


def test_cli(tmp_path, tiny_trace_dir, capsys):
    out = tmp_path / "scen"
    rc = main(
        [
            "scenario",
            "paper",
            "-o",
            str(out),
            "--trace",
            str(tiny_trace_dir),
            "--set",
            "world_sizes=2,8",
            "--set",
            "links=IB-FDR56",
            "--set",
            "nets=vgg_like",
        ]
    )
    assert rc == 0
    df, header = read_results(out)
    assert set(df.world_size) == {2, 8} and set(df.cluster) == {"IB-FDR56"}
    assert "variance α=2 (tiny)" in set(df.compressor)
    assert (
        (out / "scenario.md").read_text().startswith("# Dense allreduce vs compressed allgatherv")
    )
    assert (out / "crossover.csv").is_file()
    assert main(["scenario", "nope", "-o", str(out)]) == 2
    assert main(["scenario", "paper", "-o", str(out), "--set", "linkz=1GbE"]) == 2
    assert "linkz" in capsys.readouterr().err


@pytest.mark.parametrize("override", ["links=", "nets=", "allgatherv=", "codec_s=nan"])
def test_empty_lists_and_nan_codec_are_config_errors(override, tmp_path, capsys):
    # an empty links list crashed np.concatenate; codec_s=nan wrote a table of NaNs
    assert main(["scenario", "paper", "--set", override, "-o", str(tmp_path / "s")]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


# Hand-worked checks of the scenario model: expected numbers from the formulas in its docstrings
# on small, exact inputs, documented contracts and one-line error messages.


def test_best_rows_keeps_the_first_listed_of_tied_algorithms():
    """17 mean rows: every third (trace "a") at 0.5 s, the others (trace "b") tied at 1 s; the
    best row of "b" is the first one listed (row 1), as a stable sort keeps ties in order."""
    n = 17
    df = pd.DataFrame(
        {
            "trace": ["a" if i % 3 == 0 else "b" for i in range(n)],
            "cluster": "c",
            "world_size": 4,
            "method": "compressed",
            "compressor": "x",
            "step": -1,
            "step_s": [0.5 if i % 3 == 0 else 1.0 for i in range(n)],
            "collective": [f"alg{i}" for i in range(n)],
        }
    )
    best = best_rows(df)
    assert best.set_index("trace")["collective"].to_dict() == {"a": "alg0", "b": "alg1"}


# ------------------------------------------------------------------------------------------


def test_time_sources_name_the_scenarios_own_local_times():
    """The scenario's step is compute modelled on its device plus, on compressed methods,
    the codec_s it is given (paper_scenario's StepBreakdown: no variance, decode or
    optimizer term); the header says exactly that."""
    cfg = PaperScenarioConfig(device="P100", codec_s=0.002)
    assert time_sources(cfg) == {
        "compute_mode": "model",
        "device": "P100",
        "compute_s": "modelled on P100: flops_per_sample x B / effective FLOP/s",
        "variance_s": "none: not in the scenario's step",
        "codec_s": "set: codec_s = 0.002 s per step on compressed methods, 0 on dense",
        "decode_s": "none: not in the scenario's step",
        "optimizer_s": "none: not in the scenario's step",
    }
    # the rows agree: compressed rows pay codec_s, dense rows none, nothing decodes
    df, _ = paper_scenario(
        PaperScenarioConfig(
            nets=("resnet50",), links=("10GbE",), world_sizes=(8,), device="P100", codec_s=0.002
        )
    )
    assert set(df.loc[df["method"] == "compressed", "codec_s"]) == {0.002}
    assert set(df.loc[df["method"] == "dense", "codec_s"]) == {0.0}
    assert set(df["decode_s"]) == {0.0} and set(df["device"]) == {"P100"}
