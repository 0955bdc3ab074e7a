"""Small Java programs the suite and the benchmark run against Kafka's own jars (the
differential suite's Kafka Streams reference, the benchmark's Kafka Streams peer): each is
compiled once per source and jar version into ``~/.cache/streamkit/<name>-<hash>``."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def compiled_java(source: Path, libs: Path, version: str, name: str) -> Path:
    """The folder holding ``source`` compiled against the jars in ``libs``, compiling it when
    the source (or ``version``) changed. Compiled beside the target and renamed into place:
    two processes may compile at once."""
    digest = hashlib.sha256(source.read_bytes() + version.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streamkit"
    target = cache / f"{name}-{digest}"
    if (target / f"{source.stem}.class").exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{name}-{digest}-", dir=cache))
    done = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-cp", f"{libs}/*", "-d", str(staging),
                           str(source)], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"javac {source.name} failed:\n{done.stderr[-4000:]}")
    try:
        staging.rename(target)
    except OSError:  # another process got there first
        shutil.rmtree(staging, ignore_errors=True)
    return target
