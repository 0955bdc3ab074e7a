"""Checking on open that a partition's segment files form one contiguous log
(``SegmentGapError`` otherwise): a missing, misnamed or stray segment file would make
readers stop at the gap or writers append around it.
"""
from __future__ import annotations

import os
from typing import Optional

from streamkit.broker.batch_format import HEADER, PEEK_SIZE, batch_span, header_is_valid
from streamkit.broker.errors import SegmentGapError
from streamkit.broker.segment_files import (
    BAD_CRC, START_OFFSET_FILE, is_segment_name, misnamed_segments, read_int_file, segment_file_name)
from streamkit.broker.segment_scan import PartitionFiles, scan_segment

_unpack_header = HEADER.unpack_from


def verify_segments(log: PartitionFiles) -> None:
    """Check that the segment files form one contiguous log; SegmentGapError if not.

    Every ``*.log`` file must be well-named; the first segment must start at or
    below the log start; a segment's first batch must carry the offset its name
    says; each sealed segment must end exactly where the next one begins (its
    batch headers are walked once). Segments wholly below the log start (left by
    an interrupted retention pass) are not checked. A sealed segment whose batches
    are damaged is left to readers: they deliver the records before the damage,
    then raise CorruptLogError there.
    """
    try:
        names = os.listdir(log.directory)
    except FileNotFoundError:
        return
    misnamed = misnamed_segments(names)
    if misnamed:
        raise SegmentGapError(
            f"{_where(log)}: {', '.join(misnamed)} named like segment files but not "
            f"<base offset, 20 digits>.log; no reader would see their records. Rename each to "
            f"the offset of its first record, or move it out of the directory")
    segments = sorted(int(name[:20]) for name in names if is_segment_name(name))
    if not segments:
        return
    start = read_int_file(os.path.join(log.directory, START_OFFSET_FILE)) or 0  # read after the listing
    if segments[0] > start:
        raise SegmentGapError(
            f"{_where(log)}: the first segment file {segment_file_name(segments[0])} "
            f"starts at offset {segments[0]} but the log starts at {start}: offsets {start} to "
            f"{segments[0] - 1} are missing (a segment file was deleted or renamed)")
    for base, following in zip(segments, [*segments[1:], None]):
        if following is not None and following <= start:
            continue  # wholly below the log start: deleted by the next retention pass
        try:
            fd = os.open(log.segment_path(base), os.O_RDONLY)
        except FileNotFoundError:
            continue  # deleted by retention meanwhile
        try:
            _verify_segment(log, fd, base, following)
        finally:
            os.close(fd)

def _verify_segment(log: PartitionFiles, fd: int, base: int, following: Optional[int]) -> None:
    """One segment of verify_segments: `following` is the next segment's base, None
    for the last (active) segment, of which only the first batch is checked."""
    name = segment_file_name(base)
    header = os.pread(fd, PEEK_SIZE, 0)
    if len(header) >= PEEK_SIZE:
        length, _crc, magic, flags, reserved, first, _pid, count = _unpack_header(header)
        if first != base and header_is_valid(magic, flags, reserved, count, length):
            raise SegmentGapError(
                f"{_where(log)}: segment file {name} holds records from offset {first}, "
                f"not from the offset its name says ({base}): a misnamed or stray segment file")
    if following is None:
        return
    result = scan_segment(fd, 0, base, (log.index, (base, os.fstat(fd).st_ino)))
    if result.problem is not None and result.problem is not BAD_CRC:
        return  # damaged inside: readers raise there, after the records before it
    end = result.offset
    if result.problem is BAD_CRC:  # the last batch is damaged, but its extent is known
        header = os.pread(fd, PEEK_SIZE, result.pos)
        _length, _crc, _magic, flags, _reserved, _first, _pid, count = _unpack_header(header)
        end += batch_span(header, 0, flags, count)
    if end == following:
        return
    next_name = segment_file_name(following)
    if end < following:
        what = (f"offsets {end} to {following - 1} are missing (a segment file was deleted, "
                f"or {next_name} does not belong here)")
    else:
        what = f"they overlap on offsets {following} to {end - 1} ({next_name} does not belong here)"
    raise SegmentGapError(
        f"{_where(log)}: segment file {name} ends at offset {end} but the next segment "
        f"file is {next_name}: {what}; refusing to read or append around the gap")


def _where(log: PartitionFiles) -> str:
    return f"{log.describe()}, directory {log.directory}"
