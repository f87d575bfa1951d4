"""Shared fixtures. Integration tests get a real local Showdown started here."""

from __future__ import annotations

import asyncio
import atexit
import faulthandler
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid

import pytest
import torch

torch.set_num_threads(1)

# Every process this run starts inherits the tag, so the check at the end finds its Node
# processes (servers, simulators) and no one else's.
_TAG = uuid.uuid4().hex
os.environ["MAPLE_TEST_SESSION"] = _TAG
# SB3's learn() makes a folder in /tmp per call unless told where: one folder, removed at exit
os.environ["SB3_LOGDIR"] = _SB3_LOGDIR = tempfile.mkdtemp(prefix="maple-test-sb3-")
atexit.register(shutil.rmtree, _SB3_LOGDIR, True)


@pytest.fixture(autouse=True)
def _python_gc_settings():
    """Each test ends with Python's garbage-collector settings: a command run in-process
    (train, eval, bench) tunes them for the whole process (run.process.tune_gc)."""
    yield
    from maple_async.run.process import tune_gc
    tune_gc(0)


def _tagged_processes(node_only: bool = True) -> dict[int, str]:
    """The live processes this run started (by its tag), pid -> command line."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
                if node_only and b"node" not in argv[0]:
                    continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if f"MAPLE_TEST_SESSION={_TAG}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found[int(name)] = b" ".join(argv).decode(errors="replace")
    return found


def pytest_sessionfinish(session, exitstatus):
    """No Node process started by the tests may outlive them; other processes they started are
    listed and killed, threads the interpreter joins at exit listed (each would hold up the end)."""
    deadline = time.monotonic() + 10
    left = _tagged_processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _tagged_processes()
    if left:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        print(f"\nFAILED: Node processes outlived the tests: {list(left)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    others = {pid: cmd for pid, cmd in _tagged_processes(node_only=False).items()
              if "multiprocessing.resource_tracker" not in cmd}
    if others:  # one holding the run's output open would keep CI waiting after the summary
        print("\nprocesses started by the tests still alive at the end (killed):")
        for pid, cmd in others.items():
            print(f"  {pid}: {cmd[:200]}")
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    joined = [t.name for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if joined:  # the interpreter waits for these at exit
        print(f"\nthreads the interpreter will wait for at exit: {', '.join(joined)}")


def pytest_unconfigure(config):
    """Should the interpreter not exit (a thread or child joined at exit that never ends), the
    run's output shows every thread's stack after two minutes and the run fails then."""
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)


@pytest.fixture(scope="session")
def showdown_url():
    """URL of a local Showdown: $MAPLE_TEST_SERVER if set, else a managed loopback server."""
    url = os.environ.get("MAPLE_TEST_SERVER")
    if url:
        yield url
        return
    from maple_async.server import ShowdownServer

    srv = ShowdownServer()
    asyncio.run(srv.start())
    try:
        yield srv.url
    finally:
        srv.stop()
        assert not srv.alive(), "managed Showdown survived stop()"


@pytest.fixture(scope="session")
def managed_server(showdown_url):
    """The managed server object's port (skip-free: always a managed one in CI)."""
    return showdown_url


@pytest.fixture
def restore_gc():
    """For tests that run a command in this process: its GC setting (runner.gc_young_threshold,
    with start-up objects frozen) must not outlive the test."""
    import gc
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.fixture(params=["websocket", "simulator"])
async def venue(request, showdown_url):
    """Where a test's battles run, once per transport: the session's server URL, or
    simulator processes started for this test (seeded, so its battles repeat)."""
    if request.param == "websocket":
        yield showdown_url
        return
    from maple_async.simulator import Simulators
    sims = await Simulators(2, seed=7).start()
    pids = list(sims.pgids)
    try:
        yield sims
    finally:
        await sims.close()
        assert not any(os.path.exists(f"/proc/{p}") for p in pids), "simulator processes survived close()"
