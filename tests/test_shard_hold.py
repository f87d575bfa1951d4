"""A shard holds its decisions while the learner asks it to, or while too many of its
finished trajectories wait for the learner (released at half the limit)."""

from maple_async.run.worker import ShardHold


def _hold(limit=8):
    calls, queue = [], [0]
    return ShardHold(calls.append, lambda: queue[0], limit), calls, queue


def test_holds_at_the_limit_and_releases_at_half():
    hold, calls, queue = _hold(8)
    queue[0] = 7
    hold.check(0.0)
    assert calls == [] and not hold.by_backlog
    queue[0] = 8
    hold.check(1.0)
    assert calls == [True] and hold.by_backlog
    queue[0] = 5  # above half: still held
    hold.check(2.0)
    assert calls == [True]
    queue[0] = 4
    hold.check(3.5)
    assert calls == [True, False] and not hold.by_backlog
    assert hold.held_s(10.0) == 2.5


def test_the_learner_and_the_backlog_hold_independently():
    hold, calls, queue = _hold(4)
    hold.learner(True)
    assert calls == [True]
    queue[0] = 4
    hold.check(0.0)  # already held: no second pause call
    queue[0] = 0
    hold.check(1.0)  # backlog gone, but the learner still holds
    assert calls == [True]
    hold.learner(False)
    assert calls == [True, False]
    queue[0] = 9
    hold.check(2.0)
    hold.learner(True)
    hold.learner(False)  # the backlog still holds
    assert calls == [True, False, True]
    assert hold.held_s(3.0) == 2.0  # 1 s earlier plus 1 s so far


def test_each_worker_holds_at_its_share_of_an_update():
    """The worker's own config says one shard, so the learner side writes each worker's
    share into it: with 8 shards a shard holds at 2048 / 8, not at a whole update."""
    from maple_async.config import Config
    from maple_async.run.transports import ProcessTransport

    cfg = Config()
    for shards, per_update, share in ((8, 2048, 256), (2, 16, 8), (4, 16, 8)):
        cfg.train.shards, cfg.train.sides_per_update = shards, per_update
        d = ProcessTransport(cfg, quiet=True)._worker_cfg(0)
        assert d["train"]["shards"] == 1 and d["train"]["sides_per_update"] == share
