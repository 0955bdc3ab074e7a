"""Windows for windowed aggregations: definitions, window arithmetic, windowed keys.

See ``windows`` for the bounds and closing rule of each window type (``sliding_windows``
and ``session_windows`` for those two) and
``windowed`` for the ``Windowed`` key, its serde and the window-store key layouts.
"""
from .windowed_keys import (Windowed, WindowedSerde, split_window_store_key, split_window_store_time_key,
                       window_store_key, window_store_time_key)
from typing import Union

from .session_windows import SessionMerge, SessionWindows
from .sliding_windows import SlidingWindows, SlidingWindowUpdate
from .windows import HoppingWindows, TumblingWindows

Windows = Union[TumblingWindows, HoppingWindows, SlidingWindows, SessionWindows]
"""Any window definition."""

__all__ = [
    "TumblingWindows", "HoppingWindows", "SlidingWindows", "SessionWindows", "Windows",
    "SlidingWindowUpdate", "SessionMerge",
    "Windowed", "WindowedSerde",
    "window_store_key", "split_window_store_key", "window_store_time_key", "split_window_store_time_key",
]
