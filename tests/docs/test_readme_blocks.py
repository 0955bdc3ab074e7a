"""The README as a new user follows it: in a fresh copy of the repository (the files git
tracks, as a clone has them), ``make demo`` and then every shell block marked
``<!-- readme-test: run -->``, in order, each line's exit code checked.

The copy gets a virtualenv of its own whose packages come from the suite's (a ``.pth``
file), so ``make`` installs the copy itself (``pip install -e .``) without downloading
the dependencies again, and nothing the suite runs on is touched.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARK = "<!-- readme-test: run -->"
COMMAND_TIMEOUT_S = 900


def runnable_blocks(text: str) -> List[str]:
    """The shell blocks that follow the marker, in README order."""
    return re.findall(re.escape(MARK) + r"\s*```sh\n(.*?)```", text, flags=re.S)


def commands(block: str) -> List[str]:
    """A block's commands: continued lines joined, comments and blank lines dropped."""
    joined = block.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def fresh_copy(target: Path) -> None:
    """The files git tracks or would track (not ignored), from the working tree: what a clone
    of the commit about to be made holds (in CI, a clean clone: the same)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if not source.exists():  # deleted in the working tree, not yet committed
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)


def borrowing_venv(clone: Path) -> Path:
    """``clone/.venv``: a new virtualenv that sees the suite's packages through a ``.pth``."""
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "_suite_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_the_readme_runs_as_written_in_a_fresh_copy(tmp_path: Path) -> None:
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("make and git are needed to follow the README")
    blocks = runnable_blocks(README.read_text())
    assert len(blocks) >= 2, f"expected the README's runnable blocks after {MARK!r}, found {len(blocks)}"
    clone = tmp_path / "streamkit"
    clone.mkdir()
    fresh_copy(clone)
    venv = borrowing_venv(clone)
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "STREAMKIT_BROKER", "STREAMKIT_CONFIG")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(sys.prefix))  # only what `source .venv/bin/activate` adds

    def run(command: str) -> subprocess.CompletedProcess:
        # each block runs in one shell, so `source .venv/bin/activate` holds for the lines after it
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
        return done

    steps = ["make demo"] + ["set -e -o pipefail\n" + "\n".join(
        f"echo '>>> {c.replace(chr(39), '')}' >&2\n{c}" for c in commands(block)) for block in blocks]
    for step in steps:
        done = run(step)
        assert done.returncode == 0, (f"README step failed (exit {done.returncode}):\n{step}\n"
                                      f"--- stdout (tail) ---\n{done.stdout[-3000:]}\n"
                                      f"--- stderr (tail) ---\n{done.stderr[-5000:]}")
    assert (venv / "bin" / "streamkit").exists(), "make did not install streamkit into the copy's .venv"
    replay_step = run("source .venv/bin/activate && ls replay-out/topics")
    assert "page-counts-per-minute" in replay_step.stdout, replay_step.stdout + replay_step.stderr
