"""Human units (streamkit.core.units): durations, rates, counts and bytes as people
write them, never in exponent form, for the whole range of values."""
from __future__ import annotations

import math
import re
from datetime import timedelta

import pytest

from streamkit.core.units import bytes_text, count_text, duration_text, rate_text

PLAIN_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


@pytest.mark.parametrize("seconds, approx, exact", [
    (0, "0s", "0s"),
    (0.35, "350ms", "350ms"),
    (0.0015, "1.5ms", "1.5ms"),
    (1.2, "1.2s", "1.2s"),
    (1.23456, "1.23s", "1.23456s"),
    (59.96, "1m", "59.96s"),
    (90, "1m 30s", "1m 30s"),
    (7505, "2h 5m", "2h 5m 5s"),
    (7205, "2h", "2h 5s"),
    (timedelta(days=3650).total_seconds(), "3650d", "3650d"),
    (timedelta(days=3650, seconds=1).total_seconds(), "3650d", "3650d 1s"),
    (-90, "-1m 30s", "-1m 30s"),
    (math.inf, "forever", "forever"),
])
def test_durations(seconds: float, approx: str, exact: str) -> None:
    assert duration_text(seconds) == approx
    assert duration_text(seconds, exact=True) == exact


@pytest.mark.parametrize("exponent", range(-6, 13))
def test_no_value_is_written_in_exponent_form(exponent: int) -> None:
    for mantissa in (1, 1.5, 3.1536, 9.999):
        value = mantissa * 10 ** exponent
        for text in (duration_text(value), duration_text(value, exact=True), rate_text(value),
                     count_text(value), bytes_text(value)):
            assert "e+" not in text and "e-" not in text, (value, text)
        parts = duration_text(value, exact=True).split()
        for part in parts:  # every part a plain number and a unit
            number = re.match(r"^[\d.]+", part)
            assert number and PLAIN_NUMBER.match(number.group()), (value, part)


def test_exact_durations_add_up_to_the_value() -> None:
    factors = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
    for milliseconds in (1, 999, 1000, 61_001, 3_599_999, 86_400_000 * 3650 + 7, 123_456_789):
        total = 0.0
        for part in duration_text(milliseconds / 1000, exact=True).split():
            number, unit = re.match(r"^([\d.]+)([a-z]+)$", part).groups()
            total += float(number) * factors[unit]
        assert round(total) == milliseconds


def test_rates_counts_and_bytes() -> None:
    assert [rate_text(r) for r in (0, 0.5, 12.34, 950, 12_345, 1_200_000)] == [
        "0/s", "0.5/s", "12.3/s", "950/s", "12.3k/s", "1.2M/s"]
    assert [count_text(c) for c in (0, 9_999, 12_345, 4_500_000)] == ["0", "9999", "12.3k", "4.5M"]
    assert [bytes_text(b) for b in (512, 1536, 12.3 * 2 ** 20, 5 * 2 ** 40)] == [
        "512 B", "1.5 KiB", "12.3 MiB", "5 TiB"]
