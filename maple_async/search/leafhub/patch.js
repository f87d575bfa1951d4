// A STATE's PATCHes written into a fresh battle (leafhub.js's header says what they hold).
//
// PATCHES is the table of how Showdown's state takes each carried effect: the Python belief's
// table (maple_async/search/belief/effects.py) names one of these for each of its entries,
// and patchFor says which one the fields of an entry reach (tests/test_search_effects.py
// holds the two together). The patches of one holder share its arguments: a Pokémon's
// volatile (battle, pokemon, id, fields); its status and ability state (battle, pokemon,
// fields); a side's condition (battle, side, id, fields) and future move (battle, side, f,
// foeOrder, residualToCome); the field's weather and terrain (battle, FIELD), pseudo-weather
// (battle, field, id, fields).
'use strict';
const {BadRequest, need} = require('./errors.js');

const STATS = ['atk', 'def', 'spa', 'spd', 'spe', 'accuracy', 'evasion'];
const WEATHER_FORMES = new Set(['forecast', 'flowergift', 'mimicry']);

function effectState(battle, id, target, fields) {
  const state = battle.initEffectState({id, target});
  for (const [k, v] of Object.entries(fields || {})) {
    if (k === 'seen' || k === 'uses' || k === 'elapsed') continue;  // drawn() reads them
    if (k === 'source' && Array.isArray(v)) {
      state.source = sourcePokemon(battle, v);
      state.sourceSlot = state.source.getSlot();
    } else if (k === 'source' && v === 'foe') {
      state.source = target.side.foe.active[0];
      state.sourceSlot = state.source.getSlot();
    } else {
      state[k] = v;
    }
  }
  return state;
}

// side.pokemon is in the battle's order; a state's team indices are the caller's: orders maps
// them while a state is patched.
let orders = null;

function sourcePokemon(battle, [sideId, index]) {
  const side = battle.sides[sideId === 'p1' ? 0 : 1];
  need(side && Number.isInteger(index) && index >= 0 && index < side.pokemon.length, `no source ${sideId} ${index}`);
  return side.pokemon[orders ? orders[side.n][index] : index];
}

// A timer the caller cannot see, drawn by the effect's own rule (its duration, durationCallback
// and onStart, on the battle's PRNG) until it outlasts what was seen; then what was seen is
// taken off it.
// A durationCallback's arguments as Showdown passes them: the field's (source, effect), a
// side's (its active Pokémon, source, effect), a Pokémon's (target, source, effect).
function durationOf(battle, effect, target, source) {
  if (target === battle.field) return effect.durationCallback.call(battle, source, null);
  if (battle.sides.includes(target)) return effect.durationCallback.call(battle, target.active[0], source, null);
  return effect.durationCallback.call(battle, target, source || target, null);
}

function drawn(battle, effect, target, fields, seen, source, start) {
  for (let tries = 0; tries < 64; tries++) {
    const state = effectState(battle, effect.id, target, fields);
    if (effect.duration) state.duration = effect.duration;
    if (effect.durationCallback) state.duration = durationOf(battle, effect, target, source);
    if (start && effect.onStart) {
      const prev = battle.effectState;
      battle.effectState = state;
      try {
        effect.onStart.call(battle, target, source || target, null);
      } finally {
        battle.effectState = prev;
      }
    }
    const key = state.time !== undefined ? 'time' : state.duration ? 'duration' : null;
    if (!key) return state;
    if (state[key] - seen > 0) {
      state[key] -= seen;
      return state;
    }
  }
  throw new BadRequest(`${effect.id}: no draw of its timer outlasts ${seen} turns seen`);
}

function condition(battle, id, what) {
  const effect = battle.dex.conditions.get(id);
  need(effect.exists, `unknown ${what} '${id}'`);
  return effect.id;
}

// -- the patches ------------------------------------------------------------------------------
const PATCHES = {
  // a volatile as its fields give it (a source: [side, team index], or 'foe': the foe's active)
  volatile(battle, pokemon, id, fields) {
    pokemon.volatiles[id] = effectState(battle, id, pokemon, fields);
  },
  // {"seen": n}: its timer drawn by its rule (confusion: failed turns; others: turn ends)
  drawnVolatile(battle, pokemon, id, fields) {
    pokemon.volatiles[id] = drawn(battle, battle.dex.conditions.get(id), pokemon, fields, fields.seen,
      pokemon.side.foe.active[0], true);
  },
  // {"uses": n}: Protect's counter after n uses in a row
  stall(battle, pokemon, id, fields) {
    const effect = battle.dex.conditions.get(id);
    const state = effectState(battle, id, pokemon, {duration: 1, counter: 3, ...fields});
    for (let i = 1; i < fields.uses && state.counter < (effect.counterMax || Infinity); i++) state.counter *= 3;
    pokemon.volatiles[id] = state;
  },
  removeVolatile(battle, pokemon, id) {
    delete pokemon.volatiles[id];
  },
  // Outrage's lock after "used" turns in a row: Showdown draws 2-3 turns (trueDuration) at its
  // start and counts one down at each turn's end; between turns its duration is 1 (a use renews
  // it to 2 while two turns are left). The draw is kept only where it outlasts the uses.
  lockedmove(battle, pokemon, id, {move, used}) {
    const moveId = battle.dex.moves.get(move).id;
    need(moveId && Number.isInteger(used) && used >= 1 && used <= 2, `lockedmove {move: ${move}, used: ${used}}`);
    let total = battle.random(2, 4);
    while (total <= used) total = battle.random(2, 4);
    pokemon.volatiles[id] = effectState(battle, 'lockedmove', pokemon, {move: moveId, duration: 1, trueDuration: total - used});
  },
  // no volatile in Showdown: the types, and Protean / Libero spent
  typechange(battle, pokemon, id, fields) {
    need(Array.isArray(fields.types) && fields.types.length > 0, `typechange without types`);
    pokemon.setType(fields.types, true);
    if (fields.ability && pokemon.ability === fields.ability) pokemon.abilityState[fields.ability] = true;
  },
  // the status, its timer drawn given "statusSeen" (sleep) or as "statusState" says
  status(battle, pokemon, p) {
    const id = p.status ? condition(battle, p.status, 'status') : '';
    pokemon.status = id;
    if (id && p.statusSeen !== undefined) {
      pokemon.statusState = drawn(battle, battle.dex.conditions.get(id), pokemon, p.statusState, p.statusSeen, null, true);
    } else {
      const defaults = id === 'slp' ? {time: 2, startTime: 2} : id === 'tox' ? {stage: 0} : {};
      pokemon.statusState = effectState(battle, id, pokemon, {...defaults, ...p.statusState});
    }
  },
  abilityState(battle, pokemon, fields) {
    need(pokemon.isActive, `an ability state on ${pokemon.name}, who is not active`);
    Object.assign(pokemon.abilityState, fields);
  },
  sideCondition(battle, side, id, fields) {
    const cid = condition(battle, id, 'side condition');
    side.sideConditions[cid] = timed(battle, cid, side, fields);
  },
  futuremove: futureMove,
  weather(battle, f) {
    patchWeatherOrTerrain(battle, f, 'weather');
  },
  terrain(battle, f) {
    patchWeatherOrTerrain(battle, f, 'terrain');
  },
  pseudoWeather(battle, field, id, fields) {
    const pid = condition(battle, id, 'field condition');
    field.pseudoWeather[pid] = timed(battle, pid, field, fields);
  },
};

// The patch each holder's fields reach (a volatile's: by its id and fields).
const HOLDERS = {
  abilityState: 'abilityState', status: 'status', conditions: 'sideCondition', future: 'futuremove',
  weather: 'weather', terrain: 'terrain', pseudoWeather: 'pseudoWeather',
};

function volatilePatch(id, fields) {
  if (id === 'typechange') return 'typechange';
  if (fields === null) return 'removeVolatile';
  if (id === 'lockedmove') return 'lockedmove';
  if (fields.seen !== undefined) return 'drawnVolatile';
  if (fields.uses !== undefined) return 'stall';
  return 'volatile';
}

function patchFor(holds, id, fields) {
  return holds === 'volatiles' ? volatilePatch(id, fields) : HOLDERS[holds];
}

// -- a Pokémon, a side, the field -------------------------------------------------------------
function patchPokemon(battle, pokemon, p) {
  if (p.forme) {  // first: a permanent forme's HP is scaled to its new max before the patch's HP
    const species = battle.dex.species.get(p.forme.species);
    need(species.exists, `unknown forme '${p.forme.species}'`);
    need(pokemon.isActive, `forme ${species.name} on ${pokemon.name}, who is not active`);
    if (pokemon.species.id !== species.id) pokemon.formeChange(species.id, null, !!p.forme.permanent);
  }
  if (p.hpFraction !== undefined) {
    need(p.hpFraction >= 0 && p.hpFraction <= 1, `hpFraction ${p.hpFraction} is outside [0, 1]`);
    pokemon.hp = p.hpFraction > 0 ? Math.max(1, Math.round(p.hpFraction * pokemon.maxhp)) : 0;
  }
  if (p.hp !== undefined) {
    need(Number.isInteger(p.hp) && p.hp >= 0 && p.hp <= pokemon.maxhp,
      `hp ${p.hp} of ${pokemon.name} is outside 0-${pokemon.maxhp}`);
    pokemon.hp = p.hp;
  }
  if (pokemon.hp === 0 && !pokemon.fainted) {
    pokemon.fainted = true;
    pokemon.status = '';
    pokemon.side.pokemonLeft--;
    pokemon.side.totalFainted++;  // Supreme Overlord, Last Respects
    if (pokemon.isActive) {  // fainted in the turn that ended: as faintMessages and checkFainted leave it
      pokemon.clearVolatile(false);
      pokemon.isActive = false;
      pokemon.isStarted = false;
      pokemon.status = 'fnt';
      pokemon.switchFlag = true;
      pokemon.side.faintedThisTurn = pokemon;
    }
  }
  if (p.status !== undefined && !pokemon.fainted) PATCHES[HOLDERS.status](battle, pokemon, p);
  if (p.pp) {
    need(p.pp.length <= pokemon.moveSlots.length, `${p.pp.length} PP values for ${pokemon.moveSlots.length} moves`);
    p.pp.forEach((pp, i) => {
      if (pp !== null) pokemon.moveSlots[i].pp = Math.max(0, Math.min(pp, pokemon.moveSlots[i].maxpp));
    });
  }
  if (p.item !== undefined) {
    pokemon.item = battle.dex.items.get(p.item).id;  // '' for an item used or knocked off
    pokemon.itemState = effectState(battle, pokemon.item, pokemon);
  }
  if (p.activeTurns !== undefined) pokemon.activeTurns = p.activeTurns;
  if (p.terastallized) {
    pokemon.terastallized = p.terastallized;
    pokemon.knownType = true;
    pokemon.apparentType = p.terastallized;
    pokemon.addedType = '';
  }
  if (p.beenIn) {  // once-a-battle abilities (gen 9 Intrepid Sword, Dauntless Shield) are spent
    pokemon.swordBoost = true;
    pokemon.shieldBoost = true;
  }
  if (p.ability) {  // what it has now (Trace), where its set's differs
    pokemon.ability = battle.dex.abilities.get(p.ability).id;
    pokemon.abilityState = effectState(battle, pokemon.ability, pokemon);
  }
  if (p.abilityState) PATCHES[HOLDERS.abilityState](battle, pokemon, p.abilityState);
  for (const [id, fields] of Object.entries(p.volatiles || {})) {
    need(pokemon.isActive, `volatile '${id}' on ${pokemon.name}, who is not active`);
    const vid = id === 'typechange' ? id : condition(battle, id, 'volatile');
    PATCHES[patchFor('volatiles', vid, fields)](battle, pokemon, vid, fields);
  }
}

function patchSide(battle, side, s, order) {
  for (const pokemon of side.pokemon) {
    pokemon.boosts = Object.fromEntries(STATS.map((k) => [k, 0]));
  }
  (s.pokemon || []).forEach((p, i) => {
    if (!p) return;
    need(i < order.length, `a patch for team index ${i} of a team of ${order.length}`);
    const pokemon = side.pokemon[order[i]];
    if (p.boosts) {
      for (const [k, v] of Object.entries(p.boosts)) {
        need(STATS.includes(k) && Math.abs(v) <= 6, `boost ${k} ${v}`);
        pokemon.boosts[k] = v;
      }
    }
    patchPokemon(battle, pokemon, p);
  });
  side.sideConditions = {};
  for (const [id, fields] of Object.entries(s.conditions || {})) PATCHES[HOLDERS.conditions](battle, side, id, fields);
  if (s.teraUsed) for (const pokemon of side.pokemon) pokemon.canTerastallize = null;
}

// A side or field condition: its fields as given, or with "elapsed" its duration by rule.
function timed(battle, id, target, fields) {
  if (!fields || fields.elapsed === undefined) return effectState(battle, id, target, fields);
  const source = fields.source ? sourcePokemon(battle, fields.source) : null;
  const state = drawn(battle, battle.dex.conditions.get(id), target, fields, fields.elapsed, source, false);
  if (source) {
    state.source = source;
    state.sourceSlot = source.getSlot();
  }
  return state;
}

// Weather or terrain as its source set it, then `elapsed` turns on; false: no source given.
function setBySource(battle, kind, id, src, elapsed) {
  if (!src) return false;
  const field = battle.field;
  const source = sourcePokemon(battle, [src.side, src.index]);
  const by = src.by === 'ability' ? source.getAbility() : battle.dex.moves.get(id);
  const ok = kind === 'weather' ? field.setWeather(id, source, by) : field.setTerrain(id, source, by);
  need(ok, `${kind} ${id} could not be set by ${source.name}`);
  const state = kind === 'weather' ? field.weatherState : field.terrainState;
  if (state.duration) state.duration = Math.max(1, state.duration - (elapsed || 0));
  return true;
}

// kind: 'weather' or 'terrain'; set through its source where the patch names one
function patchWeatherOrTerrain(battle, f, kind) {
  const field = battle.field;
  const id = f[kind] ? condition(battle, f[kind], kind) : '';
  field[kind] = '';
  field[kind + 'State'] = effectState(battle, '', field, {});
  if (!id || !setBySource(battle, kind, id, f[kind + 'Source'], f[kind + 'Elapsed'])) {
    field[kind] = id;
    const duration = f[kind + 'Duration'];
    field[kind + 'State'] = effectState(battle, id, field, id && duration !== undefined ? {duration} : {});
  }
}

function patchField(battle, f) {
  const field = battle.field;
  PATCHES[HOLDERS.weather](battle, f);
  PATCHES[HOLDERS.terrain](battle, f);
  field.pseudoWeather = {};
  for (const [id, fields] of Object.entries(f.pseudoWeather || {})) PATCHES[HOLDERS.pseudoWeather](battle, field, id, fields);
}

// A Future Sight / Doom Desire on its way to this side's slot, set by the move's own onTry,
// hitting after f.residuals more turn ends (gens 5+: gens 2-4 fix its damage at use, which a
// state built later cannot know; the caller refuses them).
function futureMove(battle, side, f, foeOrder, residualToCome) {
  const move = battle.dex.moves.get(f.move);
  need(['futuresight', 'doomdesire'].includes(move.id) && move.onTry, `no future move '${f.move}'`);
  need(Number.isInteger(f.residuals) && f.residuals >= 1 && f.residuals <= 3, `residuals ${f.residuals}`);
  need(Number.isInteger(f.source) && f.source >= 0 && f.source < foeOrder.length, `source ${f.source}`);
  const source = side.foe.pokemon[foeOrder[f.source]];
  const target = side.active[0];
  const slot = side.slotConditions[target.position];
  delete slot.futuremove;
  const event = battle.event;
  battle.event = {target: source};  // the move's user, as in its own onTry's event
  try {
    move.onTry.call(battle, source, target);
  } finally {
    battle.event = event;
  }
  const state = slot.futuremove;
  need(state, `${move.name} could not be set on ${target.name}`);
  // the next turn end is this turn's, or at a faint's switch whose residual ran, the next turn's
  const faintSwitch = side.active[0].switchFlag || side.foe.active[0].switchFlag;
  const next = faintSwitch && !residualToCome ? battle.turn + 1 : battle.turn;
  state.endingTurn = next - 1 + f.residuals - 1;
  if (state.duration) state.duration = f.residuals;
}

// What endTurn works out for the request from the state (disabled moves, trapping), which the
// patch may have changed since the start's own endTurn.
function refreshActive(battle) {
  for (const pokemon of battle.getAllActive()) {
    pokemon.maybeDisabled = false;
    pokemon.maybeLocked = false;
    for (const slot of pokemon.moveSlots) {
      slot.disabled = false;
      slot.disabledSource = '';
    }
    battle.runEvent('DisableMove', pokemon);
    for (const slot of pokemon.moveSlots) {
      battle.singleEvent('DisableMove', battle.dex.getActiveMove(slot.id), null, pokemon);
    }
    pokemon.trapped = pokemon.maybeTrapped = false;
    battle.runEvent('TrapPokemon', pokemon);
    if (!pokemon.knownType || battle.dex.getImmunity('trapped', pokemon)) {
      battle.runEvent('MaybeTrapPokemon', pokemon);
    }
  }
}

// The started battle made the state's: what the leads' switch-ins did that the real battle may
// not have is undone (an item used up: Booster Energy, a Seed, White Herb; a paradox boost from
// the other lead's weather), then each side's patch, the field's, the turn, the future moves.
// sides: [{s: SIDE, order}] (order[i]: where the state's i-th Pokémon stands in the battle).
function patchBattle(battle, st, sides) {
  orders = sides.map((side) => side.order);
  try {
    for (const side of battle.sides) {
      for (const pokemon of side.pokemon) {
        const item = battle.dex.items.get(pokemon.set.item).id;
        if (pokemon.item !== item) {
          pokemon.item = item;
          pokemon.itemState = effectState(battle, item, pokemon);
          // as its switch-in leaves an item it did not use (Booster Energy waits for the
          // weather or terrain to end), no use remembered
          if (pokemon.isActive) pokemon.itemState.started = true;
          pokemon.lastItem = '';
          pokemon.usedItemThisTurn = false;
        }
        if (pokemon.isActive) pokemon.volatiles = {};
      }
    }
    for (const [i, side] of sides.entries()) patchSide(battle, battle.sides[i], side.s, side.order);
    patchField(battle, st.field || {});
    for (const side of battle.sides) {
      // a forme or type the start's weather or terrain gave, set again for the patched field
      const pk = side.active[0];
      if (pk && !pk.fainted && WEATHER_FORMES.has(pk.ability)) {
        battle.singleEvent('WeatherChange', pk.getAbility(), pk.abilityState, pk);
        battle.singleEvent('TerrainChange', pk.getAbility(), pk.abilityState, pk);
      }
    }
    if (st.turn !== undefined) battle.turn = st.turn;
    for (const [i, side] of sides.entries()) {
      if (side.s.future) PATCHES[HOLDERS.future](battle, battle.sides[i], side.s.future, sides[1 - i].order, !!st.residual);
    }
    refreshActive(battle);
  } finally {
    orders = null;
  }
}

module.exports = {PATCHES, patchFor, patchBattle};
