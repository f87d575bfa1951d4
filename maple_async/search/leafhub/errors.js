// A request leafhub cannot serve: answered {"ok": false, "error": its message}; the process goes on.
'use strict';

class BadRequest extends Error {}

function need(cond, why) {
  if (!cond) throw new BadRequest(why);
}

// An error's words for an answer: a bad request's message, else the first lines of its stack.
function why(err) {
  return err instanceof BadRequest ? err.message : String(err && err.stack || err).split('\n').slice(0, 3).join(' | ');
}

module.exports = {BadRequest, need, why};
