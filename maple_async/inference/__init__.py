"""Batched acting: the batching coroutine (:mod:`.batcher`), per-battle recurrent state
(:mod:`.hidden`), the network on its device (:mod:`.policy`) and league opponents, one
snapshot per battle (:mod:`.league`)."""
