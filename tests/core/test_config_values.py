"""Config values that do not fit their type are one ConfigError, never an OverflowError."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from vgcsim.core.config import apply_overrides, config_from_dict
from vgcsim.core.errors import ConfigError


@dataclass(frozen=True)
class _Cfg:
    rate: float = 1.0
    count: int = 1


def test_an_integer_too_large_for_a_float_is_a_config_error():
    # a TOML integer of 400 digits for a float key: float() raised OverflowError
    with pytest.raises(ConfigError, match="config key 'rate' expects a number"):
        config_from_dict(_Cfg, {"rate": 10**400})
    assert config_from_dict(_Cfg, {"rate": 10**300}).rate == 1e300


@pytest.mark.parametrize("raw", ["1" * 5000, "1e3.5", "x"])
def test_integers_that_do_not_parse_are_config_errors(raw):
    with pytest.raises(ConfigError, match="config key 'count' expects an integer"):
        apply_overrides(_Cfg(), [f"count={raw}"])


@pytest.mark.parametrize(
    ("raw", "count"),
    [(7, 7), (3.0, 3), (" 1_000 ", 1000), ("-2", -2)],
)
def test_integers_from_ints_whole_floats_and_underscored_text(raw, count):
    assert config_from_dict(_Cfg, {"count": raw}).count == count


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (True, "config key 'count' expects an integer, got True"),
        (2.5, "config key 'count' expects an integer, got 2.5"),
        ("two", "config key 'count' expects an integer, got 'two'"),
        ("1__0x", "config key 'count' expects an integer, got '1__0x'"),
        # underscores group digits only between two of them, as in Python
        ("1__000", "config key 'count' expects an integer, got '1__000'"),
        ("_1000", "config key 'count' expects an integer, got '_1000'"),
    ],
)
def test_an_integer_key_refuses_in_one_line(raw, message):
    with pytest.raises(ConfigError) as err:
        config_from_dict(_Cfg, {"count": raw})
    assert str(err.value) == message
