"""A training run: the one learning loop (:mod:`.loop`) and the transports that connect it
to collectors (:mod:`.transports`): in this process, in spawned shard processes
(:mod:`.shards`) or in Ray actors (:mod:`.ray`); the shard worker (:mod:`.worker`), what
crosses to it (:mod:`.wire`), and what every process sets up first (:mod:`.process`)."""
