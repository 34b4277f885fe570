//! Module timers (`RedisModule_CreateTimer`), typed by the job they carry: the layer above
//! defines its job type and what firing it does; this file only boxes and unboxes it.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::os::raw::c_int;

use redis_module::raw;

use super::{api, Ctx};

/// What a timer does when it fires.
pub trait TimerJob: Sized + Send + 'static {
    fn fire(self, ctx: Ctx);
}

/// A timer armed with a job of type `J`.
pub struct TimerId<J> {
    id: raw::RedisModuleTimerID,
    job: PhantomData<fn() -> J>,
}

impl<J> Clone for TimerId<J> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<J> Copy for TimerId<J> {}
impl<J> PartialEq for TimerId<J> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl<J> std::fmt::Debug for TimerId<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TimerId({})", self.id)
    }
}

/// Arms a one-shot timer that runs `job.fire(ctx)` after `delay_ms` (0: the next event-loop
/// turn).
pub fn start<J: TimerJob>(ctx: Ctx, delay_ms: i64, job: J) -> TimerId<J> {
    let data = Box::into_raw(Box::new(job)).cast::<c_void>();
    // SAFETY: a live context; Redis owns `data` until it passes it to `fire::<J>` or gives it
    // back through `stop`.
    let id = unsafe {
        api!(RedisModule_CreateTimer)(ctx.as_ptr(), delay_ms.max(0), Some(fire::<J>), data)
    };
    TimerId {
        id,
        job: PhantomData,
    }
}

/// Stops a timer that has not fired yet and returns its job (`None`: it already fired).
pub fn stop<J: TimerJob>(ctx: Ctx, timer: TimerId<J>) -> Option<J> {
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live context; Redis writes the timer's data pointer on success.
    let ok = unsafe { api!(RedisModule_StopTimer)(ctx.as_ptr(), timer.id, &mut data) };
    if ok != raw::REDISMODULE_OK as c_int || data.is_null() {
        return None;
    }
    // SAFETY: the data of a `TimerId<J>` is a boxed `J` (see `start`), handed back once.
    Some(*unsafe { Box::from_raw(data.cast::<J>()) })
}

unsafe extern "C" fn fire<J: TimerJob>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: Redis passes a live context and the data given to `start::<J>`: a boxed `J`,
    // handed over once (a fired timer cannot be stopped).
    let (ctx, job) = unsafe { (Ctx::from_raw(ctx), *Box::from_raw(data.cast::<J>())) };
    job.fire(ctx);
}
