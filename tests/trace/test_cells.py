"""Bulk cell parsing: bit-identical to float() on what it accepts, flags everything else."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.trace.cells import classify, delimiters, parse_cells, parse_table


def _parse(cells: list[str]) -> tuple[np.ndarray, np.ndarray]:
    block = (",".join(cells) + "\n").encode()
    classes = classify(block)
    ends = delimiters(classes)
    lengths = np.diff(ends, prepend=-1) - 1
    return parse_cells(classes, ends - lengths, lengths)


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


def test_known_cells() -> None:
    cells = ["", "0", "-0", "1.5", "-12.345", ".5", "5.", "-.5", "1049589846.123", "999999999999999"]
    values, fallback = _parse(cells)
    assert not fallback.any()
    for cell, value in zip(cells, values, strict=True):
        assert _same(value, float(cell) if cell else math.nan), cell


def test_everything_else_is_left_to_the_fallback() -> None:
    cells = [
        "nan",
        "1e5",
        "+1",
        " 1",
        "1.2.3",
        "--1",
        "1-2",
        "-",
        ".",
        "abc",
        "1_0",
        "1234567890123456",
        "9" * 30,
    ]
    values, fallback = _parse(cells)
    assert fallback.all() and np.isnan(values).all()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(), st.text("0123456789", min_size=0, max_size=10), st.text("0123456789", max_size=8)
        ),
        min_size=1,
        max_size=50,
    )
)
def test_decimal_cells_match_float(parts: list[tuple[bool, str, str]]) -> None:
    cells = [("-" if neg else "") + whole + ("." + frac if frac else "") for neg, whole, frac in parts]
    values, fallback = _parse(cells)
    for cell, value, flagged in zip(cells, values, fallback, strict=True):
        digits = sum(ch.isdigit() for ch in cell)
        if flagged:
            assert digits == 0 or digits > 15, cell
        else:
            assert _same(value, float(cell) if cell else math.nan), (cell, value)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.lists(st.sampled_from(["", "1", "-2.5", "30.25", "nan", "1e3", "12345678901"]),
                                   min_size=6, max_size=60))
def test_a_table_comes_back_column_by_column(columns: int, cells: list[str]) -> None:
    cells = cells[: len(cells) // columns * columns]
    block = "".join(",".join(cells[i : i + columns]) + "\n" for i in range(0, len(cells), columns)).encode()
    classes = classify(block)
    ends = delimiters(classes)
    lengths = np.diff(ends, prepend=-1) - 1
    values, fallback = parse_table(classes, ends - lengths, lengths, columns)
    flat_values, flat_fallback = parse_cells(classes, ends - lengths, lengths)
    assert values.shape == (columns, len(cells) // columns)
    np.testing.assert_array_equal(values, flat_values.reshape(-1, columns).T)
    np.testing.assert_array_equal(fallback, flat_fallback)  # flags stay in the cells' own order
