"""Record the raw messages one player receives in a few random battles, for replay tests.

    python tests/record_battles.py tests/data/battles.json.gz [n_battles]

Starts its own local Showdown. Each record is one websocket message of a battle room, split
the way poke-env splits it (``[line.split("|") for line in message.split("\\n")]``).
"""

import asyncio
import gzip
import json
import sys

from poke_env.player import RandomPlayer

from maple_async.pokeenv.players import player_kwargs, run_id
from maple_async.server import ShowdownServer


class Recorder(RandomPlayer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.records = []

    async def _handle_battle_message(self, split_messages):
        self.records.append(split_messages)
        await super()._handle_battle_message(split_messages)


async def main(path: str, n: int) -> None:
    async with ShowdownServer() as srv:
        tag = run_id()
        me = Recorder(**player_kwargs(srv.url, f"rec{tag}a", n, "gen9randombattle"))
        opp = RandomPlayer(**player_kwargs(srv.url, f"rec{tag}b", n, "gen9randombattle"))
        await me.battle_against(opp, n_battles=n)
    with gzip.open(path, "wt") as f:
        json.dump({"username": me.username, "format": "gen9randombattle", "records": me.records}, f)
    print(f"{len(me.records)} messages from {n} battles -> {path}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4))
