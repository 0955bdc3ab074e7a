"""Windows for windowed aggregations: definitions, window arithmetic, windowed keys.

See ``windows`` for the bounds and closing rule of each window type and
``windowed`` for the ``Windowed`` key, its serde and the window-store key layouts.
"""
from .windowed_keys import (Windowed, WindowedSerde, split_window_store_key, split_window_store_time_key,
                       window_store_key, window_store_time_key)
from .windows import (HoppingWindows, SessionMerge, SessionWindows, SlidingWindows, SlidingWindowUpdate,
                      TumblingWindows, Windows)

__all__ = [
    "TumblingWindows", "HoppingWindows", "SlidingWindows", "SessionWindows", "Windows",
    "SlidingWindowUpdate", "SessionMerge",
    "Windowed", "WindowedSerde",
    "window_store_key", "split_window_store_key", "window_store_time_key", "split_window_store_time_key",
]
