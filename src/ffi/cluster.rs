//! What the module needs to know of Redis Cluster: whether a slot of this node is being
//! migrated, where a key and its companion keys may sit on two nodes at once.

use std::os::raw::c_char;

use super::{api, Ctx};

/// Whether this node is migrating `slot` to another node or importing it from one, as its
/// own `CLUSTER NODES` line says (`[slot->-node]`, `[slot-<-node]`). False outside cluster
/// mode, and when the line cannot be read. Costs a `CLUSTER NODES` call: for rare paths only.
pub fn slot_in_migration(ctx: Ctx, slot: u16) -> bool {
    if !ctx.in_cluster() {
        return false;
    }
    // SAFETY: a live context of the running callback; command name and format are
    // NUL-terminated, and the "c" format takes exactly one C string argument, given.
    let reply = unsafe {
        api!(RedisModule_Call)(
            ctx.as_ptr(),
            c"CLUSTER".as_ptr(),
            c"c".as_ptr(),
            c"NODES".as_ptr(),
        )
    };
    if reply.is_null() {
        return false;
    }
    let mut len: usize = 0;
    // SAFETY: `reply` is the non-null reply of the call above; the pointer it returns is
    // valid for `len` bytes until the reply is freed, which happens after the last use.
    let migrating = unsafe {
        let ptr: *const c_char = api!(RedisModule_CallReplyStringPtr)(reply, &mut len);
        let found = !ptr.is_null()
            && own_line_migrates(std::slice::from_raw_parts(ptr.cast::<u8>(), len), slot);
        api!(RedisModule_FreeCallReply)(reply);
        found
    };
    migrating
}

/// `CLUSTER NODES` text: the `myself` line lists `slot` as migrating or importing.
fn own_line_migrates(nodes: &[u8], slot: u16) -> bool {
    let text = String::from_utf8_lossy(nodes);
    let Some(own) = text.lines().find(|line| {
        line.split(' ')
            .nth(2)
            .is_some_and(|f| f.split(',').any(|f| f == "myself"))
    }) else {
        return false;
    };
    own.split(' ').skip(8).any(|entry| {
        let Some(inner) = entry.strip_prefix('[').and_then(|e| e.strip_suffix(']')) else {
            return false;
        };
        let number = inner.split_once("->-").or_else(|| inner.split_once("-<-"));
        number.and_then(|(n, _)| n.parse::<u16>().ok()) == Some(slot)
    })
}

#[cfg(test)]
mod tests {
    use super::own_line_migrates;

    const NODES: &[u8] = b"\
a1 127.0.0.1:7001@17001 master - 0 1 2 connected 8192-16383 [42-<-b2]\n\
b2 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-8191 [42->-a1] [7-<-a1]\n";

    #[test]
    fn reads_only_its_own_line() {
        assert!(own_line_migrates(NODES, 42));
        assert!(own_line_migrates(NODES, 7));
        assert!(!own_line_migrates(NODES, 8191));
        assert!(!own_line_migrates(&NODES[..NODES.len() / 2], 42));
    }
}
