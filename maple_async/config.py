"""Typed run configuration: one dataclass per section, loaded from YAML, validated once.

Every key can be overridden from the command line as ``--section.key VALUE`` (the CLI
also offers short aliases such as ``--concurrency``). Unknown keys and wrongly-typed
values are rejected with a :class:`ConfigError` that names the key.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml


class ConfigError(ValueError):
    """A user error in the configuration (bad key, type or value)."""


@dataclass
class ServerConfig:
    # URL of an existing server (``ws://host:port`` or ``http://host:port``);
    # None starts a managed loopback server.
    url: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 0  # 0 = pick a free port
    home: Optional[str] = None  # where Showdown is installed; default ~/.cache/maple-async
    start_timeout_s: float = 180.0


@dataclass
class RunnerConfig:
    battle_format: str = "gen9randombattle"  # gen9 singles random-team formats only (the encoder)
    concurrency: int = 64  # battles in flight per player
    opponent: str = "self"  # self | random | max_power | heuristics
    device: str = "auto"  # auto | cpu | cuda | mps
    battle_timeout_s: float = 300.0  # a battle silent this long is abandoned
    torch_threads: int = 1  # CPU threads for torch; Showdown needs the other core(s)
    # Our players' battles skip poke-env's redundant move lookups (same state; fastbattle.py).
    fast_battles: bool = True
    # With fast_battles: the encoder re-reads only the Pokémon that changed since the
    # battle's previous decision (same observation; encoding.py). Off: read all each time.
    incremental_encode: bool = True
    # Our players' orders sent in one event-loop iteration (the battles one batch resolves)
    # leave in one socket write instead of one each (same frames, same order; coalesce.py).
    coalesce_sends: bool = True
    # Our players' listen loops take one message per event-loop iteration, so the orders a
    # batch resolved go out before the rest of a wave of requests is parsed (coalesce.py).
    fair_receive: bool = True
    # Python's cyclic GC: objects alive at start-up (poke-env's data tables, torch) are frozen
    # out of collections, and young objects are collected every this many allocations
    # instead of 700 (0: Python's defaults). See runner.tune_gc.
    gc_young_threshold: int = 20000
    seed: Optional[int] = None


@dataclass
class BatcherConfig:
    max_batch_size: int = 256
    # How long a batch may wait after its *first* pending request:
    # min(max_wait_ms, wait_per_side_ms x live battle sides); wait_per_side_ms 0 = always
    # max_wait_ms. Scaling with the sides in flight keeps a fixed share of the battles
    # waiting on the batcher: with N battles in flight on a saturated server a turn takes
    # ~N times longer, so a wait that is harmless at 128 battles would stall 8. Measured on
    # the 2-core machine (bench, 4 rounds each, 2026-11-23): at concurrency 128 a fixed
    # 10 ms gave batches of 38-41 (30-32% of the battles in flight), 30 ms 64 and 40 ms 75
    # (58%), with ratios to the ceiling 0.89-0.98 / 0.92 / 0.91, all inside the rounds'
    # noise; at concurrency 64, 10 / 40 ms gave batches of 31 / 57 and ratios 0.99 / 0.95;
    # earlier, 2 ms gave 0.89-0.90 with batches of 18 and ~50 us more forward CPU per
    # decision. With runner.fair_receive on (2026-11-24) the requests arrive less bunched
    # and batches shrank at the same wait: 0.15 gave 61-65 at concurrency 128 (48-51%),
    # 0.2 gave 78 (61%) with a ratio of 0.91 (0.95 at 64). With these defaults: 26 ms at
    # concurrency 64 self-play (128 sides), 50 ms at 128, 3.2 ms at 8.
    max_wait_ms: float = 50.0
    wait_per_side_ms: float = 0.2
    # Batches at least this large run their forward pass in a worker thread so the
    # event loop keeps serving websockets; smaller ones run inline. Inline is cheaper
    # than it looks: an offloaded forward waits for the GIL at every torch op while the
    # loop parses messages (measured at concurrency 64 on 2 cores: 12 ms per flush
    # offloaded vs 2.5 ms inline, decision latency p50 31 -> 20 ms); a CPU forward below
    # 128 rows takes ~1-3 ms.
    offload_min_batch: int = 128


@dataclass
class NetworkConfig:
    kind: str = "lstm"  # mlp | lstm | attention
    hidden_size: int = 128
    num_layers: int = 1
    attention_heads: int = 4
    entity_head: bool = True  # score switch/move actions per Pokémon/move block (shared scorers)


@dataclass
class RewardConfig:
    win: float = 1.0  # +win on a win, -win on a loss (given once, at the end)
    hp: float = 0.0  # per unit change of (own HP fraction sum - opponent's)
    faint: float = 0.0  # per opponent faint (+) / own faint (-)
    turn_penalty: float = 0.0  # subtracted every decision


@dataclass
class PPOConfig:
    algo: str = "ppo"  # ppo | reinforce
    lr: float = 3e-4
    lr_schedule: str = "constant"  # constant | linear
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    epochs: int = 4
    minibatch_sequences: int = 32  # sequences per minibatch
    bptt_length: int = 0  # 0 = whole battle
    normalize_advantages: bool = True


@dataclass
class TrainConfig:
    battles_per_update: int = 64
    total_battles: int = 2000
    max_minutes: float = 0.0  # 0 = no time limit
    opponents: str = "self:1.0"  # e.g. "self:0.5,league:0.3,heuristics:0.2"
    league_size: int = 5
    league_every_updates: int = 10
    checkpoint_every_updates: int = 10
    run_dir: str = "runs/default"
    eval_battles: int = 0  # at the end of training, per baseline; 0 = skip
    tensorboard: bool = True
    shards: int = 1  # worker processes, each with its own Showdown server and event loop
    worker_device: str = "cpu"  # where shard workers run inference (cpu keeps CUDA out of them)
    backend: str = "local"  # local (processes on this machine) | ray (actors across a cluster)
    ray_address: Optional[str] = None  # None: start a local Ray; "auto" or host:port: join one
    ray_cpus_per_shard: float = 1.0


@dataclass
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


SECTIONS: dict[str, type] = typing.get_type_hints(Config)
_CHOICES = {
    "runner.opponent": ("self", "random", "max_power", "heuristics"),
    "runner.device": ("auto", "cpu", "cuda", "mps"),
    "network.kind": ("mlp", "lstm", "attention"),
    "ppo.algo": ("ppo", "reinforce"),
    "ppo.lr_schedule": ("constant", "linear"),
    "train.worker_device": ("cpu", "cuda"),
    "train.backend": ("local", "ray"),
}
_POSITIVE = (
    "runner.concurrency",
    "runner.battle_timeout_s",
    "runner.torch_threads",
    "batcher.max_batch_size",
    "batcher.offload_min_batch",
    "network.hidden_size",
    "network.num_layers",
    "network.attention_heads",
    "ppo.lr",
    "ppo.epochs",
    "ppo.minibatch_sequences",
    "train.battles_per_update",
    "train.total_battles",
    "train.shards",
    "server.start_timeout_s",
)
_NON_NEGATIVE = (
    "runner.gc_young_threshold",
    "batcher.max_wait_ms",
    "batcher.wait_per_side_ms",
    "server.port",
    "ppo.bptt_length",
    "ppo.clip_coef",
    "ppo.max_grad_norm",
    "train.max_minutes",
    "train.league_size",
    "train.eval_battles",
)


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


def _apply(cfg: Config, key: str, value: Any) -> None:
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


def validate(cfg: Config) -> Config:
    for key, choices in _CHOICES.items():
        value = get_key(cfg, key)
        if value not in choices:
            raise ConfigError(
                f"config key '{key}' must be one of {', '.join(choices)}, got {value!r}"
            )
    for key in _POSITIVE:
        if get_key(cfg, key) <= 0:
            raise ConfigError(f"config key '{key}' must be > 0, got {get_key(cfg, key)!r}")
    for key in _NON_NEGATIVE:
        if get_key(cfg, key) < 0:
            raise ConfigError(f"config key '{key}' must be >= 0, got {get_key(cfg, key)!r}")
    if cfg.server.url is None and cfg.server.host not in ("127.0.0.1", "localhost", "::1"):
        # The managed server runs with --no-security; never expose it.
        raise ConfigError(
            f"config key 'server.host' must be a loopback address for a managed server "
            f"(it runs with --no-security), got {cfg.server.host!r}"
        )
    check_battle_format(cfg.runner.battle_format)
    parse_opponent_mix(cfg.train.opponents)
    return cfg


def check_battle_format(fmt: str) -> None:
    """The encoder and action space are gen9 singles (type chart, tera, 26 actions), and our
    players bring no team: a doubles format would fail on every decision, a team format at
    every challenge, an older generation would be encoded with the wrong rules."""
    if not (fmt.startswith("gen9") and "random" in fmt and "doubles" not in fmt):
        raise ConfigError(
            f"config key 'runner.battle_format' must be a gen9 singles random-team format "
            f"(e.g. gen9randombattle): the encoder is gen9 singles and players bring no "
            f"team; got {fmt!r}"
        )


def get_key(cfg: Config, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(getattr(cfg, section), name)


OPPONENT_KINDS = ("self", "league", "random", "max_power", "heuristics")


def parse_opponent_mix(spec: str) -> dict[str, float]:
    """Parse ``"self:0.5,league:0.3,heuristics:0.2"`` into normalised weights."""
    mix: dict[str, float] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, weight = part.partition(":")
        name = name.strip()
        if name not in OPPONENT_KINDS:
            raise ConfigError(
                f"config key 'train.opponents': unknown opponent '{name}' "
                f"(known: {', '.join(OPPONENT_KINDS)})"
            )
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise ConfigError(
                f"config key 'train.opponents': weight for '{name}' must be a number, "
                f"got {weight!r}"
            ) from None
        if w < 0:
            raise ConfigError(f"config key 'train.opponents': weight for '{name}' is negative")
        mix[name] = mix.get(name, 0.0) + w
    total = sum(mix.values())
    if total <= 0:
        raise ConfigError("config key 'train.opponents' needs at least one positive weight")
    return {k: v / total for k, v in mix.items() if v > 0}


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


def load(path: Optional[str | Path], overrides: Optional[dict[str, Any]] = None) -> Config:
    """Load YAML at ``path`` (or defaults), apply ``overrides`` (``section.key``), validate."""
    cfg = Config()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            raise ConfigError(f"malformed YAML in {p}{where}: {getattr(e, 'problem', e)}") from None
        from_dict(data, cfg)
    for key, value in (overrides or {}).items():
        _apply(cfg, key, value)
    return validate(cfg)


def parse_override_value(text: str) -> Any:
    """Command-line override values are YAML scalars: ``3``, ``0.5``, ``true``, ``null``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def all_keys() -> list[tuple[str, Any]]:
    """Every ``section.key`` with its annotation, for generating CLI flags."""
    out = []
    for section, cls in SECTIONS.items():
        for name, ann in _section_types(cls).items():
            out.append((f"{section}.{name}", ann))
    return out


def from_saved(data: dict[str, Any]) -> Config:
    """Rebuild a Config saved inside a checkpoint."""
    return validate(from_dict(data))
