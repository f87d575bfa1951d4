"""Every process this project starts must listen on loopback only (127.0.0.1 / ::1).

``listening_sockets(pids)`` lists the listening TCP sockets of given processes from
/proc/net/tcp{,6}; the tests start a component and assert that none of its processes
listens on anything but loopback."""

from __future__ import annotations

import os
import socket
import struct
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")

LOOPBACK = {"127.0.0.1", "::1"}
_TCP_LISTEN = "0A"


def _decode(hex_addr: str, family: int) -> str:
    """/proc/net/tcp{,6} address: 32-bit words in host byte order, as hex."""
    raw = bytes.fromhex(hex_addr)
    words = struct.unpack(f"<{len(raw) // 4}I", raw) if sys.byteorder == "little" \
        else struct.unpack(f">{len(raw) // 4}I", raw)
    host = socket.inet_ntop(family, struct.pack(f"!{len(words)}I", *words))
    if family == socket.AF_INET6 and host.startswith("::ffff:") and "." in host:
        host = host[len("::ffff:"):]  # an IPv4-mapped address: report the IPv4 one
    return host


def _listening_inodes() -> dict[int, tuple[str, int]]:
    """Socket inode -> (host, port) of every listening TCP socket in this network namespace."""
    out: dict[int, tuple[str, int]] = {}
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            addr, port = fields[1].rsplit(":", 1)
            out[int(fields[9])] = (_decode(addr, family), int(port, 16))
    return out


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone, or not ours
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    return inodes


def listening_sockets(pids) -> list[tuple[str, int, int]]:
    """``(host, port, pid)`` of every listening TCP socket (IPv4 and IPv6) that one of ``pids``
    holds open. A socket shared by several of them is listed once per holder."""
    table = _listening_inodes()
    found = []
    for pid in sorted(set(pids)):
        for inode in sorted(_socket_inodes(pid)):
            if inode in table:
                host, port = table[inode]
                found.append((host, port, pid))
    return found


def not_loopback(sockets) -> list[tuple[str, int, int]]:
    return [s for s in sockets if s[0] not in LOOPBACK]


def descendants(pid: int) -> set[int]:
    """``pid``'s living descendants (children, grandchildren, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _start_time(pid: int) -> float:
    """Seconds since boot at which ``pid`` started (/proc/<pid>/stat field 22)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def _ray_pids(since: float) -> set[int]:
    """This process's descendants, plus any process of this user whose command line names Ray
    and that started after ``since`` (seconds since boot): Ray may re-parent some of them."""
    pids = descendants(os.getpid())
    uid = os.getuid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid or _start_time(pid) < since:
                continue
        except OSError:
            continue
        if "ray" in _cmdline(pid):
            pids.add(pid)
    return pids


def test_listening_sockets_sees_a_socket_of_this_process():
    """The helper itself: a socket on all interfaces is reported (and flagged), one on
    loopback is reported (and not flagged)."""
    wide = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    local = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        wide.bind(("0.0.0.0", 0))
        wide.listen()
        local.bind(("::1", 0))
        local.listen()
        found = listening_sockets([os.getpid()])
        assert ("0.0.0.0", wide.getsockname()[1], os.getpid()) in found
        assert ("::1", local.getsockname()[1], os.getpid()) in found
        assert ("0.0.0.0", wide.getsockname()[1], os.getpid()) in not_loopback(found)
        assert all(s[1] != local.getsockname()[1] for s in not_loopback(found))
    finally:
        wide.close()
        local.close()


def test_local_ray_listens_on_loopback_only():
    """A local Ray started the way ``--train.backend ray`` starts one (no train.ray_address):
    none of its processes (GCS, raylet, agents, workers, this driver) listens beyond loopback."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'maple-async[ray]')")
    from maple_async.run.ray import init_local_ray

    if ray.is_initialized():
        pytest.skip("a Ray is already initialised in this process")
    since = _uptime() - 1.0
    before = listening_sockets([os.getpid()])
    init_local_ray(ray)
    try:
        @ray.remote(num_cpus=0)
        class Echo:
            def ping(self, x):
                return x

        @ray.remote(num_cpus=0)
        def square(x):
            return x * x

        # Workers and an actor are up, so their gRPC servers listen too.
        assert ray.get(square.remote(3), timeout=60) == 9
        echo = Echo.remote()
        assert ray.get(echo.ping.remote("x"), timeout=60) == "x"

        # Agents start in the background: sample for a while, keep everything seen.
        seen: set[tuple[str, int, int]] = set()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            pids = _ray_pids(since) | {os.getpid()}
            seen.update(s for s in listening_sockets(pids) if s not in before)
            time.sleep(0.5)
        assert seen, "found no listening socket of Ray at all: the helper cannot see them"
        wide = sorted(not_loopback(seen))
        detail = "\n".join(f"{h}:{p} pid {pid} {_cmdline(pid)[:120]}" for h, p, pid in wide)
        assert not wide, f"Ray listens beyond loopback:\n{detail}"
    finally:
        ray.shutdown()
