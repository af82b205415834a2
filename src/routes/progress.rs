//! `notifications/progress` of an `Auto` call as the task's status message: the
//! layer asks the inner server for progress (a `progressToken` of its own when the
//! client gave none), keeps only the newest report, and writes it to the task at a
//! bounded rate. The reports never reach a listen stream; a client that gave no
//! token never sees them at all.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::engine::Engine;
use crate::task::{Scope, TaskId, Transition};
use crate::wire::RawObject;

/// The `progressToken` the layer sends when the client's call has none.
pub(crate) const LAYER_TOKEN: &str = "mcp-tasks/progress";

/// The shortest time between two status messages written from progress: reports
/// in between are coalesced, the newest wins.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Gives the call a `progressToken` if it has none; `true` when the token is the
/// layer's own (so the reports are the layer's business alone).
pub(crate) fn ensure_token(message: &mut RawObject) -> bool {
    message.edit(&["params"], |params| {
        if params.get("_meta").is_none() {
            params.insert("_meta", serde_json::json!({"progressToken": LAYER_TOKEN}));
            return true;
        }
        params.edit(&["_meta"], |meta| {
            if meta.get("progressToken").is_some() {
                return false;
            }
            meta.insert("progressToken", LAYER_TOKEN);
            true
        })
    })
}

/// What a progress report says, in words: its `message`, otherwise "n of total"
/// (or "n" without a total).
fn status_text(params: &Value) -> Option<String> {
    if let Some(message) = params["message"].as_str().filter(|m| !m.trim().is_empty()) {
        return Some(message.to_owned());
    }
    let progress = params.get("progress").filter(|p| p.is_number())?;
    Some(match params.get("total").filter(|t| t.is_number()) {
        Some(total) => format!("{progress} of {total}"),
        None => progress.to_string(),
    })
}

/// Where the inner server's progress reports for one call go.
#[derive(Debug)]
pub(crate) struct ProgressSink {
    newest: watch::Sender<Option<String>>,
    /// The token is the layer's: the reports are taken out of the inner answer.
    hide: bool,
}

impl ProgressSink {
    pub(crate) fn new(hide: bool) -> Self {
        ProgressSink {
            newest: watch::Sender::new(None),
            hide,
        }
    }

    /// Looks at one message of the inner stream; `false` when it is a progress
    /// report that must not be passed on.
    pub(crate) fn observe(&self, message: &Value) -> bool {
        if message["method"] != "notifications/progress" {
            return true;
        }
        if let Some(text) = status_text(&message["params"]) {
            self.newest.send_replace(Some(text));
        }
        !self.hide
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.newest.subscribe()
    }
}

/// Runs `work`, meanwhile writing the newest progress report to `task` as its
/// status message, at most once per [`PROGRESS_EVERY`]. A write that fails is
/// skipped: a newer report or the final state follows.
pub(crate) async fn relaying<T>(
    engine: &Engine,
    task: &TaskId,
    reports: &mut watch::Receiver<Option<String>>,
    work: impl Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let mut next = tokio::time::Instant::now();
    loop {
        let report = async {
            tokio::time::sleep_until(next).await;
            reports.changed().await
        };
        tokio::select! {
            biased;
            done = &mut work => return done,
            changed = report => {
                if changed.is_err() {
                    // No more reports can come.
                    return work.await;
                }
            }
        }
        let Some(message) = reports.borrow_and_update().clone() else {
            continue;
        };
        next = tokio::time::Instant::now() + PROGRESS_EVERY;
        let progress = Transition::Progress { message };
        if let Err(e) = engine.update(task, Scope::Any, &progress).await {
            tracing::debug!(error = %crate::error::Chain(&e), "could not write an auto task's progress");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_report_reads_as_its_message_or_its_count() {
        let text = |p: Value| status_text(&p);
        assert_eq!(
            text(json!({"progress": 2, "total": 5, "message": "Copying"})),
            Some("Copying".into())
        );
        assert_eq!(
            text(json!({"progress": 2, "total": 5})),
            Some("2 of 5".into())
        );
        assert_eq!(
            text(json!({"progress": 0.5, "message": " "})),
            Some("0.5".into())
        );
        assert_eq!(text(json!({"message": null})), None);
    }

    #[test]
    fn the_layer_token_is_added_only_when_the_client_gave_none() {
        let raw = |text: &str| RawObject::parse(text.as_bytes()).unwrap();
        let json = |object: &RawObject| serde_json::from_slice::<Value>(&object.to_vec()).unwrap();
        let mut call = raw(r#"{"params": {"name": "t"}}"#);
        assert!(ensure_token(&mut call));
        assert_eq!(json(&call)["params"]["_meta"]["progressToken"], LAYER_TOKEN);
        let mut meta = raw(r#"{"params": {"_meta": {"x": 1.50}}}"#);
        assert!(ensure_token(&mut meta));
        assert!(String::from_utf8(meta.to_vec()).unwrap().contains("1.50"));
        let mut own = raw(r#"{"params": {"_meta": {"progressToken": 7, "x": 1}}}"#);
        assert!(!ensure_token(&mut own));
        assert_eq!(
            json(&own)["params"]["_meta"],
            json!({"progressToken": 7, "x": 1})
        );
    }

    #[test]
    fn the_newest_report_wins_and_hidden_ones_are_taken_out() {
        let sink = ProgressSink::new(true);
        let mut reports = sink.subscribe();
        let report =
            |n: u32| json!({"method": "notifications/progress", "params": {"progress": n}});
        assert!(!sink.observe(&report(1)));
        assert!(!sink.observe(&report(2)));
        assert!(sink.observe(&json!({"method": "notifications/message"})));
        assert!(reports.has_changed().unwrap());
        assert_eq!(reports.borrow_and_update().as_deref(), Some("2"));
        assert!(ProgressSink::new(false).observe(&report(3)));
    }
}
