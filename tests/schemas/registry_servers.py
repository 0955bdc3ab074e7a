"""``streamkit registry serve`` as a real process, for the registry's HTTP tests."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"serves (https?://\S+)")


class RegistryProcess:
    """``python -m streamkit registry serve --http 127.0.0.1:0 --broker URL``; :attr:`url`
    is the address it logged. Its stderr goes to ``log_path``."""

    def __init__(self, broker_url: str, log_path: Path, *, topic: str = "_schemas", timeout: float = 30,
                 extra_args: Sequence[str] = (), env: Optional[Dict[str, str]] = None) -> None:
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        env.pop("STREAMKIT_BROKER", None)
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streamkit", "registry", "serve", "--http", "127.0.0.1:0",
                 "--broker", broker_url, "--topic", topic, *extra_args],
                stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env=env)
        self.url = self._wait_for_address(timeout)

    def _wait_for_address(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _LISTENING.findall(self.log_path.read_text(errors="replace"))
            if found:
                return found[-1]
            if self.process.poll() is not None:
                raise AssertionError(f"registry serve exited with {self.process.returncode}:\n{self.log()}")
            time.sleep(0.05)
        self.process.kill()
        raise AssertionError(f"registry serve logged no address within {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> Optional[int]:
        """Send ``sig`` and return the exit code (None if it was already reaped)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
                raise AssertionError(f"registry serve did not stop on signal {sig}:\n{self.log()}") from None
        return self.process.returncode
