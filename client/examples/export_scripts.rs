//! Prints the script backend's Lua texts as one JSON object (`name -> full script text`, plus
//! the unlock message, the default channel prefix and the module's argument limits): the
//! copies the Python and Node packages ship are this output (`make scripts` writes them,
//! `client/tests/script_copies.rs` fails when one differs; both read the list of copies in
//! `client/script-copies.txt`), so the scripts are written once, in `dlock_client::scripts`.
//!
//! `cargo run -q -p dlock-client --example export_scripts`

use dlock_client::scripts as lua;
use dlock_core::limits;

/// The exported document (shared with `tests/script_copies.rs`).
pub fn document() -> serde_json::Value {
    serde_json::json!({
        "about": "Generated from dlock_client::scripts by `make scripts`; do not edit.",
        "unlock_message": lua::UNLOCK_MESSAGE,
        "default_channel_prefix": lua::DEFAULT_CHANNEL_PREFIX,
        "lock": lua::LOCK,
        "unlock": lua::UNLOCK,
        "renew": lua::RENEW,
        "force_unlock": lua::FORCE_UNLOCK,
        "rw_lock": lua::rw_lock_script(lua::RW_LOCK_BODY),
        "rw_unlock": lua::rw_lock_script(lua::RW_UNLOCK_BODY),
        "rw_renew": lua::rw_lock_script(lua::RW_RENEW_BODY),
        "sem_acquire": lua::semaphore_script(lua::SEMAPHORE_ACQUIRE_BODY),
        "sem_release": lua::semaphore_script(lua::SEMAPHORE_RELEASE_BODY),
        "sem_renew": lua::semaphore_script(lua::SEMAPHORE_RENEW_BODY),
        // The module's argument limits, so a client refuses a bad value where the lock is made.
        "limits": {
            "max_ms": limits::MAX_MS,
            "max_lock_delay_ms": limits::MAX_LOCK_DELAY_MS,
            "max_capacity": limits::MAX_CAPACITY,
        },
    })
}

/// The exact text of a copy: pretty JSON and a final newline.
pub fn text() -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(&document()).expect("JSON of strings")
    )
}

#[allow(dead_code)] // the test includes this file for `text()` only
fn main() {
    print!("{}", text());
}
