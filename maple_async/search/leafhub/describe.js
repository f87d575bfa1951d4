// A battle in plain terms: every fact a search engine other than Showdown needs to rebuild it,
// read off a Showdown Battle (a built state: leafhub's "describe"; a leaf's turn: "brief"). No Showdown
// object leaks out: effect states keep their numbers and strings, a source becomes its side and
// team position.
//
// SNAPSHOT = {"gen", "turn", "ended", "winner": side id | "" | null,
//             "sides": [SIDE for p1, SIDE for p2], "field": FIELD}
// SIDE     = {"id", "active": position of the active Pokémon in "pokemon" (-1: none),
//             "request": "move" | "switch" | "wait" | "", "pokemonLeft", "teraUsed",
//             "pokemon": [MON in the request's order], "conditions": {id: STATE},
//             "slot": {id: STATE} (the active slot's conditions: Wish, Future Sight)}
// MON      = {"name", "species", "baseSpecies", "level", "gender", "types", "addedType", "baseTypes", "hp", "maxhp",
//             "fainted", "stats": {atk, def, spa, spd, spe}, "ability", "baseAbility", "item",
//             "nature", "evs", "ivs", "moves": [{"id", "pp", "maxpp", "disabled"}], "hpType",
//             "hpPower", "status", "statusState": STATE, "boosts", "volatiles": {id: STATE},
//             "abilityState": STATE,
//             "teraType", "terastallized", "weightkg", "activeTurns", "lastMove", "active"}
// FIELD    = {"weather", "weatherDuration", "terrain", "terrainDuration",
//             "pseudoWeather": {id: STATE}}
// STATE    = an effect state's own fields that are numbers, strings or booleans ("duration",
//            "time", "hp", "move", "layers", "stage", "counter", ...), "source": [side id,
//            position] and "sourceEffect": its id, where it has them.
'use strict';

const SKIP = new Set(['id', 'target', 'source', 'sourceSlot', 'sourceEffect', 'effectOrder']);

function position(battle, pokemon) {
  if (!pokemon || !pokemon.side) return null;
  const i = pokemon.side.pokemon.indexOf(pokemon);
  return i < 0 ? null : [pokemon.side.id, i];
}

function plain(battle, state) {
  const out = {};
  if (!state) return out;
  for (const [k, v] of Object.entries(state)) {
    if (SKIP.has(k)) continue;
    if (typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean') out[k] = v;
  }
  const src = position(battle, state.source);
  if (src) out.source = src;
  if (state.sourceEffect && state.sourceEffect.id) out.sourceEffect = state.sourceEffect.id;  // Rest's sleep
  return out;
}

function states(battle, bag) {
  const out = {};
  for (const [id, state] of Object.entries(bag || {})) out[id] = plain(battle, state);
  return out;
}

function mon(battle, p) {
  return {
    name: p.name,
    species: p.species.id,
    baseSpecies: p.baseSpecies.id,
    level: p.level,
    gender: p.gender || '',
    types: p.getTypes(true, true),  // before tera; a third type (Forest's Curse) apart
    addedType: p.addedType || '',
    baseTypes: [...p.baseSpecies.types],
    hp: p.hp,
    maxhp: p.maxhp,
    fainted: !!p.fainted,
    stats: {...p.storedStats},
    ability: p.ability,
    baseAbility: p.baseAbility,
    item: p.item,
    nature: p.set.nature || '',
    evs: {...(p.set.evs || {})},
    ivs: {...(p.set.ivs || {})},
    moves: p.moveSlots.map((s) => ({id: s.id, pp: s.pp, maxpp: s.maxpp, disabled: !!s.disabled})),
    hpType: p.hpType || '',
    hpPower: p.hpPower || 0,
    status: p.status || '',
    statusState: plain(battle, p.statusState),
    boosts: {...p.boosts},
    volatiles: states(battle, p.volatiles),
    abilityState: plain(battle, p.abilityState),  // Slow Start's turns left ("counter")
    teraType: p.teraType || '',
    terastallized: p.terastallized || '',
    weightkg: p.weighthg / 10,
    activeTurns: p.activeTurns || 0,
    lastMove: p.lastMove ? p.lastMove.id : '',
    active: !!p.isActive,
  };
}

function requestKind(side) {
  const req = side.activeRequest;
  if (!req) return '';
  if (req.wait) return 'wait';
  if (req.forceSwitch) return 'switch';
  return 'move';
}

// What a leaf's turn left, per side: name -> [hp, maxhp, fainted] (the agreement check's; by
// name, which no forme change touches: a species or even a base species changes (Mimikyu's
// Disguise, Eiscue's Ice Face, a Mega)).
function brief(battle) {
  return battle.sides.map((side) => Object.fromEntries(
    side.pokemon.map((p) => [p.name, [p.hp, p.maxhp, !!p.fainted]])));
}

function describe(battle) {
  return {
    gen: battle.gen,
    turn: battle.turn,
    ended: !!battle.ended,
    winner: battle.ended ? (battle.sides.find((s) => s.name === battle.winner) || {id: ''}).id : null,
    sides: battle.sides.map((side) => ({
      id: side.id,
      active: side.active[0] ? side.pokemon.indexOf(side.active[0]) : -1,
      request: requestKind(side),
      pokemonLeft: side.pokemonLeft,
      teraUsed: side.pokemon.every((p) => !p.canTerastallize),
      pokemon: side.pokemon.map((p) => mon(battle, p)),
      conditions: states(battle, side.sideConditions),
      slot: states(battle, side.slotConditions[0]),
    })),
    field: {
      weather: battle.field.weather || '',
      weatherDuration: battle.field.weatherState.duration || 0,
      terrain: battle.field.terrain || '',
      terrainDuration: battle.field.terrainState.duration || 0,
      pseudoWeather: states(battle, battle.field.pseudoWeather),
    },
  };
}

module.exports = {brief, describe};
