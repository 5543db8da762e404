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
