"""The replay vocabulary of ``vgcsim.core.options``, pinned directly (no CLI, no trace).

Pinned here: every vocabulary's exact members and order, the module constants, every field's
default (ReplayOptions, PredictOptions, SimulateConfig), the accepted edges on both sides of
each range check, and each refusal's whole one-line message (the line the CLI prints).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from vgcsim.core import options
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.options import (
    DDP_BUCKET_BYTES,
    DENSE_ENCODINGS,
    FORWARD_FRACTION,
    MAX_JITTER,
    MODES,
    OVERLAPS,
    PATHS,
    RULES,
    SEMANTICS,
    PredictOptions,
    ReplayOptions,
    SimulateConfig,
)

ALLREDUCE_VALID = "binomial_tree, hierarchical, rabenseifner, recursive_doubling, ring"
ALLGATHERV_VALID = "bounded, bruck, direct, padded, recursive_doubling, ring"
SHARED_DEFAULTS = {
    "world_sizes": (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
    "allreduce": ("ring",),
    "allgatherv": (),
    "encoding": None,
    "rule": "modulo",
    "seed": 0,
    "per_step": False,
    "overlap": "none",
    "bucket_bytes": 26214400,
    "dense_encodings": ("fp32", "bf16", "fp16"),
    "size_exchange": True,
    "sparse_allreduce": ("recursive_doubling",),
}
SIMULATE_DEFAULTS = {
    "backward_fraction": 0.6666666666666667,
    "mode": "fair",
    "semantics": "rendezvous",
    "path": "auto",
    "jitter": 0.0,
    "max_steps": 0,
}


def _refusal(cls, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        cls(**kw)
    return info.value


# --- vocabularies and constants ---------------------------------------------------------------


def test_vocabularies_have_exactly_their_members_in_order():
    assert OVERLAPS == ("none", "full", "per_layer", "bucketed")
    assert RULES == ("modulo", "resample")
    assert DENSE_ENCODINGS == ("fp32", "bf16", "fp16")
    assert MODES == ("fair", "fifo")
    assert SEMANTICS == ("eager", "rendezvous")
    assert PATHS == ("auto", "message", "collective", "round", "reference")


def test_constants_have_their_documented_values():
    assert MAX_JITTER == 10.0
    assert DDP_BUCKET_BYTES == 26214400  # 25 MiB
    assert isinstance(DDP_BUCKET_BYTES, int)
    assert FORWARD_FRACTION == 0.3333333333333333
    assert options._WORLD_SIZES == (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


# --- defaults ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [ReplayOptions, PredictOptions, SimulateConfig])
def test_every_shared_field_defaults_to_its_documented_value(cls):
    made = cls()
    assert {k: getattr(made, k) for k in SHARED_DEFAULTS} == SHARED_DEFAULTS
    assert type(made.bucket_bytes) is int


def test_fields_are_declared_in_their_documented_order():
    assert [f.name for f in dataclasses.fields(ReplayOptions)] == list(SHARED_DEFAULTS)
    assert [f.name for f in dataclasses.fields(PredictOptions)] == [*SHARED_DEFAULTS, "extra"]
    assert [f.name for f in dataclasses.fields(SimulateConfig)] == [
        *SHARED_DEFAULTS,
        *SIMULATE_DEFAULTS,
    ]


def test_simulate_own_fields_default_to_their_documented_values():
    made = SimulateConfig()
    assert {k: getattr(made, k) for k in SIMULATE_DEFAULTS} == SIMULATE_DEFAULTS
    # the backward pass is the rest of forward+backward: 1 - 1/3
    assert made.backward_fraction == pytest.approx(2 / 3, rel=1e-15)
    assert made.backward_fraction + FORWARD_FRACTION == 1.0


def test_predict_extra_defaults_to_a_fresh_empty_dict_outside_equality_and_hash():
    a, b = PredictOptions(), PredictOptions()
    assert a.extra == {} and b.extra == {}
    assert a.extra is not b.extra
    tagged = PredictOptions(extra={"note": "x"})
    assert tagged.extra == {"note": "x"}
    assert tagged == a
    assert hash(tagged) == hash(a)


@pytest.mark.parametrize("cls", [ReplayOptions, PredictOptions, SimulateConfig])
def test_options_are_frozen(cls):
    made = cls()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.seed = 1  # type: ignore[misc]


def test_equal_options_compare_and_hash_equal_and_differ_by_a_field():
    assert ReplayOptions() == ReplayOptions()
    assert hash(ReplayOptions()) == hash(ReplayOptions())
    assert ReplayOptions(seed=1) != ReplayOptions()
    assert SimulateConfig(jitter=0.5) != SimulateConfig()


# --- ReplayOptions: accepted edges --------------------------------------------------------------


def test_replay_options_accept_the_edges_of_every_range():
    made = ReplayOptions(
        world_sizes=(1,),
        seed=0,
        bucket_bytes=1,
        dense_encodings=("fp32",),
        size_exchange=False,
    )
    assert made.world_sizes == (1,)
    assert made.seed == 0
    assert made.bucket_bytes == 1
    assert made.size_exchange is False
    assert ReplayOptions(bucket_bytes=1e15).bucket_bytes == 1e15
    assert ReplayOptions(seed=2**62).seed == 2**62


def test_replay_options_accept_several_algorithms_per_collective_and_none():
    made = ReplayOptions(
        allreduce=("ring", "rabenseifner", "binomial_tree", "hierarchical", "recursive_doubling"),
        allgatherv=("ring", "recursive_doubling", "bruck", "direct", "padded", "bounded"),
        sparse_allreduce=(),
    )
    assert len(made.allreduce) == 5 and len(made.allgatherv) == 6
    assert ReplayOptions(allreduce=()).allreduce == ()
    assert ReplayOptions(sparse_allreduce=("recursive_doubling",)).sparse_allreduce == (
        "recursive_doubling",
    )


@pytest.mark.parametrize("rule", ["modulo", "resample"])
def test_replay_options_accept_every_rule(rule):
    assert ReplayOptions(rule=rule).rule == rule


@pytest.mark.parametrize("overlap", ["none", "full", "per_layer", "bucketed"])
def test_replay_and_predict_options_accept_every_overlap_mode_including_full(overlap):
    assert ReplayOptions(overlap=overlap).overlap == overlap
    assert PredictOptions(overlap=overlap).overlap == overlap


@pytest.mark.parametrize(
    "encs", [("fp32",), ("bf16", "fp32"), ("fp16", "fp32", "bf16"), ["fp32", "fp16"]]
)
def test_dense_encodings_accept_any_order_holding_fp32_once(encs):
    assert ReplayOptions(dense_encodings=encs).dense_encodings == encs


# --- ReplayOptions: refusals, whole lines -------------------------------------------------------


@pytest.mark.parametrize("sizes", [(), (0,), (2, 0), (4, -3), (0.5,)])
def test_world_sizes_empty_or_below_one_are_refused(sizes):
    err = _refusal(ReplayOptions, world_sizes=sizes)
    assert str(err) == "world sizes must be integers >= 1"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"allreduce": ("mesh",)},
            f"unknown allreduce algorithm 'mesh'; valid: {ALLREDUCE_VALID}",
        ),
        (
            {"allreduce": ("ring", 7)},
            f"unknown allreduce algorithm '7'; valid: {ALLREDUCE_VALID}",
        ),
        (
            {"allgatherv": ("ring", "mesh")},
            f"unknown allgatherv algorithm 'mesh'; valid: {ALLGATHERV_VALID}",
        ),
        (
            {"sparse_allreduce": ("ring",)},
            "unknown sparse_allreduce algorithm 'ring'; valid: recursive_doubling",
        ),
        ({"rule": "nearest"}, "unknown extrapolation rule 'nearest'; valid: modulo, resample"),
        ({"rule": 3}, "unknown extrapolation rule '3'; valid: modulo, resample"),
        (
            {"overlap": "some"},
            "unknown overlap mode 'some'; valid: bucketed, full, none, per_layer",
        ),
        (
            {"dense_encodings": ("fp32", "int8")},
            "unknown dense encoding 'int8'; valid: bf16, fp16, fp32",
        ),
    ],
)
def test_unknown_names_are_refused_with_the_sorted_valid_names(kw, message):
    err = _refusal(ReplayOptions, **kw)
    assert isinstance(err, UnknownNameError)
    assert str(err) == message


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0"),
        (0.0, "0.0"),
        (-1, "-1"),
        (0.999, "0.999"),  # below one byte: a size given in bits, e.g. 3b
        (1.01e15, "1010000000000000.0"),
        (math.inf, "inf"),
        (math.nan, "nan"),
    ],
)
def test_bucket_bytes_outside_one_byte_to_a_petabyte_are_refused(value, shown):
    err = _refusal(ReplayOptions, bucket_bytes=value)
    assert str(err) == f"bucket_bytes must be a number of bytes in [1, 1e15], got {shown}"


@pytest.mark.parametrize("seed", [-1, -7])
def test_negative_seeds_are_refused(seed):
    assert str(_refusal(ReplayOptions, seed=seed)) == f"seed must be >= 0, got {seed}"


@pytest.mark.parametrize("encs", [(), ("bf16",), ("bf16", "fp16")])
def test_dense_encodings_without_fp32_are_refused(encs):
    err = _refusal(ReplayOptions, dense_encodings=encs)
    assert str(err) == "dense_encodings must include fp32 (the speedup baseline)"


@pytest.mark.parametrize(
    ("encs", "shown"),
    [
        (("fp32", "fp32"), "['fp32', 'fp32']"),
        (("fp32", "bf16", "bf16"), "['fp32', 'bf16', 'bf16']"),
        (["bf16", "fp32", "bf16"], "['bf16', 'fp32', 'bf16']"),
    ],
)
def test_dense_encodings_listing_one_twice_are_refused(encs, shown):
    err = _refusal(ReplayOptions, dense_encodings=encs)
    assert str(err) == f"dense_encodings lists an encoding twice: {shown}"


@pytest.mark.parametrize(
    ("value", "shown"), [(1, "1"), (0, "0"), ("true", "'true'"), (None, "None")]
)
def test_size_exchange_other_than_a_bool_is_refused(value, shown):
    err = _refusal(ReplayOptions, size_exchange=value)
    assert str(err) == f"size_exchange must be true or false, got {shown}"


def test_predict_options_refuse_what_replay_options_refuse():
    assert str(_refusal(PredictOptions, seed=-2)) == "seed must be >= 0, got -2"
    assert str(_refusal(PredictOptions, world_sizes=())) == "world sizes must be integers >= 1"


# --- SimulateConfig -----------------------------------------------------------------------------


def test_simulate_refuses_what_replay_options_refuse():
    assert str(_refusal(SimulateConfig, seed=-1)) == "seed must be >= 0, got -1"
    assert str(_refusal(SimulateConfig, world_sizes=(0,))) == "world sizes must be integers >= 1"
    assert (
        str(_refusal(SimulateConfig, overlap="some"))
        == "unknown overlap mode 'some'; valid: bucketed, full, none, per_layer"
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"allreduce": ("rabenseifner",)},
        {"allgatherv": ()},
        {"allgatherv": ("bruck",)},
        {"allreduce": ("hierarchical",), "allgatherv": ("ring",)},
    ],
)
def test_simulate_accepts_one_allreduce_and_at_most_one_allgatherv(kw):
    made = SimulateConfig(**kw)
    for key, value in kw.items():
        assert getattr(made, key) == value


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"allreduce": ("ring", "rabenseifner")},
            "allreduce 'ring,rabenseifner': simulate replays one algorithm at a time",
        ),
        ({"allreduce": ()}, "allreduce '': simulate replays one algorithm at a time"),
        (
            {"allgatherv": ("ring", "bruck")},
            "allgatherv 'ring,bruck': simulate replays one algorithm at a time",
        ),
        (
            {"allgatherv": ("ring", "bruck", "direct")},
            "allgatherv 'ring,bruck,direct': simulate replays one algorithm at a time",
        ),
    ],
)
def test_simulate_refuses_more_than_one_algorithm_per_collective(kw, message):
    assert str(_refusal(SimulateConfig, **kw)) == message


def test_simulate_refuses_the_full_overlap_bound():
    assert str(_refusal(SimulateConfig, overlap="full")) == (
        "overlap 'full' is the closed form's optimistic bound; simulate replays none, "
        "per_layer or bucketed"
    )


@pytest.mark.parametrize("overlap", ["none", "per_layer", "bucketed"])
def test_simulate_accepts_every_other_overlap_mode(overlap):
    assert SimulateConfig(overlap=overlap).overlap == overlap


@pytest.mark.parametrize(
    ("key", "value"),
    [("mode", m) for m in MODES]
    + [("semantics", s) for s in SEMANTICS]
    + [("path", p) for p in PATHS],
)
def test_simulate_accepts_every_member_of_its_vocabularies(key, value):
    assert getattr(SimulateConfig(**{key: value}), key) == value


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mode": "lifo"}, "unknown network mode 'lifo'; valid: fair, fifo"),
        ({"mode": 1}, "unknown network mode '1'; valid: fair, fifo"),
        ({"semantics": "lazy"}, "unknown message semantics 'lazy'; valid: eager, rendezvous"),
        (
            {"path": "fast"},
            "unknown path 'fast'; valid: auto, collective, message, reference, round",
        ),
    ],
)
def test_simulate_refuses_unknown_vocabulary_names_with_the_sorted_valid_names(kw, message):
    err = _refusal(SimulateConfig, **kw)
    assert isinstance(err, UnknownNameError)
    assert str(err) == message


@pytest.mark.parametrize("value", [0.0, 0, 1e-12, 0.5, 1.0, 1])
def test_backward_fraction_accepts_the_closed_unit_interval(value):
    assert SimulateConfig(backward_fraction=value).backward_fraction == value


@pytest.mark.parametrize("value", [-1e-12, -1.0, 1.0000001, 2.0, math.nan, math.inf])
def test_backward_fraction_outside_the_unit_interval_is_refused(value):
    err = _refusal(SimulateConfig, backward_fraction=value)
    assert str(err) == "backward_fraction must be in [0, 1]"


@pytest.mark.parametrize("value", [0, 0.0, 1e-12, 1.0, 9.999, 10, 10.0])
def test_jitter_accepts_zero_to_ten_inclusive(value):
    assert SimulateConfig(jitter=value).jitter == value


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-1e-09, "-1e-09"),
        (-0.5, "-0.5"),
        (10.000001, "10.000001"),
        (10.5, "10.5"),
        (11, "11"),
        (math.inf, "inf"),
        (math.nan, "nan"),
        (1e308, "1e+308"),
    ],
)
def test_jitter_outside_zero_to_ten_is_refused(value, shown):
    err = _refusal(SimulateConfig, jitter=value)
    assert str(err) == f"jitter must be a number in [0, 10], got {shown}"


@pytest.mark.parametrize("value", [0, 1, 2**40])
def test_max_steps_accepts_zero_and_above(value):
    assert SimulateConfig(max_steps=value).max_steps == value


@pytest.mark.parametrize("value", [-1, -100])
def test_negative_max_steps_are_refused(value):
    err = _refusal(SimulateConfig, max_steps=value)
    assert str(err) == "max_steps must be >= 0 (0 = all steps)"


def test_the_bounded_exchange_replays_without_overlap_only():
    assert SimulateConfig(allgatherv=("bounded",), overlap="none").allgatherv == ("bounded",)
    for overlap in ("per_layer", "bucketed"):
        err = _refusal(SimulateConfig, allgatherv=("bounded",), overlap=overlap)
        assert str(err) == "allgatherv/bounded replays the hook's own buckets; use overlap none"
        # any other exchange replays with overlap buckets
        assert SimulateConfig(allgatherv=("ring",), overlap=overlap).overlap == overlap
        assert SimulateConfig(allgatherv=(), overlap=overlap).overlap == overlap


def test_predict_prices_the_bounded_exchange_with_overlap():
    made = PredictOptions(allgatherv=("bounded",), overlap="bucketed")
    assert made.allgatherv == ("bounded",) and made.overlap == "bucketed"
