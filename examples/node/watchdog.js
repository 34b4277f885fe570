// The watchdog both Node examples use: renew every lease / 3 until stopped, and note when a
// renewal answers 0 (the lock expired, was deleted or taken over: stop writing).
//
// `renew` sends `DLOCK.RENEW key owner lease-ms` with the caller's client and resolves to its
// reply; the client library does not matter here.
'use strict';

function watchdog(renew, leaseMs) {
  const dog = { renewals: 0, lost: false };
  const timer = setInterval(async () => {
    if ((await renew()) === 1) dog.renewals += 1;
    else {
      dog.lost = true;
      clearInterval(timer);
    }
  }, leaseMs / 3);
  dog.stop = () => clearInterval(timer);
  return dog;
}

module.exports = { watchdog };
