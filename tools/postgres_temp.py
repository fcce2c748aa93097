"""A PostgreSQL server of its own, for tests and benchmarks: `initdb` in a temporary directory,
`pg_ctl start` on a free 127.0.0.1 port, password (SCRAM) authentication over TCP.

Needs the server binaries (Debian's `postgresql` package, or STRATA_PG_BINDIR). PostgreSQL
refuses to run as root, so under root the server runs as the `postgres` system user the
package creates, in a directory that user owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from strata.shared.loopback import free_port

HOW_TO_GET = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's `postgresql` "
    "package (`apt-get install postgresql`, or `bash .ci/system-deps`) or set STRATA_PG_BINDIR "
    "to the directory holding them"
)


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server can be started here (the message says how to get one)."""


def find_bindir() -> Path | None:
    """The directory holding initdb and pg_ctl, newest Debian version first; None: none."""
    env = os.environ.get("STRATA_PG_BINDIR")
    if env:  # an explicit choice: that directory or none
        ok = (Path(env) / "initdb").is_file() and (Path(env) / "pg_ctl").is_file()
        return Path(env) if ok else None
    candidates: list[str] = []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).parent))

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for c in candidates:
        if (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


class TempPostgres:
    """Start with start() (or `with`), get URLs with url()/create_database(), stop()."""

    def __init__(self, user: str = "strata", password: str = "strata-test") -> None:
        self.user = user
        self.password = password
        self.port = 0
        self.root: Path | None = None
        self._run_as: dict[str, Any] = {}
        self._bindir = Path()

    def __enter__(self) -> TempPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, *argv: str, timeout: float = 120.0) -> None:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, **self._run_as, cwd="/"
        )
        if out.returncode != 0:
            raise RuntimeError(f"{Path(argv[0]).name} failed ({out.returncode}): {out.stderr}")

    def start(self) -> None:
        """initdb and start the server; raises PostgresUnavailableError when it cannot."""
        bindir = find_bindir()
        if bindir is None:
            raise PostgresUnavailableError(HOW_TO_GET)
        self._bindir = bindir
        root = Path(tempfile.mkdtemp(prefix="strata-pg-"))
        self.root = root
        pwfile = root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            try:
                pg = pwd.getpwnam("postgres")
            except KeyError:
                self.stop()
                raise PostgresUnavailableError(
                    "running as root, PostgreSQL needs a non-root user: the `postgres` user "
                    "that Debian's `postgresql` package creates is missing"
                ) from None
            for path in (root, pwfile):
                os.chown(path, pg.pw_uid, pg.pw_gid)
            self._run_as = {"user": pg.pw_uid, "group": pg.pw_gid, "extra_groups": []}
        try:
            self._init(bindir, root, pwfile)
            self.port = free_port()
            self.start_again()
        except BaseException:
            self.stop()
            raise

    def _init(self, bindir: Path, root: Path, pwfile: Path) -> None:
        self._run(
            str(bindir / "initdb"),
            "-D",
            str(root / "data"),
            "-U",
            self.user,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--no-sync",  # initdb's own files; the server still fsyncs every commit
        )
        sock = root / "sock"
        sock.mkdir(exist_ok=True)
        if self._run_as:
            os.chown(sock, self._run_as["user"], self._run_as["group"])

    def start_again(self) -> None:
        """Start the server (again, after crash()) on the same port and data."""
        assert self.root is not None, "start() first"
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root / 'sock'} "
            "-c max_connections=200 -c shared_buffers=64MB -c fsync=on"
        )
        self._run(
            str(self._bindir / "pg_ctl"),
            "-D",
            str(self.root / "data"),
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        )

    def crash(self) -> None:
        """Stop the server the hard way (immediate shutdown: no checkpoint, every backend
        killed, recovery from the WAL at the next start), as a power cut or kill -9 would."""
        assert self.root is not None, "start() first"
        self._run(
            str(self._bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "stop"
        )

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        """A postgresql:// URL of this server (with another password to test a wrong one)."""
        pw = self.password if password is None else password
        return f"postgresql://{self.user}:{pw}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def postmaster(self) -> int:
        """The server's main process id."""
        assert self.root is not None, "start() first"
        return int((self.root / "data" / "postmaster.pid").read_text().split()[0])

    def log(self) -> str:
        """The server's log so far."""
        if self.root is None:
            return ""
        try:
            return (self.root / "server.log").read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        root, self.root = self.root, None
        if root is None:
            return
        try:
            if (root / "data" / "postmaster.pid").exists():
                self._run(
                    str(self._bindir / "pg_ctl"),
                    "-D",
                    str(root / "data"),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                    timeout=60,
                )
        finally:
            shutil.rmtree(root, ignore_errors=True)
