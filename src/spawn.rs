//! Starting background work: every loop and one-off job the layer runs in the
//! background is spawned here, on the tokio runtime current at the call, and a
//! loop that must end with the layer is stopped through the [`Stop`] it returns.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

/// Whether a tokio runtime is current, so that [`spawn_if_runtime`] would spawn.
pub(crate) fn has_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Spawns `job` on the current tokio runtime; outside one, drops it and returns
/// `false`.
pub(crate) fn spawn_if_runtime<F>(job: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(job);
            true
        }
        Err(_) => false,
    }
}

/// Spawns the loop `run` makes from its shutdown signal; the loop ends once the
/// returned [`Stop`] is dropped. `None` (nothing spawned) outside a runtime.
pub(crate) fn spawn_loop<F>(run: impl FnOnce(Stopped) -> F) -> Option<Stop>
where
    F: Future<Output = ()> + Send + 'static,
{
    if !has_runtime() {
        return None;
    }
    let (stop, stopped) = oneshot::channel();
    spawn_if_runtime(run(Stopped(stopped)));
    Some(Stop(stop))
}

/// Held by the owner of a background loop: dropping it stops the loop.
#[derive(Debug)]
pub(crate) struct Stop(#[allow(dead_code)] oneshot::Sender<()>);

/// The shutdown signal of a loop started by [`spawn_loop`]: resolves once its
/// [`Stop`] is dropped.
#[derive(Debug)]
pub(crate) struct Stopped(oneshot::Receiver<()>);

impl Future for Stopped {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}
