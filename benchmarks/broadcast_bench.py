"""How long the learner's weights take to reach shard workers while the learner is busy.

The learner process publishes a preset's network weights every ``--every`` seconds to
``--workers`` spawned processes, through the training transport's own queue and worker inbox
(``maple_async.run.shards``), while a thread of pure Python holds the GIL (a stand-in
for a busy learner process). Each worker notes when each version arrived. ``--wire tensors`` sends the state_dict
as it is (torch tensors: shared-memory file descriptors fetched from the learner's
resource-sharer thread), ``--wire bytes`` as the transport sends it (one pickle of numpy
arrays per broadcast).

    python benchmarks/broadcast_bench.py --wire tensors
    python benchmarks/broadcast_bench.py --wire bytes
"""

import argparse
import asyncio
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _worker(q, out) -> None:
    from maple_async.run.worker import WeightsInbox

    out.put("ready")  # imports done: the clock starts when every worker is up

    async def main():
        inbox, got = WeightsInbox(q, alive=lambda: True), []
        while (msg := await inbox.get()) is not None:
            got.append((msg["version"], time.time()))
        return got

    out.put(asyncio.run(main()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wire", choices=("tensors", "bytes"), default="bytes")
    p.add_argument("--config", default="gen4random")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--every", type=float, default=0.8, help="seconds between broadcasts")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--busy", action=argparse.BooleanOptionalAction, default=True,
                   help="a thread of pure Python holds the GIL (a stand-in for a busy learner)")
    args = p.parse_args()

    from maple_async import config as C
    from maple_async.learn import networks
    from maple_async.run.wire import pack_weights_msg

    cfg = C.load(args.config)
    sd = {k: v.detach().clone() for k, v in networks.for_config(cfg).state_dict().items()}
    size = sum(v.numel() * v.element_size() for v in sd.values())
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    queues = [ctx.Queue() for _ in range(args.workers)]
    procs = [ctx.Process(target=_worker, args=(q, out), daemon=True) for q in queues]
    for pr in procs:
        pr.start()
    for _ in procs:
        assert out.get(timeout=300) == "ready"
    stop = threading.Event()

    def busy() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    if args.busy:
        threading.Thread(target=busy, daemon=True).start()
    sent: dict[int, float] = {}
    t_end, version = time.time() + args.seconds, 0
    while time.time() < t_end:
        weights = {k: v.clone() for k, v in sd.items()}  # a fresh copy each time, as weights_cpu()
        msg = {"weights": weights, "version": version, "league": None}
        sent[version] = time.time()  # packing counts, as the tensors' move to shared memory does
        wire = pack_weights_msg(msg) if args.wire == "bytes" else msg
        for q in queues:
            q.put(wire)
        version += 1
        time.sleep(args.every)
    t_stop = sent[version - 1]  # the last broadcast
    for q in queues:
        q.put(None)
    got = [out.get(timeout=600) for _ in procs]
    stop.set()
    drain = time.time() - t_stop
    lat = [t - sent[v] for g in got for v, t in g]
    lat.sort()
    print(f"[broadcast] wire {args.wire}: {len(sd)} tensors, {size / 1e6:.2f} MB, {version} broadcasts to "
          f"{args.workers} workers every {args.every}s{' (GIL-busy learner)' if args.busy else ''}: delivery "
          f"median {lat[len(lat) // 2] * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms; every worker had read all "
          f"{drain:.1f}s after the last broadcast",
          flush=True)
    for pr in procs:
        pr.join(10)


if __name__ == "__main__":
    main()
