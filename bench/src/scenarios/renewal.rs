//! Scenario 4, renewal: one watchdog round over 1 000 or 10 000 held locks.

use std::time::Instant;

use crate::report::Report;
use crate::resp::{encode, RawConn};
use crate::stats;
use crate::{Backend, Ctx};

use super::{ms, rotate};

pub async fn renewal(ctx: &Ctx, rep: &mut Report) {
    let backends = [Backend::Native, Backend::Lua, Backend::SetNx, Backend::Raw];
    for n in [1_000usize, 10_000] {
        let sc = format!("renew-{n}");
        eprintln!(
            "scenario {sc}: one client holds {n} locks, one pipelined watchdog round, {} reps",
            ctx.cfg.renew_reps
        );
        let mut sets = vec![];
        for (i, b) in backends.iter().copied().enumerate() {
            let owner = ctx.owner(300 + i);
            let mut acq = vec![];
            let mut acq_exp = vec![];
            let mut ren = vec![];
            let mut ren_exp = vec![];
            for k in 0..n {
                let key = format!("bench:renew:{}:{n}:{k}", b.name());
                let hold = ctx.sha.hold(b, &key, &owner, 300_000);
                let (a, ea) = hold.acquire();
                acq.extend(a);
                acq_exp.extend(ea);
                let (r, er) = hold.renew();
                ren.extend(r);
                ren_exp.extend(er);
            }
            let mut conn = RawConn::connect(ctx.port(b)).await.expect("connect");
            conn.send(&acq).await.unwrap();
            let mut fb = None;
            let bad = conn.expect(&acq_exp, &mut fb).await.unwrap();
            assert_eq!(bad, 0, "{sc} {} set-up: {fb:?}", b.name());
            sets.push((b, conn, ren, ren_exp));
        }
        for r in 0..ctx.cfg.renew_reps {
            let order: Vec<usize> = rotate(&(0..sets.len()).collect::<Vec<_>>(), r);
            for i in order {
                let (b, conn, ren, exp) = &mut sets[i];
                let mut ctrl = ctx.ctrl(*b).await;
                let cpu0 = stats::begin(&mut ctrl).await;
                let t = Instant::now();
                conn.send(ren).await.unwrap();
                let mut fb = None;
                let bad = conn.expect(exp, &mut fb).await.unwrap();
                let el = t.elapsed();
                let view = stats::end(&mut ctrl, cpu0).await;
                if bad > 0 {
                    rep.fails
                        .push(format!("{sc} {}: {bad} renewals failed ({fb:?})", b.name()));
                }
                rep.add(&sc, b.name(), "round_ms", ms(el));
                let top = match b {
                    Backend::Native | Backend::NativeBind | Backend::NativeClient => "dlock.renew",
                    Backend::Lua | Backend::SetNx => "evalsha",
                    Backend::Raw => "pexpire",
                };
                rep.add(
                    &sc,
                    b.name(),
                    "srv_us/renew",
                    view.usec(top) as f64 / n as f64,
                );
                rep.add(&sc, b.name(), "srv_cpu_ms", view.cpu * 1e3);
            }
        }
        let t = rep.ratio(&sc, &sc, "round_ms", "native", "lua");
        rep.ratio(
            &format!("{sc}-server-time"),
            &sc,
            "srv_us/renew",
            "native",
            "lua",
        );
        rep.ratio(
            &format!("{sc}-server-cpu"),
            &sc,
            "srv_cpu_ms",
            "native",
            "lua",
        );
        rep.ratio(&sc, &sc, "round_ms", "native", "raw");
        if n == 10_000 {
            rep.target(
                &format!("{sc} time native/lua"),
                "<= 0.333",
                t,
                t <= 1.0 / 3.0,
            );
        }
    }
    for b in [Backend::Native, Backend::Lua] {
        let mut c = ctx.ctrl(b).await;
        c.call(&encode(&[b"FLUSHALL"])).await.unwrap();
    }
}
