"""Named crash points, armed only by tests through ``STREAMKIT_CRASH_AT``.

``STREAMKIT_CRASH_AT="commit.after_transaction:3"`` kills the process with
SIGKILL the 3rd time it reaches that point (several points: comma-separated).
Unset (always, in production) each call is one dictionary lookup on a commit
path, never per record. In-process tests arm a point with :func:`arm`, which can
also make it raise :class:`InjectedFault` (a failure the worker must survive
cleanly) instead of killing the process.
"""
from __future__ import annotations

import os
import signal
from typing import Dict

from .errors import StreamkitError

ENV = "STREAMKIT_CRASH_AT"


def _parse(spec: str) -> Dict[str, int]:
    points = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, nth = item.partition(":")
        points[name] = int(nth or 1)
    return points


_ARMED = _parse(os.environ.get(ENV, ""))
_RAISING: set = set()


class InjectedFault(StreamkitError):
    """Raised at an armed fault point (tests only)."""


def arm(name: str, nth: int = 1, *, kill: bool = False) -> None:
    """Arm ``name`` in this process: the ``nth`` time it is reached it raises
    :class:`InjectedFault` (``kill``: it SIGKILLs the process)."""
    _ARMED[name] = nth
    if kill:
        _RAISING.discard(name)
    else:
        _RAISING.add(name)


def disarm() -> None:
    """Forget every armed point (tests call it when done)."""
    _ARMED.clear()
    _RAISING.clear()


def crash_point(name: str) -> None:
    """Die here (SIGKILL, no cleanup) if a test armed this point and its count is reached."""
    if _ARMED and name in _ARMED:
        _ARMED[name] -= 1
        if _ARMED[name] == 0:
            if name in _RAISING:
                del _ARMED[name]
                raise InjectedFault(f"fault injected at {name}")
            os.kill(os.getpid(), signal.SIGKILL)
