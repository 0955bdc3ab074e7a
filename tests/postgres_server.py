"""A throwaway PostgreSQL server for the tests, from the machine's Debian packages.

If no server binaries are installed and the tests run as root with apt-get, the
``postgresql`` package is installed first. The server runs as the ``postgres``
user when the tests run as root (PostgreSQL refuses root), listens on a free
loopback port, trusts local connections, and is stopped when the session ends.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from typing import Callable, Optional, Tuple

INSTALL_TIMEOUT = 900


def _server_bin() -> Optional[str]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return os.path.dirname(found[-1]) if found else None


def _install() -> Optional[str]:
    """Install Debian's postgresql package; a reason string if that is not possible."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "no PostgreSQL server is installed and the tests cannot install one (need root and apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "postgresql"]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        if result.returncode != 0:
            return f"installing PostgreSQL failed ({' '.join(command)}): {result.stderr.strip()[-300:]}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_postgres() -> Tuple[Optional[str], Callable[[], None], str]:
    """``(url, stop, reason)``: a running server's URL, or None and why it could not start."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None, lambda: None, "psycopg is not installed (pip install 'streamkit[postgres]')"
    bin_dir = _server_bin()
    if bin_dir is None:
        reason = _install()
        bin_dir = _server_bin()
        if bin_dir is None:
            return None, lambda: None, reason or "PostgreSQL server binaries not found after installing"
    base = tempfile.mkdtemp(prefix="streamkit-pg-")
    data, sockets = os.path.join(base, "data"), os.path.join(base, "sockets")
    os.makedirs(sockets)
    prefix = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sockets, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    log = os.path.join(base, "server.log")
    init = subprocess.run(prefix + [f"{bin_dir}/initdb", "-D", data, "-A", "trust", "-U", "streamkit", "-E", "UTF8"],
                          capture_output=True, text=True, timeout=120)
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        return None, lambda: None, f"initdb failed: {init.stderr.strip()[-300:]}"
    start = subprocess.run(prefix + [f"{bin_dir}/pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
                                     f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                           capture_output=True, text=True, timeout=120)
    if start.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        return None, lambda: None, f"starting PostgreSQL failed: {start.stderr.strip()[-300:]}"

    def stop() -> None:
        subprocess.run(prefix + [f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    return f"postgresql://streamkit@127.0.0.1:{port}/postgres", stop, ""
