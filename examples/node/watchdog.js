// The watchdog both Node examples use: renew every lease / 3 until stopped, and note when the
// lock is lost: a renewal answers 0 (the lock expired, was deleted or taken over), or no
// renewal got through before the lease ran out (the server died or hangs: a renewal that
// never answers, or fails, must not leave `lost` false). Either way: stop writing.
//
// `renew` sends `DLOCK.RENEW key owner lease-ms` with the caller's client and resolves to its
// reply; the client library does not matter here.
'use strict';

function watchdog(renew, leaseMs) {
  const dog = { renewals: 0, lost: false };
  let deadline = Date.now() + leaseMs; // the lease runs from the grant
  let nextRenewal = Date.now() + leaseMs / 3;
  let inFlight = false;
  let stopped = false;
  const lose = () => {
    dog.lost = true;
    clearInterval(timer);
  };
  // Ticks often enough to notice the deadline within a tenth of the lease.
  const timer = setInterval(async () => {
    if (Date.now() >= deadline) return lose(); // no renewal got through in time
    if (inFlight || Date.now() < nextRenewal) return;
    inFlight = true;
    const sent = Date.now();
    try {
      const reply = await renew();
      if (stopped || dog.lost) return;
      if (reply === 1) {
        deadline = sent + leaseMs; // the server renewed at `sent` or later
        nextRenewal = sent + leaseMs / 3;
        dog.renewals += 1;
      } else {
        lose();
      }
    } catch (err) {
      // Not reached (reconnecting, reset): try again soon; the deadline decides.
      nextRenewal = Date.now() + leaseMs / 10;
    } finally {
      inFlight = false;
    }
  }, leaseMs / 10);
  dog.stop = () => {
    stopped = true;
    clearInterval(timer);
  };
  return dog;
}

module.exports = { watchdog };
