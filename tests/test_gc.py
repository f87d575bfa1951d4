"""runner.tune_gc: the garbage-collector setting battle processes run with (no server)."""

import gc
import weakref

from maple_async.run.process import tune_gc


class Node:
    pass


def _cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_tune_gc_freezes_start_up_objects_and_still_collects_new_cycles():
    default = gc.get_threshold()
    try:
        tune_gc(5000)
        assert gc.get_threshold() == (5000, *default[1:])
        assert gc.get_freeze_count() > 1000  # imports, pytest, poke-env data: out of collections
        ref = _cycle()
        assert ref() is not None  # unreachable, but only the collector can free a cycle
        gc.collect()
        assert ref() is None  # objects made after the freeze are collected as usual
        tune_gc(0)
        assert gc.get_threshold() == default and gc.get_freeze_count() == 0
    finally:
        tune_gc(0)


def test_tune_gc_again_collects_what_died_since_the_last_freeze():
    try:
        tune_gc(5000)
        ref = _cycle()  # alive at the next freeze? No: unreachable, so collected first
        tune_gc(5000)
        assert ref() is None
    finally:
        tune_gc(0)
