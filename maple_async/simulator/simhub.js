// Many Showdown battles in one Node process, driven by maple-async through pipes.
//
// stdin, one command per line:   S <tag> <json>          start a battle (format, seed, p1, p2, ots)
//                                C <tag> <p1|p2> <choice>  a player's choice ("move 1", "team 1234")
//                                F <tag> <p1|p2>          that player forfeits
//                                X <tag>                  drop the battle without a result
//                                P                        ping (answered with P)
// stdout, records ended by \x1e:  M<1|2><text>  what the server would send that player (">tag\n...")
//                                E<tag>        the battle ended and is gone
//                                K<tag>\t<why> the simulator threw: the battle is gone
//                                R             ready
//                                P             the answer to a ping
// argv[2]: the pokemon-showdown package directory. Exits when stdin closes (the parent died).
'use strict';
const path = require('path');
const readLines = require(path.join(__dirname, '..', 'stdin_lines.js'));
const sim = require(path.join(process.argv[2], 'dist', 'sim'));
const {Battle, Teams} = sim;
const {extractChannelMessages} = require(path.join(process.argv[2], 'dist', 'sim', 'battle'));

const RS = '\x1e';
const FLUSH_RECORDS = 16;
const battles = new Map();
let out = [];
let flushing = false;
let draining = false;

function emit(record) {
  out.push(record);
  if (!flushing) {
    flushing = true;
    setImmediate(flush);
  }
}

function flush() {
  flushing = false;
  if (!out.length) return;
  const data = out.join(RS) + RS;
  out = [];
  // A full pipe: stop reading commands until the parent has read (bounded both ways).
  if (!process.stdout.write(data) && !draining) {
    draining = true;
    process.stdin.pause();
    process.stdout.once('drain', () => {
      draining = false;
      process.stdin.resume();
    });
  }
}

class Game {
  constructor(tag, opts) {
    this.tag = tag;
    this.header = `>${tag}\n`;
    this.rqid = [0, 0];
    this.first = [true, true];
    this.names = [opts.p1.name, opts.p2.name];
    this.battle = new Battle({formatid: opts.format, seed: opts.seed, send: (t, d) => this.send(t, d)});
  }

  deliver(i, body) {
    let text = this.header;
    if (this.first[i]) {  // what a room sends a player who joins it
      this.first[i] = false;
      text += `|init|battle\n|title|${this.names[0]} vs. ${this.names[1]}\n`;
    }
    emit(`M${i + 1}${text}${body}`);
  }

  send(type, data) {
    if (type === 'update') {
      const lines = Array.isArray(data) ? data.join('\n') : data;
      const ch = extractChannelMessages(lines, [1, 2]);
      this.deliver(0, ch[1].join('\n'));
      this.deliver(1, ch[2].join('\n'));
    } else if (type === 'sideupdate') {
      const nl = data.indexOf('\n');
      const i = data.charCodeAt(1) - 49;  // "p1" -> 0
      let body = data.slice(nl + 1);
      if (body.startsWith('|request|{')) {  // the server numbers each side's requests
        this.rqid[i] += 1;
        body = `|request|{"rqid":${this.rqid[i]},` + body.slice(10);
      }
      this.deliver(i, body);
    } else if (type === 'end') {
      this.ended = true;
    }
  }
}

function start(tag, json) {
  const opts = JSON.parse(json);
  const game = new Game(tag, opts);
  battles.set(tag, game);
  const b = game.battle;
  b.setPlayer('p1', opts.p1);
  b.setPlayer('p2', opts.p2);
  b.sendUpdates();
  if (opts.ots === 'show') {
    b.showOpenTeamSheets();
    b.sendUpdates();
  } else if (opts.ots) {  // the name of the player who rejected them, to both sides
    for (const i of [0, 1]) game.deliver(i, `${opts.ots} rejected open team sheets.`);
  }
  return game;
}

function handle(line) {
  const kind = line[0];
  if (kind === 'P') {  // a ping: alive and reading
    emit('P');
    return;
  }
  const a = line.indexOf(' ', 2);
  const tag = a < 0 ? line.slice(2) : line.slice(2, a);
  let game = battles.get(tag);
  try {
    if (kind === 'S') {
      game = start(tag, line.slice(a + 1));
    } else if (!game) {
      return;  // a choice for a battle already over
    } else if (kind === 'C') {
      const side = line.slice(a + 1, a + 3);
      const choice = line.slice(a + 4);
      if (choice === 'undo') game.battle.undoChoice(side);
      else game.battle.choose(side, choice);
      game.battle.sendUpdates();
    } else if (kind === 'F') {
      game.battle.lose(line.slice(a + 1, a + 3));
      game.battle.sendUpdates();
    } else if (kind === 'X') {
      battles.delete(tag);
      return;
    }
  } catch (err) {
    battles.delete(tag);
    emit(`K${tag}\t${String(err && err.stack || err).split('\n').slice(0, 3).join(' | ')}`);
    return;
  }
  if (game && game.ended) {
    battles.delete(tag);
    emit(`E${tag}`);
  }
}

readLines((line) => {
  if (line) handle(line);
  // A long chunk of choices takes tens of ms: hand each few turns back as they are
  // played, so this process and the parent work at the same time, not in waves.
  if (out.length >= FLUSH_RECORDS) flush();
}, flush);

// Load the data before saying ready, so the first battles do not pay for it.
Teams.getGenerator('gen9randombattle');
emit('R');
