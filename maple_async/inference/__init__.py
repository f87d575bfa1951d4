"""Batched acting: the batching coroutine (:mod:`.batcher`), per-battle recurrent state
(:mod:`.hidden`) and the network on its device (:mod:`.policy`)."""
