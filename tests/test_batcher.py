import asyncio
import time

import numpy as np
import pytest

from maple_async.inference.batcher import InferenceBatcher
from maple_async.inference.hidden import HiddenStates


class EchoPolicy:
    """action = obs[0]; new hidden = old hidden + 1; records every batch."""

    hidden_dim = 2
    version = 0

    def __init__(self):
        self.batches = []

    def act(self, obs, mask, hidden):
        self.batches.append((time.perf_counter(), obs[:, 0].astype(int).tolist()))
        n = obs.shape[0]
        return (obs[:, 0].astype(np.int64), np.zeros(n, np.float32), obs[:, 1].copy(), hidden + 1)

    def load_state_dict(self, sd, version=None):
        self.version = version


def _req(batcher, hs, key, value):
    gen = hs.generation(key) or hs.start(key)
    obs = np.array([value, value * 10], dtype=np.float32)
    return batcher.decide(key, gen, obs, np.ones(3, bool))


async def _with_batcher(live, **kw):
    """A started batcher that sees ``live`` live sides; a fixed max wait unless
    ``wait_per_side_ms`` is given."""
    hs = HiddenStates(2)
    pol = EchoPolicy()
    kw.setdefault("wait_per_side_ms", 0.0)
    b = InferenceBatcher(pol, hs, live_count=lambda: live, **kw)
    b.start()
    await asyncio.sleep(0)
    return b, hs, pol


async def test_flush_when_batch_full():
    b, hs, pol = await _with_batcher(live=100, max_batch_size=4, max_wait_ms=10_000)
    futs = [_req(b, hs, f"k{i}", i) for i in range(4)]
    res = await asyncio.wait_for(asyncio.gather(*futs), 2.0)
    assert [r.action for r in res] == [0, 1, 2, 3]
    assert b.stats.reasons == {"full": 1}
    await b.close()


async def test_flush_when_all_live_battles_wait():
    b, hs, pol = await _with_batcher(live=3, max_batch_size=64, max_wait_ms=10_000)
    futs = [_req(b, hs, f"k{i}", i) for i in range(3)]
    res = await asyncio.wait_for(asyncio.gather(*futs), 2.0)
    assert sorted(r.action for r in res) == [0, 1, 2]
    assert b.stats.reasons == {"all_waiting": 1}
    assert len(pol.batches) == 1
    await b.close()


async def test_no_flush_before_rule_holds():
    b, hs, pol = await _with_batcher(live=10, max_batch_size=64, max_wait_ms=10_000)
    fut = _req(b, hs, "k0", 0)
    await asyncio.sleep(0.05)
    assert not fut.done() and pol.batches == []
    await b.close()


async def test_timeout_measured_from_first_request():
    wait = 0.2
    b, hs, pol = await _with_batcher(live=10, max_batch_size=64, max_wait_ms=wait * 1000)
    t0 = time.perf_counter()
    f1 = _req(b, hs, "a", 1)
    await asyncio.sleep(0.12)
    f2 = _req(b, hs, "b", 2)
    await asyncio.wait_for(asyncio.gather(f1, f2), 2.0)
    flushed_at = pol.batches[0][0] - t0
    # From the first arrival: ~0.20 s. Timing from the latest arrival would give >= 0.32 s.
    assert wait * 0.95 <= flushed_at < 0.30, flushed_at
    assert pol.batches[0][1] == [1, 2]
    assert b.stats.reasons == {"timeout": 1}
    await b.close()


def test_wait_limit_scales_with_live_sides_up_to_max_wait():
    hs = HiddenStates(2)
    live = [0]
    b = InferenceBatcher(EchoPolicy(), hs, max_wait_ms=50, wait_per_side_ms=0.15,
                         live_count=lambda: live[0])
    for sides, want_ms in ((16, 2.4), (128, 19.2), (256, 38.4), (400, 50.0), (10_000, 50.0)):
        live[0] = sides
        assert b.wait_limit_s() == pytest.approx(want_ms / 1000), sides
    assert b.wait_limit_s(live=100) == pytest.approx(0.015)
    fixed = InferenceBatcher(EchoPolicy(), hs, max_wait_ms=7, wait_per_side_ms=0, live_count=lambda: 1000)
    assert fixed.wait_limit_s() == pytest.approx(0.007)
    with pytest.raises(ValueError):
        InferenceBatcher(EchoPolicy(), hs, wait_per_side_ms=-1)


async def test_scaled_wait_flushes_after_the_per_side_wait_not_max_wait():
    # 100 live sides x 2 ms = 200 ms, well under max_wait (10 s): the timeout is the former.
    b, hs, pol = await _with_batcher(live=100, max_batch_size=64, max_wait_ms=10_000,
                                     wait_per_side_ms=2.0)
    t0 = time.perf_counter()
    f1 = _req(b, hs, "a", 1)
    await asyncio.sleep(0.1)
    assert not f1.done()  # 100 ms in: the 200 ms wait has not passed
    await asyncio.wait_for(f1, 5.0)
    flushed_at = pol.batches[0][0] - t0
    assert 0.19 <= flushed_at < 2.0, flushed_at
    assert b.stats.reasons == {"timeout": 1}
    assert b.stats.wait_limit_s == pytest.approx(0.2)  # one batch, at 200 ms
    await b.close()


async def test_results_go_to_the_right_futures_and_hidden_rows():
    b, hs, pol = await _with_batcher(live=5, max_batch_size=64, max_wait_ms=10_000)
    values = [7, 3, 9, 1, 4]
    futs = {v: _req(b, hs, f"k{v}", v) for v in values}
    await asyncio.wait_for(asyncio.gather(*futs.values()), 2.0)
    for v, f in futs.items():
        assert f.result().action == v and f.result().value == v * 10
        assert np.array_equal(hs.get(f"k{v}"), np.ones(2))
    await b.close()


async def test_late_result_for_ended_battle_is_dropped():
    b, hs, pol = await _with_batcher(live=2, max_batch_size=64, max_wait_ms=10_000)
    f_old = _req(b, hs, "gone", 5)
    hs.end("gone")  # battle ended while the request is pending
    new_gen = hs.start("gone")  # and its key is reused right away
    f_other = b.decide("gone", new_gen, np.array([6, 60], np.float32), np.ones(3, bool))
    await asyncio.wait_for(asyncio.gather(f_old, f_other), 2.0)
    # Only the new generation's result was written: one step from zero.
    assert np.array_equal(hs.get("gone"), np.ones(2))
    assert hs.stale_writes == 1
    await b.close()


async def test_failed_forward_resolves_with_fallback():
    class Broken(EchoPolicy):
        def act(self, *a):
            raise RuntimeError("boom")

    hs = HiddenStates(2)
    b = InferenceBatcher(Broken(), hs, live_count=lambda: 1, max_wait_ms=0)
    b.start()
    res = await asyncio.wait_for(_req(b, hs, "k", 1), 2.0)
    assert res.action == -1
    assert b.stats.failed_batches == 1
    await b.close()


async def test_weights_swapped_between_batches():
    b, hs, pol = await _with_batcher(live=1, max_batch_size=64, max_wait_ms=0)
    r1 = await _req(b, hs, "k", 1)
    b.set_weights({}, version=5)
    r2 = await _req(b, hs, "k", 1)
    assert (r1.version, r2.version) == (0, 5)
    await b.close()


async def test_large_batches_run_off_the_event_loop():
    """A slow forward in the worker thread must not freeze other coroutines."""
    class Slow(EchoPolicy):
        def act(self, *a):
            time.sleep(0.3)
            return super().act(*a)

    hs = HiddenStates(2)
    b = InferenceBatcher(Slow(), hs, live_count=lambda: 1, max_wait_ms=0, offload_min_batch=1)
    b.start()
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.get_running_loop().create_task(ticker())
    await asyncio.wait_for(_req(b, hs, "k", 1), 2.0)
    t.cancel()
    assert ticks >= 10  # the loop kept running during the 0.3 s forward
    await b.close()


def test_rejects_zero_batch_size():
    with pytest.raises(ValueError):
        InferenceBatcher(EchoPolicy(), HiddenStates(2), max_batch_size=0)


# -- the quiet rule: flush a wave once the requests pause ---------------------------------

class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _scripted(monkeypatch, live=1000, **kw):
    """A batcher whose clock the test moves (its coroutine is not started: the test asks
    the flush rule directly)."""
    from maple_async.inference import batcher as batcher_mod
    clock = FakeClock()
    monkeypatch.setattr(batcher_mod.time, "perf_counter", clock)
    hs = HiddenStates(2)
    kw.setdefault("wait_per_side_ms", 0.0)
    kw.setdefault("quiet_gaps", 4.0)
    kw.setdefault("min_quiet_ms", 0.5)
    b = InferenceBatcher(EchoPolicy(), hs, live_count=lambda: live, **kw)
    return b, hs, clock


def _take(b, n=None):
    """What a flush would take now (the rule's state moves as after a real flush)."""
    n = n or b.max_batch_size
    batch, b._pending[:] = b._pending[:n], b._pending[n:]
    return len(batch)


async def test_quiet_rule_flushes_a_whole_wave_once_it_drained(monkeypatch):
    b, hs, clock = _scripted(monkeypatch, max_wait_ms=50)
    for wave in range(3):
        for i in range(40):  # a wave: 40 requests 0.3 ms apart
            _req(b, hs, f"w{wave}k{i}", i)
            clock.t += 0.0003
            assert b._flush_reason(clock.t) is None, (wave, i)  # mid-wave: keep collecting
        clock.t += 0.0008  # 1.1 ms after the last request: not yet 4 usual gaps (1.2 ms)
        assert b._flush_reason(clock.t) is None
        clock.t += 0.0005
        assert b._flush_reason(clock.t) == "quiet"
        assert _take(b) == 40  # the whole wave in one batch
        b._last_event = clock.t
        clock.t += 0.2  # the simulator computes the next turn
    assert b.gap_s == pytest.approx(0.0003)


async def test_steady_stream_never_waits_past_the_cap(monkeypatch):
    b, hs, clock = _scripted(monkeypatch, max_wait_ms=20)
    t_first = clock.t
    for i in range(100):  # a request every 0.2-0.6 ms: never a pause of 4 usual gaps
        _req(b, hs, f"k{i}", i)
        clock.t += 0.0002 if i % 2 else 0.0006
        reason = b._flush_reason(clock.t)
        if clock.t - t_first >= 0.020:
            assert reason == "timeout"
            break
        assert reason is None, i
    else:
        pytest.fail("the cap never held")
    assert b._deadline() <= t_first + 0.020


async def test_a_lone_battle_is_not_kept_waiting_for_the_cap(monkeypatch):
    b, hs, clock = _scripted(monkeypatch, max_wait_ms=50)
    for i in range(5):  # earlier traffic taught the usual gap: 1 ms
        _req(b, hs, f"k{i}", i)
        clock.t += 0.001
    _take(b)
    b._last_event = clock.t
    clock.t += 0.1
    _req(b, hs, "slow", 9)  # one battle asks, nobody else does
    assert b._deadline() == pytest.approx(clock.t + 0.004)  # 4 gaps, not the 50 ms cap
    clock.t += 0.0041
    assert b._flush_reason(clock.t) == "quiet"


async def test_without_a_measured_gap_the_cap_bounds_the_wait(monkeypatch):
    b, hs, clock = _scripted(monkeypatch, max_wait_ms=30)
    _req(b, hs, "first", 1)
    assert b.quiet_s() is None
    clock.t += 0.029
    assert b._flush_reason(clock.t) is None
    clock.t += 0.002
    assert b._flush_reason(clock.t) == "timeout"


async def test_a_burst_larger_than_the_batch_flushes_full_batches_then_the_rest(monkeypatch):
    b, hs, clock = _scripted(monkeypatch, max_batch_size=64, max_wait_ms=50)
    for i in range(150):
        _req(b, hs, f"k{i}", i)
        clock.t += 0.00001
    sizes = []
    while b._flush_reason(clock.t) == "full":
        sizes.append(_take(b))
    assert sizes == [64, 64] and len(b._pending) == 22
    assert b._flush_reason(clock.t) is None  # the rest: 10 us apart, so quiet after 0.5 ms
    clock.t += 0.0006
    assert b._flush_reason(clock.t) == "quiet"


async def test_quiet_rule_off_by_default_and_minimum_pause():
    b = InferenceBatcher(EchoPolicy(), HiddenStates(2), live_count=lambda: 10)
    b.gap_s = 0.001
    assert b.quiet_s() is None  # quiet_gaps 0: only full / all waiting / the cap
    b.quiet_gaps = 4.0
    assert b.quiet_s() == pytest.approx(0.004)
    b.gap_s = 1e-6
    assert b.quiet_s() == pytest.approx(0.0005)  # never below min_quiet_ms
    with pytest.raises(ValueError):
        InferenceBatcher(EchoPolicy(), HiddenStates(2), quiet_gaps=-1)


async def test_running_batcher_flushes_when_requests_pause():
    """The coroutine's timer follows the pause (re-armed while requests keep coming)."""
    b, hs, pol = await _with_batcher(live=100, max_batch_size=64, max_wait_ms=10_000, quiet_gaps=4.0,
                                     min_quiet_ms=50.0)
    futs = []
    for i in range(10):
        futs.append(_req(b, hs, f"k{i}", i))
        await asyncio.sleep(0.002)
    await asyncio.wait_for(asyncio.gather(*futs), 5.0)  # long before the 10 s cap
    assert [len(batch) for _, batch in pol.batches] == [10]
    assert b.stats.reasons == {"quiet": 1}
    await b.close()


async def test_a_paused_batcher_holds_decisions_until_resumed():
    b, hs, pol = await _with_batcher(live=2, max_batch_size=64, max_wait_ms=1)
    b.pause(True)
    futs = [_req(b, hs, f"k{i}", i) for i in range(2)]  # all waiting: would flush at once
    await asyncio.sleep(0.05)
    assert not any(f.done() for f in futs) and pol.batches == []
    b.pause(False)
    res = await asyncio.wait_for(asyncio.gather(*futs), 2.0)
    assert sorted(r.action for r in res) == [0, 1]
    await b.close()
