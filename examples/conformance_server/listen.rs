//! `subscriptions/listen`: the open streams, and the list-changed notifications the
//! trigger tools send to them. (Task notifications on the same streams come from
//! `TasksLayer`, not from here.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::SubscriptionFilter;
use rmcp::service::{SubscriptionContext, SubscriptionSink};

/// The open `subscriptions/listen` streams.
#[derive(Default)]
pub(crate) struct Listeners {
    next: AtomicU64,
    sinks: Mutex<HashMap<u64, SubscriptionSink>>,
}

/// What the server agrees to send on a listen stream.
pub(crate) fn accepted_filter() -> SubscriptionFilter {
    SubscriptionFilter::builder()
        .tools_list_changed()
        .prompts_list_changed()
        .build()
}

impl Listeners {
    /// Serves one listen stream until the client closes it.
    pub(crate) async fn listen(&self, context: SubscriptionContext) {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let lock = || self.sinks.lock().unwrap_or_else(|p| p.into_inner());
        lock().insert(key, context.sink().clone());
        context.cancelled().await;
        lock().remove(&key);
    }

    /// Sends tools (`tools`) or prompts list_changed to every open stream.
    pub(crate) async fn notify(&self, tools: bool) {
        let sinks: Vec<SubscriptionSink> = self
            .sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for sink in sinks {
            let sent = match tools {
                true => sink.notify_tool_list_changed().await,
                false => sink.notify_prompt_list_changed().await,
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, "a listen stream refused the notification");
            }
        }
    }
}
