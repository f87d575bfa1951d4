// leafhub's requests, one JSON line each, answered in one (leafhub.js's header gives the
// format): the decisions built and kept here, each state's battle serialized.
'use strict';
const {Battle, Dex, State} = require('./sim.js');
const {BadRequest, need, why} = require('./errors.js');
const {patchBattle} = require('./patch.js');
const {fitted, sample} = require('./sets.js');
const {legalChoices, play, strongest} = require('./play.js');
const {describe} = require('./describe.js');

const decisions = new Map();  // decision -> {us, states: [{ser, usIndex}], kept: [{ser, usIndex}]}

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
      const dex = Dex.forFormat(msg.format);
      const battle = new Battle({
        formatid: msg.format, seed: st.seed,
        p1: {name: st.p1.name || 'p1', team: sides[0].placed.map((set) => fitted(dex, set))},
        p2: {name: st.p2.name || 'p2', team: sides[1].placed.map((set) => fitted(dex, set))},
      });
      if (battle.requestState === 'teampreview') battle.makeChoices('default', 'default');
      need(battle.requestState === 'move' && !battle.ended,
        `the battle did not reach a move request (${battle.requestState || 'none'})`);
      patchBattle(battle, st, sides);
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
        ...(msg.describe ? {snapshot: describe(battle)} : {}),
      });
    } catch (err) {
      throw new BadRequest(`state ${k}: ${err.message}`);
    }
  }
  decisions.set(msg.decision, {us: msg.us, states: built, kept: []});
  return {states: answer};
}

function leaf(decision, spec, keep, withBrief) {
  need(Array.isArray(spec) && spec.length === 4, 'a leaf is [state, our choice, their choice, seed]');
  const [k, ours, theirs, seed] = spec;
  const st = decision.states[k];
  need(st, `no state ${k}`);
  need(typeof ours === 'string' && typeof theirs === 'string', 'a leaf names both choices');
  return play(st, ours, theirs, seed, keep ? decision.kept : null, false, withBrief);
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
        return {error: why(err)};
      }
    }),
  };
}

// One request line -> its answer (never throws).
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
    case 'leaves': body = leaves(msg, (d, spec) => leaf(d, spec, msg.keep, !!msg.brief)); break;
    case 'next': body = leaves(msg, (d, spec) => nextLeaf(d, spec, msg.keep)); break;
    case 'sample': body = sample(msg); break;
    case 'drop': decisions.delete(msg.decision); body = {}; break;
    case 'ping': body = {}; break;
    default: throw new BadRequest(`unknown op '${msg.op}'`);
    }
    return {id, ok: true, ms: Number(process.hrtime.bigint() - t0) / 1e6, ...body};
  } catch (err) {
    return {id, ok: false, error: why(err)};
  }
}

module.exports = {handle};
