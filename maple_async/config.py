"""Typed run configuration: one dataclass per section, loaded from YAML, validated once.

The defaults are the measured recipe: the ``default`` preset (a 30-minute run on 2 cores),
which states nothing of its own; every other preset states only what differs from them.

Each key is declared once, with its meaning and its range (:func:`key`): the command line's
``--section.key VALUE`` flags, their ``--help`` and the validation all come from those
declarations. Unknown keys, wrong types and values out of range are rejected with a
:class:`ConfigError` that names the key.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import ConfigError
from .opponents import BASELINE_NAMES, parse_eval_opponents, parse_opponent_mix, parse_opponent_schedule  # noqa: F401 - re-exported


def key(default: Any, help: str, *, gt: Optional[float] = None, ge: Optional[float] = None,
        le: Optional[float] = None, choices: Optional[tuple] = None) -> Any:
    """A config key: its default, what it means (shown by ``--help``) and its range."""
    return field(default=default, metadata={"help": help, "gt": gt, "ge": ge, "le": le, "choices": choices})


@dataclass
class ServerConfig:
    url: Optional[str] = key(None, "URL of a running Showdown server (ws://host:port or http://host:port); "
                                   "unset: start a managed loopback server")
    host: str = key("127.0.0.1", "address a managed server binds (loopback only: it runs with --no-security)")
    port: int = key(0, "port of a managed server (0: a free port)", ge=0, le=65535)
    home: Optional[str] = key(None, "the project's home: the pinned Showdown, poke-engine's builds, logs (unset: "
                                    "$MAPLE_ASYNC_HOME or ~/.cache/maple-async)")
    start_timeout_s: float = key(180.0, "seconds a managed server may take to start", gt=0)
    transport: str = key("auto", "how battles reach Showdown: simulator (Showdown's sim package in pipes: "
                                 "no server, seeded battles), websocket (a server: rooms, logins, "
                                 "challenges), auto (simulator, or websocket when server.url is set)",
                         choices=("auto", "simulator", "websocket"))
    # One simulator works in waves and leaves cores idle (docs/experiments.md#simulator-processes).
    simulators: int = key(0, "simulator processes of a managed server (0: one per core of this "
                             "shard's share of the machine, at most 8)", ge=0)


@dataclass
class RunnerConfig:
    battle_format: str = key("gen9randombattle", "Showdown format: a singles format of any generation "
                                                 "or a gen9 doubles format (random-team, or a team format such "
                                                 "as gen1ou, gen9bssregi or gen9vgc2025regi with runner.teams); "
                                                 "a comma list trains one agent on several (train, eval)")
    teams: Optional[str] = key(None, "team format: a file or folder of teams in Showdown's export text, "
                                     "validated by Showdown before any battle; {format} stands for each "
                                     "format of a list (teams/{format}); a relative path not found here "
                                     "names a shipped pool (teams/bss, teams/ou-heldout, ...)")
    team_sampling: str = key("uniform", "how each battle draws its team from runner.teams",
                             choices=("uniform", "cycle", "fixed"))
    concurrency: int = key(64, "battles in flight per player", gt=0)
    open_team_sheets: bool = key(False, "VGC: every player of the run accepts open team sheets (both "
                                        "sides' sets are shown at team preview when both accept)")
    opponent: str = key("self", "the other side in play, and whom pretrain's teacher plays: self (the same "
                                "player on both sides) or a baseline", choices=("self", "random", "max_power",
                                                                                 "heuristics", "search"))
    device: str = key("auto", "where inference (and the learner) run; auto: cuda > mps > cpu",
                      choices=("auto", "cpu", "cuda", "mps"))
    battle_timeout_s: float = key(300.0, "a battle Showdown leaves silent this long (our pending decisions do not count) is forfeited and freed", gt=0)
    torch_threads: int = key(1, "torch CPU threads (Showdown needs the other cores)", gt=0)
    fast_battles: bool = key(True, "our players' battles skip poke-env's redundant move lookups "
                                   "(same state; pokeenv/fastbattle.py)")
    incremental_encode: bool = key(True, "with fast_battles: re-encode only the Pokémon that changed "
                                         "since the battle's previous decision (same observation)")
    coalesce_sends: bool = key(True, "orders sent in one event-loop iteration leave in one socket write "
                                     "(pokeenv/coalesce.py)")
    fair_receive: bool = key(True, "listen loops take one message per event-loop iteration, so resolved "
                                   "orders go out before the rest of a wave is parsed")
    gc_young_threshold: int = key(20000, "objects alive at start-up are frozen out of the cyclic GC and young "
                                         "objects are collected every this many allocations (0: Python's "
                                         "defaults)", ge=0)
    seed: Optional[int] = key(None, "seed of torch, numpy and random (main process: this seed; shard "
                                    "worker i: seed + 1000 (i + 1)), of minibatch order, of team draws "
                                    "and, with the simulator transport, of every battle (a websocket "
                                    "server's battles are not seeded)")


@dataclass
class BatcherConfig:
    max_batch_size: int = key(256, "largest inference batch", gt=0)
    # Scaling with the sides in flight keeps a fixed share of the battles waiting on the
    # batcher: a wait that grows the batch at 128 battles would stall 8 (docs/experiments.md#the-decision-path).
    max_wait_ms: float = key(50.0, "a batch waits at most min(max_wait_ms, wait_per_side_ms x live battle "
                                   "sides) after its first request", ge=0)
    wait_per_side_ms: float = key(0.2, "the batch wait per live battle side (0: always max_wait_ms)", ge=0)
    quiet_gaps: float = key(4.0, "flush once no request came for this many times the usual gap "
                                 "between a batch's requests: a wave has drained (0: off)", ge=0)
    min_quiet_ms: float = key(0.5, "the shortest pause that flushes (with quiet_gaps)", ge=0)
    # An offloaded forward waits for the GIL at every torch op while the loop parses messages.
    offload_min_batch: int = key(128, "batches at least this large run their forward in a worker thread; "
                                      "smaller ones inline", gt=0)


@dataclass
class NetworkConfig:
    kind: str = key("lstm", "network: mlp (no memory), lstm, or attention (over entity tokens) + lstm",
                    choices=("mlp", "lstm", "attention"))
    hidden_size: int = key(128, "width of the core and its state", gt=0)
    num_layers: int = key(1, "LSTM layers", gt=0)
    attention_heads: int = key(4, "attention heads (must divide hidden_size)", gt=0)
    entity_head: bool = key(True, "score switch/move actions per Pokémon/move block with shared scorers")


@dataclass
class RewardConfig:
    win: float = key(1.0, "+win on a win, -win on a loss (once, at the end)", ge=0)
    hp: float = key(0.1, "per unit change of (own HP fraction sum - opponent's)")
    faint: float = key(0.05, "per opponent faint (+) / own faint (-)")
    turn_penalty: float = key(0.0, "subtracted every decision", ge=0)
    # difference: the shaped terms sum to the final margin, so a bigger win pays more (up to
    # ~0.9 with hp 0.1, faint 0.05 in a random battle, against a win worth 1);
    # potential: gamma Phi(s') - Phi(s) with Phi(end) = 0, which leaves the optimal policy
    # that of the win/loss reward alone (Ng et al. 1999) and only speeds up credit.
    shaping: str = key("difference", "how hp/faint shaping is paid: difference (the margin of victory "
                                     "is rewarded) or potential (potential-based, gamma = ppo.gamma)",
                       choices=("difference", "potential"))


@dataclass
class PPOConfig:
    algo: str = key("ppo", "ppo (clipped, several epochs) or reinforce (one pass, learned baseline)",
                    choices=("ppo", "reinforce"))
    lr: float = key(5e-4, "Adam learning rate", gt=0)
    lr_schedule: str = key("linear", "constant, or linear decay to 5% over the run's budget "
                                     "(total_sides, total_decisions or max_minutes, whichever ends first)",
                           choices=("constant", "linear"))
    gamma: float = key(0.99, "discount per decision", ge=0, le=1)
    gae_lambda: float = key(0.95, "GAE lambda", ge=0, le=1)
    clip_coef: float = key(0.2, "PPO ratio clip", ge=0)
    value_coef: float = key(0.5, "weight of the value loss", ge=0)
    entropy_coef: float = key(0.01, "weight of the entropy bonus", ge=0)
    entropy_schedule: str = key("constant", "constant, or linear decay to 10% of entropy_coef over the "
                                            "run's budget (as lr_schedule)", choices=("constant", "linear"))
    entropy_target: float = key(0.0, "a floor on the policy's entropy in nats: after an update whose mean "
                                     "entropy fell below it, the bonus's weight grows by 10% (up to 0.2), "
                                     "and above it shrinks back towards entropy_coef; 0: off", ge=0)
    max_grad_norm: float = key(0.5, "gradient norm clip", gt=0)
    epochs: int = key(2, "passes over each batch of trajectories", gt=0)
    minibatch_sequences: int = key(16, "sequences (battles or chunks) per minibatch", gt=0)
    bptt_length: int = key(0, "truncated-BPTT chunk length in decisions (0: whole battles)", ge=0)
    normalize_advantages: bool = key(True, "normalise advantages per minibatch")


@dataclass
class TrainConfig:
    # A battle side is one player's part of a battle, one trajectory: a self-play battle gives
    # the learner two, a battle against a baseline or the league one.
    sides_per_update: int = key(128, "finished battle sides per update (a side: one player's part of a battle, "
                                     "one trajectory; a self-play battle is two)", gt=0)
    # Above what 30 minutes collect on the simulator transport: the minutes end the run.
    total_sides: int = key(200000, "battle sides to train on, then stop (a self-play battle is two)", gt=0)
    max_minutes: float = key(30.0, "stop after this many minutes of training in the whole run (--resume "
                                  "continues the count; 0: no time limit)", ge=0)
    total_decisions: int = key(0, "stop after training on this many decisions (steps, as published "
                                  "curves count them; 0: no decision limit)", ge=0)
    # heuristics stays out of training: evaluation against it is held out.
    opponents: str = key("self:0.4,league:0.1,random:0.1,max_power:0.4",
                         'opponent mix, e.g. "self:0.5,league:0.3,heuristics:0.2" (kinds: self, league, '
                         'random, max_power, heuristics); later mixes from a number of decisions on after ";", '
                         'e.g. "max_power:0.5,self:0.5; @5e5 self:0.8,league:0.2"')
    opponent_teams: Optional[str] = key(None, "team format: the opponents' teams (baselines, league, "
                                              "self-play's other side); unset: runner.teams")
    hold_when_behind: bool = key(True, "an update on twice sides_per_update or more (the learner is "
                                       "behind) holds every decision until it ends, so the CPU is the "
                                       "learner's and updates stay small")
    league_size: int = key(5, "league snapshots kept", gt=0)
    league_every_updates: int = key(10, "a league snapshot every this many updates", gt=0)
    league_sampling: str = key("pfsp", "which snapshot a league battle draws at its start: pfsp (the ones the "
                                       "learner beats least, (1-p)^2), recent (newer likelier) or uniform",
                               choices=("pfsp", "recent", "uniform"))
    checkpoint_every_updates: int = key(5, "a checkpoint every this many updates", gt=0)
    keep_checkpoints: int = key(3, "full checkpoints (weights, optimiser, league: ~16 MB at the default "
                                   "size) kept in <run_dir>/checkpoints, the newest; latest.pt is "
                                   "always written", gt=0)
    snapshot_minutes: float = key(5.0, "a weights-only snapshot (config, network, counters: ~2 MB) "
                                       "every this many minutes of training, all kept "
                                       "(<run_dir>/checkpoints/weights_*.pt: maple-async curve and eval "
                                       "read them); 0: none", ge=0)
    run_dir: str = key("runs/default", "run folder: config, metrics.csv, tb/, checkpoints")
    init: Optional[str] = key(None, "start from this checkpoint's weights (e.g. maple-async pretrain's), "
                                    "with fresh counters and optimiser")
    teacher: Optional[str] = key(None, "the baseline the initial weights were cloned from (set from "
                                       "train.init's checkpoint; eval labels it 'teacher')")
    # 1,000: a 95% CI of about +-0.03 per baseline (200 battles: +-0.07).
    eval_battles: int = key(1000, "at the end of training, battles per eval_opponents baseline; 0: skip",
                            ge=0)
    eval_opponents: str = key("random,max_power,heuristics",
                              "the end-of-training evaluation's opponents (baselines), comma list")
    eval_teams: Optional[str] = key(None, "team format: the pool both sides draw from in the end-of-training "
                                          "evaluation, e.g. one training never saw; unset: runner.teams")
    tensorboard: bool = key(True, "write TensorBoard scalars to <run_dir>/tb")
    replay_every: int = key(0, "keep one learner battle in this many as a replay (HTML + protocol log) "
                               "in <run_dir>/replays; 0: none", ge=0)
    replay_keep: int = key(200, "replays kept per process; the oldest are deleted first", gt=0)
    shards: int = key(1, "collector processes, each with its own event loop and its own simulator processes "
                         "(or, with the websocket transport, its own managed server; with server.url all "
                         "play on that server)", gt=0)
    worker_device: str = key("cpu", "where shard workers run inference (cpu keeps CUDA out of them)",
                             choices=("cpu", "cuda"))
    backend: str = key("local", "local (processes on this machine) or ray (actors across a cluster)",
                       choices=("local", "ray"))
    ray_address: Optional[str] = key(None, 'unset: start a local Ray; "auto" or host:port: join one')
    ray_cpus_per_shard: float = key(1.0, "CPUs Ray reserves per shard actor", gt=0)


SEARCH_RULES = ("maxmin", "equilibrium", "expected")
REPLY_ORDERS = ("threat", "slot")
SEARCH_ENGINES = ("auto", "showdown", "poke-engine")


@dataclass
class SearchConfig:
    """How ``--search`` and the ``search`` opponent look ahead (maple_async.search)."""

    engine: str = key("auto", "where the search plays its turns: 'showdown' (Showdown's own simulator, "
                              "exact, about 70 leaves a decision) or 'poke-engine' (a fast Rust model of the "
                              "game, thousands of tree-search iterations; built once per generation with "
                              "cargo); 'auto': poke-engine where it is built or cargo can build it, else "
                              "showdown", choices=SEARCH_ENGINES)
    engine_workers: int = key(0, "poke-engine worker processes per generation (0: one per core)", ge=0)
    iterations: int = key(0, "poke-engine: tree-search iterations per sampled state instead of a time budget "
                             "(the same search on any machine, however loaded); 0: search.budget_ms decides",
                          ge=0)
    record: Optional[str] = key(None, "poke-engine: append each searched decision's first sampled state to this "
                                      "JSON-lines file (the positions 'maple-async engine agree' compares "
                                      "Showdown and the engine on)")
    states: int = key(2, "sampled battle states per decision", gt=0)
    replies: int = key(6, "the opponent's replies per state at most (its moves first, then switches)", gt=0)
    seeds: int = key(1, "leaves per joint action, each turn played with a fresh seed", gt=0)
    depth: int = key(1, "turns a leaf plays: 1, 2 or 3 (the turns after the first: we play the policy's "
                        "likeliest choice there, or without a network our strongest attack; the opponent "
                        "its strongest attack on our active)", gt=0, le=3)
    actions: int = key(3, "our choices searched with a network: the policy's most likely N (only they can "
                          "be chosen; the prior is renormalised over them); 0: all", ge=0)
    reply_order: str = key("threat", "which replies a state keeps: 'threat' (with a network: each of the "
                                   "opponent's choices first played against our likeliest one, the worst "
                                   "for us kept) or 'slot' (its moves, then switches)", choices=REPLY_ORDERS)
    rule: str = key("maxmin", "how the payoff tables choose: max-min, their mixed equilibrium, or the "
                              "expected value over the opponent's replies", choices=SEARCH_RULES)
    attack_weight: float = key(0.0, "max-min's reply model: each state scores our choice (1 - w) x its worst "
                                    "reply + w x the opponent's strongest attack on our active (the later "
                                    "turns' model, played in every state's table); 0: the worst reply alone",
                               ge=0, le=1)
    # On Showdown's simulator max-min's pick is one choice, so at 0.5 or less the prior only
    # breaks its ties; poke-engine's visit shares are mixed, and 0.1 measured best there.
    prior_weight: float = key(0.1, "weight of the network's probabilities in the choice: "
                                   "(1 - w) search + w policy", ge=0, le=1)
    q_scale: float = key(0.0, "> 0: the choice is the policy's probabilities times exp(q_scale x each of our "
                               "choices' score under the rule), its argmax (prior_weight then unused; rule "
                               "maxmin or expected); 0: the rule's pick mixed by prior_weight", ge=0)
    budget_ms: float = key(300.0, "compute per searched decision (the leaf process's and the leaf values'), "
                                  "kept on average by the costs measured so far: the opponent's replies "
                                  "shrink first (to 3), then the states, then the replies to 1; 0: no bound; "
                                  "poke-engine: each state's share of it (0: 100 ms), unless search.iterations",
                           ge=0)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            _check_range(f"search.{f.name}", getattr(self, f.name), f.metadata)
        _check_q_scale(self)


def _check_q_scale(search: "SearchConfig") -> None:
    if search.attack_weight > 0 and search.rule != "maxmin":
        raise ConfigError("config key 'search.attack_weight' weighs max-min's replies: it needs search.rule maxmin")
    if search.q_scale > 0 and search.rule == "equilibrium":  # its rows all score the game's value
        raise ConfigError("config key 'search.q_scale' needs search.rule maxmin or expected: an "
                          "equilibrium's rows score alike, so its mix would be lost to the policy")


@dataclass
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    search: SearchConfig = field(default_factory=SearchConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


SECTIONS: dict[str, type] = typing.get_type_hints(Config)


def _section_types(section_cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(section_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(section_cls)}


def _check_type(key: str, value: Any, annotation: Any) -> Any:
    """Return ``value`` coerced to ``annotation`` or raise ConfigError naming ``key``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        (annotation,) = [a for a in args if a is not type(None)]
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif annotation is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - only the types above are used
        raise TypeError(f"unsupported annotation {annotation!r} for {key}")
    raise ConfigError(
        f"config key '{key}' must be {annotation.__name__}, got {value!r} "
        f"({type(value).__name__})"
    )


# Keys renamed: the old name, in a file or a flag, is answered with the new one; a config saved
# inside a checkpoint or a run folder before the rename is read under the new names.
RENAMED = {"train.total_battles": "train.total_sides", "train.battles_per_update": "train.sides_per_update"}


def renamed(data: dict[str, Any]) -> dict[str, Any]:
    """A saved config's sections with the keys of :data:`RENAMED` under their new names."""
    out = {s: dict(v) if isinstance(v, dict) else v for s, v in data.items()}
    for old, new in RENAMED.items():
        section, _, name = old.partition(".")
        if isinstance(out.get(section), dict) and name in out[section]:
            out[section].setdefault(new.partition(".")[2], out[section].pop(name))
    return out


def _apply(cfg: Config, key: str, value: Any) -> None:
    if key in RENAMED:
        raise ConfigError(f"config key '{key}' is now {RENAMED[key]}")
    section, _, name = key.partition(".")
    if section not in SECTIONS or not name:
        raise ConfigError(
            f"unknown config key '{key}' (sections: {', '.join(SECTIONS)})"
        )
    section_obj = getattr(cfg, section)
    fields = _section_types(type(section_obj))
    if name not in fields:
        raise ConfigError(
            f"unknown config key '{key}' (known in '{section}': {', '.join(fields)})"
        )
    setattr(section_obj, name, _check_type(key, value, fields[name]))


def declared_keys() -> list[tuple[str, dataclasses.Field, Any]]:
    """Every ``section.key`` with its declaration and annotation, in declaration order."""
    out = []
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out.append((f"{section}.{f.name}", f, hints[f.name]))
    return out


def _check_range(name: str, value: Any, meta: dict) -> None:
    if meta["choices"] is not None and value not in meta["choices"]:
        raise ConfigError(f"config key '{name}' must be one of {', '.join(meta['choices'])}, got {value!r}")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if not math.isfinite(value):
        raise ConfigError(f"config key '{name}' must be a finite number, got {value!r}")
    for bound, ok, word in (("gt", lambda v, b: v > b, ">"), ("ge", lambda v, b: v >= b, ">="),
                            ("le", lambda v, b: v <= b, "<=")):
        b = meta[bound]
        if b is not None and not ok(value, b):
            raise ConfigError(f"config key '{name}' must be {word} {b:g}, got {value!r}")


def transport_of(server_cfg: ServerConfig) -> str:
    """``server.transport`` resolved: ``auto`` is the simulator unless ``server.url`` names a server."""
    if server_cfg.transport == "auto":
        return "websocket" if server_cfg.url else "simulator"
    return server_cfg.transport


def validate(cfg: Config) -> Config:
    for name, f, _ann in declared_keys():
        _check_range(name, get_key(cfg, name), f.metadata)
    if cfg.network.hidden_size % cfg.network.attention_heads:
        raise ConfigError(f"config key 'network.attention_heads' must divide network.hidden_size "
                          f"({cfg.network.hidden_size}), got {cfg.network.attention_heads}")
    if cfg.server.url is None and cfg.server.host not in ("127.0.0.1", "localhost", "::1"):
        # The managed server runs with --no-security; never expose it.
        raise ConfigError(
            f"config key 'server.host' must be a loopback address for a managed server "
            f"(it runs with --no-security), got {cfg.server.host!r}"
        )
    if cfg.server.url is not None and cfg.server.transport == "simulator":
        raise ConfigError("config key 'server.url' names a server, but server.transport is simulator "
                          "(battles in Showdown's own processes, no server): drop one of them")
    if cfg.ppo.entropy_target > 0 and cfg.ppo.entropy_coef <= 0:
        raise ConfigError("config key 'ppo.entropy_target' moves the entropy bonus's weight from "
                          "ppo.entropy_coef, which is 0: give it a weight to start from (e.g. 0.01)")
    _check_q_scale(cfg.search)
    check_battle_format(cfg.runner.battle_format)
    parse_opponent_schedule(cfg.train.opponents)
    parse_eval_opponents(cfg.train.eval_opponents)
    return cfg


_NEITHER = ("triples", "multi", "freeforall")


def formats(battle_format: str) -> list[str]:
    """The formats of ``runner.battle_format`` (one, or a comma list)."""
    return [f.strip() for f in battle_format.split(",") if f.strip()]


def for_format(cfg: "Config", fmt: str) -> "Config":
    """``cfg`` for one format of its list: ``runner.battle_format`` that one, ``{format}``
    in the team paths replaced by it (``cfg`` itself when it has one format and no ``{format}``)."""
    paths = (cfg.runner.teams, cfg.train.opponent_teams, cfg.train.eval_teams)
    if cfg.runner.battle_format == fmt and not any(p and "{format}" in p for p in paths):
        return cfg
    out = copy.deepcopy(cfg)
    out.runner.battle_format = fmt
    out.runner.teams, out.train.opponent_teams, out.train.eval_teams = (
        p.replace("{format}", fmt) if p else p for p in paths)
    return out


def eval_pool(cfg: "Config") -> "Config":
    """``cfg`` with ``train.eval_teams`` as both sides' pool (the end-of-training evaluation)."""
    if not cfg.train.eval_teams:
        return cfg
    out = copy.deepcopy(cfg)
    out.runner.teams, out.train.opponent_teams = cfg.train.eval_teams, None
    return out


def teams_here(teams: Optional[str], battle_format: str) -> Optional[str]:
    """A saved team path where it means something on this machine: it exists here, for
    every listed format where it names ``{format}``, or names a shipped pool; None
    otherwise (trained elsewhere)."""
    if not teams:
        return None
    if _exists(Path(teams), battle_format):
        return teams
    # Runs saved while the presets lived in the repository's config/ name config/teams/...
    shipped = PRESETS / Path(teams).relative_to("config") if teams.startswith("config/") else PRESETS / teams
    return str(shipped) if not Path(teams).is_absolute() and _exists(shipped, battle_format) else None


def check_battle_format(spec: str) -> None:
    """What can be told from the names: a singles format of any generation or a gen9
    doubles format, or a comma list of them all singles or all doubles. Showdown's own
    rules are read before the run starts (:func:`maple_async.teams.prepare`)."""
    from .obs.games import is_doubles_format
    names = formats(spec)
    if not names:
        raise ConfigError("config key 'runner.battle_format' is empty")
    if len(set(names)) < len(names):
        raise ConfigError(f"config key 'runner.battle_format' lists a format twice: {spec!r}")
    if len({is_doubles_format(f) for f in names}) > 1:
        raise ConfigError(f"config key 'runner.battle_format' mixes singles and doubles formats ({spec!r}): "
                          f"one agent plays one of the two")
    for fmt in names:
        _check_one_format(fmt)


def _check_one_format(fmt: str) -> None:
    from .obs.games import format_gen, is_doubles_format
    gen = format_gen(fmt)
    if gen is None:
        raise ConfigError(f"config key 'runner.battle_format' must name its generation "
                          f"(gen1randombattle ... gen9randombattle, gen1ou, gen9bssregi, ...), got {fmt!r}")
    if gen < 9 and is_doubles_format(fmt):
        raise ConfigError(f"config key 'runner.battle_format': {fmt!r} is a generation {gen} doubles "
                          f"format; doubles are played in generation 9 only")
    if any(s in fmt for s in _NEITHER):
        raise ConfigError(f"config key 'runner.battle_format': {fmt!r} is neither singles nor doubles; "
                          f"the encoder plays those two (triples, multi and free-for-all battles are not)")


def get_key(cfg: Config, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(getattr(cfg, section), name)


def from_dict(data: dict[str, Any], base: Optional[Config] = None) -> Config:
    cfg = base if base is not None else Config()
    if not isinstance(data, dict):
        raise ConfigError("config file must be a mapping of sections")
    for section, values in data.items():
        if section not in SECTIONS:
            raise ConfigError(
                f"unknown config section '{section}' (known: {', '.join(SECTIONS)})"
            )
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"config section '{section}' must be a mapping")
        for name, value in values.items():
            _apply(cfg, f"{section}.{name}", value)
    return cfg


# The presets and their team pools ship inside the package, so an installed maple-async
# finds them from any folder.
PRESETS = Path(__file__).with_name("presets")
TEAM_KEYS = ("runner.teams", "train.opponent_teams", "train.eval_teams")


def preset_names() -> list[str]:
    """The shipped presets, by name (``maple_async/presets/NAME.yaml``)."""
    return sorted(p.stem for p in PRESETS.glob("*.yaml"))


def config_file(spec: str | Path) -> tuple[Path, bool]:
    """``--config``'s file and whether it is a shipped preset: a file that exists here,
    else a preset by name (``quick`` or ``quick.yaml``)."""
    p = Path(spec).expanduser()
    if p.is_file():
        return p, False
    name = p.name.removesuffix(".yaml")
    if str(spec) in (name, f"{name}.yaml") and (PRESETS / f"{name}.yaml").is_file():
        return PRESETS / f"{name}.yaml", True
    raise ConfigError(f"config file not found: {spec} (presets by name: {', '.join(preset_names())})")


def _exists(path: Path, battle_format: str) -> bool:
    """``path`` exists, for every listed format where it names ``{format}``."""
    names = formats(battle_format) if "{format}" in str(path) else [""]
    return bool(names) and all(Path(str(path).replace("{format}", f)).exists() for f in names)


def resolve_teams(cfg: Config, base: Optional[Path] = None) -> Config:
    """The team paths of ``cfg`` made to mean what they say: relative ones against ``base``
    (a preset's own folder), or else against this folder, where they exist; a relative path
    found in neither is a shipped pool (``teams/bss`` is ``maple_async/presets/teams/bss``)."""
    for name in TEAM_KEYS:
        value = get_key(cfg, name)
        if not value:
            continue
        p = Path(value).expanduser()
        if p.is_absolute():
            continue
        if base is not None:
            p = base / p
        elif not _exists(p, cfg.runner.battle_format) and _exists(PRESETS / p, cfg.runner.battle_format):
            p = PRESETS / p
        else:
            continue
        _apply(cfg, name, str(p))
    return cfg


def load(path: Optional[str | Path], overrides: Optional[dict[str, Any]] = None, saved: bool = False) -> Config:
    """Load YAML at ``path`` (a file, or a shipped preset by name; None: the defaults),
    apply ``overrides`` (``section.key``), validate. A preset's relative team paths are
    read against its own folder; the user's against this folder, else the shipped pools.
    ``saved``: the file is a run folder's ``config.yaml``, whose keys may be older (:data:`RENAMED`)."""
    cfg = Config()
    if path is not None:
        p, preset = config_file(path)
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            raise ConfigError(f"malformed YAML in {p}{where}: {getattr(e, 'problem', e)}") from None
        from_dict(renamed(data) if saved and isinstance(data, dict) else data, cfg)
        if preset:
            resolve_teams(cfg, p.parent)
    for key, value in (overrides or {}).items():
        _apply(cfg, key, value)
    return validate(resolve_teams(cfg))


def parse_override_value(text: str) -> Any:
    """Command-line override values are YAML scalars: ``3``, ``0.5``, ``true``, ``null``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def all_keys() -> list[tuple[str, Any]]:
    """Every ``section.key`` with its annotation, for generating CLI flags."""
    return [(name, ann) for name, _f, ann in declared_keys()]


def from_saved(data: dict[str, Any]) -> Config:
    """Rebuild a Config saved inside a checkpoint (its keys perhaps older: :data:`RENAMED`): read,
    then validated as a loaded one is."""
    cfg = from_dict(renamed(data))
    return validate(cfg)


_OPTION_SECTIONS = ("runner", "batcher", "reward", "server", "network")


def for_pool(battle_format: str, num_battles: int, teams, server, seed, config, options: dict) -> Config:
    """A battle pool's config (:class:`maple_async.env.BattlePool`): a preset (a Config, a
    name, a YAML path or None: the defaults) with the arguments and ``options`` (``key=value`` of the runner, batcher, reward, server or network section,
    or ``"section.key"``) applied, validated as ``train`` validates its config."""
    if isinstance(config, Config):
        cfg = copy.deepcopy(config)
    else:
        cfg = load(config)
    overrides: dict = {"runner.battle_format": battle_format, "runner.concurrency": num_battles}
    if teams is not None:
        overrides["runner.teams"] = str(teams)
    if server is not None:
        overrides["server.url"] = server
    if seed is not None:
        overrides["runner.seed"] = seed
    for k, v in options.items():
        if "." not in k:
            owners = [s for s in _OPTION_SECTIONS if hasattr(getattr(cfg, s), k)]
            if len(owners) != 1:
                raise TypeError(f"BattlePool got an unexpected option {k!r} (options: keys of the "
                                f"{', '.join(_OPTION_SECTIONS)} sections, or 'section.key')")
            k = f"{owners[0]}.{k}"
        overrides[k] = v
    for k, v in overrides.items():
        _apply(cfg, k, v)
    return validate(resolve_teams(cfg))
