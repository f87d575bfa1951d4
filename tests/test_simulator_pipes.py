"""The simulator transport's pipe reading, without Node."""

from maple_async.simulator import Simulators
from maple_async.simulator.pipes import SimProcess as _Process


async def test_a_read_that_ends_inside_a_character_loses_nothing():
    sims = Simulators(1)
    seen = []
    sims.router.route = lambda proc, rec: seen.append(rec)
    proc = _Process(sims, 0)
    record = "M1>battle-gen9randombattle-1\n|rule|Species Clause: Limit one of each Pokémon".encode()
    cut = record.index("é".encode()) + 1  # between the two bytes of é
    proc.pipe_data_received(1, record[:cut])
    proc.pipe_data_received(1, record[cut:] + b"\x1eEbattle-gen9randombattle-1\x1e")
    assert seen == [record.decode(), "Ebattle-gen9randombattle-1"]
