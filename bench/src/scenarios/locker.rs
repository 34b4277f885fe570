//! A lock worker for the contended scenarios (hot lock, hand-off): one connection or client
//! that takes a lock, bumps a counter while holding it and releases it, for any backend.

use std::time::Duration;

use dlock_client::{Client, Lock, LockGuard};
use redis::aio::ConnectionManager;

use crate::resp::{encode, RawConn, Reply};
use crate::{Backend, Ctx};

use super::LEASE;

pub(super) enum Locker {
    /// `native` (ACQUIRE ... WAIT 0: the server queues and grants) or `setnx` (retry + sleep).
    Raw {
        conn: RawConn,
        acq: Vec<u8>,
        granted: Reply,
        rel: Vec<u8>,
        poll: bool,
        counter_get: Vec<u8>,
        counter: String,
    },
    /// `dlock-client`: `lua` (script backend) or `native-client`.
    Client {
        _client: Client,
        lock: Lock,
        // Boxed: the client's types make this variant much larger than `Raw`.
        conn: Box<ConnectionManager>,
        guard: Option<LockGuard>,
        counter: String,
    },
}

impl Locker {
    pub(super) async fn new(
        ctx: &Ctx,
        b: Backend,
        key: &str,
        counter: &str,
        owner: usize,
    ) -> Locker {
        match b {
            Backend::Native | Backend::SetNx => {
                let owner = ctx.owner(owner);
                let lease = LEASE.to_string();
                let (acq, granted) = if b == Backend::Native {
                    (
                        encode(&[
                            b"DLOCK.ACQUIRE",
                            key.as_bytes(),
                            owner.as_bytes(),
                            lease.as_bytes(),
                            b"WAIT",
                            b"0",
                        ]),
                        Reply::Int(1),
                    )
                } else {
                    let (a, mut e) = ctx.sha.hold(b, key, &owner, LEASE).acquire();
                    (a, e.remove(0))
                };
                Locker::Raw {
                    conn: RawConn::connect(ctx.port(b)).await.expect("connect"),
                    acq,
                    granted,
                    rel: ctx.sha.hold(b, key, &owner, LEASE).release().0,
                    poll: b == Backend::SetNx,
                    counter_get: encode(&[b"GET", counter.as_bytes()]),
                    counter: counter.to_string(),
                }
            }
            Backend::Lua | Backend::NativeClient => {
                let client = Client::builder(ctx.url(b))
                    .backend(if b == Backend::Lua {
                        dlock_client::Backend::Script
                    } else {
                        dlock_client::Backend::Native
                    })
                    .build()
                    .await
                    .expect("dlock client");
                Locker::Client {
                    lock: client.lock(key),
                    conn: Box::new(client.connection().expect("client open")),
                    _client: client,
                    guard: None,
                    counter: counter.to_string(),
                }
            }
            Backend::Raw | Backend::NativeBind => {
                unreachable!("only the uncontended cycles use {b:?}")
            }
        }
    }

    /// Waits until granted.
    pub(super) async fn acquire(&mut self) -> Result<(), String> {
        match self {
            Locker::Raw {
                conn,
                acq,
                granted,
                poll,
                ..
            } => loop {
                let r = conn.call(acq).await.map_err(|e| e.to_string())?;
                if &r == granted {
                    return Ok(());
                }
                if *poll && r == Reply::Nil {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                return Err(format!("acquire answered {r:?}"));
            },
            Locker::Client { lock, guard, .. } => {
                match lock
                    .try_acquire_for(Duration::from_secs(60), Some(Duration::from_millis(LEASE)))
                    .await
                {
                    Ok(Some(g)) => {
                        *guard = Some(g);
                        Ok(())
                    }
                    Ok(None) => Err("not granted within 60 s".into()),
                    Err(e) => Err(e.to_string()),
                }
            }
        }
    }

    pub(super) async fn release(&mut self) -> Result<(), String> {
        match self {
            Locker::Raw { conn, rel, .. } => match conn.call(rel).await {
                Ok(Reply::Int(1)) => Ok(()),
                other => Err(format!("release answered {other:?}")),
            },
            Locker::Client { guard, .. } => match guard.take().expect("held").release().await {
                Ok(()) => Ok(()),
                other => Err(format!("release answered {other:?}")),
            },
        }
    }

    /// GET the counter, SET it to +1 (two round trips: a lost exclusion shows as a lost update).
    pub(super) async fn bump(&mut self) -> Result<(), String> {
        match self {
            Locker::Raw {
                conn,
                counter_get,
                counter,
                ..
            } => {
                let v = conn.call(counter_get).await.map_err(|e| e.to_string())?;
                let n = v.as_i64().unwrap_or(0) + 1;
                let set = encode(&[b"SET", counter.as_bytes(), n.to_string().as_bytes()]);
                match conn.call(&set).await {
                    Ok(Reply::Status(_)) => Ok(()),
                    other => Err(format!("SET answered {other:?}")),
                }
            }
            Locker::Client { conn, counter, .. } => {
                let conn = &mut **conn;
                let v: Option<i64> = redis::cmd("GET")
                    .arg(&*counter)
                    .query_async(conn)
                    .await
                    .map_err(|e| e.to_string())?;
                redis::cmd("SET")
                    .arg(&*counter)
                    .arg(v.unwrap_or(0) + 1)
                    .query_async::<()>(conn)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }
}
