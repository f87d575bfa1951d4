"""poke-env as maple-async uses it: players, battle state and the websocket, by subclassing.

* :mod:`.players`     the Player subclasses (our policy's, the baselines), their accounts
                      and their shutdown;
* :mod:`.fastbattle`  cheaper battle state for our players (same state as stock poke-env);
* :mod:`.coalesce`    one socket write per loop iteration out, one message per iteration in;
* :mod:`.replays`     finished battles kept as replay HTML and protocol logs;
* :mod:`.accounts`    credentials, normal login off loopback, spaced messages.

Everything below is private to poke-env 0.16 and read or replaced here; it is the checklist
for a poke-env upgrade. ``tests/test_fastbattle.py``, ``tests/test_encoding.py``,
``tests/test_coalesce.py``, ``tests/test_close.py`` and ``tests/test_integration_outside.py``
pin the behaviour that relies on it.

=====================================  ===================================================
private attribute                      used by
=====================================  ===================================================
``PSClient._active_tasks``             players.quiet_logger, players.close_players
``PSClient._listening_coroutine``      players.close_players
``PSClient.websocket`` (the socket)    coalesce.coalesce_sends, coalesce.fair_receive
``Player._create_battle``              fastbattle.FastBattles
``Player._battles``                    players.PolicyPlayer, simulator (a tag's battle)
``Battle._update_team_from_request``   fastbattle.FastBattle
``Battle._team``, ``._opponent_team``  fastbattle.speed_up
``Battle._wait``                       obs.encoding (no decision while waiting)
``Battle._teampreview_opponent_team``  obs.encoding (previewed opponents, pick formats)
``Battle._team_size``                  obs.encoding (Pokémon brought per side)
``Pokemon._terastallized_type`` (set)  obs.encoding.learn_tera_types (from the request)
``Pokemon._selected_in_teampreview``   obs.actions.preview_order (as poke-env asks)
``Pokemon._active``                    fastbattle, obs.encoding
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
``Move`` ``_id``, ``_current_pp``,     obs.encoding
``_from_transform``
``Battle._build_replay_log``           replays.ReplayWriter (the protocol log file)
``Battle._replay_data``                tools.serve.rating_lines (the ladder's rating)
``Player._handle_challenge_request``   tools.serve.ServePlayer (refuses other formats)
``Player._format``                     tools.serve.ServePlayer
=====================================  ===================================================
"""
