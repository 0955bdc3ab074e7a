"""Named crash points, armed only by tests through ``STREAMKIT_CRASH_AT``.

``STREAMKIT_CRASH_AT="commit.after_transaction:3"`` kills the process with
SIGKILL the 3rd time it reaches that point (several points: comma-separated).
Unset (always, in production) each call is one dictionary lookup on a commit
path, never per record.
"""
from __future__ import annotations

import os
import signal
from typing import Dict

ENV = "STREAMKIT_CRASH_AT"


def _parse(spec: str) -> Dict[str, int]:
    points = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, nth = item.partition(":")
        points[name] = int(nth or 1)
    return points


_ARMED = _parse(os.environ.get(ENV, ""))


def crash_point(name: str) -> None:
    """Die here (SIGKILL, no cleanup) if a test armed this point and its count is reached."""
    if _ARMED and name in _ARMED:
        _ARMED[name] -= 1
        if _ARMED[name] == 0:
            os.kill(os.getpid(), signal.SIGKILL)
