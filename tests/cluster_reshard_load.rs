//! Reshard under load: worker threads lock and unlock keys of two slots, write a fenced
//! resource and record their sections, while the slots move back and forth between two
//! nodes (classic `SETSLOT` + `MIGRATE`; on Valkey 9 also `CLUSTER MIGRATESLOTS`). The
//! workers follow `MOVED`/`ASK`/`TRYAGAIN` themselves, as a cluster client does.
//! Asserted: no two sections on a key overlap, no fencing token goes back (a stale write
//! would be accepted), every reshard step completes. `DLOCK_LONG=1`: more steps.

use crate::common;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use dlock_testutil::workers::scale;
use dlock_testutil::Cluster;

/// Two slots, a few keys in each (hash tags).
const TAGS: [&str; 2] = ["{reshard-a}", "{reshard-b}"];
const KEYS_PER_TAG: usize = 3;
const WORKERS: usize = 4;

/// A connection per node and the slot map as learnt from redirects.
struct Router {
    ports: Vec<u16>,
    conns: Vec<Connection>,
    owner: HashMap<u16, usize>,
    redirects: u64,
    /// The longest time one request took to reach the node serving its key.
    longest_chase: Duration,
}

impl Router {
    fn new(cl: &Cluster, slots: &[u16]) -> Router {
        Router {
            ports: cl.nodes.iter().map(|n| n.port()).collect(),
            conns: cl.nodes.iter().map(|n| n.connection()).collect(),
            owner: slots.iter().map(|s| (*s, cl.slot_owner(*s))).collect(),
            redirects: 0,
            longest_chase: Duration::ZERO,
        }
    }

    fn node_of(&self, addr: &str) -> usize {
        let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
        self.ports
            .iter()
            .position(|p| *p == port)
            .expect("a node of ours")
    }

    /// Sends `args` (key second) to the node serving the key, following redirects as a
    /// cluster client does: within one deadline, pausing between hops once a request has been
    /// redirected twice. While a slot changes hands, the two nodes can each name the other in
    /// `MOVED` for a moment (Redis 7.0, seen under load: a node's `SETSLOT NODE` and the
    /// other's gossip crossing); a client that gives up after a fixed number of instant hops
    /// fails there, one that waits sees the nodes agree.
    fn send(&mut self, args: &[&str]) -> Reply {
        let slot = key_slot(args[1].as_bytes());
        let mut node = self.owner[&slot];
        let mut asking = false;
        let mut trail = Vec::new();
        let start = std::time::Instant::now();
        loop {
            let c = &mut self.conns[node];
            if asking {
                assert_eq!(cmd(c, &["ASKING"]), Reply::Status("OK".into()));
            }
            let reply = cmd(c, args);
            let Reply::Err(e) = &reply else {
                self.longest_chase = self.longest_chase.max(start.elapsed());
                return reply;
            };
            let words: Vec<&str> = e.split(' ').collect();
            self.redirects += 1;
            trail.push(format!("{} -> {e}", self.ports[node]));
            match words[0] {
                "MOVED" => {
                    node = self.node_of(words[2]);
                    self.owner.insert(slot, node);
                    asking = false;
                }
                "ASK" => {
                    node = self.node_of(words[2]);
                    asking = true;
                }
                "TRYAGAIN" | "CLUSTERDOWN" => {
                    node = self.owner[&slot];
                    asking = false;
                }
                _ => return reply,
            }
            if start.elapsed() > REDIRECT_DEADLINE {
                trail.dedup();
                panic!("{args:?}: still redirected after {REDIRECT_DEADLINE:?}: {trail:?}");
            }
            if trail.len() >= 2 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// How long a request may chase redirects: the nodes agree again well within it.
const REDIRECT_DEADLINE: Duration = Duration::from_secs(10);

/// What the workers share: the keys, who is inside a section, the fenced resource (the last
/// token written per key), what they saw, and the stop flag.
#[derive(Default)]
struct Shared {
    slots: Vec<u16>,
    keys: Vec<String>,
    inside: HashMap<String, AtomicBool>,
    fenced: Mutex<HashMap<String, i64>>,
    sections: AtomicU64,
    overlaps: AtomicU64,
    stale_writes: AtomicU64,
    redirects: AtomicU64,
    longest_chase_us: AtomicU64,
    stop: AtomicBool,
}

/// Stops the workers when the driver ends, also by a panic (else the scope never ends).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn worker(cl: &Cluster, sh: &Shared, id: usize) {
    let (keys, inside, fenced, rec, stop) = (&sh.keys, &sh.inside, &sh.fenced, sh, &sh.stop);
    let mut router = Router::new(cl, &sh.slots);
    let owner = format!("w{id}");
    let mut i = id;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let key = keys[i % keys.len()].as_str();
        let got = router.send(&[
            "DLOCK.ACQUIRE",
            key,
            &owner,
            "10000",
            "WAIT",
            "3000",
            "FENCE",
        ]);
        let token = match &got {
            Reply::Arr(pair) => pair[1].int(),
            Reply::Nil => continue, // waited 3 s: the key is busy, try another
            other => panic!("{owner} on {key}: {other:?}"),
        };
        // The section: nobody else inside; the fenced resource takes only newer tokens.
        if inside[key].swap(true, Ordering::SeqCst) {
            rec.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut last = fenced.lock().unwrap();
            let last = last.entry(key.to_string()).or_insert(0);
            if token <= *last {
                rec.stale_writes.fetch_add(1, Ordering::Relaxed);
            }
            *last = token;
        }
        std::thread::sleep(Duration::from_millis(1));
        inside[key].store(false, Ordering::SeqCst);
        rec.sections.fetch_add(1, Ordering::Relaxed);
        let released = router.send(&["DLOCK.RELEASE", key, &owner]);
        assert_eq!(released, Reply::Int(1), "{owner} releases {key}");
    }
    rec.redirects.fetch_add(router.redirects, Ordering::Relaxed);
    rec.longest_chase_us
        .fetch_max(router.longest_chase.as_micros() as u64, Ordering::Relaxed);
}

/// One reshard step: `slot` goes from its owner to the other node.
fn move_slot(cl: &Cluster, slot: u16, atomic: bool) {
    let from = cl.slot_owner(slot);
    let to = 1 - from;
    if atomic {
        cl.migrate_slot_atomically(slot, from, to)
            .unwrap_or_else(|e| panic!("MIGRATESLOTS {slot}: {e}"));
    } else {
        cl.move_slot(slot, from, to);
    }
    // Both nodes agree before the next step.
    for n in 0..2 {
        wait_for(Duration::from_secs(10), "slot owner agreed", || {
            (cl.slot_owner_seen_by(n, slot) == to).then_some(())
        });
    }
}

#[test]
fn locks_stay_exclusive_while_slots_move_back_and_forth() {
    let v = dlock_testutil::server_version();
    let atomic = v.flavor == dlock_testutil::Flavor::Valkey && v.major >= 9;
    let cl = Cluster::start(2);
    let keys: Vec<String> = TAGS
        .iter()
        .flat_map(|t| (0..KEYS_PER_TAG).map(move |i| format!("{t}:{i}")))
        .collect();
    let rec = Shared {
        slots: TAGS.iter().map(|t| key_slot(t.as_bytes())).collect(),
        inside: keys
            .iter()
            .map(|k| (k.clone(), AtomicBool::new(false)))
            .collect(),
        keys,
        ..Shared::default()
    };
    let steps = scale(6, 40);
    let done = std::thread::scope(|s| {
        let stop = StopOnDrop(&rec.stop);
        let workers: Vec<_> = (0..WORKERS)
            .map(|id| {
                let (cl, rec) = (&cl, &rec);
                s.spawn(move || worker(cl, rec, id))
            })
            .collect();
        let mut done = 0;
        for step in 0..steps {
            // Let the workers run a little between steps.
            let before = rec.sections.load(Ordering::Relaxed);
            wait_for(Duration::from_secs(20), "sections between steps", || {
                (rec.sections.load(Ordering::Relaxed) >= before + 10).then_some(())
            });
            move_slot(
                &cl,
                rec.slots[step % rec.slots.len()],
                atomic && step % 2 == 1,
            );
            done += 1;
        }
        drop(stop);
        for w in workers {
            w.join().expect("worker");
        }
        done
    });
    let sections = rec.sections.load(Ordering::Relaxed);
    println!(
        "{v}: {steps} reshard steps ({}), {sections} sections, {} redirects followed \
         (longest chase {:.1} ms), {} overlapping sections, {} stale fenced writes",
        if atomic {
            "classic and atomic"
        } else {
            "classic"
        },
        rec.redirects.load(Ordering::Relaxed),
        rec.longest_chase_us.load(Ordering::Relaxed) as f64 / 1000.0,
        rec.overlaps.load(Ordering::Relaxed),
        rec.stale_writes.load(Ordering::Relaxed),
    );
    assert_eq!(done, steps, "every reshard step completed");
    assert_eq!(
        rec.overlaps.load(Ordering::Relaxed),
        0,
        "overlapping sections"
    );
    assert_eq!(
        rec.stale_writes.load(Ordering::Relaxed),
        0,
        "stale fenced writes"
    );
    assert!(
        rec.redirects.load(Ordering::Relaxed) > 0,
        "the keys did move under the workers"
    );
}
