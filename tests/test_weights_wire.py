"""How the learner's weights reach shard workers: one pickle of numpy arrays per broadcast,
not torch tensors, which a multiprocessing queue sends as shared-memory file descriptors
fetched one by one from the learner's resource-sharer thread (starved by a busy learner, the
weights fell 69 updates behind on 16 cores: docs/results.md#scale-out). No server."""

import asyncio
import multiprocessing as mp
from types import SimpleNamespace

import torch

from maple_async import config as C
from maple_async.learn import networks
from maple_async.run.shards import ProcessTransport, ProcessWorker, _Shard
from maple_async.run.wire import Pause, pack_weights_msg
from maple_async.run.worker import WeightsInbox


def _weights(seed: int) -> dict:
    torch.manual_seed(seed)
    return {k: v.detach().clone() for k, v in networks.build("lstm", hidden_size=16).state_dict().items()}


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert isinstance(b[k], torch.Tensor) and b[k].dtype == a[k].dtype and torch.equal(a[k], b[k]), k


async def test_a_broadcast_reaches_a_worker_as_bytes_and_reads_back_as_the_same_tensors(tmp_path):
    tp = ProcessTransport(C.load("test", {"train.shards": 2}), quiet=True)
    ctx = mp.get_context("spawn")
    queues = [ctx.Queue(), ctx.Queue()]
    tp.shards = [_Shard(i, ProcessWorker(SimpleNamespace(is_alive=lambda: True), q)) for i, q in enumerate(queues)]
    first = {"weights": _weights(1), "version": 3, "league": None}
    tp._record(first)
    second = {"weights": _weights(2), "version": 4,
              "league": {"snapshots": {0: _weights(3), 4: _weights(4)}, "probs": {0: 0.25, 4: 0.75}}}
    tp.publish(second)
    tp.pause(True)
    for q in queues:
        raw = q.get(timeout=10)
        assert isinstance(raw, bytes)  # no tensor, so no file descriptor, crosses the queue
        assert q.get(timeout=10) == Pause(True)
        again = ctx.Queue()
        again.put(raw)
        msg = await asyncio.wait_for(WeightsInbox(again, alive=lambda: True).get(), 10)  # the worker's side
        assert msg["version"] == 4 and msg["league"]["probs"] == {0: 0.25, 4: 0.75}
        _same(second["weights"], msg["weights"])
        for k in (0, 4):
            _same(second["league"]["snapshots"][k], msg["league"]["snapshots"][k])


async def test_the_worker_inbox_keeps_no_tensor_once_it_handed_a_message_on():
    """A daemon thread that drops a tensor while the interpreter exits aborts the process
    (exit 134; it failed a CI run): the inbox thread must not hold the last message."""
    import gc
    import weakref

    q = mp.get_context("spawn").Queue()
    q.put(pack_weights_msg({"weights": _weights(5), "version": 1, "league": None}))
    inbox = WeightsInbox(q, alive=lambda: True)
    msg = await asyncio.wait_for(inbox.get(), 10)
    kept = weakref.ref(next(iter(msg["weights"].values())))
    del msg
    for _ in range(50):  # the thread may still be between handing it on and letting go
        gc.collect()
        if kept() is None:
            break
        await asyncio.sleep(0.02)
    assert kept() is None
