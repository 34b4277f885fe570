//! What the module needs to know of Redis Cluster: whether this node may serve a key now
//! (and, when not, the redirect a fresh request would get), and whether a slot of this node
//! is being migrated, where a key and its companion keys may sit on two nodes at once.

use std::os::raw::c_char;
use std::sync::atomic::{AtomicU8, Ordering};

use super::call::CallReply;
use super::server_info::ServerInfo;
use super::{api, Ctx};

/// Where a request for a key is served, as this node sees the cluster now.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// Here: outside cluster mode, a slot this node serves, or one it imports.
    Here,
    /// Elsewhere: the error a fresh write request for the key would get here (`ASK`/`MOVED
    /// <slot> <ip>:<port>`, `CLUSTERDOWN ...`, `TRYAGAIN ...`).
    Elsewhere(String),
}

/// Whether a write for `key` is served by this node now (in the context's database), as
/// Redis routes a fresh request that did not send `ASKING`, except that a slot this node
/// imports counts as here (its waiters came with `ASKING`, and the key lives here).
///
/// The check is Redis's own: a no-op write (`PEXPIREAT key 0 GT`: a time in the past is never
/// greater than a key's expiry, and a key without one counts as infinite) through
/// `RedisModule_Call`, which refuses a key this node would redirect (Redis 7.0+, Valkey); it
/// changes nothing and errs on no type, so it leaves no trace in `INFO errorstats`. Only when refused is
/// `CLUSTER NODES`/`CLUSTER INFO` read to word the redirect. Must not be called while the key
/// is open: the probe may expire it.
pub fn route(ctx: Ctx, key: &[u8]) -> Route {
    if !enabled(ctx) || write_accepted(ctx, key) {
        return Route::Here;
    }
    let nodes = call_text(ctx, c"NODES").unwrap_or_default();
    let info = call_text(ctx, c"INFO").unwrap_or_default();
    match redirect(&nodes, &info, dlock_core::names::key_slot(key)) {
        Some(error) => Route::Elsewhere(error),
        None => Route::Here,
    }
}

/// Whether the server runs in cluster mode (`cluster-enabled` cannot change while it runs:
/// asked once, so that the timer paths outside a cluster pay nothing for the check).
pub fn enabled(ctx: Ctx) -> bool {
    static MODE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 standalone, 2 cluster
    match MODE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let cluster = ctx.in_cluster();
            MODE.store(if cluster { 2 } else { 1 }, Ordering::Relaxed);
            cluster
        }
    }
}

/// `PEXPIREAT key 0 GT` (changes nothing, replicates nothing) is accepted by this node.
fn write_accepted(ctx: Ctx, key: &[u8]) -> bool {
    // SAFETY: a live context of the running callback; name and format are NUL-terminated;
    // "b" takes a pointer and a length (the key, valid for the call), each "c" one C string.
    let reply = unsafe {
        api!(RedisModule_Call)(
            ctx.as_ptr(),
            c"PEXPIREAT".as_ptr(),
            c"bcc".as_ptr(),
            key.as_ptr().cast::<c_char>(),
            key.len(),
            c"0".as_ptr(),
            c"GT".as_ptr(),
        )
    };
    if reply.is_null() {
        return false;
    }
    // SAFETY: the non-null reply of the call above, freed once.
    unsafe { api!(RedisModule_FreeCallReply)(reply) };
    true
}

/// The text reply of `CLUSTER <sub>`, `None` when the call fails.
fn call_text(ctx: Ctx, sub: &std::ffi::CStr) -> Option<String> {
    CallReply::run(ctx, c"CLUSTER", &[sub])?.text()
}

/// Whether this node is migrating `slot` to another node or importing it from one, as its
/// own `CLUSTER NODES` line says. False outside cluster mode, and when the line cannot be
/// read. Costs a `CLUSTER NODES` call: for rare paths only.
pub fn slot_in_migration(ctx: Ctx, slot: u16) -> bool {
    if !enabled(ctx) {
        return false;
    }
    let Some(nodes) = call_text(ctx, c"NODES") else {
        return false;
    };
    Nodes::parse(&nodes).is_some_and(|n| n.myself.moving.iter().any(|m| m.slot == slot))
}

/// A slot this node moves: `[slot->-node]` (migrating to `node`) or `[slot-<-node]`
/// (importing from `node`).
struct Moving<'a> {
    slot: u16,
    migrating: bool,
    node: &'a str,
}

/// One line of `CLUSTER NODES`.
struct Node<'a> {
    id: &'a str,
    /// `ip:port`, as redirects name a node.
    addr: &'a str,
    /// Slot ranges this node serves (a primary's).
    slots: Vec<(u16, u16)>,
    moving: Vec<Moving<'a>>,
}

struct Nodes<'a> {
    myself: Node<'a>,
    others: Vec<Node<'a>>,
}

impl<'a> Node<'a> {
    /// `<id> <ip:port@cport[,hostname...]> <flags> <primary> <ping> <pong> <epoch> <link>
    /// <slot>...`; the flags are returned beside.
    fn parse(line: &'a str) -> Option<(Node<'a>, &'a str)> {
        let fields: Vec<&str> = line.split(' ').collect();
        let (id, addr, flags) = (fields.first()?, fields.get(1)?, fields.get(2)?);
        let addr = addr.split(['@', ',']).next()?;
        let mut slots = Vec::new();
        let mut moving = Vec::new();
        for entry in fields.iter().skip(8) {
            if let Some(inner) = entry.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
                let (split, migrating) = match inner.split_once("->-") {
                    Some(s) => (s, true),
                    None => (inner.split_once("-<-")?, false),
                };
                moving.push(Moving {
                    slot: split.0.parse().ok()?,
                    migrating,
                    node: split.1,
                });
            } else {
                let (lo, hi) = entry.split_once('-').unwrap_or((entry, entry));
                slots.push((lo.parse().ok()?, hi.parse().ok()?));
            }
        }
        let node = Node {
            id,
            addr,
            slots,
            moving,
        };
        Some((node, flags))
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|(lo, hi)| (*lo..=*hi).contains(&slot))
    }
}

impl<'a> Nodes<'a> {
    fn parse(text: &'a str) -> Option<Nodes<'a>> {
        let mut myself = None;
        let mut others = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let (node, flags) = Node::parse(line)?;
            if flags.split(',').any(|f| f == "myself") {
                myself = Some(node);
            } else {
                others.push(node);
            }
        }
        Some(Nodes {
            myself: myself?,
            others,
        })
    }

    fn by_id(&self, id: &str) -> Option<&Node<'a>> {
        std::iter::once(&self.myself)
            .chain(&self.others)
            .find(|n| n.id == id)
    }
}

/// The error a fresh write for a key of `slot` gets on this node when Redis refused it
/// (`nodes`: `CLUSTER NODES`, `info`: `CLUSTER INFO`), in the order Redis checks; `None` when
/// this node imports the slot (its waiters came with `ASKING`: they are served here). Texts
/// as Redis's `clusterRedirectClient`.
fn redirect(nodes: &str, info: &str, slot: u16) -> Option<String> {
    let Some(nodes) = Nodes::parse(nodes) else {
        return Some(TRYAGAIN.into());
    };
    let owner = std::iter::once(&nodes.myself)
        .chain(&nodes.others)
        .find(|n| n.serves(slot));
    let Some(owner) = owner else {
        return Some("CLUSTERDOWN Hash slot not served".into());
    };
    if !info.lines().any(|l| l.trim_end() == "cluster_state:ok") {
        return Some("CLUSTERDOWN The cluster is down".into());
    }
    let moving = nodes.myself.moving.iter().find(|m| m.slot == slot);
    if owner.id == nodes.myself.id {
        // Served here and refused: the key has left for the node it migrates to.
        return Some(match moving.filter(|m| m.migrating) {
            Some(m) => match nodes.by_id(m.node) {
                Some(to) => format!("ASK {slot} {}", to.addr),
                None => TRYAGAIN.into(),
            },
            None => TRYAGAIN.into(),
        });
    }
    if moving.is_some_and(|m| !m.migrating) {
        return None;
    }
    Some(format!("MOVED {slot} {}", owner.addr))
}

/// When the cluster's state could not be read or changed while it was read: try again.
const TRYAGAIN: &str = "TRYAGAIN the cluster is changing, try again";

/// Valkey's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (Valkey 9.0+).
pub const HANDLE_ATOMIC_SLOT_MIGRATION: i32 = 1 << 5;

/// Valkey's `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` and the sub-events that end one.
pub const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;
pub const SUBEVENT_IMPORT_COMPLETED: u64 = 4;
pub const SUBEVENT_EXPORT_COMPLETED: u64 = 5;

/// Whether the server is Valkey 9.0 or newer (atomic slot migration), from `INFO server`.
pub fn server_has_atomic_slot_migration(ctx: Ctx) -> bool {
    let Some(info) = ServerInfo::section(ctx, c"server") else {
        return false;
    };
    let major = info
        .text(c"valkey_version")
        .and_then(|v| v.split('.').next().and_then(|m| m.parse::<u32>().ok()));
    info.text(c"server_name").as_deref() == Some("valkey") && major.is_some_and(|m| m >= 9)
}

#[cfg(test)]
mod tests {
    use super::{redirect, Nodes, TRYAGAIN};

    const NODES: &str = "\
a1 127.0.0.1:7001@17001 master - 0 1 2 connected 8192-16383 [42-<-b2]\n\
b2 127.0.0.1:7000@17000,host myself,master - 0 0 1 connected 0-8191 [42->-a1] [9000-<-a1]\n";
    const OK: &str = "cluster_state:ok\r\ncluster_slots_assigned:16384\r\n";

    #[test]
    fn reads_only_its_own_line() {
        let n = Nodes::parse(NODES).unwrap();
        assert_eq!(n.myself.id, "b2");
        assert_eq!(n.myself.addr, "127.0.0.1:7000");
        let slots: Vec<u16> = n.myself.moving.iter().map(|m| m.slot).collect();
        assert_eq!(slots, [42, 9000]);
        assert!(n.myself.serves(8191) && !n.myself.serves(8192));
        assert!(Nodes::parse(&NODES[..NODES.len() / 2]).is_none());
    }

    #[test]
    fn redirects_as_redis_does() {
        // Migrating away, key gone: ASK the target.
        assert_eq!(
            redirect(NODES, OK, 42).as_deref(),
            Some("ASK 42 127.0.0.1:7001")
        );
        // Another node's slot: MOVED.
        assert_eq!(
            redirect(NODES, OK, 9001).as_deref(),
            Some("MOVED 9001 127.0.0.1:7001")
        );
        // Imported here: served here.
        assert_eq!(redirect(NODES, OK, 9000), None);
        // Down, or a slot nobody serves.
        let down = "cluster_state:fail\r\n";
        assert_eq!(
            redirect(NODES, down, 9000).as_deref(),
            Some("CLUSTERDOWN The cluster is down")
        );
        let partial = NODES.replace("8192-16383", "8192-9999");
        assert_eq!(
            redirect(&partial, OK, 12000).as_deref(),
            Some("CLUSTERDOWN Hash slot not served")
        );
        // Own slot, not migrating, yet refused (changed meanwhile): try again.
        assert_eq!(redirect(NODES, OK, 100).as_deref(), Some(TRYAGAIN));
    }
}
