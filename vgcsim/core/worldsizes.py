"""World sizes: the one syntax every command reads for the ranks P to evaluate.

A world-size list is comma-separated items, each one of:

* ``N`` — one world size, e.g. ``8,16,64``;
* ``A:B:xR`` — the geometric progression A, A·R, A·R², … up to and including B, e.g.
  ``2:1024:x2`` is 2, 4, 8, …, 1024 (B must be a term);
* ``A:B:+D`` — the arithmetic progression A, A+D, A+2D, … up to and including B, e.g.
  ``8:64:+8`` is 8, 16, 24, …, 64 (B must be a term);
* ``a,b,...,z`` — an ellipsis, accepted only where one progression alone continues ``a, b``
  to ``z``: ``10,20,...,100`` (arithmetic; doubling misses 100). Where both reach ``z``
  (``2,4,...,1024`` doubles as well as counts by 2) it is ambiguous and refused, naming the
  two explicit forms.

The result is sorted and without repeats. Every size lies in ``1 .. MAX_WORLD_SIZE`` and a
list holds at most ``MAX_WORLD_SIZES`` sizes; larger input is refused before anything is
built. The default of every command is :data:`DEFAULT_WORLD_SIZES`.
"""

from __future__ import annotations

from vgcsim.core.errors import ConfigError

__all__ = [
    "DEFAULT_WORLD_SIZES",
    "MAX_WORLD_SIZE",
    "MAX_WORLD_SIZES",
    "WORLD_SIZES_HELP",
    "parse_world_sizes",
]

#: The default world sizes of every command: 2, 4, 8, ..., 1024.
DEFAULT_WORLD_SIZES = "2:1024:x2"
#: The largest world size any command accepts (the simulator holds per-rank state, the models
#: per-rank arrays; far beyond this they exhaust memory).
MAX_WORLD_SIZE = 65536
#: The most world sizes one list may hold.
MAX_WORLD_SIZES = 4096

WORLD_SIZES_HELP = (
    "ranks P: a list 8,16,64; a geometric A:B:xR (2:1024:x2 = 2,4,8,...,1024); an "
    "arithmetic A:B:+D (8:64:+8 = 8,16,24,...,64); items may be mixed, e.g. 1,2:256:x2; "
    "'a,b,...,z' only where one progression alone reaches z "
    f"(each 1..{MAX_WORLD_SIZE})"
)


def _int(text: str, whole: str) -> int:
    try:
        value = int(text.strip())  # int() reads "1_000" itself
    except ValueError:
        raise ConfigError(
            f"world sizes {whole!r}: {text.strip()!r} is not an integer ({WORLD_SIZES_HELP})"
        ) from None
    _check_size(value, whole)
    return value


def _check_size(value: int, whole: str) -> None:
    if value < 1:
        raise ConfigError(f"world sizes {whole!r}: {value} is not >= 1")
    if value > MAX_WORLD_SIZE:
        raise ConfigError(
            f"world sizes {whole!r}: {value} exceeds the largest supported world size, "
            f"{MAX_WORLD_SIZE}"
        )


def _geometric(a: int, b: int, ratio: int) -> list[int] | None:
    """a, a·r, ... up to b, or None when b is not a term."""
    out = [a]
    while out[-1] < b:
        out.append(out[-1] * ratio)
    return out if out[-1] == b else None


def _arithmetic(a: int, b: int, step: int) -> list[int] | None:
    if (b - a) % step:
        return None
    return list(range(a, b + 1, step))


def _range_item(item: str, whole: str) -> list[int]:
    parts = item.split(":")
    if len(parts) != 3 or len(parts[2].strip()) < 2 or parts[2].strip()[0] not in "x+":
        raise ConfigError(
            f"world sizes {whole!r}: {item!r} is not A:B:xR (geometric) or A:B:+D (arithmetic)"
        )
    a, b = _int(parts[0], whole), _int(parts[1], whole)
    kind, step = parts[2].strip()[0], parts[2].strip()[1:]
    if kind == "x" and step.strip().lstrip("+-").isdigit() and int(step) < 2:
        raise ConfigError(f"world sizes {whole!r}: {item!r} needs a ratio >= 2")
    by = _int(step, whole)
    if b < a:
        raise ConfigError(f"world sizes {whole!r}: {item!r} ends below its start")
    if kind == "x":
        if by < 2:
            raise ConfigError(f"world sizes {whole!r}: {item!r} needs a ratio >= 2")
        terms = _geometric(a, b, by)
        what = f"multiplying {a} by {by}"
    else:
        if (b - a) // by + 1 > MAX_WORLD_SIZES:
            raise ConfigError(
                f"world sizes {whole!r}: {item!r} has more than {MAX_WORLD_SIZES} terms"
            )
        terms = _arithmetic(a, b, by)
        what = f"adding {by} to {a}"
    if terms is None:
        raise ConfigError(f"world sizes {whole!r}: {b} is not reached by {what}")
    return terms


def _ellipsis(parts: list[str], whole: str) -> list[int]:
    i = parts.index("...")
    if i < 2 or i != len(parts) - 2:
        raise ConfigError(
            f"world sizes {whole!r}: write 'a,b,...,z' (two terms, ..., last) or the explicit "
            "A:B:xR / A:B:+D"
        )
    head = [_int(x, whole) for x in parts[:i]]
    a, b, z = head[-2], head[-1], _int(parts[-1], whole)
    if not a < b <= z:
        raise ConfigError(f"world sizes {whole!r}: need a < b <= z in 'a,b,...,z'")
    arith = _arithmetic(a, z, b - a)
    if arith is not None and len(arith) > MAX_WORLD_SIZES:
        raise ConfigError(f"world sizes {whole!r}: more than {MAX_WORLD_SIZES} terms")
    geo = _geometric(a, z, b // a) if b % a == 0 else None
    if arith is not None and geo is not None and arith != geo:
        raise ConfigError(
            f"world sizes {whole!r} are ambiguous: write {a}:{z}:x{b // a} for "
            f"{a},{b},{b * (b // a)},... or {a}:{z}:+{b - a} for {a},{b},{b + b - a},..."
        )
    terms = arith if arith is not None else geo
    if terms is None:
        raise ConfigError(f"world sizes {whole!r}: {z} is not reached from {a},{b}")
    return head[:-2] + terms


def parse_world_sizes(text: str) -> tuple[int, ...]:
    """World sizes in the syntax of the module doc → sorted, unique tuple; ConfigError else."""
    whole = str(text)
    parts = [x.strip() for x in whole.replace(" ", ",").split(",") if x.strip()]
    if not parts:
        raise ConfigError(f"world sizes {whole!r}: empty ({WORLD_SIZES_HELP})")
    values: list[int] = []
    if "..." in parts:
        values += _ellipsis(parts, whole)
    else:
        for item in parts:
            values += _range_item(item, whole) if ":" in item else [_int(item, whole)]
    out = tuple(sorted(set(values)))
    if len(out) > MAX_WORLD_SIZES:
        raise ConfigError(f"world sizes {whole!r}: more than {MAX_WORLD_SIZES} sizes")
    return out
