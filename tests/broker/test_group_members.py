"""broker.group_members: a group's live members are the processes holding their member file."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from streamkit.broker import group_members


def test_members_join_leave_and_dead_ones_are_removed(tmp_path):
    group = tmp_path / "group"
    first, second = group_members.join(group), group_members.join(group)
    assert group_members.live_members(group) == sorted([first.member_id, second.member_id])
    (group / group_members.MEMBERS_DIR / "123-deadbeef").touch()  # a member that died: nobody holds it
    assert group_members.live_members(group) == sorted([first.member_id, second.member_id])
    assert not (group / group_members.MEMBERS_DIR / "123-deadbeef").exists()
    first.leave()
    first.leave()  # idempotent
    assert group_members.live_members(group) == [second.member_id]
    second.leave()
    assert group_members.live_members(group) == []


def test_a_killed_members_file_is_no_longer_live(tmp_path):
    group = tmp_path / "group"
    code = textwrap.dedent(f"""
        import sys, time
        from streamkit.broker import group_members
        member = group_members.join(__import__("pathlib").Path({str(group)!r}))
        print(member.member_id, flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        member_id = child.stdout.readline().strip()
        assert group_members.live_members(group) == [member_id]
    finally:
        child.kill()
        child.wait(timeout=10)
    assert group_members.live_members(group) == []
