"""The ``play`` command's run: battles with a network or an outside policy, no learning,
and their throughput."""

from __future__ import annotations

from typing import Optional

from ..run.process import setup_process
from .progress import Progress


async def run_play(cfg, n_battles: int, replays=None, policy_spec: Optional[str] = None,
                   search=None) -> int:
    """``search``: a :class:`~maple_async.search.searcher.SearchConfig`: the network searches
    its decisions (:class:`~maple_async.collect.search_agent.SearchAgent`)."""
    from ..collect.agent import Agent
    from ..collect.match import play
    from ..inference.outside import OutsidePolicy, until_failed
    from ..inference.policy import InferencePolicy
    from ..learn import networks as nets
    from ..pokeenv.players import fast_kwargs
    from ..showdown import showdown_for
    from ..teams import for_config

    device = setup_process(cfg)
    if policy_spec:
        policy = OutsidePolicy(policy_spec)
    else:
        policy = InferencePolicy(nets.for_config(cfg), device)
    if search is not None:
        from ..collect.search_agent import SearchAgent
        agent = SearchAgent(policy, cfg.batcher, reward_cfg=cfg.reward, record=False, search_config=search,
                            value_reward=cfg.reward, value_gamma=cfg.ppo.gamma)
    else:
        agent = Agent(policy, cfg.batcher, reward_cfg=cfg.reward, record=False)
    progress = Progress("play", n_battles)
    async with showdown_for(cfg.server, runner=cfg.runner) as server, progress.shown():
        try:
            res = await until_failed(play(agent, server.url, n_battles, opponent=cfg.runner.opponent,
                                          concurrency=cfg.runner.concurrency,
                                          battle_format=cfg.runner.battle_format,
                                          battle_timeout_s=cfg.runner.battle_timeout_s,
                                          battle_options=fast_kwargs(cfg.runner), teams=for_config(cfg),
                                          replays=replays, search=cfg.search, progress=progress), [policy])
        finally:
            await agent.batcher.close()
            if search is not None:
                await agent.close_search()
    print(f"[play] {res.battles} battles in {res.seconds:.1f}s: {res.battles_per_s:.2f} battles/s, "
          f"{res.decisions_per_s:.0f} decisions/s, mean batch {res.mean_batch_size:.1f}, "
          f"win rate {res.wins / max(res.battles, 1):.3f} ({res.wins}W/{res.losses}L/{res.ties}T) "
          f"{'policy=' + policy.name if policy_spec else 'network=' + cfg.network.kind} device={device} "
          f"concurrency={cfg.runner.concurrency} "
          f"opponent={cfg.runner.opponent}")
    print(f"[play] hidden states left: {len(agent.hidden)}, fallbacks: {agent.stats.fallbacks}, "
          f"[Invalid choice] errors: {agent.stats.invalid_choices}, [Unavailable choice] "
          f"(hidden trapping): {agent.stats.unavailable_choices}, re-decisions: {agent.stats.retries}"
          + (f", {cfg.runner.opponent}'s [Invalid choice] errors: {res.opponent_invalid_choices}"
             if res.opponent_invalid_choices is not None else ""))
    if res.opponent_search:
        print(f"[play] search: {res.opponent_search}")
    if search is not None:
        print(f"[play] agent+search: {agent.search_stats.line()}")
    return 0
