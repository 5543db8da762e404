"""A deterministic greedy pairwise (2-way covering array) generator for test grids.

``pairwise(factors)`` returns rows (dicts) in which every pair of values of every two factors
occurs in at least one row: a fault that needs two factors at given values to show is found
with far fewer rows than the full product (e.g. 28 rows instead of 168 for 3 x 4 x 2 x 7).
Factors whose values interact in threes or more are joined into one factor whose values are
their full product by the caller (see ``joined``), so that the product stays where it matters.

The construction is the greedy one of AETG (Cohen et al., IEEE TSE 23(7), 1997) without its
random candidates: each new row starts from the first pair (in factor order, then value
order) not covered yet, and every other factor, in order, takes the first of its values that
covers the most uncovered pairs with the values already chosen. Each row covers at least that
first pair, so the loop ends; the result depends only on the factors and their order.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence


def _pairs(factors: list[tuple[str, list]]) -> set[tuple[int, int, int, int]]:
    """All (factor i, value index a, factor j, value index b) with i < j."""
    return {
        (i, a, j, b)
        for (i, (_, vi)), (j, (_, vj)) in itertools.combinations(enumerate(factors), 2)
        for a in range(len(vi))
        for b in range(len(vj))
    }


def _gain(uncovered: set, chosen: dict[int, int], k: int, c: int) -> int:
    """How many uncovered pairs value ``c`` of factor ``k`` covers with the ``chosen`` ones."""
    return sum(
        ((m, chosen[m], k, c) if m < k else (k, c, m, chosen[m])) in uncovered for m in chosen
    )


def pairwise(factors: Mapping[str, Sequence]) -> list[dict]:
    """Rows covering every pair of values of every two factors, in a deterministic order."""
    items = [(name, list(values)) for name, values in factors.items()]
    if any(not values for _, values in items):
        raise ValueError("every factor needs at least one value")
    if len(items) < 2:
        return [{name: v} for name, values in items for v in values]
    uncovered = _pairs(items)
    rows: list[dict] = []
    while uncovered:
        i, a, j, b = min(uncovered)
        chosen = {i: a, j: b}
        for k, (_, values) in enumerate(items):
            if k in chosen:
                continue

            chosen[k] = max(
                range(len(values)), key=lambda c, k=k: (_gain(uncovered, chosen, k, c), -c)
            )
        for m, n in itertools.combinations(sorted(chosen), 2):
            uncovered.discard((m, chosen[m], n, chosen[n]))
        rows.append({name: items[k][1][chosen[k]] for k, (name, _) in enumerate(items)})
    return rows


def joined(**factors: Sequence) -> list[dict]:
    """The full product of interacting factors as the values of one factor (dicts to merge)."""
    return [
        dict(zip(factors, combo, strict=True)) for combo in itertools.product(*factors.values())
    ]


def covers_every_pair(rows: list[dict], factors: Mapping[str, Sequence]) -> bool:
    """True when every pair of values of every two factors occurs in some row."""
    names = list(factors)
    for x, y in itertools.combinations(names, 2):
        seen = [(r[x], r[y]) for r in rows]  # a list: values may be dicts
        if any((a, b) not in seen for a in factors[x] for b in factors[y]):
            return False
    return True
