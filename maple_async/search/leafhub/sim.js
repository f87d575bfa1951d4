// The pokemon-showdown package named on the command line (argv[2]), loaded once.
'use strict';
const path = require('path');

const dir = process.argv[2];
const sim = require(path.join(dir, 'dist', 'sim'));

module.exports = {
  Battle: sim.Battle,
  Dex: sim.Dex,
  PRNG: sim.PRNG,
  Teams: sim.Teams,
  State: require(path.join(dir, 'dist', 'sim', 'state')).State,
  extractChannelMessages: require(path.join(dir, 'dist', 'sim', 'battle')).extractChannelMessages,
};
