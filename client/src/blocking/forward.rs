//! The blocking API generated from the async one. A blocking handle names the async handle
//! that acts for the calling thread and the runtime that runs it ([`Facade`]);
//! [`on_runtime!`] writes each blocking method as "run the async method on that runtime and
//! wrap its answer" ([`FromAsync`]: a value stays itself, an async hold becomes the blocking
//! hold on the same runtime); [`to_hold!`] writes a blocking hold's methods as calls on the
//! hold it wraps (its field `held`, a [`Held`](super::hold::Held)).

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::{Result, Waiter};

/// A blocking handle: the async handle it acts through, and the runtime that runs it.
pub(super) trait Facade {
    /// The async handle.
    type Async;
    /// The async handle acting for the calling thread (its owner is the thread's).
    fn for_thread(&self) -> Self::Async;
    /// The runtime (`None` only for a group without members).
    fn rt(&self) -> Option<&Arc<Runtime>>;
}

/// A blocking method's answer, made from the async method's answer on runtime `rt`.
pub(super) trait FromAsync<A> {
    fn from_async(answer: A, rt: Option<&Arc<Runtime>>) -> Self;
}

impl<A, B: FromAsync<A>> FromAsync<Result<A>> for Result<B> {
    fn from_async(answer: Result<A>, rt: Option<&Arc<Runtime>>) -> Self {
        answer.map(|a| B::from_async(a, rt))
    }
}

impl<A, B: FromAsync<A>> FromAsync<Option<A>> for Option<B> {
    fn from_async(answer: Option<A>, rt: Option<&Arc<Runtime>>) -> Self {
        answer.map(|a| B::from_async(a, rt))
    }
}

/// The answers a blocking method passes on as they are.
macro_rules! as_they_are {
    ($($t:ty),*) => {$(
        impl FromAsync<$t> for $t {
            fn from_async(answer: $t, _: Option<&Arc<Runtime>>) -> Self {
                answer
            }
        }
    )*};
}
as_they_are!((), bool, u32, Duration, Vec<Waiter>);

/// Blocking methods of a [`Facade`]: each `fn name(&self, args) -> Answer = async_name;`
/// (or without `-> Answer` for none)
/// (docs and attributes carried over) runs `async_name(args)` of the calling thread's async
/// handle on the facade's runtime and makes `Answer` from its answer.
macro_rules! on_runtime {
    ($(
        $(#[$meta:meta])*
        fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $answer:ty)? = $call:ident;
    )*) => {$(
        $(#[$meta])*
        pub fn $name(&self $(, $arg: $ty)*) $(-> $answer)? {
            use $crate::blocking::forward::{Facade, FromAsync};
            let handle = self.for_thread();
            let answer = $crate::blocking::block_on(self.rt(), async move {
                handle.$call($($arg),*).await
            });
            FromAsync::from_async(answer, self.rt())
        }
    )*};
}
pub(super) use on_runtime;

/// Methods of a blocking hold (field `held`): each `fn name(&self, args) -> Answer;` or
/// `fn name(self) -> Answer;` (docs and attributes carried over) calls the same method on the
/// hold: the async hold's accessor, or [`Held`](super::hold::Held)'s own `wait_lost` and
/// `release`.
macro_rules! to_hold {
    () => {};
    (
        $(#[$meta:meta])*
        fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $answer:ty;
        $($rest:tt)*
    ) => {
        $(#[$meta])*
        pub fn $name(&self $(, $arg: $ty)*) -> $answer {
            self.held.$name($($arg),*)
        }
        $crate::blocking::forward::to_hold!($($rest)*);
    };
    (
        $(#[$meta:meta])*
        fn $name:ident(self) -> $answer:ty;
        $($rest:tt)*
    ) => {
        $(#[$meta])*
        pub fn $name(self) -> $answer {
            self.held.$name()
        }
        $crate::blocking::forward::to_hold!($($rest)*);
    };
}
pub(super) use to_hold;
