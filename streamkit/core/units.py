"""Human units for durations, rates, counts and bytes: ``3650d``, ``2h 5m``, ``1.2s``,
``350ms``, ``12.3k/s``, ``1.5 MiB``.

One rule for every place that shows them (``describe()``, the live page mirrors it in
``page.js``): a duration is written in days, hours, minutes, seconds and milliseconds,
largest first, zero parts left out; below a minute it is one number of seconds (or of
milliseconds below a second). ``exact`` keeps every part (a topology's description must
not round a window away); otherwise only the two largest parts are kept and the
number is rounded to three significant digits.
"""
from __future__ import annotations

import math
from typing import List

_PARTS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000))
_DECIMAL = (("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12))
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _significant(value: float, digits: int = 3) -> str:
    """``value`` rounded to ``digits`` significant digits, without an exponent or trailing zeros."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    decimals = max(digits - 1 - int(math.floor(math.log10(abs(value)))), 0)
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _plain(value: float) -> str:
    """``value`` exactly as far as microseconds go, never in exponent form."""
    text = f"{round(value, 6):.6f}".rstrip("0").rstrip(".")
    return text or "0"


def duration_text(seconds: float, *, exact: bool = False) -> str:
    """``seconds`` in human units (see the module docstring): ``3650d``, ``2h 5m``,
    ``1m 30s``, ``1.2s``, ``350ms``, ``0s``."""
    if not math.isfinite(seconds):
        return "forever" if seconds > 0 else str(seconds)
    if seconds < 0:
        return "-" + duration_text(-seconds, exact=exact)
    if seconds == 0:
        return "0s"
    if seconds < 1:
        milliseconds = seconds * 1000
        return (_plain(milliseconds) if exact else _significant(milliseconds)) + "ms"
    if seconds < 60:
        text = _plain(seconds) if exact else _significant(seconds)
        if text != "60":
            return text + "s"
    total_ms = round(seconds * 1000)
    if not exact:  # keep the largest part and the next one, rounded
        first = next(i for i, (_, size) in enumerate(_PARTS) if total_ms >= size)
        keep = _PARTS[min(first + 1, len(_PARTS) - 1)][1]
        total_ms = round(total_ms / keep) * keep
    parts: List[str] = []
    for unit, size in _PARTS[:-1]:
        count, total_ms = divmod(total_ms, size)
        if count:
            parts.append(f"{count}{unit}")
    if total_ms:
        parts.append(f"{_plain(total_ms / 1000)}s")
    return " ".join(parts)


def count_text(count: float) -> str:
    """A count, shortened above 9,999: ``950``, ``12.3k``, ``4.5M``."""
    if abs(count) < 10_000:
        return _significant(count, 4) if count != int(count) else str(int(count))
    for prefix, size in reversed(_DECIMAL):
        if abs(count) >= size:
            return _significant(count / size) + prefix
    return str(count)  # unreachable: 10,000 is above the smallest prefix


def rate_text(per_second: float) -> str:
    """Events per second: ``0/s``, ``0.5/s``, ``950/s``, ``12.3k/s``, ``1.2M/s``."""
    if abs(per_second) < 1000:
        return _significant(per_second) + "/s"
    for prefix, size in reversed(_DECIMAL):
        if abs(per_second) >= size:
            return _significant(per_second / size) + prefix + "/s"
    return f"{per_second}/s"  # unreachable


def bytes_text(count: float) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``12.3 MiB``."""
    value, unit = float(count), 0
    while abs(value) >= 1024 and unit < len(_BINARY) - 1:
        value /= 1024
        unit += 1
    return f"{int(value) if unit == 0 else _significant(value)} {_BINARY[unit]}"
