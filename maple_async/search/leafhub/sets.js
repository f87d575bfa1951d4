// The sets of a state: our side's spreads fitted to the request's stats, and the opponent's
// teams drawn by the format's generator to agree with what it revealed.
'use strict';
const {Teams} = require('./sim.js');
const {BadRequest, need} = require('./errors.js');

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
  if (m.notItems && m.notItems.length) {  // ruled out (a Booster Energy an active one did not use)
    all++;
    if (!m.notItems.includes(dex.items.get(set.item).id)) ok++;
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
  // every draw held the ruled-out item: the Pokémon holds none rather than one it cannot have
  else if (m.notItems && m.notItems.includes(dex.items.get(out.item).id)) out.item = '';
  if (m.ability) out.ability = m.ability;
  if (m.tera) out.teraType = m.tera;
  return out;
}

module.exports = {fitted, sample};
