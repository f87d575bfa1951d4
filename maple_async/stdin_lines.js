// The stdin side of maple-async's Node processes (simulator/simhub.js, search/leafhub.js): each line
// read goes to onLine; stdin's end means the parent died; a closed stdout ends the process.
'use strict';

module.exports = function readLines(onLine, onEnd) {
  let pending = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (chunk) => {
    const lines = (pending + chunk).split('\n');
    pending = lines.pop();
    for (const line of lines) onLine(line);
  });
  process.stdin.on('end', () => { onEnd(); process.exit(0); });
  process.stdout.on('error', () => process.exit(0));
};
