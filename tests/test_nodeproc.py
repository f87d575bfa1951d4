"""nodeproc: a Node child's records, ready line, error tail, exit line, close and restart budget."""

import asyncio
import shutil

import pytest

from maple_async.nodeproc import (NodeProcess, NodeProcessError, RestartBudget, exit_line,
                                  group_processes)
from closed_start import ended, given_up

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")

READY = "process.stdout.write('{\"ready\":true}\\n');"
STAYS = "process.stdin.on('data', () => {}); process.stdin.on('end', () => process.exit(0));"


async def test_records_split_across_reads_come_whole_and_the_ready_one_is_taken_out():
    seen = []
    proc = NodeProcess(received=seen.extend)
    proc.pipe_data_received(1, b'{"a":')
    proc.pipe_data_received(1, b'1}\n{"ready":true}\n{"b"')
    assert proc.started and proc.ready.done()
    proc.pipe_data_received(1, b":2}\n")
    assert seen == [b'{"a":1}', b'{"b":2}']


async def test_error_output_keeps_its_last_lines():
    proc = NodeProcess("x.js", tail_lines=3)
    proc.pipe_data_received(2, b"one\ntwo\nthr")
    proc.pipe_data_received(2, b"ee\nfour\nfive")
    proc.pipe_connection_lost(2, None)
    assert list(proc.tail) == ["three", "four", "five"]


def test_the_exit_line_names_the_code_the_tail_and_the_log():
    assert exit_line("x.js", 7, -9) == "x.js (pid 7) exited with code -9"
    assert (exit_line("x.js", 7, 1, ["", "a", "b"], "/tmp/x.log")
            == "x.js (pid 7) exited with code 1; its last error output: a | b; log /tmp/x.log")


def test_the_restart_budget_gives_up_past_its_limit_with_the_last_error():
    budget = RestartBudget(2, 60.0)
    assert budget.spend() and budget.spend()
    budget.last_error = "x.js (pid 7) exited with code -9"
    assert not budget.spend()
    assert budget.exhausted("x processes") == ("x processes exited 3 times within 60s; "
                                               "the last: x.js (pid 7) exited with code -9")


@needs_node
async def test_a_child_closed_by_the_end_of_its_stdin_exits_by_itself():
    proc = await NodeProcess("stays.js").start("node", "-e", READY + STAYS, timeout=60)
    await proc.close(timeout=30)
    assert proc.exited and proc.returncode == 0


@needs_node
async def test_a_child_that_ignores_the_end_of_its_stdin_is_killed():
    proc = await NodeProcess("deaf.js").start("node", "-e", READY + "setInterval(() => {}, 1000);",
                                              timeout=60)
    await proc.close(timeout=0.5)
    assert proc.exited and proc.returncode == -9


@needs_node
async def test_a_child_that_dies_before_ready_says_why():
    proc = NodeProcess("dies.js")
    with pytest.raises(NodeProcessError, match=r"dies.js did not start: dies.js \(pid \d+\) exited "
                                               r"with code 3; its last error output: boom"):
        await proc.start("node", "-e", "console.error('boom'); process.exit(3);", timeout=60)
    await proc.close()


@needs_node
async def test_a_child_that_never_says_ready_is_killed_at_the_start_timeout():
    proc = NodeProcess("mute.js")
    with pytest.raises(NodeProcessError, match=r"mute.js did not start within 1s"):
        await proc.start("node", "-e", STAYS, timeout=1.0)
    await asyncio.wait_for(proc.gone, 30)
    assert proc.returncode == -9
    await proc.close()


async def test_a_close_during_the_spawn_kills_the_child_and_fails_its_start_without_a_cancel():
    proc = NodeProcess("cat")
    start = asyncio.ensure_future(proc.start("cat", timeout=60))
    await asyncio.sleep(0)  # the child is being created: no pipes yet
    assert proc.transport is None
    try:
        await proc.close(timeout=5)
        await given_up(start, proc, NodeProcessError, "cat was closed")
    finally:
        await ended(start, proc)


@needs_node
async def test_a_cancelled_close_kills_the_child():
    proc = await NodeProcess("deaf.js").start("node", "-e", READY + "setInterval(() => {}, 1000);",
                                              timeout=60)
    closing = asyncio.ensure_future(proc.close(timeout=30))
    await asyncio.sleep(0.1)
    closing.cancel()
    await asyncio.gather(closing, return_exceptions=True)
    try:
        await asyncio.wait([proc.gone], timeout=10)
        assert proc.returncode == -9 and group_processes(proc.pgid) == []
        await asyncio.sleep(0)
        assert proc.transport.is_closing()
    finally:
        proc.kill()
        await proc.close(timeout=1)
