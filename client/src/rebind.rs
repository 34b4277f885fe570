//! What a closed shared connection means for bound holds (`BIND`, native backend): the
//! server cuts their lease to the bind grace from the close, so until the watchdog's
//! renewal on the new connection rebinds them, the client counts them as ending then.

use tokio::time::Instant;

use crate::backend::ActiveBackend;
use crate::shared::Inner;

/// The shared connection closed just now: every watched hold (the bound ones) may end a
/// bind grace from the close. Counted from when the client noticed, which is after the
/// server did: three quarters of the grace, to stay on the safe side. The watchdog renews
/// (and rebinds) right after this, which moves the deadlines again.
pub(crate) fn connection_closed(inner: &Inner, backend: &ActiveBackend) {
    let Some(grace) = backend.bind_grace() else {
        return;
    };
    let ends = Instant::now() + grace.mul_f64(0.75);
    for e in inner.registry.watched() {
        e.cap_deadline(ends);
    }
}
