"""The files of a partition directory: names, small state files, and the helpers
that read batches from a segment without a PartitionLog (the reader, the batch
walker and the housekeeping jobs use them too). Layout: see ``partition_log``."""
from __future__ import annotations

import json
import os
import re
import uuid
import zlib
from typing import Optional

from streamkit.broker.batch_format import CRC_START, HEADER, HEADER_SIZE, header_is_valid

SEGMENT_SUFFIX = ".log"
LOCK_FILE_NAME = ".lock"
CLEANER_LOCK_NAME = ".cleaner.lock"
START_OFFSET_FILE = "log-start-offset"
CLEANER_CHECKPOINT_FILE = "cleaner-checkpoint.json"
TEMP_PREFIX = "+"  # temp files of the cleaner: never a segment name
READ_CHUNK = 1 << 20
INDEX_INTERVAL = 64 << 10  # bytes between sparse index entries

INCOMPLETE = "incomplete batch"
BAD_HEADER = "invalid batch header"
BAD_CRC = "CRC mismatch"
# magic, flags, reserved of a batch header: where to look for a batch after bad bytes
_HEADER_MARK = re.compile(rb"(?=\x01[\x00-\x3f]\x00\x00)")
_unpack_header = HEADER.unpack_from
_crc32 = zlib.crc32


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def is_segment_name(name: str) -> bool:
    """Whether `name` is a well-formed segment file name: 20 digits, then ``.log``."""
    return len(name) == 24 and name.endswith(SEGMENT_SUFFIX) and name[:20].isdigit()


def list_segments(directory: str | os.PathLike) -> list[int]:
    """Base offsets of the segment files in `directory`, ascending ([] if none)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(name[:20]) for name in names if is_segment_name(name))


def misnamed_segments(names: list[str]) -> list[str]:
    """The names among `names` that look like segment files (``*.log``) but are not
    well-formed: a reader would never find the records in them."""
    return sorted(name for name in names if name.endswith(SEGMENT_SUFFIX)
                  and not name.startswith(TEMP_PREFIX) and not is_segment_name(name))


def read_int_file(path: str) -> Optional[int]:
    """The integer stored in a small text file, None if it is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            return int(f.read().strip() or b"x")
    except (FileNotFoundError, ValueError):
        return None


def write_int_file(path: str, value: int, *, durable: bool = True) -> None:
    """Replace a small text file holding one integer: temp file, rename (fsync if durable)."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f"{TEMP_PREFIX}{name}.{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, b"%d\n" % value)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(directory)


def read_cleaner_checkpoint(path: str) -> dict:
    """{"offset", "due_ms", "markers"} written by compaction; {} if none or unreadable."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def find_valid_batch(fd: int, start: int, min_offset: int) -> Optional[int]:
    """Byte position of the first CRC-valid batch after `start` with base >= min_offset.

    Tells a torn tail (nothing valid follows) from corruption in the middle of a log.
    Reads the rest of the segment: only called when something is already wrong.
    """
    size = os.fstat(fd).st_size
    data = os.pread(fd, max(0, size - start), start)
    view = memoryview(data)
    for match in _HEADER_MARK.finditer(data, 9):
        pos = match.start() - 8
        if pos + HEADER_SIZE > len(data):
            break
        length, crc, magic, flags, reserved, base, _pid, count = _unpack_header(data, pos)
        if (base >= min_offset and header_is_valid(magic, flags, reserved, count, length)
                and pos + 4 + length <= len(data)
                and _crc32(view[pos + CRC_START:pos + 4 + length]) == crc):
            return start + pos
    return None


def file_id(path: str) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def fsync_dir(directory: str | os.PathLike) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
