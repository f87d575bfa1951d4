"""Managed local Pokémon Showdown servers: install, configure, start, health-check, stop.

The npm package ``pokemon-showdown`` (pinned) is installed once into a cache folder
(``~/.cache/maple-async`` or ``$MAPLE_ASYNC_HOME``). Every managed server binds
127.0.0.1 and runs with ``--no-security`` (no throttles), which is only safe on loopback.
Several servers may run from one install on different ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import aiohttp

from .errors import UserError
from .nodeproc import exit_line, kill_group, own_group

SHOWDOWN_VERSION = "0.11.11"
LOOPBACK = ("127.0.0.1", "localhost", "::1")

# Overrides merged by Showdown over config-example.js (its config loader does
# ``{...defaults, ...require('config/config.js')}``).
_CONFIG_JS = """\
// Written by maple-async. Showdown merges this over config-example.js.
exports.bindaddress = '127.0.0.1';
exports.repl = false;          // no REPL sockets: several servers share one install
exports.logchallenges = false;
exports.reportbattles = false;
// The example's crash-report copies: a simulator sends its battle's whole input log to the
// main process on every write, a validator every team. CPU a training server does not spend.
exports.debugsimprocesses = false;
exports.debugvalidatorprocesses = false;
exports.debugdexsearchprocesses = false;
// Servers of other maple-async versions may share this install: none reloads the other's file.
exports.watchconfig = false;
// Merged key by key over the example's, so every kind is given. Simulators per server
// come from its environment: several servers with their own counts share this file.
exports.subprocesses = {
  network: 1, simulator: Number(process.env.MAPLE_SIMULATORS) || 1, validator: 1, verifier: 1,
  localartemis: 1, remoteartemis: 1, friends: 1, chatdb: 1, modlog: 1, pm: 1, battlesearch: 1,
  datasearch: 1,
};
"""

# One Python process decides ~3,000 decisions/s; more simulator processes than it can feed
# only cost memory (docs/experiments.md#simulator-processes).
MAX_AUTO_SIMULATORS = 8


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def resolve_simulators(simulators: int, shards: int = 1) -> int:
    """``server.simulators``: as given, or 0 = one per core of this shard's share of the
    machine (at least 1, at most MAX_AUTO_SIMULATORS)."""
    if simulators > 0:
        return simulators
    return max(1, min(cores() // max(shards, 1), MAX_AUTO_SIMULATORS))


class ServerError(UserError, RuntimeError):
    """A managed server could not be installed, started or reached."""


def default_home() -> Path:
    return Path(os.environ.get("MAPLE_ASYNC_HOME", Path.home() / ".cache" / "maple-async"))


def which(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ServerError(
            f"'{tool}' was not found on PATH: Pokémon Showdown needs Node.js (>= 16, "
            f"20 recommended) and npm. Install them, or pass --server URL of a running server."
        )
    return path


def package_dir(home: Optional[Path] = None) -> Path:
    home = Path(home) if home else default_home()
    return home / f"showdown-{SHOWDOWN_VERSION}" / "node_modules" / "pokemon-showdown"


def install(home: Optional[Path] = None, quiet: bool = False) -> Path:
    """Install pokemon-showdown@pinned into ``home`` if missing; return the package dir.

    Safe to call from several processes at once (file lock); an interrupted install is
    never mistaken for a complete one (completion marker written last).
    """
    home = Path(home) if home else default_home()
    pkg = package_dir(home)
    marker = pkg.parent.parent / ".maple-installed"
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            which("node")
            npm = which("npm")
            prefix = pkg.parent.parent
            prefix.mkdir(parents=True, exist_ok=True)
            if not (prefix / "package.json").exists():
                (prefix / "package.json").write_text('{"name": "maple-showdown", "private": true}\n')
            # Optional dependencies (sqlite3 and better-sqlite3 build native code) serve chat
            # databases and other features a battle server never uses.
            with _step(f"installing pokemon-showdown@{SHOWDOWN_VERSION} into {prefix} (npm, once)", quiet):
                proc = subprocess.run(
                    [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--omit=optional",
                     f"pokemon-showdown@{SHOWDOWN_VERSION}"],
                    cwd=prefix, capture_output=True, text=True,
                )
            if proc.returncode != 0:
                raise ServerError(
                    f"npm install pokemon-showdown@{SHOWDOWN_VERSION} failed "
                    f"(exit {proc.returncode}):\n{proc.stderr[-2000:]}"
                )
            marker.write_text(SHOWDOWN_VERSION + "\n")
        _prepare(pkg)
        built = pkg.parent.parent / ".maple-built"
        if not built.exists():
            # `pokemon-showdown start` rebuilds dist/ on every start unless told not to; several
            # servers starting at once would rewrite the files the others are loading. Build once
            # here, under the lock, and start every server with --skip-build.
            with _step("building pokemon-showdown (once)", quiet):
                proc = subprocess.run([which("node"), "build"], cwd=pkg, capture_output=True, text=True)
            if proc.returncode != 0:
                raise ServerError(f"building pokemon-showdown failed (exit {proc.returncode}):\n"
                                  f"{(proc.stdout + proc.stderr)[-2000:]}")
            built.write_text(SHOWDOWN_VERSION + "\n")
    return pkg


@contextlib.contextmanager
def _step(what: str, quiet: bool):
    """A long set-up step: say what starts, then how long it took."""
    t0 = time.perf_counter()
    if not quiet:
        print(f"[maple-async] {what} ...", flush=True)
    yield
    if not quiet:
        print(f"[maple-async]   done in {time.perf_counter() - t0:.0f} s", flush=True)


def _prepare(pkg: Path) -> None:
    # The server crashes on first start without logs/repl; chat-plugins silences
    # harmless crashguard lines.
    (pkg / "logs" / "repl").mkdir(parents=True, exist_ok=True)
    (pkg / "config" / "chat-plugins").mkdir(parents=True, exist_ok=True)
    cfg = pkg / "config" / "config.js"
    if not cfg.exists() or cfg.read_text() != _CONFIG_JS:
        tmp = cfg.with_suffix(".js.tmp")
        tmp.write_text(_CONFIG_JS)
        os.replace(tmp, cfg)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def http_url(url: str) -> str:
    """Normalise ``ws://h:p``, ``http://h:p`` or ``h:p`` to ``http://h:p`` (``wss://`` and
    ``https://``, a server behind TLS, to ``https://h:p``)."""
    scheme = "http"
    for prefix in ("ws://", "wss://", "http://", "https://"):
        if url.startswith(prefix):
            url = url[len(prefix):]
            scheme = "https" if prefix in ("wss://", "https://") else "http"
            break
    return f"{scheme}://" + url.split("/", 1)[0]


def websocket_url(url: str) -> str:
    base = http_url(url)
    return ("wss" if base.startswith("https") else "ws") + base[base.index("://"):] + "/showdown/websocket"


async def check_health(url: str, timeout: float = 2.0) -> bool:
    """True when the server answers HTTP on ``url``."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
            async with s.get(http_url(url) + "/") as r:
                return r.status == 200
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return False


async def wait_reachable(url: str, timeout: float = 10.0, backoff: float = 0.25) -> None:
    """Wait for a user-given server, with exponential backoff; ServerError if it never answers."""
    deadline = time.monotonic() + timeout
    delay = backoff
    while True:
        if await check_health(url):
            return
        if time.monotonic() + delay > deadline:
            raise ServerError(f"Showdown server at {http_url(url)} is unreachable "
                              f"(no HTTP answer within {timeout:.0f}s)")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


@dataclass
class ShowdownServer:
    """One managed Showdown process bound to loopback.

    Use ``async with ShowdownServer() as srv:`` or ``await srv.start()`` / ``srv.stop()``.
    """

    port: int = 0
    host: str = "127.0.0.1"
    home: Optional[Path] = None
    start_timeout_s: float = 180.0
    log_path: Optional[Path] = None
    # Attached servers die with this Python process; `maple-async server start` detaches.
    attached: bool = True
    simulators: int = 1  # simulator processes (battles go to the least loaded)

    def __post_init__(self) -> None:
        if self.host not in LOOPBACK:
            raise ServerError(
                f"refusing to bind a --no-security Showdown server to {self.host!r}: "
                f"managed servers bind loopback only"
            )
        self.process: Optional[subprocess.Popen] = None
        self._log_file = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def websocket_url(self) -> str:
        return websocket_url(self.url)

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    async def start(self) -> "ShowdownServer":
        pkg = await asyncio.to_thread(install, self.home)
        node = which("node")
        if self.port == 0:
            self.port = free_port(self.host)
        elif port_in_use(self.port, self.host):
            raise ServerError(f"port {self.port} on {self.host} is already in use; "
                              f"choose another with --server.port or use port 0 (free port)")
        log_dir = (Path(self.home) if self.home else default_home()) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_path or log_dir / f"showdown-{self.port}.log"
        self._log_file = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [node, "pokemon-showdown", "start", "--skip-build", "--no-security", str(self.port)],
            cwd=pkg, stdout=self._log_file, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env={**os.environ, "MAPLE_SIMULATORS": str(self.simulators)},
            **own_group(self.attached),  # stop() takes its simulator processes too
        )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                why = exit_line("Showdown", self.pid, self.process.returncode, log_path=self.log_path)
                raise ServerError(f"Showdown did not start: {why}:\n{self._log_tail()}")
            if await check_health(self.url, timeout=1.0):
                return self
            await asyncio.sleep(0.25)
        self.stop()
        raise ServerError(f"Showdown did not become healthy within {self.start_timeout_s:.0f}s; "
                          f"log {self.log_path}:\n{self._log_tail()}")

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and all its child processes (idempotent)."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            kill_group(proc.pid, timeout)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
        elif proc is not None:
            kill_group(proc.pid)  # the main process is gone; its simulator children may not be
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    async def restart(self) -> None:
        self.stop()
        self.process = None
        port = self.port
        # Same port if it is free again (clients reconnect there), else a new one.
        if port_in_use(port, self.host):
            self.port = 0
        await self.start()

    async def __aenter__(self) -> "ShowdownServer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        self.stop()


# -- detached servers for `maple-async server start|stop|status` -------------------------

def _state_dir(home: Optional[Path] = None) -> Path:
    d = (Path(home) if home else default_home()) / "servers"
    d.mkdir(parents=True, exist_ok=True)
    return d


async def start_detached(port: int = 0, home: Optional[Path] = None,
                         timeout: float = 180.0, simulators: int = 1) -> dict:
    srv = ShowdownServer(port=port, home=home, start_timeout_s=timeout, attached=False, simulators=simulators)
    await srv.start()
    info = {"port": srv.port, "pid": srv.pid, "url": srv.url, "log": str(srv.log_path),
            "simulators": simulators, "started": time.time()}
    (_state_dir(home) / f"{srv.port}.json").write_text(json.dumps(info))
    srv.process = None  # detach: leave it running after we exit
    return info


def list_detached(home: Optional[Path] = None) -> list[dict]:
    out = []
    for f in sorted(_state_dir(home).glob("*.json")):
        info = json.loads(f.read_text())
        try:
            os.killpg(info["pid"], 0)
            info["running"] = True
        except (ProcessLookupError, PermissionError):
            info["running"] = False
        out.append(info)
    return out


def stop_detached(port: Optional[int] = None, home: Optional[Path] = None) -> list[int]:
    stopped = []
    for info in list_detached(home):
        if port is not None and info["port"] != port:
            continue
        if info["running"]:
            kill_group(info["pid"], 10.0)
        (_state_dir(home) / f"{info['port']}.json").unlink(missing_ok=True)
        stopped.append(info["port"])
    return stopped


class ServerHandle:
    """The server a run uses: managed (restartable) or the user's (reconnect with backoff)."""

    def __init__(self, url: str, managed: Optional[ShowdownServer] = None):
        self._url = url
        self.managed = managed
        self.restarts = 0

    @property
    def url(self) -> str:
        return self.managed.url if self.managed is not None else self._url

    async def healthy(self) -> bool:
        if self.managed is not None and not self.managed.alive():
            return False
        return await check_health(self.url, timeout=3.0)

    async def recover(self, timeout: float = 120.0) -> None:
        """Restart a managed server, or wait (with backoff) for the user's to come back."""
        self.restarts += 1
        if self.managed is not None:
            await self.managed.restart()
        else:
            await wait_reachable(self._url, timeout=timeout)


@contextlib.asynccontextmanager
async def server_for(server_cfg, quiet: bool = False):
    """Yield a :class:`ServerHandle`: the user's server (checked) or a managed loopback one
    with ``server.simulators`` (0: resolved for this process alone; shards get a count
    resolved for the whole machine in their config). A server whatever ``server.transport``
    says: :func:`maple_async.showdown.showdown_for` honours it."""
    if server_cfg.url:
        await wait_reachable(server_cfg.url, timeout=10.0)
        yield ServerHandle(http_url(server_cfg.url))
        return
    srv = ShowdownServer(port=server_cfg.port, host=server_cfg.host,
                         home=Path(server_cfg.home) if server_cfg.home else None,
                         start_timeout_s=server_cfg.start_timeout_s,
                         simulators=resolve_simulators(server_cfg.simulators))
    await srv.start()
    if not quiet:
        print(f"[maple-async] managed Showdown {SHOWDOWN_VERSION} at {srv.url} "
              f"(pid {srv.pid}, {srv.simulators} simulator processes, log {srv.log_path})", flush=True)
    try:
        yield ServerHandle(srv.url, srv)
    finally:
        srv.stop()
