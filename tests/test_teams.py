"""Team formats without a server: team files, draws, the team preview's mask, encoding and
steps, and a 3-of-6 battle's switches (requests recorded from a real gen9bssregi battle)."""

import asyncio
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from poke_env.battle import Battle

from maple_async import teams as T
from maple_async.collect.agent import Agent
from maple_async.config import BatcherConfig, PPOConfig
from maple_async.inference.batcher import Decision
from maple_async.inference.policy import InferencePolicy
from maple_async.learn import checkpoint as ckpt
from maple_async.learn import networks as nets
from maple_async.learn.learner import Learner, Rollout, make_chunks
from maple_async.obs import encoding as enc
from maple_async.obs import actions as act
from maple_async.obs import rewards

DATA = Path(__file__).parent / "data" / "bss_requests.json"


def _preview_battle():
    """A gen9bssregi battle at its team preview (p1's view; both teams previewed)."""
    d = json.loads(DATA.read_text())
    b = Battle("battle-gen9bssregi-1", "capa", logging.getLogger("test"), gen=9)
    b.parse_message(["", "player", "p1", "capa", "1", ""])
    b.parse_message(["", "player", "p2", "capb", "1", ""])
    for details in d["opponent_preview"]:
        b.parse_message(["", "poke", "p2", details, ""])
    b.parse_request(d["preview"])
    return b, d


def _after_preview(b, d):
    """The same battle after p1 brought slots 5, 3, 1 (Gholdengo leads), turn 1."""
    for msg in (["teamsize", "p1", "3"], ["teamsize", "p2", "3"], ["start"],
                ["switch", "p1a: Gholdengo", "Gholdengo, L50", "151/151"],
                ["switch", "p2a: Urshifu", "Urshifu-Rapid-Strike, L50, F", "100/100"], ["turn", "1"]):
        b.parse_message(["", *msg])
    b.parse_request(d["move"])
    return b


# -- team files ------------------------------------------------------------------------------

def test_split_texts_at_showdown_headers():
    text = ("=== [gen9ou] First ===\n\nGarchomp @ Leftovers\n- Earthquake\n\n"
            "=== [gen9ou] Second ===\nPikachu\n- Thunderbolt\n")
    got = T.split_texts(text, "dir/pool.txt")
    assert [(s, n) for s, n, _ in got] == [("dir/pool.txt", "First"), ("dir/pool.txt", "Second")]
    assert got[0][2].startswith("Garchomp @ Leftovers") and "Pikachu" not in got[0][2]
    # No header: one team named after its file; blank files give none.
    assert [n for _, n, _ in T.split_texts("Pikachu\n- Thunderbolt\n", "x/my team.txt")] == ["my team"]
    assert T.split_texts("\n\n  \n", "x/empty.txt") == []


def test_read_texts_errors(tmp_path):
    with pytest.raises(T.TeamError, match="does not exist"):
        T.read_texts(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "blank.txt").write_text("\n")
    with pytest.raises(T.TeamError, match="holds no team"):
        T.read_texts(tmp_path / "empty")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(T.TeamError, match="not readable as UTF-8"):
        T.read_texts(tmp_path / "bin.txt")


def test_folder_reads_sorted_files_and_skips_hidden(tmp_path):
    (tmp_path / "b.txt").write_text("Pikachu\n- Thunderbolt\n")
    (tmp_path / "a.txt").write_text("Eevee\n- Tackle\n")
    (tmp_path / ".swap").write_text("Mew\n- Psychic\n")
    assert [n for _, n, _ in T.read_texts(tmp_path)] == ["a", "b"]


@pytest.mark.parametrize("sampling", T.SAMPLING)
def test_pool_sampling(sampling):
    pool = T.TeamPool([T.Team("f", f"t{i}", f"packed{i}") for i in range(4)], sampling, seed=5)
    b = pool.builder()
    draws = [b.yield_team() for _ in range(8)]
    if sampling == "fixed":
        assert set(draws) == {"packed0"}
    elif sampling == "cycle":
        assert draws == [f"packed{i % 4}" for i in range(8)]
        assert pool.builder(offset=1).yield_team() == "packed1"  # the other side starts elsewhere
    else:
        again = pool.builder()
        assert draws == [again.yield_team() for _ in range(8)]  # seeded: reproducible
        assert len(set(draws)) > 1


# -- the team preview ------------------------------------------------------------------------

def test_preview_mask_and_encoding():
    b, _ = _preview_battle()
    assert b.teampreview and act.preview_picks(b) == 3
    mask = np.zeros(act.N_ACTIONS, bool)
    obs = enc.encode_preview(b, [4, 2], 3, mask)
    assert list(np.flatnonzero(mask)) == [act.PREVIEW + i for i in (0, 1, 3, 5)]  # no repeats
    own = [obs[enc.OWN_TEAM + i * enc.POKE_DIM + enc.P_IN_BATTLE] for i in range(6)]
    assert own == [0, 0, 1, 0, 1, 0]
    opp = obs[enc.OPP_TEAM:enc.MOVES].reshape(6, enc.POKE_DIM)
    assert (opp[:, enc.P_PRESENT] == 1).all() and (opp[:, enc.P_IN_BATTLE] == 0).all()
    flags = obs[enc.FIELD + enc.F_FLAGS:]
    assert flags[enc.FLAG_PREVIEW] == 1 and flags[enc.FLAG_PICKS_LEFT] == pytest.approx(1 / 6)
    # The own team is fully known: item, ability, tera type and move types from the request.
    kyogre = obs[enc.OWN_TEAM:enc.OWN_TEAM + enc.POKE_DIM]
    assert kyogre[enc.P_ITEM_OTHER] == 1  # mystic water: not in the list
    assert kyogre[enc.P_ABILITY + enc.ABILITY_INDEX["drizzle"]] == 1
    assert kyogre[enc.P_TERA + enc.TYPE_INDEX[enc.PokemonType.WATER]] == 1
    move_types = {enc._TYPES[t].name for t in np.flatnonzero(kyogre[enc.P_MOVE_TYPES:enc.P_MOVE_TYPES + 18])}
    assert move_types == {"WATER", "ICE", "ELECTRIC"}
    # Numbered as the request lists the team; the picked Pokémon are marked for poke-env.
    assert act.preview_order(b, [4, 2, 0]) == "/team 531"
    assert [m._selected_in_teampreview for m in b.team.values()] == [True, False, True, False, True, False]


def test_a_switch_to_a_pokemon_left_home_is_never_legal():
    b = _after_preview(*_preview_battle())
    assert len(b.team) == 6  # poke-env keeps all six
    mask = np.zeros(act.N_ACTIONS, bool)
    state: list = []
    obs = enc.encode(b, mask=mask, side_state=state)
    species = [m.species for m in b.team.values()]
    legal_switches = {species[i] for i in np.flatnonzero(mask[:6])}
    assert legal_switches == {"ironbundle", "kyogre"}  # brought, not active
    assert (act.action_mask(b) == mask).all()
    assert not mask[act.PREVIEW:].any()
    in_battle = [obs[enc.OWN_TEAM + i * enc.POKE_DIM + enc.P_IN_BATTLE] for i in range(6)]
    assert [s for s, x in zip(species, in_battle) if x] == ["kyogre", "ironbundle", "gholdengo"]
    # Opponent: the one seen first, then the five previewed species not seen yet.
    opp = obs[enc.OPP_TEAM:enc.MOVES].reshape(6, enc.POKE_DIM)
    assert list(opp[:, enc.P_IN_BATTLE]) == [1, 0, 0, 0, 0, 0] and (opp[:, enc.P_PRESENT] == 1).all()
    # Three a side: unseen opponents counted at full HP, the Pokémon left home not at all.
    assert state == [3.0, 0, 3.0, 0]
    assert list(rewards.side_state(b)) == state  # the stand-alone version agrees
    flags = obs[enc.FIELD + enc.F_FLAGS:]
    assert flags[5] == pytest.approx(0.5) and flags[6] == pytest.approx(0.5)


class ScriptedBatcher:
    def __init__(self, actions):
        self.actions = list(actions)
        self.masks = []

    def decide(self, key, generation, obs, mask):
        self.masks.append(mask.copy())
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(Decision(self.actions.pop(0), -1.0, 0.2, 1))
        return fut

    def notify(self):
        pass


async def test_preview_picks_are_recorded_steps(monkeypatch):
    from maple_async.collect import agent as agent_mod
    monkeypatch.setattr(agent_mod.random, "choice", lambda seq: seq[-1])
    b, _ = _preview_battle()
    a = Agent(SimpleNamespace(hidden_dim=0, version=0), BatcherConfig(), record=True)
    # Slot 4, then slot 4 again (illegal: answered at random, not recorded), then slot 0.
    a.batcher = ScriptedBatcher([act.PREVIEW + 4, act.PREVIEW + 4, act.PREVIEW + 0])
    order = await a.preview(b, "self")
    digits = order.split()[1]
    assert order.startswith("/team ") and len(digits) == 3 and len(set(digits)) == 3
    assert digits == "561"  # the illegal repeat was answered with the last legal slot
    assert [int(m.sum()) for m in a.batcher.masks] == [6, 5, 4]
    assert a.stats.fallbacks == 1 and a.stats.previews == 1
    tr = a.live[a.key(b)].traj
    assert tr.actions == [act.PREVIEW + 4, act.PREVIEW + 0]
    assert all(not m[:act.PREVIEW].any() for m in tr.masks)
    assert tr.rewards == [0.0, 0.0]


def test_preview_steps_train_like_the_others():
    """Preview steps at the start of a trajectory: the update reproduces their log-probs
    (ratio 1 at the first epoch), and the preview head gets gradient."""
    torch.manual_seed(0)
    b, _ = _preview_battle()
    net = nets.build("lstm", hidden_size=16)
    policy = InferencePolicy(nets.build("lstm", hidden_size=16))
    policy.network.load_state_dict(net.state_dict())
    obs, masks, picks = [], [], []
    for _ in range(3):
        m = np.zeros(act.N_ACTIONS, bool)
        obs.append(enc.encode_preview(b, picks, 3, m))
        masks.append(m)
        picks.append(len(picks))
    rng = np.random.default_rng(0)
    for _ in range(4):  # battle steps: moves legal
        obs.append(rng.standard_normal(enc.OBS_DIM).astype(np.float32))
        m = np.zeros(act.N_ACTIONS, bool)
        m[6:10] = True
        masks.append(m)
    obs, masks = np.stack(obs), np.stack(masks)
    h = torch.zeros(1, policy.hidden_dim)
    acts, lps, vals = [], [], []
    for t in range(len(obs)):
        a, lp, v, h = policy.act(obs[t:t + 1].copy(), masks[t:t + 1], h)
        acts.append(a[0]); lps.append(lp[0]); vals.append(v[0])
    assert all(act.PREVIEW <= x < act.N_ACTIONS for x in acts[:3]) and all(6 <= x < 10 for x in acts[3:])
    traj = {"obs": obs, "masks": masks, "actions": np.array(acts), "logps": np.array(lps, np.float32),
            "values": np.array(vals, np.float32), "rewards": np.r_[np.zeros(6), 1.0].astype(np.float32),
            "versions": np.zeros(len(obs), np.int64)}
    learner = Learner(net, PPOConfig(epochs=1, minibatch_sequences=1))
    ro = Rollout.from_trajectories([traj], learner.cfg, "cpu")
    batch = learner._gather(ro, make_chunks(ro.lengths, 0), max(ro.lengths), learner.chunk_start_hidden(ro))
    loss, info = learner.loss(**batch)
    assert info["approx_kl"] == pytest.approx(0.0, abs=1e-6) and info["clipfrac"] == 0.0
    loss.backward()
    assert net.entity_head.pick_ctx.weight.grad.abs().sum() > 0


def test_checkpoint_of_another_layout_is_refused(tmp_path):
    path = ckpt.save(tmp_path / "c.pt", {"learner": {}})
    assert ckpt.load(path)["layout"] == enc.LAYOUT
    data = torch.load(path, weights_only=True)
    data["layout"] = "maple-obs/1"
    torch.save(data, path)
    with pytest.raises(ckpt.CheckpointError, match="another observation layout .*train a new one"):
        ckpt.load(path)
