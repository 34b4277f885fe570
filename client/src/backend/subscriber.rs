//! The script backend's unlock-channel subscriptions: one pub/sub connection per node
//! (the node serving the lock's key), shared by every waiter (like Redisson's `LockPubSub`). Each `0` message on a channel
//! wakes one waiter of that channel (a semaphore permit, as Redisson's latch).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::Semaphore;

use super::lua;

#[derive(Default)]
pub(crate) struct Subscribers {
    /// By node address.
    conns: Arc<tokio::sync::Mutex<HashMap<String, Arc<SubConn>>>>,
    /// The reader task of each pub/sub connection (aborting it ends the connection).
    readers: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    /// The client was closed: no new subscription.
    closed: AtomicBool,
}

struct SubConn {
    sink: PubSubSink,
    channels: Mutex<HashMap<String, ChanEntry>>,
    alive: AtomicBool,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE so they reach the server in bookkeeping order.
    op: tokio::sync::Mutex<()>,
}

struct ChanEntry {
    refs: usize,
    sem: Arc<Semaphore>,
}

/// A waiter's subscription to one unlock channel; unsubscribes (in the background) on drop.
pub(crate) struct Subscription {
    conn: Arc<SubConn>,
    channel: String,
    sem: Arc<Semaphore>,
    rt: tokio::runtime::Handle,
}

impl Subscription {
    /// Wait for an unlock message (one permit).
    pub(crate) async fn notified(&self) {
        match self.sem.acquire().await {
            Ok(p) => p.forget(),
            // The pub/sub connection died: fall back to polling.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let conn = self.conn.clone();
        let channel = std::mem::take(&mut self.channel);
        self.rt.spawn(async move {
            let _op = conn.op.lock().await;
            let last = {
                let mut ch = conn.channels.lock().unwrap();
                match ch.get_mut(&channel) {
                    Some(e) => {
                        e.refs -= 1;
                        if e.refs == 0 {
                            ch.remove(&channel);
                            true
                        } else {
                            false
                        }
                    }
                    None => false,
                }
            };
            if last && conn.alive.load(Ordering::Acquire) {
                let _ = conn.sink.clone().unsubscribe(&channel).await;
            }
        });
    }
}

impl Subscribers {
    /// The client is closing: end every pub/sub connection (their waiters are ended by the
    /// close itself) and refuse new subscriptions.
    pub(crate) fn close(&self, rt: &tokio::runtime::Handle) {
        self.closed.store(true, Ordering::Release);
        let (conns, readers) = (self.conns.clone(), self.readers.clone());
        let end = move |conns: &mut HashMap<String, Arc<SubConn>>| {
            for r in readers.lock().unwrap().drain(..) {
                r.abort();
            }
            for c in conns.values() {
                c.alive.store(false, Ordering::Release);
            }
            // The last handle of a connection's sink goes: the connection closes.
            conns.clear();
        };
        match self.conns.try_lock() {
            Ok(mut g) => end(&mut g),
            // A subscribe in progress holds the map (it may still add a connection, or be
            // cancelled by the close): end everything once it is done.
            Err(_) => {
                rt.spawn(async move { end(&mut *conns.lock().await) });
            }
        }
    }

    /// Subscribe to `channel` and return once the server confirmed it. `None` when pub/sub
    /// is unavailable (the caller then polls).
    pub(crate) async fn subscribe(
        &self,
        client: &redis::Client,
        channel: &str,
        rt: &tokio::runtime::Handle,
    ) -> Option<Subscription> {
        let sc = {
            let addr = client.get_connection_info().addr.to_string();
            let mut g = self.conns.lock().await;
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            match g.get(&addr) {
                Some(c) if c.alive.load(Ordering::Acquire) => c.clone(),
                _ => {
                    let ps =
                        tokio::time::timeout(Duration::from_secs(5), client.get_async_pubsub())
                            .await
                            .ok()?
                            .ok()?;
                    let (sink, stream) = ps.split();
                    let c = Arc::new(SubConn {
                        sink,
                        channels: Mutex::new(HashMap::new()),
                        alive: AtomicBool::new(true),
                        op: tokio::sync::Mutex::new(()),
                    });
                    let reader = c.clone();
                    let task = rt.spawn(async move {
                        let mut stream = stream;
                        while let Some(msg) = stream.next().await {
                            let payload: String = msg.get_payload().unwrap_or_default();
                            if payload == lua::UNLOCK_MESSAGE {
                                let ch = reader.channels.lock().unwrap();
                                if let Some(e) = ch.get(msg.get_channel_name()) {
                                    e.sem.add_permits(1);
                                }
                            }
                        }
                        // Connection gone: messages may have been missed; wake everyone
                        // into polling mode.
                        reader.alive.store(false, Ordering::Release);
                        for e in reader.channels.lock().unwrap().values() {
                            e.sem.close();
                        }
                    });
                    self.readers.lock().unwrap().push(task.abort_handle());
                    g.insert(addr, c.clone());
                    c
                }
            }
        };
        let _op = sc.op.lock().await;
        let sem = {
            let mut ch = sc.channels.lock().unwrap();
            let e = ch.entry(channel.to_string()).or_insert_with(|| ChanEntry {
                refs: 0,
                sem: Arc::new(Semaphore::new(0)),
            });
            e.refs += 1;
            e.sem.clone()
        };
        let sub = Subscription {
            conn: sc.clone(),
            channel: channel.to_string(),
            sem,
            rt: rt.clone(),
        };
        match tokio::time::timeout(Duration::from_secs(5), sc.sink.clone().subscribe(channel)).await
        {
            Ok(Ok(())) => Some(sub),
            _ => {
                sc.alive.store(false, Ordering::Release);
                drop(_op);
                drop(sub);
                None
            }
        }
    }
}
