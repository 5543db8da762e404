"""World-size lists (``vgcsim.core.worldsizes``): each form's terms by hand, the bounds at
their edges, and each refusal as its one line."""

from __future__ import annotations

import pytest

from vgcsim.core.errors import ConfigError
from vgcsim.core.worldsizes import MAX_WORLD_SIZE, MAX_WORLD_SIZES, parse_world_sizes

HELP_FORMS = "is not A:B:xR (geometric) or A:B:+D (arithmetic)"


@pytest.mark.parametrize(
    ("text", "sizes"),
    [
        ("8,16,64", (8, 16, 64)),
        ("64 8 8", (8, 64)),  # spaces separate too; sorted, without repeats
        ("2:16:x2", (2, 4, 8, 16)),
        ("3:27:x3", (3, 9, 27)),
        ("5:5:x2", (5,)),  # a range that starts at its end
        ("8:32:+8", (8, 16, 24, 32)),
        ("7:7:+3", (7,)),
        ("2:8:+3", (2, 5, 8)),
        ("2,5,...,11", (2, 5, 8, 11)),
        ("1,2:8:x2", (1, 2, 4, 8)),
        ("10,20,...,50", (10, 20, 30, 40, 50)),  # doubling misses 50: arithmetic
        ("1,5,10,...,25", (1, 5, 10, 15, 20, 25)),  # terms before the last two stay
        ("4,8,...,8", (4, 8)),  # the last term may be b itself
        ("1_000,2_000", (1000, 2000)),
        (f"{MAX_WORLD_SIZE}", (MAX_WORLD_SIZE,)),
        (f"1:{MAX_WORLD_SIZES}:+1", tuple(range(1, MAX_WORLD_SIZES + 1))),
    ],
)
def test_terms_by_hand(text, sizes):
    assert parse_world_sizes(text) == sizes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "world sizes '': empty"),
        ("0", "world sizes '0': 0 is not >= 1"),
        (
            f"{MAX_WORLD_SIZE + 1}",
            f"world sizes '{MAX_WORLD_SIZE + 1}': {MAX_WORLD_SIZE + 1} exceeds the largest "
            f"supported world size, {MAX_WORLD_SIZE}",
        ),
        ("2:8", f"world sizes '2:8': '2:8' {HELP_FORMS}"),
        ("2:8:x", f"world sizes '2:8:x': '2:8:x' {HELP_FORMS}"),
        ("2:8:*2", f"world sizes '2:8:*2': '2:8:*2' {HELP_FORMS}"),
        ("2:8:x2:1", f"world sizes '2:8:x2:1': '2:8:x2:1' {HELP_FORMS}"),
        ("8:2:x2", "world sizes '8:2:x2': '8:2:x2' ends below its start"),
        ("8:7:+1", "world sizes '8:7:+1': '8:7:+1' ends below its start"),
        ("2:8:x1", "world sizes '2:8:x1': '2:8:x1' needs a ratio >= 2"),
        ("2:10:x2", "world sizes '2:10:x2': 10 is not reached by multiplying 2 by 2"),
        ("2:9:+2", "world sizes '2:9:+2': 9 is not reached by adding 2 to 2"),
        (
            f"1:{MAX_WORLD_SIZES + 1}:+1",
            f"world sizes '1:{MAX_WORLD_SIZES + 1}:+1': '1:{MAX_WORLD_SIZES + 1}:+1' has more "
            f"than {MAX_WORLD_SIZES} terms",
        ),
        (
            f"1:{MAX_WORLD_SIZES}:+1,{MAX_WORLD_SIZES + 1}",
            f"world sizes '1:{MAX_WORLD_SIZES}:+1,{MAX_WORLD_SIZES + 1}': more than "
            f"{MAX_WORLD_SIZES} sizes",
        ),
        (
            "2,...,8",
            "world sizes '2,...,8': write 'a,b,...,z' (two terms, ..., last) or the explicit "
            "A:B:xR / A:B:+D",
        ),
        (
            "2,4,...,8,16",
            "world sizes '2,4,...,8,16': write 'a,b,...,z' (two terms, ..., last) or the "
            "explicit A:B:xR / A:B:+D",
        ),
        ("4,4,...,8", "world sizes '4,4,...,8': need a < b <= z in 'a,b,...,z'"),
        ("4,8,...,6", "world sizes '4,8,...,6': need a < b <= z in 'a,b,...,z'"),
        (
            "2,4,...,16",
            "world sizes '2,4,...,16' are ambiguous: write 2:16:x2 for 2,4,8,... or 2:16:+2 "
            "for 2,4,6,...",
        ),
        (
            "3,9,...,80",
            "world sizes '3,9,...,80': 80 is not reached from 3,9",
        ),
        (
            f"1,2,...,{MAX_WORLD_SIZES + 1}",
            f"world sizes '1,2,...,{MAX_WORLD_SIZES + 1}': more than {MAX_WORLD_SIZES} terms",
        ),
        ("a,2", "world sizes 'a,2': 'a' is not an integer"),
        ("2,b,...,8", "world sizes '2,b,...,8': 'b' is not an integer"),
        ("2,4,...,z", "world sizes '2,4,...,z': 'z' is not an integer"),
        ("a:8:x2", "world sizes 'a:8:x2': 'a' is not an integer"),
        ("2:b:x2", "world sizes '2:b:x2': 'b' is not an integer"),
        ("2:8:xr", "world sizes '2:8:xr': 'r' is not an integer"),
        # underscores group digits only between two of them, as in Python
        ("1__000", "world sizes '1__000': '1__000' is not an integer"),
        ("8,16_", "world sizes '8,16_': '16_' is not an integer"),
    ],
)
def test_each_refusal_is_its_one_line(text, message):
    with pytest.raises(ConfigError) as err:
        parse_world_sizes(text)
    got = str(err.value)
    assert "\n" not in got
    # the not-an-integer and empty refusals append the syntax help in brackets
    assert got == message or got.startswith(message + " (ranks P: ")


def test_a_geometric_ellipsis_is_always_also_arithmetic_so_it_is_ambiguous():
    """a·rᵏ − a = a(rᵏ − 1) is a multiple of b − a = a(r − 1): counting by b − a reaches
    every term doubling (or tripling) reaches, so no ellipsis is geometric alone."""
    for a, r in ((2, 2), (3, 3), (5, 2), (1, 4)):
        for k in (2, 3, 5):
            with pytest.raises(ConfigError, match="are ambiguous"):
                parse_world_sizes(f"{a},{a * r},...,{a * r**k}")


def test_the_ambiguity_names_both_forms_with_their_third_terms():
    """3,6,...,48: doubling gives 3,6,12,...,48 and counting by 3 gives 3,6,9,...,48."""
    with pytest.raises(ConfigError) as err:
        parse_world_sizes("3,6,...,48")
    assert str(err.value) == (
        "world sizes '3,6,...,48' are ambiguous: write 3:48:x2 for 3,6,12,... or 3:48:+3 for "
        "3,6,9,..."
    )


def test_only_x_and_plus_name_a_progression_and_the_term_count_is_whole():
    with pytest.raises(ConfigError) as err:
        parse_world_sizes("2:8:X2")
    assert str(err.value) == f"world sizes '2:8:X2': '2:8:X2' {HELP_FORMS}"
    # (8192 − 1) // 2 + 1 = 4096 terms fit; 8192 is then not a term
    with pytest.raises(ConfigError) as err:
        parse_world_sizes("1:8192:+2")
    assert str(err.value) == "world sizes '1:8192:+2': 8192 is not reached by adding 2 to 1"


def test_an_ellipsis_of_exactly_the_most_terms_is_read_and_one_more_is_refused():
    last = MAX_WORLD_SIZES + 1  # 2, 3, ..., last: MAX_WORLD_SIZES terms
    assert len(parse_world_sizes(f"2,3,...,{last}")) == MAX_WORLD_SIZES
    with pytest.raises(ConfigError) as err:
        parse_world_sizes(f"2,3,...,{last + 1}")
    assert str(err.value) == (
        f"world sizes '2,3,...,{last + 1}': more than {MAX_WORLD_SIZES} terms"
    )


def test_every_term_before_the_ellipsis_pair_is_kept():
    # the run starts from the last two terms (5, 7); 1, 2 and 4 before them stay
    assert parse_world_sizes("1,2,4,5,7,...,11") == (1, 2, 4, 5, 7, 9, 11)
