"""The batching inference coroutine.

Every battle that needs a decision calls :meth:`InferenceBatcher.decide` with its encoded
observation and action mask and awaits the result. One coroutine (:meth:`run`) collects
requests and flushes a batch when

* the batch is full (``max_batch_size``), or
* every live battle side is waiting (nothing else can arrive), or
* the requests have gone quiet (``quiet_gaps`` > 0): no request for ``quiet_gaps`` times
  the usual gap between two requests of a batch (a running average), and at least
  ``min_quiet_ms``. Showdown's simulators answer in waves; this flushes a wave once it
  has drained, however fast the simulator and this process are today, or
* the hard cap has passed since the *first* pending request: ``max_wait_ms``, or with
  ``wait_per_side_ms`` > 0, ``min(max_wait_ms, wait_per_side_ms x live sides)``,

then runs one forward pass for the whole batch and resolves the futures. Large batches
run their forward pass in a worker thread so the event loop keeps serving websockets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Hashable, NamedTuple, Optional

import numpy as np

from .hidden import HiddenStates

log = logging.getLogger("maple_async.batcher")
_GAP_EWMA = 0.1  # weight of the newest gap in the running average


class Decision(NamedTuple):
    action: int  # -1: the forward pass failed; the caller falls back to a default order
    logp: float
    value: float
    version: int  # policy version that produced it


@dataclass(slots=True)
class _Request:
    key: Hashable
    generation: int
    obs: np.ndarray
    mask: np.ndarray
    future: asyncio.Future
    arrived: float


@dataclass
class BatcherStats:
    batches: int = 0
    decisions: int = 0
    reasons: Counter = field(default_factory=Counter)  # full / all_waiting / quiet / timeout
    wait_limit_s: float = 0.0  # sum over batches of the max wait in effect at the flush
    batch_sizes: list = field(default_factory=list)  # one entry per batch (bounded)
    forward_s: float = 0.0  # CPU seconds: stacking + forward pass + resolving futures
    failed_batches: int = 0
    failed_decisions: int = 0

    def record(self, size: int, reason: str, forward_s: float, wait_limit_s: float = 0.0) -> None:
        self.batches += 1
        self.wait_limit_s += wait_limit_s
        self.decisions += size
        self.reasons[reason] += 1
        self.forward_s += forward_s
        if len(self.batch_sizes) < 200_000:
            self.batch_sizes.append(size)

    @property
    def mean_batch_size(self) -> float:
        return self.decisions / self.batches if self.batches else 0.0


class InferenceBatcher:
    """Dynamic batcher in front of an ``InferencePolicy``-like object (``act``, ``version``)."""

    def __init__(self, policy, hidden: HiddenStates, *, max_batch_size: int = 256,
                 max_wait_ms: float = 50.0, wait_per_side_ms: float = 0.2,
                 offload_min_batch: int = 128, quiet_gaps: float = 0.0, min_quiet_ms: float = 0.5,
                 live_count: Optional[Callable[[], int]] = None):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if max_wait_ms < 0 or wait_per_side_ms < 0 or quiet_gaps < 0 or min_quiet_ms < 0:
            raise ValueError("max_wait_ms, wait_per_side_ms, quiet_gaps and min_quiet_ms must be >= 0")
        self.policy = policy
        # A policy that acts per battle (the league's) routes each request on this loop's
        # thread, so its bookkeeping never races the forward pass in the executor.
        self._route = getattr(policy, "route", None)
        self.hidden = hidden
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000.0
        self.wait_per_side_s = wait_per_side_ms / 1000.0
        self.offload_min_batch = offload_min_batch
        self.quiet_gaps = quiet_gaps
        self.min_quiet_s = min_quiet_ms / 1000.0
        self.gap_s: Optional[float] = None  # running average gap between requests of a batch
        # Last request or end of the last flush: a forward pass (no request can arrive
        # meanwhile) is not silence.
        self._last_event = 0.0
        # Live battle sides that may still ask; default: those holding a hidden state.
        self.live_count = live_count or (lambda: len(self.hidden))
        self.stats = BatcherStats()
        self._pending: list[_Request] = []
        self._wakeup: Optional[asyncio.Event] = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="maple-forward")
        self._pending_weights = None
        self._task: Optional[asyncio.Task] = None
        self._closed = False
        self._paused = False

    # -- producer side ------------------------------------------------------------------
    def decide(self, key: Hashable, generation: int, obs: np.ndarray, mask: np.ndarray) -> asyncio.Future:
        """Queue one decision; the returned future resolves to a :class:`Decision`."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._closed:
            fut.set_exception(RuntimeError("batcher is closed"))
            return fut
        pending = self._pending
        now = time.perf_counter()
        first_gap = False
        if pending and self.quiet_gaps:
            gap = now - self._last_event
            first_gap = self.gap_s is None  # the batcher's timer was armed without the quiet rule
            self.gap_s = gap if first_gap else self.gap_s + _GAP_EWMA * (gap - self.gap_s)
        self._last_event = now
        pending.append(_Request(key, generation, obs, mask, fut, now))
        # Wake the batcher only when a flush rule may have changed: a first request arms
        # its timer (which re-arms itself while requests keep coming); a full batch or
        # every live side waiting flushes now. (Waking it for every request cost a timer
        # and a task per decision.)
        n = len(pending)
        if self._wakeup is not None and (n == 1 or first_gap or n >= self.max_batch_size
                                         or n >= self.live_count()):
            self._wakeup.set()
        return fut

    def notify(self) -> None:
        """Re-check flush rules (e.g. a battle ended, so 'all waiting' may now hold)."""
        if self._wakeup is not None:
            self._wakeup.set()

    def set_weights(self, state_dict, version: Optional[int] = None) -> None:
        """Install new weights before the next batch (never during a forward pass)."""
        self._pending_weights = (state_dict, version)
        self.notify()

    def pause(self, paused: bool) -> None:
        """While paused no batch is flushed: decisions wait, so the battles (and the
        simulator) stand still and the CPU is the learner's."""
        self._paused = paused
        self.notify()

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- the coroutine ------------------------------------------------------------------
    def start(self) -> asyncio.Task:
        if self._task is not None and not self._task.done():
            return self._task
        self._task = asyncio.get_running_loop().create_task(self.run(), name="maple-batcher")
        return self._task

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for r in self._pending:
            if not r.future.done():
                r.future.cancel()
        self._pending.clear()
        self._executor.shutdown(wait=False)

    def wait_limit_s(self, live: Optional[int] = None) -> float:
        """How long a batch may wait after its first request, with ``live`` battle sides
        (default: ``live_count()``)."""
        if not self.wait_per_side_s:
            return self.max_wait_s
        if live is None:
            live = self.live_count()
        return min(self.max_wait_s, self.wait_per_side_s * live)

    def quiet_s(self) -> Optional[float]:
        """How long the requests must pause before a batch flushes (None: rule off, or no
        gap measured yet)."""
        if not self.quiet_gaps or self.gap_s is None:
            return None
        return max(self.quiet_gaps * self.gap_s, self.min_quiet_s)

    def _deadline(self) -> float:
        """When the next flush rule that depends on time can hold."""
        deadline = self._pending[0].arrived + self.wait_limit_s()
        quiet = self.quiet_s()
        if quiet is not None:
            deadline = min(deadline, self._last_event + quiet)
        return deadline

    def _flush_reason(self, now: float) -> Optional[str]:
        n = len(self._pending)
        if n == 0:
            return None
        if n >= self.max_batch_size:
            return "full"
        live = self.live_count()
        if n >= live:
            return "all_waiting"
        quiet = self.quiet_s()
        if quiet is not None and now - self._last_event >= quiet:
            return "quiet"
        if now - self._pending[0].arrived >= self.wait_limit_s(live):
            return "timeout"
        return None

    async def run(self) -> None:
        self._wakeup = asyncio.Event()
        while True:
            self._apply_weights()
            if self._paused:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            reason = self._flush_reason(time.perf_counter())
            if reason is None:
                self._wakeup.clear()
                if self._pending:
                    remaining = self._deadline() - time.perf_counter()
                    timer = asyncio.get_running_loop().call_later(max(remaining, 0.0), self._wakeup.set)
                    try:
                        await self._wakeup.wait()
                    finally:
                        timer.cancel()
                else:
                    await self._wakeup.wait()
                continue
            batch = self._pending[:self.max_batch_size]
            del self._pending[:self.max_batch_size]
            await self._flush(batch, reason)
            self._last_event = time.perf_counter()

    def _apply_weights(self) -> None:
        if self._pending_weights is not None:
            state_dict, version = self._pending_weights
            self._pending_weights = None
            self.policy.load_state_dict(state_dict, version)

    def _act_timed(self, obs, mask, hidden, routes):
        c0 = time.thread_time()
        if routes is None:
            out = self.policy.act(obs, mask, hidden)
        else:
            out = self.policy.act(obs, mask, hidden, routes)
        return out, time.thread_time() - c0

    async def _flush(self, batch: list[_Request], reason: str) -> None:
        c0 = time.thread_time()
        wait_limit = self.wait_limit_s()
        keys = [r.key for r in batch]
        gens = [r.generation for r in batch]
        obs = np.stack([r.obs for r in batch])
        mask = np.stack([r.mask for r in batch])
        hidden = self.hidden.gather(keys, gens)
        version = self.policy.version
        try:
            routes = self._route(keys) if self._route is not None else None
            if len(batch) >= self.offload_min_batch:
                loop = asyncio.get_running_loop()
                c1 = time.thread_time()
                out, fwd_cpu = await loop.run_in_executor(self._executor, self._act_timed, obs, mask, hidden, routes)
                c0 -= fwd_cpu - (time.thread_time() - c1)  # count the worker's CPU, not the wait
            else:
                out, _ = self._act_timed(obs, mask, hidden, routes)
            actions, logps, values, new_hidden = out
        except Exception as e:  # a failed forward must not stall every battle
            self.stats.failed_batches += 1
            self.stats.failed_decisions += len(batch)
            if self.stats.failed_batches == 1 or self.stats.failed_batches % 100 == 0:
                log.error("forward pass failed (%d batches, %d decisions so far): %r",
                          self.stats.failed_batches, self.stats.failed_decisions, e)
            for r in batch:
                if not r.future.done():
                    r.future.set_result(Decision(-1, 0.0, 0.0, version))
            return
        put = self.hidden.put if self.hidden.hidden_dim else None
        if put is not None:
            new_hidden = np.asarray(new_hidden, dtype=np.float32)  # rows as numpy views
        for i, r in enumerate(batch):
            if put is not None:
                put(r.key, r.generation, new_hidden[i])
            if not r.future.done():
                r.future.set_result(Decision(int(actions[i]), float(logps[i]), float(values[i]), version))
        self.stats.record(len(batch), reason, time.thread_time() - c0, wait_limit)


class HandoffBatcher(InferenceBatcher):
    """The same flush rule, but a flushed batch goes to ``sink(batch)`` (a pool of battles
    hands it to an outside learner) instead of a forward pass; the sink resolves each
    request's future later. ``held()``: requests flushed and not answered yet, which are
    live battle sides that cannot ask again (so 'every live side waiting' stays true)."""

    def __init__(self, policy, hidden: HiddenStates, *, sink: Callable[[list], None],
                 held: Callable[[], int], **kwargs):
        super().__init__(policy, hidden, live_count=lambda: len(hidden) - held(), **kwargs)
        self._sink = sink

    def _apply_weights(self) -> None:
        pass  # the caller's learner owns the weights

    async def _flush(self, batch: list[_Request], reason: str) -> None:
        c0 = time.thread_time()
        wait_limit = self.wait_limit_s()
        self._sink(batch)
        self.stats.record(len(batch), reason, time.thread_time() - c0, wait_limit)
