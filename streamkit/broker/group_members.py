"""Who is in a group on the embedded broker: one locked file per live member.

A member holds an exclusive ``flock`` on ``<group>/members/<member id>``; the kernel
drops it when the process exits or is killed, so a file whose lock can be taken
belongs to a dead member (and is removed by whoever notices). The file is locked
under a temporary name and then renamed into place, so a reader never sees a live
member's file unlocked.

A member may publish a few bytes about itself (:meth:`MemberLock.publish`, like the
user data of Kafka's JoinGroup) in ``<group>/member-data/<member id>``, replaced
atomically. Workers publish the tasks they run and hold state for, and each places
the group's tasks by the same rule over what all published (see
``transport.embedded.EmbeddedMembership``); the tasks themselves stay guarded by
their own locks, so a stale view can delay a hand-over, never let two workers run
one task.
"""
from __future__ import annotations

import fcntl
import os
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Sequence

MEMBERS_DIR = "members"
DATA_DIR = "member-data"
_TEMP_PREFIX = "+"  # a member file being created: not a member yet


class MemberLock:
    """This process's membership of one group, until :meth:`leave` or death."""

    def __init__(self, member_id: str, fd: int, path: Path) -> None:
        self.member_id = member_id
        self._fd = fd
        self._path = path

    def publish(self, data: bytes) -> None:
        """Replace what this member tells the others (read with :func:`member_data`)."""
        if self._fd < 0:
            raise RuntimeError(f"member {self.member_id} left its group")
        directory = self._path.parent.parent / DATA_DIR
        directory.mkdir(parents=True, exist_ok=True)
        temp = directory / f"{_TEMP_PREFIX}{self.member_id}"
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, directory / self.member_id)

    def leave(self) -> None:
        """Leave the group (idempotent)."""
        if self._fd < 0:
            return
        for path in (self._path, self._path.parent.parent / DATA_DIR / self.member_id):
            try:
                os.unlink(path)
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


def member_data(group_dir: Path, member_ids: Sequence[str]) -> Dict[str, bytes]:
    """What each of ``member_ids`` last published (empty bytes: nothing yet)."""
    out = {}
    for member_id in member_ids:
        try:
            out[member_id] = (group_dir / DATA_DIR / member_id).read_bytes()
        except FileNotFoundError:
            out[member_id] = b""
    return out


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
    for dead in (path, path.parent.parent / DATA_DIR / path.name):  # its member died: nobody holds it
        try:
            os.unlink(dead)
        except FileNotFoundError:
            pass
    return False
