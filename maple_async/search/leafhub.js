// Search leaves on Showdown's own simulator: build the sampled battle states of one decision,
// then play one turn of a joint action from a copy of a state, as often as asked.
//
// Newline-delimited JSON both ways; every request carries an "id" its answer repeats.
//   {"id", "op": "build", "decision", "format", "us": "p1"|"p2", "states": [STATE, ...], "describe": bool}
//     -> {"id", "ok": true, "states": [{"request", "ours": [choice...], "theirs": [choice...],
//         "attack": their strongest attack on our active (STRONGEST below), "" where none scores,
//         "snapshot": with "describe", the built battle in plain terms (leafhub/describe.js)}]}
//   {"id", "op": "leaves", "decision", "leaves": [[state index, our choice, their choice, SEED], ...],
//    "keep": bool, "brief": bool}
//     -> {"id", "ok": true, "leaves": [{"lines", "request", "ended", "winner", "value", "kept", "brief"} | {"error"}]}
//        ("kept": with "keep", a live leaf's battle is kept under this number for "next"; "brief":
//        with "brief", each side's species -> [hp, maxhp, fainted] after the turn)
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
//          once-a-battle abilities are spent), "forme": {"species", "permanent": bool} (an active's
//          forme since its switch-in: Stance Change's blade, Disguise's busted)}; the volatile "typechange": {"types": [type, ...],
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
//
// The parts, each a module of ./leafhub/: patch.js (a STATE's patches written into a fresh
// battle: PATCHES, the table of how Showdown's state takes each carried effect), sets.js (our
// spreads fitted, the opponent's sets drawn), play.js (a leaf's turn, STRONGEST), dispatch.js
// (the requests and the decisions they build), sim.js (the Showdown package of argv[2]).
'use strict';
const path = require('path');
const readLines = require(path.join(__dirname, '..', 'stdin_lines.js'));
const {Teams} = require('./leafhub/sim.js');
const {handle} = require('./leafhub/dispatch.js');

readLines((line) => {
  if (line.trim()) process.stdout.write(JSON.stringify(handle(line)) + '\n');
}, () => {});

Teams.getGenerator('gen9randombattle');  // load the data before saying ready
process.stdout.write(JSON.stringify({ready: true}) + '\n');
