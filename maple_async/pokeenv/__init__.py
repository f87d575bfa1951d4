"""poke-env as maple-async uses it: players, battle state and the websocket, by subclassing.

* :mod:`.players`     the Player subclasses (our policy's, the baselines), their accounts
                      and their shutdown;
* :mod:`.fastbattle`  cheaper battle state for our players (same state as stock poke-env);
* :mod:`.coalesce`    one socket write per loop iteration out, one message per iteration in;
* :mod:`.replays`     finished battles kept as replay HTML and protocol logs;
* :mod:`.accounts`    credentials, normal login off loopback, spaced messages.

Everything below is private to poke-env 0.16 and read or replaced here; it is the checklist
for a poke-env upgrade. ``tests/test_fastbattle.py``, ``tests/test_encoding.py``,
``tests/test_doubles.py``, ``tests/test_coalesce.py``, ``tests/test_close.py``,
``tests/test_search_belief.py``, ``tests/test_search_value.py`` and
``tests/test_integration_outside.py`` pin the behaviour that relies on it.

=====================================  ===================================================
private attribute                      used by
=====================================  ===================================================
``PSClient._active_tasks``             players.quiet_logger, players.close_players
``PSClient._listening_coroutine``      players.close_players, tools.bench.docs_env
``PSClient._stop_listening``           tools.bench.docs_env (closing a docs-style env)
``PSClient.websocket`` (the socket)    coalesce.coalesce_sends, coalesce.fair_receive
``PokeEnv._loop``                      tools.bench.docs_env (the env's own event loop)
``Player._create_battle``              fastbattle.FastBattles
``Player._battles``                    players.PolicyPlayer, simulator (a tag's battle)
``Player._get_battle``                 players.PolicyPlayer (open team sheets)
``Player._handle_battle_message``      players.PolicyPlayer (replaced), simulator (fed the
                                       simulator transport's messages)
``Player._handle_battle_request``      players.PolicyPlayer (replaced: a wait is told)
``Player._battle_finished_callback``   players (replaced: results, replays, forgetting)
``Player._battle_count_queue``         simulator (an abandoned battle's count given back)
``Battle._update_team_from_request``   fastbattle.FastBattle
``Battle._team``, ``._opponent_team``  fastbattle.speed_up, obs.encoding
``Battle._wait``                       obs.actions, obs.doubles, players.PolicyPlayer (no
                                       decision while waiting)
``Battle._teampreview_opponent_team``  obs.encoding (previewed opponents, pick formats)
``Battle._team_size``                  obs.encoding, search.belief.sampling (Pokémon
                                       brought per side)
``Battle._gen``, ``Pokemon._gen``,     obs.encoding, obs.doubles (the generation's tables)
``Move._gen``
``Battle`` ``_can_mega_evolve``,       obs.encoding.write_generation (the gimmick flags)
``_can_z_move``, ``_can_dynamax``,
``_dynamax_turn``,
``_opponent_dynamax_turn``
``DoubleBattle._active_pokemon``       obs.doubles (a slot's fainted Pokémon)
``Battle._replay_data``                tools.serve.rating_lines (the ladder's rating),
                                       search.belief.protocol (the protocol read back)
``Battle._build_replay_log``           replays.ReplayWriter (the protocol log file)
``Pokemon._terastallized_type`` (set)  obs.encoding.learn_tera_types (from the request)
``Pokemon._selected_in_teampreview``   obs.actions.preview_order (as poke-env asks)
``Pokemon._active``                    fastbattle, obs.encoding, obs.actions
``Pokemon._active_turns``              obs.doubles, search.belief.effects.active_patch
                                       (turns since its switch-in)
``Pokemon._protect_counter``           obs.doubles
``Pokemon._add_move``, ``._moves``     fastbattle.FastPokemon
``MoveSet`` ``_base_moves``,           fastbattle.FastPokemon (Transform / Mimic check)
``_transform_moves``, ``_mimic_move``
``Pokemon`` ``_type_1``, ``_type_2``,  obs.encoding (one ``attrgetter`` per Pokémon)
``_temporary_types``,
``_terastallized``,
``_terastallized_type``, ``_level``,
``_base_stats``,
``_temporary_base_stats``, ``_stats``,
``_current_hp``, ``_max_hp``,
``_status``, ``_boosts``, ``_item``,
``_ability``, ``_moves``
``Move`` ``_id``, ``_current_pp``,     obs.encoding, obs.actions (``_id``)
``_from_transform``
``Player._handle_challenge_request``   tools.serve.ServePlayer (refuses other formats)
``Player._format``                     tools.serve.ServePlayer
=====================================  ===================================================
"""
