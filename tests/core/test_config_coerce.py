"""Config values coerced to their declared types (``vgcsim.core.config``), from TOML values
(``config_from_dict``) and from ``--set`` text (``apply_overrides``): every type the configs
declare, by hand, and each refusal as its one line."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from vgcsim.core.config import apply_overrides, config_from_dict
from vgcsim.core.errors import ConfigError


@dataclass(frozen=True)
class Part:
    size: int = 1


@dataclass(frozen=True)
class Typed:
    anything: Any = None
    maybe: int | None = 3
    flag: bool = False
    label: str = "x"
    sizes: list[int] = field(default_factory=list)
    names: tuple[str, ...] = ()
    loose: list[Any] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    table: dict = field(default_factory=dict)
    part: Part = field(default_factory=Part)


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("anything", "1.5", 1.5),  # free-form text: a TOML literal where it is one
        ("anything", "[1, 2]", [1, 2]),
        ("anything", "plain words", "plain words"),
        ("maybe", "none", None),
        ("maybe", "NULL", None),
        ("maybe", "", None),
        ("maybe", "7", 7),
        ("flag", "yes", True),
        ("flag", " Off ", False),
        ("label", "none", "none"),  # a string that is not optional keeps the word
        ("sizes", "1, 2,3", [1, 2, 3]),
        ("sizes", "[4, 5]", [4, 5]),
        ("names", "a,b", ("a", "b")),
        ("loose", "1, x", [1, "x"]),  # items of an untyped list are free-form
        ("weights", '{"a": 0.5}', {"a": 0.5}),
        ("table", "{b = 2}", {"b": 2}),  # JSON first, else a TOML inline table
    ],
)
def test_set_text_is_coerced_to_the_declared_type(key, text, value):
    got = getattr(apply_overrides(Typed(), [f"{key}={text}"]), key)
    assert got == value and type(got) is type(value)


def test_toml_values_keep_their_types_where_they_fit():
    cfg = config_from_dict(
        Typed,
        {
            "anything": "x",  # a TOML string for a free-form key stays a string
            "maybe": None,
            "sizes": (1, 2),
            "names": ["p", "q"],
            "weights": {"a": 1.0},
            "part": {"size": 4},
        },
    )
    assert cfg.anything == "x" and cfg.maybe is None
    assert cfg.sizes == [1, 2] and cfg.names == ("p", "q")
    assert cfg.weights == {"a": 1.0} and cfg.part == Part(size=4)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"label": None}, "config key 'label' must not be empty"),
        ({"label": 5}, "config key 'label' expects a string, got 5"),
        ({"flag": "maybe"}, "config key 'flag' expects true or false, got 'maybe'"),
        ({"sizes": 5}, "config key 'sizes' expects a list, got 5"),
        ({"sizes": ["1", "x"]}, "config key 'sizes[1]' expects an integer, got 'x'"),
        ({"weights": 5}, "config key 'weights' expects a table, got 5"),
        ({"weights": "[1]"}, "config key 'weights' expects a table, got [1]"),
        ({"part": 5}, "config key 'part' is a section; give its keys, e.g. part.<name>=..."),
    ],
)
def test_each_coercion_refusal_is_its_one_line(data, message):
    with pytest.raises(ConfigError) as err:
        config_from_dict(Typed, data)
    assert str(err.value) == message


@dataclass(frozen=True)
class Declared:
    """Field types the configs do not declare today, read by the same rules."""

    anything: Any = None
    bare: typing.List = field(default_factory=list)  # noqa: UP006 (the bare typing alias)
    maybe: typing.Optional[int] = 3  # noqa: UP045 (typing's spelling of int | None)
    either: int | str = 0
    where: Path = Path(".")


def test_a_value_toml_already_typed_is_kept_as_it_is_for_an_any_key():
    """Only text is parsed as a literal: a list from TOML keeps its strings, backslashes and
    all (parsed again, 'C:\\data' would come back with its backslash doubled)."""
    assert config_from_dict(Declared, {"anything": ["C:\\data", 2]}).anything == ["C:\\data", 2]
    assert config_from_dict(Declared, {"anything": {"k": "v"}}).anything == {"k": "v"}
    assert config_from_dict(Declared, {"anything": "[1, 2]"}).anything == [1, 2]


def test_a_bare_list_type_reads_its_items_as_literals():
    assert config_from_dict(Declared, {"bare": "1, x"}).bare == [1, "x"]
    assert config_from_dict(Declared, {"bare": [2, "y"]}).bare == [2, "y"]


def test_typings_optional_spelling_is_optional_too():
    assert config_from_dict(Declared, {"maybe": "none"}).maybe is None
    assert config_from_dict(Declared, {"maybe": "5"}).maybe == 5


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [("either", "none", "int | str"), ("either", 5, "int | str"), ("where", "x", "<class")],
)
def test_a_type_the_reader_has_no_rule_for_is_one_line(key, value, shown):
    """A union of two non-None types is not optional, and neither it nor another class is
    read from text: both are refused naming the key and the type."""
    with pytest.raises(ConfigError) as err:
        config_from_dict(Declared, {key: value})
    assert str(err.value).startswith(f"config key {key!r}: unsupported type {shown}")


def test_a_value_already_of_a_plain_class_type_is_kept():
    assert config_from_dict(Declared, {"where": Path("/tmp/x")}).where == Path("/tmp/x")
