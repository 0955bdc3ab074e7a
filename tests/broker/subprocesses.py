"""Running Python snippets in real subprocesses against an embedded broker directory."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 30


def spawn(code: str, *args: object) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    return out


def run_json(code: str, *args: object):
    """Run `code` to completion; its last stdout line, parsed as JSON."""
    return json.loads(finish(spawn(code, *args)).strip().splitlines()[-1])


def wait_for_line(proc: subprocess.Popen, expected: str) -> None:
    line = proc.stdout.readline()
    assert line.strip() == expected, proc.stderr.read() if not line else line
