"""Who is in a group on the embedded broker: one locked file per live member.

A member holds an exclusive ``flock`` on ``<group>/members/<member id>``; the kernel
drops it when the process exits or is killed, so a file whose lock can be taken
belongs to a dead member (and is removed by whoever notices). The file is locked
under a temporary name and then renamed into place, so a reader never sees a live
member's file unlocked.

Workers use the member count to share a group's tasks fairly (see
``transport.embedded.EmbeddedMembership``); the tasks themselves stay guarded by
their own locks, so a slow or wrong count can delay a hand-over, never let two
workers run one task.
"""
from __future__ import annotations

import fcntl
import os
import uuid
from pathlib import Path
from typing import List, Optional

MEMBERS_DIR = "members"
_TEMP_PREFIX = "+"  # a member file being created: not a member yet


class MemberLock:
    """This process's membership of one group, until :meth:`leave` or death."""

    def __init__(self, member_id: str, fd: int, path: Path) -> None:
        self.member_id = member_id
        self._fd = fd
        self._path = path

    def leave(self) -> None:
        """Leave the group (idempotent)."""
        if self._fd < 0:
            return
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = -1


def join(group_dir: Path) -> MemberLock:
    """Become a member of the group stored in ``group_dir``."""
    members = group_dir / MEMBERS_DIR
    members.mkdir(parents=True, exist_ok=True)
    member_id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    temp = members / f"{_TEMP_PREFIX}{member_id}"
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
    path = members / member_id
    os.rename(temp, path)
    return MemberLock(member_id, fd, path)


def live_members(group_dir: Path) -> List[str]:
    """The ids of the group's live members, sorted; removes dead members' files."""
    members = group_dir / MEMBERS_DIR
    try:
        names = os.listdir(members)
    except FileNotFoundError:
        return []
    alive = []
    for name in names:
        if name.startswith(_TEMP_PREFIX):
            continue
        if _is_held(members / name):
            alive.append(name)
    return sorted(alive)


def _is_held(path: Path) -> bool:
    fd: Optional[int] = None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the shared lock taken when the member was dead
    try:
        os.unlink(path)  # its member died: nobody holds it
    except FileNotFoundError:
        pass
    return False
