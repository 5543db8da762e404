"""One collective, priced from a notebook (``vgcsim.api.collective``) and from the command line
(``vgcsim collective``): closed form against hand arithmetic, simulation against the closed
form, any cluster form (preset, TOML, dict with a graph), per-link detail, clear errors."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from vgcsim import api
from vgcsim.cli import main
from vgcsim.core.cluster import LinkSpec, get_cluster
from vgcsim.core.collectives import COLLECTIVE_KEYS
from vgcsim.core.errors import ConfigError, UnknownNameError

N = 4e6
P = 8

# three hosts on a line a - b - c: 1 GB/s payload (8 Gb/s, efficiency 1) and 1 us per link
LINE = {
    "base": "10GbE",
    "topology": {
        "kind": "graph",
        "hosts": ["a", "b", "c"],
        "links": [
            {"a": "a", "b": "b", "bandwidth": "8Gbps", "latency": "1us"},
            {"a": "b", "b": "c", "bandwidth": "8Gbps", "latency": "1us"},
        ],
    },
}


def test_ring_allreduce_on_a_preset_is_the_closed_form_by_hand():
    link = get_cluster("10GbE").link
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    by_hand = 2 * (P - 1) * a + 2 * (P - 1) / P * N * b + (P - 1) / P * N * g
    got = api.collective("10GbE", "allreduce/ring", [N] * P)
    assert isinstance(got, float)
    assert got == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
def test_simulation_agrees_with_the_closed_form_within_a_tenth_of_a_percent(key):
    model = api.collective("10GbE", key, [N] * P)
    simulated = api.collective("10GbE", key, [N] * P, engine="simulate")
    assert simulated == pytest.approx(model, rel=1e-3)


def test_uneven_allgatherv_and_every_cluster_form(tmp_path):
    sizes = [1e6, 3e6, 2e6, 5e5, 4e6]
    link = get_cluster("10GbE").link
    # ring allgatherv: (P - 1) rounds, the largest block sets each
    by_hand = 4 * (link.latency_s + 4e6 * link.beta_s_per_byte)
    toml = tmp_path / "c.toml"
    toml.write_text('base = "10GbE"\nname = "mine"\n', encoding="utf-8")
    for cluster in ("10GbE", str(toml), {"base": "10GbE"}, get_cluster("10GbE")):
        assert api.collective(cluster, "allgatherv/ring", sizes) == pytest.approx(by_hand)
        assert api.collective(
            cluster, "allgatherv/ring", sizes, engine="simulate"
        ) == pytest.approx(by_hand, rel=1e-9)


def test_a_graph_cluster_given_as_a_dict_gives_its_route_times_and_link_detail():
    run = api.collective(LINE, "allgatherv/ring", [1e6] * 3, engine="simulate", detail=True)
    # 2 rounds; the slowest flow, c -> a, crosses two links: 2 us + 1e6 B / 1e9 B/s
    assert run.time_s == pytest.approx(2 * (2e-6 + 1e-3), rel=1e-12)
    assert run.topology == "graph" and run.world_size == 3
    assert len(run.finish_s) == 3 and run.finish_s.max() == run.time_s
    links = run.links.set_index("link")
    assert sorted(links.index) == ["a->b", "b->a", "b->c", "c->b"]
    # c -> a crosses b -> a in both rounds, one 1 MB block each
    assert links.loc["b->a", "bytes"] == 2e6
    assert links.loc["a->b", "busy_s"] == pytest.approx(2e-3)
    assert (links["utilization"] <= 1).all()


def test_message_semantics_reach_the_simulator():
    # 2 ranks on a star of dyadic numbers (exact in binary): 2^20 B/s, α = 2^-10 s. Ring
    # allgatherv of [2^20, 1] bytes: rank 0 sends one second of bytes, rank 1 one byte.
    link = LinkSpec("nic", bandwidth_Bps=2.0**20, latency_s=2.0**-10)
    star = dataclasses.replace(get_cluster("10GbE"), link=link)
    a, sizes = 2.0**-10, [2**20, 1]

    def finish_s(**semantics):
        run = api.collective(
            star, "allgatherv/ring", sizes, engine="simulate", detail=True, **semantics
        )
        return run.finish_s.tolist()

    # eager: a send completes when its last byte has left, so rank 0 is done at 1 s (its one
    # byte in arrived at 2^-20 + α); rank 1 waits for the big block: 1 + α
    assert finish_s(semantics="eager") == [1.0, 1.0 + a]
    # rendezvous (the default): a send completes when its last byte arrives, at 1 + α
    assert finish_s(semantics="rendezvous") == finish_s() == [1.0 + a, 1.0 + a]
    with pytest.raises(UnknownNameError, match="message semantics"):
        api.collective(star, "allgatherv/ring", sizes, engine="simulate", semantics="eagre")


def test_detail_needs_the_simulator_and_bad_input_is_a_clear_error():
    with pytest.raises(ConfigError, match="engine='simulate'"):
        api.collective("10GbE", "allreduce/ring", [N] * 2, detail=True)
    with pytest.raises(UnknownNameError, match="allreduce/ring"):
        api.collective("10GbE", "allreduce/rung", [N] * 2)
    with pytest.raises(UnknownNameError, match="simulate"):
        api.collective("10GbE", "allreduce/ring", [N] * 2, engine="exact")
    with pytest.raises(ConfigError, match="same size"):
        api.collective("10GbE", "allreduce/ring", [N, N / 2])
    for bad in ([], [N, -1.0], [N, float("nan")], [[N, N]], ["x"]):
        with pytest.raises(ConfigError):
            api.collective("10GbE", "allgatherv/ring", bad)
    with pytest.raises(ConfigError):
        api.collective({"link": "10GbE", "colour": "red"}, "allgatherv/ring", [N])


def test_cli_prints_the_time_and_writes_a_table(tmp_path, capsys):
    out = tmp_path / "t" / "links.csv"
    argv = ["collective", "10GbE", "allreduce/ring", "--sizes-bytes", "4e6", "--world-size", "8"]
    assert main([*argv, "--engine", "simulate", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    model = api.collective("10GbE", "allreduce/ring", [N] * P)
    assert "allreduce/ring on 10GbE, P = 8" in text
    table = pd.read_csv(out)
    assert set(table["engine"]) == {"simulate"} and set(table["world_size"]) == {8}
    assert table["time_s"].iloc[0] == pytest.approx(model, rel=1e-3)
    assert len(table) == 16  # 8 hosts, each up and down to the switch
    agv = ["collective", "10GbE", "allgatherv/direct", "--sizes-bytes", "1MB,2MiB"]
    assert main([*agv, "--out", str(tmp_path / "m.csv")]) == 0
    one = pd.read_csv(tmp_path / "m.csv")
    assert len(one) == 1 and one["engine"].item() == "model"
    assert one["time_s"].item() == api.collective("10GbE", "allgatherv/direct", [1e6, 2**21])
    # an existing file is replaced only with --overwrite
    assert main([*agv, "--out", str(tmp_path / "m.csv")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([*agv, "--out", str(tmp_path / "m.csv"), "--overwrite"]) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["10GbE", "allreduce/rung", "--sizes-bytes", "4e6,4e6"],
        ["10GbE", "allreduce/ring", "--sizes-bytes", "4e6,1e6"],
        ["nocluster", "allgatherv/ring", "--sizes-bytes", "4e6"],
        ["10GbE", "allgatherv/ring", "--sizes-bytes", "4e6,2e6", "--world-size", "3"],
        ["10GbE", "allgatherv/ring", "--sizes-bytes", "4e6", "-o", "x.json"],
        ["10GbE", "allgatherv/ring", "--sizes-bytes", "4e6", "--engine", "simulate", "--mode", "x"],
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, capsys):
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vgcsim collective: error:")


@pytest.mark.parametrize("sizes", ["abc", "4e6,-1"])
def test_cli_unparsable_sizes_are_usage_errors(sizes, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["collective", "10GbE", "allgatherv/ring", "--sizes-bytes", sizes])
    assert exc.value.code == 2
    assert "--sizes-bytes" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("key", "sizes", "kwargs", "message"),
    [
        (
            "allreduce/ring",
            [1.0, 1.0],
            {"engine": "exact"},
            "unknown collective engine 'exact'; valid: model, simulate",
        ),
        ("allreduce/nope", [1.0, 1.0], {}, "unknown collective 'allreduce/nope'; valid: "),
        (
            "allreduce/ring",
            [1.0, 1.0],
            {"detail": True},
            "per-link detail comes from the simulator: use engine='simulate'",
        ),
        ("allgatherv/ring", ["a", "b"], {}, "sizes_bytes must be numbers, one per rank"),
        ("allgatherv/ring", [], {}, "sizes_bytes must be a non-empty list with one size per rank"),
        (
            "allgatherv/ring",
            [[1.0, 2.0]],
            {},
            "sizes_bytes must be a non-empty list with one size per rank",
        ),
        (
            "allgatherv/ring",
            [1.0] * 65537,
            {},
            "world size 65537 exceeds the largest supported world size, 65536",
        ),
        ("allgatherv/ring", [1.0, -1.0], {}, "sizes_bytes must be finite and >= 0"),
        ("allgatherv/ring", [1.0, float("nan")], {}, "sizes_bytes must be finite and >= 0"),
        ("allreduce/ring", [4.0, 4.0, 8.0], {}, "allreduce/ring needs the same size on every rank"),
    ],
)
def test_each_refusal_of_a_collective_call_is_its_exact_line(key, sizes, kwargs, message):
    with pytest.raises(ConfigError) as err:
        api.collective("10GbE", key, sizes, **kwargs)
    assert str(err.value) == message or (
        message.endswith("valid: ") and str(err.value).startswith(message)
    )


def test_the_edges_a_collective_call_accepts():
    """One rank (nothing to exchange), zero bytes and the largest world size are accepted."""
    assert api.collective("10GbE", "allreduce/ring", [5.0]) == 0.0
    assert api.collective("10GbE", "allgatherv/ring", [0.0, 0.0]) > 0.0  # α is still paid
    big = api.collective("10GbE", "allgatherv/ring", [1.0] * 65536)
    assert big > api.collective("10GbE", "allgatherv/ring", [1.0] * 2)


def test_the_model_engine_prices_the_closed_form_even_where_the_topology_contends():
    """On the line a - b - c the simulator's flows share a link and take longer; the model
    engine is the closed form on a non-blocking fabric, whatever the topology."""
    from vgcsim.core.cluster import cluster_from_dict
    from vgcsim.models.collectives import collective_time_s

    sizes = [1e6] * 3
    closed = float(collective_time_s("allgatherv/direct", sizes, cluster_from_dict(LINE)))
    assert api.collective(LINE, "allgatherv/direct", sizes) == closed
    assert api.collective(LINE, "allgatherv/direct", sizes, engine="simulate") > 1.1 * closed
