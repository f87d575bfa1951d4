// Search leaves on Showdown's own simulator: build the sampled battle states of one decision,
// then play one turn of a joint action from a copy of a state, as often as asked.
//
// Newline-delimited JSON both ways; every request carries an "id" its answer repeats.
//   {"id", "op": "build", "decision", "format", "us": "p1"|"p2", "states": [STATE, ...]}
//     -> {"id", "ok": true, "states": [{"request", "ours": [choice...], "theirs": [choice...],
//         "attack": their strongest attack on our active (STRONGEST below), "" where none scores}]}
//   {"id", "op": "leaves", "decision", "leaves": [[state index, our choice, their choice, SEED], ...],
//    "keep": bool}
//     -> {"id", "ok": true, "leaves": [{"lines", "request", "ended", "winner", "value", "kept"} | {"error"}]}
//        ("kept": with "keep", a live leaf's battle is kept under this number for "next")
//   {"id", "op": "next", "decision", "leaves": [[kept number, our choice | null, SEED], ...], "keep": bool}
//     -> as "leaves": the turn after a kept leaf; the opponent plays its strongest attack on our
//        active (STRONGEST below), and so do we where our choice is null or refused ("fallback":
//        why it was refused)
//   {"id", "op": "sample", "format", "seed": SEED, "k", "size", "known": [KNOWN, ...], "tries", "pool"}
//     -> {"id", "ok": true, "teams": [[set, ...] x k], "relaxed": n}   (the opponent's teams: below)
//   {"id", "op": "drop", "decision"}  -> {"id", "ok": true}
//   {"id", "op": "ping"}              -> {"id", "ok": true}
//   any request that cannot be served -> {"id", "ok": false, "error": reason}; the process goes on.
// On start the process writes {"ready": true}; it exits when stdin closes (the parent died).
//
// STATE = {"seed": SEED, "turn": n, "p1": SIDE, "p2": SIDE, "field": FIELD, "residual": bool}
//         ("residual": gens 1-3, a faint's switch asked before the turn's residual: it runs after)
// SIDE  = {"name", "team": [Showdown set objects], "active": index into team (0 by default),
//          (a set may carry "fit": {hp, atk, def, spa, spd, spe} and "fitHpPower": n in place of
//          its EVs and IVs: the spread nearest the random formats' that gives those stats),
//          "pokemon": [PATCH | null per team index], "conditions": {id: {"duration", "layers"}},
//          "teraUsed": bool, "future": {"move": "futuresight" | "doomdesire", "source": index into the
//          other side's team, "residuals": turn ends before it hits this side's active slot}}
// PATCH = {"hp" | "hpFraction", "status", "statusState": {"time"} | {"stage"}, "statusSeen": n,
//          "boosts": {stat: n}, "pp": [n per move slot], "item", "volatiles": {id: {fields} | null},
//          "activeTurns", "terastallized": type, "abilityState": {fields} (Supreme Overlord's
//          "fallen"), "ability": id (what it has now: Trace), "beenIn": bool (it has been in:
//          once-a-battle abilities are spent)}; the volatile "typechange": {"types": [type, ...],
//          "ability": id (Protean / Libero, which in gen 9 change it once a switch-in)} sets its types
// The leads' switch-ins at the start are undone where the patch does not say: every item is
// the set's (an item used up at the start, Booster Energy, is back), the actives' volatiles
// are the patch's alone.
// FIELD = {"weather", "weatherDuration", "weatherSource", "weatherElapsed", "terrain",
//          "terrainDuration", "terrainSource", "terrainElapsed", "pseudoWeather": {id: {fields}}}
// An active Pokémon patched to 0 HP fainted in the turn that ended: the state asks its side for a
// switch (the other side's choice is "wait"), and a leaf plays the switch-ins and the next turn's start.
// Timers the caller cannot see are drawn here by the effect's own rules, with the state's PRNG:
// "statusSeen" n (sleep: turns it failed to move) starts the status as the game does and keeps a
// draw whose timer outlasts n; a volatile's {"seen": n} the same (confusion: failed turns;
// others: turn ends); a side or field condition's {"elapsed": n, "source": [side, team index]}
// takes its duration from the rule (Light Clay, Damp Rock: the source's item) less n.
// "weatherSource"/"terrainSource" = {"side", "index", "by": "ability" | "move"}: the weather is
// set as its source set it (gen 3-5 ability weather lasts), then "weatherElapsed" turns pass.
// A volatile's {"uses": n} on stall: Protect's counter after n uses in a row. "lockedmove":
// {"move", "used": n} (Outrage, ... n turns in a row): the 2-3 turns drawn by its rule given n.
// KNOWN = {"species", "level", "gender", "moves": [id, ...], "item": id | "" (gone) | null
//          (unknown), "ability": id | null, "tera": type | null}: the revealed facts of one
//          Pokémon of the opponent. Each known Pokémon's set is drawn by the format's generator
//          (randomSet) until one agrees with every revealed fact ("tries" draws at most; else the
//          draw that agrees most, with the revealed facts written over it: counted as relaxed);
//          the team is filled to "size" from "pool" ([{"species", "level", "gender"}]: the
//          species team preview showed and not yet seen, drawn in turn, each set by the generator),
//          then from a generator team's species not seen (at "level" where given: a team
//          format's). "format" names the generator: a team
//          format's caller names its generation's random format (the public sets Showdown ships).
// SEED  = four integers below 65536, or a Showdown seed string ("sodium,…").
//
// A state is a fresh `new Battle` whose leads are the active Pokémon: the team is reordered
// before the battle starts exactly as switchIn reorders it (the active swaps places with the
// first), so the leads enter through Showdown's own switchIn. What the start changed is then
// overwritten: boosts, weather, terrain and side conditions are set to the patch's (absent: none),
// the rest of a PATCH where it names a field. Timers (sleep, toxic, durations) are the caller's:
// the defaults are sleep 2 turns, toxic stage 0, a condition's own duration.
// A leaf is a copy (State.serializeBattle / deserializeBattle, with a fresh log) given its own
// seed, both choices, and a mid-turn request (U-turn, a faint) answered with the first legal
// switch, up to the next full-turn request or the battle's end. "lines" are our side's view of
// the turn ("|t:|" timestamps dropped); "value" is (our HP fractions + Pokémon left) minus
// theirs over twice the larger team, in [-1, 1]; an ended battle is 1, -1 or 0 (a tie).
// STRONGEST: a side's second turn in a two-turn leaf, a plain max-damage bot: the move with the
// best base power x STAB x type effectiveness x its attacking stat over the foe's defence x
// accuracy (tera, status moves, switches, self-fainting moves and Fake Out aside; immunities by
// type, grounding and the absorbing abilities count); with no damaging move, its first legal choice.
// argv[2]: the pokemon-showdown package directory.
'use strict';
const path = require('path');
const readLines = require(path.join(__dirname, '..', 'stdin_lines.js'));
const sim = require(path.join(process.argv[2], 'dist', 'sim'));
const {Battle, PRNG, Teams} = sim;
const {State} = require(path.join(process.argv[2], 'dist', 'sim', 'state'));
const {extractChannelMessages} = require(path.join(process.argv[2], 'dist', 'sim', 'battle'));

const MAX_MIDTURN = 12;  // mid-turn requests answered within one leaf before it gives up
const STATS = ['atk', 'def', 'spa', 'spd', 'spe', 'accuracy', 'evasion'];
const decisions = new Map();  // decision -> {us, states: [{ser, usIndex}]}

class BadRequest extends Error {}

function need(cond, why) {
  if (!cond) throw new BadRequest(why);
}

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

// side.pokemon is in the battle's order; a state's team indices are the caller's: orders maps.
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

// Outrage's lock after "used" turns in a row: Showdown draws 2-3 turns (trueDuration) at its
// start and counts one down at each turn's end; between turns its duration is 1 (a use renews
// it to 2 while two turns are left). The draw is kept only where it outlasts the uses.
function lockedMove(battle, pokemon, {move, used}) {
  const id = battle.dex.moves.get(move).id;
  need(id && Number.isInteger(used) && used >= 1 && used <= 2, `lockedmove {move: ${move}, used: ${used}}`);
  let total = battle.random(2, 4);
  while (total <= used) total = battle.random(2, 4);
  return effectState(battle, 'lockedmove', pokemon, {move: id, duration: 1, trueDuration: total - used});
}

function condition(battle, id, what) {
  const effect = battle.dex.conditions.get(id);
  need(effect.exists, `unknown ${what} '${id}'`);
  return effect.id;
}

function patchPokemon(battle, pokemon, p) {
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
  if (p.status !== undefined && !pokemon.fainted) {
    const id = p.status ? condition(battle, p.status, 'status') : '';
    pokemon.status = id;
    if (id && p.statusSeen !== undefined) {
      pokemon.statusState = drawn(battle, battle.dex.conditions.get(id), pokemon, p.statusState, p.statusSeen, null, true);
    } else {
      const defaults = id === 'slp' ? {time: 2, startTime: 2} : id === 'tox' ? {stage: 0} : {};
      pokemon.statusState = effectState(battle, id, pokemon, {...defaults, ...p.statusState});
    }
  }
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
  if (p.abilityState) {
    need(pokemon.isActive, `an ability state on ${pokemon.name}, who is not active`);
    Object.assign(pokemon.abilityState, p.abilityState);
  }
  for (const [id, fields] of Object.entries(p.volatiles || {})) {
    need(pokemon.isActive, `volatile '${id}' on ${pokemon.name}, who is not active`);
    if (id === 'typechange') {  // no volatile in Showdown: the types, and Protean / Libero spent
      need(Array.isArray(fields.types) && fields.types.length > 0, `typechange without types`);
      pokemon.setType(fields.types, true);
      if (fields.ability && pokemon.ability === fields.ability) pokemon.abilityState[fields.ability] = true;
      continue;
    }
    const vid = condition(battle, id, 'volatile');
    if (fields === null) {
      delete pokemon.volatiles[vid];
    } else if (vid === 'lockedmove') {
      pokemon.volatiles[vid] = lockedMove(battle, pokemon, fields);
    } else if (fields.seen !== undefined) {
      pokemon.volatiles[vid] = drawn(battle, battle.dex.conditions.get(vid), pokemon, fields, fields.seen,
        pokemon.side.foe.active[0], true);
    } else if (fields.uses !== undefined) {
      const effect = battle.dex.conditions.get(vid);
      const state = effectState(battle, vid, pokemon, {duration: 1, counter: 3, ...fields});
      for (let i = 1; i < fields.uses && state.counter < (effect.counterMax || Infinity); i++) state.counter *= 3;
      pokemon.volatiles[vid] = state;
    } else {
      pokemon.volatiles[vid] = effectState(battle, vid, pokemon, fields);
    }
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
  for (const [id, fields] of Object.entries(s.conditions || {})) {
    const cid = condition(battle, id, 'side condition');
    side.sideConditions[cid] = timed(battle, cid, side, fields);
  }
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
  patchWeatherOrTerrain(battle, f, 'weather');
  patchWeatherOrTerrain(battle, f, 'terrain');
  field.pseudoWeather = {};
  for (const [id, fields] of Object.entries(f.pseudoWeather || {})) {
    const pid = condition(battle, id, 'field condition');
    field.pseudoWeather[pid] = timed(battle, pid, field, fields);
  }
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

const SPREAD = ['hp', 'atk', 'def', 'spa', 'spd', 'spe'];
// the random formats' first, then the extremes, then every other a team file may give
const EV_CHOICES = [85, 84, 0, 252, 255];
for (let ev = 4; ev < 252; ev += 4) if (!EV_CHOICES.includes(ev)) EV_CHOICES.push(ev);

function statOf(dex, stat, base, iv, ev, level, mod = 0) {
  const core = Math.trunc(Math.trunc(2 * base + iv + Math.trunc(ev / 4) + (stat === 'hp' ? 100 : 0)) * level / 100);
  if (stat === 'hp') return core + 10;
  return mod ? Math.trunc((core + 5) * (100 + 10 * mod) / 100) : core + 5;
}

// Natures by what they change: neutral first (the random formats'), then each [plus, minus].
const NATURES = [[null, null]];
for (const plus of ['atk', 'def', 'spa', 'spd', 'spe']) {
  for (const minus of ['atk', 'def', 'spa', 'spd', 'spe']) if (plus !== minus) NATURES.push([plus, minus]);
}
const fits = new Map();  // a side's stats do not change within a battle: each spread is fitted once

// The EVs, IVs and nature nearest the random formats' (85 EVs, 31 IVs, neutral) that give a
// set's stats (a team file's spread: any EVs, any nature); with a Hidden Power power (gens
// 2-5), IVs that also give that power.
function fitSpread(dex, set, want, hpPower) {
  const key = JSON.stringify([dex.currentMod, set.species, set.level, want, hpPower]);
  if (!fits.has(key)) {
    if (fits.size > 4096) fits.clear();
    fits.set(key, fitOnce(dex, set, want, hpPower));
  }
  const fit = fits.get(key);
  if (fit instanceof Error) throw fit;
  return fit;
}

function fitOnce(dex, set, want, hpPower) {
  const species = dex.species.get(set.species);
  if (!species.exists) return new BadRequest(`unknown species '${set.species}'`);
  for (const stat of SPREAD) {
    if (stat === 'hp' && (species.maxHP || want.hp === null)) continue;  // Shedinja; fainted
    if (!Number.isInteger(want[stat])) return new BadRequest(`no ${stat} to fit for ${set.species}`);
  }
  // each stat's [EV, IV] pairs under a nature's -1 / 0 / +1, found once for all natures
  const found = new Map();
  const optionsOf = (stat, mod) => {
    if (stat === 'hp' && (species.maxHP || want.hp === null)) return [[85, 31]];
    const key = `${stat}${mod}`;
    if (!found.has(key)) {
      const list = [];
      for (const ev of EV_CHOICES) {
        for (let iv = dex.gen <= 2 ? 30 : 31; iv >= 0; iv -= dex.gen <= 2 ? 2 : 1) {  // gens 1-2: DVs, even IVs
          if (statOf(dex, stat, species.baseStats[stat], iv, ev, set.level || 100, mod) === want[stat]) list.push([ev, iv]);
        }
      }
      found.set(key, list);
    }
    return found.get(key);
  };
  let missing = null;
  for (const [plus, minus] of dex.gen >= 3 ? NATURES : NATURES.slice(0, 1)) {
    const options = Object.fromEntries(SPREAD.map((stat) => [stat, optionsOf(stat, stat === plus ? 1 : stat === minus ? -1 : 0)]));
    const empty = SPREAD.find((k) => !options[k].length);
    if (empty) {
      missing = missing || empty;
      continue;
    }
    const nature = plus ? dex.natures.all().find((n) => n.plus === plus && n.minus === minus).name : undefined;
    const spread = pickIvs(dex, set, options, hpPower);
    if (spread) return nature ? {...spread, nature} : spread;
    missing = missing || 'hiddenpower';
  }
  if (missing === 'hiddenpower' || hpPower) return new BadRequest(`no EVs, IVs and nature give ${set.species}'s stats${hpPower ? ` and Hidden Power ${hpPower}` : ''}`);
  return new BadRequest(`no EVs and IVs give ${set.species}'s ${missing} ${want[missing]}`);
}

function pickIvs(dex, set, options, hpPower) {
  const pick = (choice) => ({
    evs: Object.fromEntries(SPREAD.map((k) => [k, options[k][choice[k]][0]])),
    ivs: Object.fromEntries(SPREAD.map((k) => [k, options[k][choice[k]][1]])),
  });
  const first = Object.fromEntries(SPREAD.map((k) => [k, 0]));
  if (!hpPower) return pick(first);
  // Hidden Power's power reads some bits of the IVs (gen 2: of the DVs): among the spreads that
  // give the same stats, the first of each stat's kind of those bits is tried.
  const bits = dex.gen <= 2 ? (iv) => ((iv >> 1) >> 3) * 4 + ((iv >> 1) & 3) : (iv) => (iv >> 1) & 1;
  const ranges = SPREAD.map((k) => {
    const firsts = new Map();
    options[k].forEach(([, iv], i) => {
      if (!firsts.has(bits(iv))) firsts.set(bits(iv), i);
    });
    return [...firsts.values()];
  });
  const choice = {...first};
  const walk = (d) => {
    if (d === SPREAD.length) return dex.getHiddenPower(pick(choice).ivs).power === hpPower;
    for (const i of ranges[d]) {
      choice[SPREAD[d]] = i;
      if (walk(d + 1)) return true;
    }
    return false;
  };
  return walk(0) ? pick(choice) : null;
}

function fitted(dex, set) {
  if (!set.fit) return set;
  const {fit, fitHpPower, ...rest} = set;
  return {...rest, ...fitSpread(dex, rest, fit, fitHpPower)};
}

// The opponent's teams: each known Pokémon's set drawn by the format's generator until one agrees
// with what was revealed, the rest of the team from a generator team's unseen species.
// A random-battle set for `species`, or for the forme its sets are kept under (a battle-only
// or cosmetic forme has none of its own: Terapagos-Terastal, ...).
function drawSet(gen, dex, species) {
  const sp = dex.species.get(species);
  for (const name of [species, sp.battleOnly, sp.changesFrom, sp.baseSpecies]) {
    if (typeof name !== 'string' || !name) continue;
    try {
      return gen.randomSet(name, {}, false);
    } catch (err) {
      // no sets under this name: try the next
    }
  }
  throw new BadRequest(`no random-battle set for ${species}`);
}

// Team preview hides these species' formes ("Urshifu-*": Showdown's rulesets): a previewed one
// is any of its formes that has random-battle sets, drawn uniformly.
const PREVIEW_HIDES = new Set(['greninja', 'gourgeist', 'pumpkaboo', 'silvally', 'urshifu',
  'dudunsparce', 'xerneas', 'zacian', 'zamazenta']);

const formesWithSets = new Map();  // format + species -> its formes that have sets (probed once)

function hiddenFormes(gen, dex, species) {
  const sp = dex.species.get(species);
  if (!PREVIEW_HIDES.has(sp.id)) return [species];
  const key = `${gen.format.id}:${sp.id}`;
  if (!formesWithSets.has(key)) {
    const formes = [sp.name, ...(sp.otherFormes || [])].filter((name) => {
      try {
        gen.randomSet(name, {}, false);
        return true;
      } catch (err) {
        return false;
      }
    });
    formesWithSets.set(key, formes.length ? formes : [species]);
  }
  return formesWithSets.get(key);
}

function sample(msg) {
  need(typeof msg.format === 'string', 'no format');
  need(Number.isInteger(msg.k) && msg.k > 0, 'k must be a positive integer');
  const known = msg.known || [];
  const size = msg.size || 6;
  const tries = msg.tries || 100;
  const gen = Teams.getGenerator(msg.format, Array.isArray(msg.seed) ? msg.seed : undefined);
  const dex = gen.dex;
  const seenBase = new Set(known.map((m) => dex.species.get(m.species).baseSpecies));
  let relaxed = 0;
  const teams = [];
  for (let k = 0; k < msg.k; k++) {
    const team = [];
    for (const m of known) {
      let best = null;
      let bestScore = -1;
      for (let t = 0; t < tries && bestScore < 1; t++) {
        const set = drawSet(gen, dex, m.species);
        const score = agreement(dex, set, m);
        if (score > bestScore) [best, bestScore] = [set, score];
      }
      if (bestScore < 1) relaxed++;
      team.push(revealed(dex, best, m));
    }
    if (Array.isArray(msg.pool)) {  // team preview showed the species: the unseen ones, drawn in turn
      const pool = msg.pool.slice();
      while (team.length < size && pool.length) {
        const [m] = pool.splice(gen.prng.random(pool.length), 1);
        const formes = hiddenFormes(gen, dex, m.species);
        const species = formes[gen.prng.random(formes.length)];
        const set = drawSet(gen, dex, species);
        team.push({...set, species: dex.species.get(species).name, level: m.level || set.level,
          ...(m.gender !== undefined ? {gender: m.gender} : {})});
      }
    }
    for (let guard = 0; team.length < size && guard < 20; guard++) {
      for (const set of gen.getTeam()) {
        const base = dex.species.get(set.species).baseSpecies;
        if (team.length < size && !seenBase.has(base) && !team.some((s) => dex.species.get(s.species).baseSpecies === base)) {
          team.push(msg.level ? {...set, level: msg.level} : set);
        }
      }
    }
    need(team.length === size, `could not fill a team of ${size}`);
    teams.push(team);
  }
  return {teams, relaxed};
}

// A set's move id and a revealed one: Hidden Power is revealed without its type ("hiddenpower").
function sameMove(set, seen) {
  if (set === seen) return true;
  return set.startsWith('hiddenpower') && seen.startsWith('hiddenpower') && (seen === 'hiddenpower' || seen.startsWith(set));
}

// The share of a known Pokémon's revealed facts that a drawn set agrees with (1: all).
function agreement(dex, set, m) {
  const moves = new Set(set.moves.map((x) => dex.moves.get(x).id));
  let ok = 0;
  let all = 0;
  for (const move of m.moves || []) {
    all++;
    if ([...moves].some((x) => sameMove(x, move))) ok++;
  }
  if (m.item) {
    all++;
    if (dex.items.get(set.item).id === m.item) ok++;
  }
  if (m.ability) {
    all++;
    if (dex.abilities.get(set.ability).id === m.ability) ok++;
  }
  if (m.tera) {
    all++;
    if ((set.teraType || '').toLowerCase() === m.tera.toLowerCase()) ok++;
  }
  return all ? ok / all : 1;
}

// A drawn set with the revealed facts written over it (a no-op where it agrees).
function revealed(dex, set, m) {
  const out = {...set, name: m.name || set.name, level: m.level || set.level};
  // The state keeps the forme Showdown showed: the generator picks some at random (cosmetic ones,
  // Polteageist-Antique, Pikachu's caps: getForme), and a battle-only one is what the battle made
  // of it (Mimikyu-Busted's Disguise is gone; the sets are its base forme's).
  const seen = dex.species.get(m.species);
  const drawn = dex.species.get(set.species);
  if (seen.exists && seen.id !== drawn.id && seen.baseSpecies === drawn.baseSpecies) {
    out.species = seen.name;
  }
  if (m.gender !== undefined) out.gender = m.gender;
  const ids = out.moves.map((x) => dex.moves.get(x).id);
  const known = m.moves || [];
  const missing = known.filter((x) => !ids.some((y) => sameMove(y, x)));
  const moves = out.moves.slice();
  for (const x of missing) {
    const j = ids.findIndex((y) => !known.some((z) => sameMove(y, z)));
    if (j >= 0 && moves.length >= 4) {
      moves[j] = x;
      ids[j] = x;
    } else {
      moves.push(x);
      ids.push(x);
    }
  }
  out.moves = moves.slice(0, Math.max(4, (m.moves || []).length));
  if (m.item) out.item = m.item;
  if (m.ability) out.ability = m.ability;
  if (m.tera) out.teraType = m.tera;
  return out;
}

// The team as switchIn leaves it when team[active] switched in for team[0]; order[i] is where
// the given team's i-th Pokémon ends up.
function reorder(team, active) {
  need(Array.isArray(team) && team.length > 0, 'a side without a team');
  need(Number.isInteger(active) && active >= 0 && active < team.length, `active ${active} is not in the team`);
  const order = team.map((_, i) => i);
  order[0] = active;
  order[active] = 0;
  const placed = team.slice();
  placed[0] = team[active];
  placed[active] = team[0];
  return {placed, order};
}

const WEATHER_FORMES = new Set(['forecast', 'flowergift', 'mimicry']);

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

function build(msg) {
  need(['p1', 'p2'].includes(msg.us), `us must be p1 or p2, not ${msg.us}`);
  need(typeof msg.format === 'string', 'no format');
  need(Array.isArray(msg.states) && msg.states.length > 0, 'no states');
  const usIndex = msg.us === 'p1' ? 0 : 1;
  const built = [];
  const answer = [];
  for (const [k, st] of msg.states.entries()) {
    try {
      const sides = ['p1', 'p2'].map((id) => {
        need(st[id], `no ${id}`);
        return {id, s: st[id], ...reorder(st[id].team, st[id].active || 0)};
      });
      need((st.p1.name || 'p1') !== (st.p2.name || 'p2'), 'both sides have one name: the winner would be ambiguous');
      const dex = sim.Dex.forFormat(msg.format);
      const battle = new Battle({
        formatid: msg.format, seed: st.seed,
        p1: {name: st.p1.name || 'p1', team: sides[0].placed.map((set) => fitted(dex, set))},
        p2: {name: st.p2.name || 'p2', team: sides[1].placed.map((set) => fitted(dex, set))},
      });
      orders = sides.map((side) => side.order);
      if (battle.requestState === 'teampreview') battle.makeChoices('default', 'default');
      need(battle.requestState === 'move' && !battle.ended,
        `the battle did not reach a move request (${battle.requestState || 'none'})`);
      for (const side of battle.sides) {
        for (const pokemon of side.pokemon) {
          // What the leads' switch-ins did that the real battle may not have: an item used up
          // (Booster Energy, a Seed, White Herb), a paradox boost from the other lead's weather.
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
        if (side.s.future) futureMove(battle, battle.sides[i], side.s.future, sides[1 - i].order, !!st.residual);
      }
      refreshActive(battle);
      if (battle.sides.some((side) => side.active[0].switchFlag)) {
        // a faint's switch at the end of a turn: the switch-ins, then the next turn starts
        need(battle.sides.every((side) => side.pokemonLeft > 0), 'a side with nothing left');
        battle.midTurn = true;
        if (st.residual) battle.queue.addChoice({choice: 'residual'});  // gens 1-3: the faint came first
        battle.makeRequest('switch');
      } else {
        battle.makeRequest('move');
      }
      const ser = State.serializeBattle(battle);
      ser.log = [];  // a leaf's lines are the whole log of its copy
      ser.sentLogPos = 0;
      built.push({ser, usIndex});
      answer.push({
        request: battle.sides[usIndex].activeRequest,
        ours: legalChoices(battle.sides[usIndex]),
        theirs: legalChoices(battle.sides[1 - usIndex]),
        attack: strongest(battle, battle.sides[1 - usIndex], battle.sides[usIndex], ''),
      });
    } catch (err) {
      throw new BadRequest(`state ${k}: ${err.message}`);
    } finally {
      orders = null;
    }
  }
  decisions.set(msg.decision, {us: msg.us, states: built, kept: []});
  return {states: answer};
}

// Every choice the side's request allows, in Showdown's own words ("move 2 terastallize").
function legalChoices(side) {
  const req = side.activeRequest;
  if (!req || req.wait) return [WAIT];
  const switches = [];
  req.side.pokemon.forEach((p, j) => {
    if (!p.active && !p.condition.endsWith(' fnt') && !p.reviving) switches.push(`switch ${j + 1}`);
  });
  if (req.forceSwitch) return switches;
  const active = req.active[0];
  const out = [];
  active.moves.forEach((m, i) => {
    if (m.disabled) return;
    const n = i + 1;
    out.push(`move ${n}`);
    if (active.canTerastallize) out.push(`move ${n} terastallize`);
    if (active.canMegaEvo) out.push(`move ${n} mega`);
    if (active.canZMove && active.canZMove[i]) out.push(`move ${n} zmove`);
    if (active.canDynamax) out.push(`move ${n} dynamax`);
  });
  if (!active.trapped) out.push(...switches);
  return out;
}

function sideScore(side) {
  let score = 0;
  for (const p of side.pokemon) if (!p.fainted && p.hp > 0) score += 1 + p.hp / p.maxhp;
  return score;
}

function value(battle, usIndex) {
  const us = battle.sides[usIndex];
  const them = battle.sides[1 - usIndex];
  if (battle.ended) {
    if (!battle.winner) return 0;
    return battle.winner === us.name ? 1 : -1;
  }
  const n = Math.max(us.pokemon.length, them.pokemon.length);
  return (sideScore(us) - sideScore(them)) / (2 * n);
}

// The choice of a side whose request is to wait (the other side's Pokémon fainted).
const WAIT = 'wait';

function choose(battle, side, choice, whose) {
  if (!side.choose(choice)) {
    throw new BadRequest(`${whose} choice '${choice}' refused: ${side.choice.error}`);
  }
}

// One turn of a copy of ST ({ser, usIndex}) from both choices (null: STRONGEST); with KEPT (a
// list), a live end state is kept in it and its number answered. FALLBACK: our choice, if the
// simulator refuses it (a switch out of a trap our view did not show), gives way to STRONGEST.
function play(st, ours, theirs, seed, kept, fallback = false) {
  const battle = State.deserializeBattle({...st.ser, log: []});
  battle.prng = new PRNG(Array.isArray(seed) ? seed.join(',') : seed);
  const us = battle.sides[st.usIndex];
  const them = battle.sides[1 - st.usIndex];
  let refused = null;
  if (fallback && ours !== null && !us.choose(ours)) {
    refused = `our choice '${ours}' refused: ${us.choice.error}`;
    choose(battle, us, strongest(battle, us, them), `our (after ${refused})`);
  } else if (!fallback || ours === null) {
    choose(battle, us, ours === null ? strongest(battle, us, them) : ours, 'our');
  }
  const their = theirs === null ? strongest(battle, them, us) : theirs;
  if (their !== WAIT) choose(battle, them, their, 'their');
  need(battle.allChoicesDone(), `their choice '${their}' leaves a choice to make`);
  battle.commitChoices();
  for (let i = 0; !battle.ended && battle.requestState === 'switch'; i++) {
    need(i < MAX_MIDTURN, `more than ${MAX_MIDTURN} mid-turn requests in one turn`);
    for (const side of battle.sides) {
      if (side.activeRequest && !side.activeRequest.wait) side.autoChoose();
    }
    battle.commitChoices();
  }
  const side = st.usIndex + 1;
  const mine = extractChannelMessages(battle.log.join('\n'), [side])[side];
  const out = {
    lines: mine.filter((l) => !l.startsWith('|t:|')).join('\n'),
    request: battle.ended ? null : us.activeRequest,
    ended: battle.ended,
    winner: !battle.ended ? null : battle.winner === us.name ? 'us' : battle.winner ? 'them' : 'tie',
    value: value(battle, st.usIndex),
  };
  if (refused) out.fallback = refused;
  if (kept && !battle.ended) {
    const ser = State.serializeBattle(battle);
    ser.log = [];
    ser.sentLogPos = 0;
    out.kept = kept.push({ser, usIndex: st.usIndex}) - 1;
  }
  return out;
}

// Abilities that take a move type in (STRONGEST does not aim at them).
const ABSORBS = {
  Electric: ['voltabsorb', 'lightningrod', 'motordrive'], Water: ['waterabsorb', 'stormdrain', 'dryskin'],
  Fire: ['flashfire'], Grass: ['sapsipper'],
};
// Moves STRONGEST passes over: they faint the user, or fail after its first turn in.
const NOT_AIMED = new Set(['explosion', 'selfdestruct', 'memento', 'finalgambit', 'mistyexplosion', 'fakeout', 'firstimpression']);

// STRONGEST (above) for SIDE against FOE's active; where no attack scores (all immune, status
// moves alone, a switch to make), ORELSE, by default its first choice.
function strongest(battle, side, foe, orElse = undefined) {
  const choices = legalChoices(side);
  const fallback = orElse === undefined ? choices[0] : orElse;
  const req = side.activeRequest;
  if (choices[0] === WAIT || req.forceSwitch) return fallback;
  const me = side.active[0];
  const target = foe.active[0];
  let best = fallback;
  let top = 0;
  req.active[0].moves.forEach((entry, i) => {
    const choice = `move ${i + 1}`;
    if (!choices.includes(choice) || !target || target.fainted) return;
    const move = battle.dex.moves.get(entry.id);
    if (!move.exists || move.category === 'Status' || NOT_AIMED.has(move.id)) return;
    const type = move.id === 'hiddenpower' ? me.hpType : move.type;
    const absorbed = (ABSORBS[type] || []).includes(target.ability) ||
      (target.ability === 'wonderguard' && battle.dex.getEffectiveness(type, target) <= 0);
    const hits = absorbed || !target.runImmunity({...move, type}, false) ? 0 : 2 ** battle.dex.getEffectiveness(type, target);
    const ratio = move.category === 'Physical'
      ? me.getStat('atk', false, true) / target.getStat('def', false, true)
      : me.getStat('spa', false, true) / target.getStat('spd', false, true);
    const score = (move.basePower || 60) * (me.hasType(type) ? 1.5 : 1) * hits * ratio *
      (move.accuracy === true ? 1 : move.accuracy / 100);
    if (score > top) {
      top = score;
      best = choice;
    }
  });
  return best;
}

function leaf(decision, spec, keep) {
  need(Array.isArray(spec) && spec.length === 4, 'a leaf is [state, our choice, their choice, seed]');
  const [k, ours, theirs, seed] = spec;
  const st = decision.states[k];
  need(st, `no state ${k}`);
  need(typeof ours === 'string' && typeof theirs === 'string', 'a leaf names both choices');
  return play(st, ours, theirs, seed, keep ? decision.kept : null);
}

function nextLeaf(decision, spec, keep) {
  need(Array.isArray(spec) && spec.length === 3, 'a next leaf is [kept number, our choice | null, seed]');
  const [n, ours, seed] = spec;
  const st = decision.kept[n];
  need(st, `no kept leaf ${n}`);
  return play(st, ours, null, seed, keep ? decision.kept : null, true);
}

function leaves(msg, one) {
  const decision = decisions.get(msg.decision);
  need(decision, `no decision '${msg.decision}' (never built, or dropped)`);
  need(Array.isArray(msg.leaves), 'no leaves');
  return {
    leaves: msg.leaves.map((spec) => {
      try {
        return one(decision, spec);
      } catch (err) {
        return {error: err instanceof BadRequest ? err.message : String(err && err.stack || err).split('\n').slice(0, 3).join(' | ')};
      }
    }),
  };
}

function handle(line) {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch (err) {
    return {id: null, ok: false, error: `not JSON: ${err.message}`};
  }
  const id = msg && msg.id !== undefined ? msg.id : null;
  const t0 = process.hrtime.bigint();
  try {
    let body;
    switch (msg.op) {
    case 'build': body = build(msg); break;
    case 'leaves': body = leaves(msg, (d, spec) => leaf(d, spec, msg.keep)); break;
    case 'next': body = leaves(msg, (d, spec) => nextLeaf(d, spec, msg.keep)); break;
    case 'sample': body = sample(msg); break;
    case 'drop': decisions.delete(msg.decision); body = {}; break;
    case 'ping': body = {}; break;
    default: throw new BadRequest(`unknown op '${msg.op}'`);
    }
    return {id, ok: true, ms: Number(process.hrtime.bigint() - t0) / 1e6, ...body};
  } catch (err) {
    const why = err instanceof BadRequest ? err.message : String(err && err.stack || err).split('\n').slice(0, 3).join(' | ');
    return {id, ok: false, error: why};
  }
}

readLines((line) => {
  if (line.trim()) process.stdout.write(JSON.stringify(handle(line)) + '\n');
}, () => {});

Teams.getGenerator('gen9randombattle');  // load the data before saying ready
process.stdout.write(JSON.stringify({ready: true}) + '\n');
