// A leaf: one turn of a built state's copy from both sides' choices; and STRONGEST, the reply
// model of the later turns (leafhub.js's header says what both answer).
'use strict';
const {PRNG, State, extractChannelMessages} = require('./sim.js');
const {BadRequest, need} = require('./errors.js');
const {brief} = require('./describe.js');

const MAX_MIDTURN = 12;  // mid-turn requests answered within one leaf before it gives up

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
function play(st, ours, theirs, seed, kept, fallback = false, withBrief = false) {
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
  if (withBrief) out.brief = brief(battle);
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

module.exports = {WAIT, legalChoices, play, strongest};
