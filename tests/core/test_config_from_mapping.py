"""vgcsim.core.config by value: the exact one-line ConfigErrors of ``config_from_dict`` (a
config that is not a table, an unknown key, a boolean for a number, a nested key that does not
parse, a dataclass that refuses its values, top level and in a section), that a section's
free-form keys keep their default when none are given, and that TOML files are read as UTF-8
whatever the locale."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.conftest import ascii_locale
from vgcsim.core.config import config_from_dict, load_toml
from vgcsim.core.errors import ConfigError


@dataclass(frozen=True)
class Solver:
    rate: float = 1.0
    steps: int = 10

    def __post_init__(self):
        if self.rate <= 0:
            raise ValueError("rate must be positive")


@dataclass(frozen=True)
class Codec:
    EXTRA_KEYS_FIELD = "params"
    name: str = "variance"
    params: dict = field(default_factory=lambda: {"alpha": 1.5})


@dataclass(frozen=True)
class Study:
    title: str = "study"
    solver: Solver = field(default_factory=Solver)
    codec: Codec = field(default_factory=Codec)


def _error(cls, data) -> str:
    with pytest.raises(ConfigError) as exc:
        config_from_dict(cls, data)
    return str(exc.value)


@pytest.mark.parametrize(
    ("data", "name"), [([("rate", 1.0)], "list"), ("rate=1", "str"), (None, "NoneType")]
)
def test_a_config_that_is_not_a_table_is_refused_naming_its_type(data, name):
    assert _error(Solver, data) == f"config must be a table, got {name}"


def test_an_unknown_key_lists_the_valid_keys_comma_separated():
    assert _error(Solver, {"rtae": 2.0}) == (
        "unknown config key 'rtae'; valid keys here: rate, steps"
    )
    assert _error(Study, {"solver": {"stpes": 3}}) == (
        "unknown config key 'solver.stpes'; valid keys here: rate, steps"
    )


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_not_a_number(value):
    assert _error(Solver, {"rate": value}) == (f"config key 'rate' expects a number, got {value!r}")


def test_a_bad_value_in_a_section_is_named_by_its_dotted_key():
    assert _error(Study, {"solver": {"rate": "fast"}}) == (
        "config key 'solver.rate' expects a number, got 'fast'"
    )
    assert _error(Study, {"solver": {"steps": "many"}}) == (
        "config key 'solver.steps' expects an integer, got 'many'"
    )


def test_values_the_dataclass_refuses_are_one_line_at_the_top_level():
    assert _error(Solver, {"rate": -1.0}) == "invalid config: rate must be positive"


def test_values_the_dataclass_refuses_are_one_line_naming_their_section():
    assert _error(Study, {"solver": {"rate": 0}}) == (
        "invalid config section solver: rate must be positive"
    )


def test_without_free_form_keys_a_section_keeps_its_default_params():
    assert config_from_dict(Codec, {"name": "strom"}) == Codec(name="strom", params={"alpha": 1.5})
    assert config_from_dict(Codec, {}).params == {"alpha": 1.5}
    assert config_from_dict(Study, {"codec": {"name": "strom"}}).codec.params == {"alpha": 1.5}
    # given keys replace the default dict
    assert config_from_dict(Codec, {"beta": 2}).params == {"beta": 2}


def test_a_toml_file_is_read_as_utf8_whatever_the_locale(tmp_path):
    p = tmp_path / "study.toml"
    p.write_text('title = "Zürich — 10 µs"\n[solver]\nrate = 0.5\n', encoding="utf-8")
    with ascii_locale():
        data = load_toml(p)
    assert data == {"title": "Zürich — 10 µs", "solver": {"rate": 0.5}}
    cfg = config_from_dict(Study, data)
    assert cfg.title == "Zürich — 10 µs" and cfg.solver == Solver(rate=0.5)


def test_a_free_form_section_that_is_not_a_table_is_refused_by_its_full_key():
    # the codec's params take any keys, but only as a table
    with pytest.raises(ConfigError) as err:
        config_from_dict(Study, {"codec": {"params": 3}})
    assert str(err.value) == "config key 'codec.params' expects a table, got 3"
