//! Prints the script backend's Lua texts as one JSON object (`name -> full script text`, plus
//! the unlock message and the default channel prefix): the copies the Python and Node
//! packages ship are this output (`make scripts` writes them, `client/tests/script_copies.rs`
//! fails when one differs), so the scripts are written once, in `dlock_client::scripts`.
//!
//! `cargo run -q -p dlock-client --example export_scripts`

use dlock_client::scripts as lua;

fn main() {
    let doc = serde_json::json!({
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
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&doc).expect("JSON of strings")
    );
}
