//! What a task may store: the one place that bounds the bytes of every write.
//!
//! A status message longer than `max_status_message_bytes` is cut (on a character
//! boundary, ending with "…"). A result, an error, or the input requests of one
//! call whose JSON passes `max_result_bytes` fail the task instead. A write that
//! grows a task is admitted only while its owner's stored bytes
//! ([`TaskStore::owner_bytes`](crate::store::TaskStore::owner_bytes)), with what
//! this node is writing for the owner meanwhile, stay within
//! `max_bytes_per_owner`: past it a new task and a client's answers are refused
//! ([`Limit::BytesPerOwner`]), a status message is not written, and a result, an
//! error or input requests fail the task with the short failure of
//! [`over_owner_bytes`], so that a task always ends.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

use super::{Engine, json_len_within};
use crate::error::{Limit, StoreError};
use crate::observe;
use crate::store::{COUNT_SLACK, encoded_len, json_len};
use crate::task::{ErrorObject, Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};
use crate::wire::RpcError;

/// The end of a status message cut to its bound.
const CUT_MARK: &str = "…";

/// What a field adds to a record's JSON besides its value: its key, quotes, colon
/// and comma, at their longest.
const FIELD: usize = 32;

/// A failure this small always lands, whatever its owner stores: the layer's own
/// failures (a drain, a lost worker, the failures below) must end their tasks.
const ALWAYS_LANDS: usize = 1024;

/// How many task owners the layer remembers, so that a worker's write by id needs
/// no read to find whose bytes it adds to; past it the memory starts over.
const OWNERS_KEPT: usize = 65_536;

/// Why a write was changed before it was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// A result or an error larger than `max_result_bytes`: the task failed with
    /// -32603 "Result too large".
    ResultTooLarge,
    /// Input requests larger than `max_result_bytes`: the task failed with -32603
    /// "Input requests too large".
    InputTooLarge,
    /// The task's owner stores `max_bytes_per_owner` already: the task failed with
    /// [`over_owner_bytes`].
    OwnerBytes,
}

impl Cut {
    /// What a worker is told of it.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Cut::ResultTooLarge => {
                "the result or error is larger than max_result_bytes; the task failed with \"Result too large\""
            }
            Cut::InputTooLarge => {
                "the input requests are larger than max_result_bytes; the task failed with \"Input requests too large\""
            }
            Cut::OwnerBytes => {
                "the task's principal stores max_bytes_per_owner already; the task failed with \"Task limit reached\""
            }
        }
    }
}

/// What the layer keeps to bound each owner's bytes.
#[derive(Default)]
pub(crate) struct Ledger {
    /// This node's writes for each owner, counted with what the store says so
    /// that concurrent writes of one owner never pass the bound together.
    writes: Mutex<HashMap<Option<Principal>, Writes>>,
    /// The owners of tasks this node made or wrote lately.
    owners: Mutex<HashMap<TaskId, Option<Principal>>>,
    /// Set once the store said it does not count bytes per owner.
    uncounted: AtomicBool,
}

/// One owner's writes on this node: the bytes admitted, the bytes of the writes
/// that have since landed (or failed), and the admissions reading the store.
/// Bytes admitted and not landed when a read of the store began may be missing
/// from what it says; they are counted on top of it.
#[derive(Default)]
struct Writes {
    admitted: u64,
    landed: u64,
    reading: u32,
}

impl Ledger {
    fn writes(&self) -> std::sync::MutexGuard<'_, HashMap<Option<Principal>, Writes>> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes an admission for `owner` about to read the store, with how many of
    /// its bytes had landed by then.
    fn start_reading<'a>(&'a self, owner: &'a Option<Principal>) -> Reading<'a> {
        let mut writes = self.writes();
        let entry = writes.entry(owner.clone()).or_default();
        entry.reading += 1;
        Reading {
            ledger: self,
            owner,
            landed: entry.landed,
        }
    }

    /// `bytes` admitted for `owner` have landed, or failed.
    fn land(&self, owner: &Option<Principal>, bytes: u64) {
        let mut writes = self.writes();
        if let Some(entry) = writes.get_mut(owner) {
            entry.landed += bytes;
            if entry.reading == 0 && entry.admitted == entry.landed {
                writes.remove(owner);
            }
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Option<Principal>>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers whose task `id` is.
    pub(crate) fn note_owner(&self, id: TaskId, owner: &Option<Principal>) {
        let mut owners = self.owners();
        if owners.contains_key(&id) {
            return;
        }
        if owners.len() >= OWNERS_KEPT {
            owners.clear();
        }
        owners.insert(id, owner.clone());
    }

    /// Forgets the owner of a task that ended: it takes no more writes that grow.
    pub(crate) fn forget_owner(&self, id: &TaskId) {
        self.owners().remove(id);
    }

    fn owner_of(&self, id: &TaskId) -> Option<Option<Principal>> {
        self.owners().get(id).cloned()
    }
}

/// An admission reading the store for its owner; ended by
/// [`finish`](Self::finish), or by a drop (the admission was given up).
struct Reading<'a> {
    ledger: &'a Ledger,
    owner: &'a Option<Principal>,
    landed: u64,
}

impl Reading<'_> {
    /// Admits `bytes` more when the store's count `stored`, with everything
    /// admitted and not landed when the read began (or admitted since), leaves
    /// room for them under `max`.
    fn finish(self, stored: u64, bytes: u64, max: u64) -> bool {
        let mut writes = self.ledger.writes();
        let Some(entry) = writes.get_mut(self.owner) else {
            return false;
        };
        let unseen = entry.admitted - self.landed;
        let admit = stored.saturating_add(unseen).saturating_add(bytes) <= max;
        if admit {
            entry.admitted += bytes;
        }
        admit
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut writes = self.ledger.writes();
        if let Some(entry) = writes.get_mut(self.owner) {
            entry.reading -= 1;
            if entry.reading == 0 && entry.admitted == entry.landed {
                writes.remove(self.owner);
            }
        }
    }
}

/// Bytes admitted for an owner, counted in flight until dropped (once the write
/// landed, or failed).
pub(crate) struct Admitted<'a> {
    ledger: Option<&'a Ledger>,
    owner: Option<Principal>,
    bytes: u64,
}

impl Admitted<'_> {
    fn none() -> Self {
        Admitted {
            ledger: None,
            owner: None,
            bytes: 0,
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let Some(ledger) = self.ledger {
            ledger.land(&self.owner, self.bytes);
        }
    }
}

/// A write as it will be stored: the transition (cut to the bounds, or the
/// failure that replaces it), why it was changed, and its admitted bytes.
pub(crate) struct Bounded<'t, 'e> {
    pub(crate) transition: Cow<'t, Transition>,
    pub(crate) cut: Option<Cut>,
    _admitted: Admitted<'e>,
}

/// The failure that replaces a result, an error or input requests once their
/// owner stores `max_bytes_per_owner`: -32603 "Task limit reached", with
/// `error.data` `{"limit": "bytes_per_owner"}`, as a refused create says.
pub(crate) fn over_owner_bytes() -> Transition {
    let limit = Limit::BytesPerOwner.as_str();
    Transition::Fail {
        error: ErrorObject::new(RpcError::INTERNAL_ERROR, "Task limit reached")
            .with_data(json!({"limit": limit})),
        message: Some("Task limit reached".to_owned()),
    }
}

/// The refusal of a new task, or of a client's answers, at a cap: -32603 "Task
/// limit reached" with `error.data` `{"limit": …}`, HTTP 200.
pub(crate) fn limit_reached(limit: Limit) -> RpcError {
    tracing::warn!(limit = limit.as_str(), "refused: task limit reached");
    RpcError::internal("Task limit reached").with_data(json!({"limit": limit.as_str()}))
}

fn internal_failure(message: &'static str) -> Transition {
    Transition::Fail {
        error: ErrorObject::new(RpcError::INTERNAL_ERROR, message),
        message: Some(message.to_owned()),
    }
}

/// `text` cut to at most `max` bytes on a character boundary, ending with
/// [`CUT_MARK`] when cut (and when the mark fits).
pub(crate) fn cut_text(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mark = if max >= CUT_MARK.len() { CUT_MARK } else { "" };
    let mut end = max - mark.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{mark}", &text[..end]))
}

/// How much a transition may add to its record's JSON at most: the values it
/// brings, with their keys. What a record loses meanwhile (a message replaced,
/// requests answered) is not taken off.
fn growth(transition: &Transition) -> usize {
    let text = |m: &Option<String>| m.as_ref().map_or(0, |m| json_len(m) + FIELD);
    match transition {
        Transition::Progress { message } => json_len(message) + FIELD,
        Transition::RequireInput { requests, message } => {
            // Each key is kept once more, among the issued keys.
            let keys: usize = requests.keys().map(|k| json_len(k) + 1).sum();
            json_len(requests) + keys + 2 * FIELD + text(message)
        }
        Transition::Complete { result, message } => json_len(result) + FIELD + text(message),
        Transition::Fail { error, message } => json_len(error) + FIELD + text(message),
        Transition::Answer { responses } => json_len(responses) + FIELD,
        _ => 0,
    }
}

impl Engine {
    /// `transition` within the size bounds that need no store: its status message
    /// cut, and a result, an error or input requests too large replaced by the
    /// task's failure.
    fn fit<'t>(&self, transition: &'t Transition) -> (Cow<'t, Transition>, Option<Cut>) {
        let max = self.config.max_result_bytes;
        let (failure, cut) = match transition {
            Transition::Complete { result, .. } if json_len_within(result, max).is_none() => {
                (internal_failure("Result too large"), Cut::ResultTooLarge)
            }
            Transition::Fail { error, .. } if json_len(error) > max => {
                (internal_failure("Result too large"), Cut::ResultTooLarge)
            }
            Transition::RequireInput { requests, .. } if json_len(requests) > max => (
                internal_failure("Input requests too large"),
                Cut::InputTooLarge,
            ),
            _ => return (self.cut_message(transition), None),
        };
        tracing::warn!(
            max_result_bytes = max,
            "a task's result, error or input requests are too large; the task fails instead"
        );
        (Cow::Owned(failure), Some(cut))
    }

    /// `transition` with its status message cut to `max_status_message_bytes`.
    fn cut_message<'t>(&self, transition: &'t Transition) -> Cow<'t, Transition> {
        let max = self.config.max_status_message_bytes;
        let long = |m: &Option<String>| m.as_ref().is_some_and(|m| m.len() > max);
        let cut = |m: &Option<String>| m.as_ref().map(|m| cut_text(m, max).into_owned());
        Cow::Owned(match transition {
            Transition::Progress { message } if message.len() > max => Transition::Progress {
                message: cut_text(message, max).into_owned(),
            },
            Transition::RequireInput { requests, message } if long(message) => {
                Transition::RequireInput {
                    requests: requests.clone(),
                    message: cut(message),
                }
            }
            Transition::Complete { result, message } if long(message) => Transition::Complete {
                result: result.clone(),
                message: cut(message),
            },
            Transition::Fail { error, message } if long(message) => Transition::Fail {
                error: error.clone(),
                message: cut(message),
            },
            _ => return Cow::Borrowed(transition),
        })
    }

    /// A new task's record within the bounds: its status message cut, and its
    /// owner's bytes with it within `max_bytes_per_owner` (otherwise refused with
    /// [`Limit::BytesPerOwner`]).
    pub(crate) async fn admit_create(
        &self,
        record: &mut TaskRecord,
    ) -> Result<Admitted<'_>, StoreError> {
        if let Some(message) = &record.status_message
            && let Cow::Owned(cut) = cut_text(message, self.config.max_status_message_bytes)
        {
            record.status_message = Some(cut);
        }
        let owner = record.owner.clone();
        // As much as a store may count for the new record.
        let bytes = encoded_len(record) + COUNT_SLACK;
        self.admit_bytes(owner, bytes).await
    }

    /// The one admission of a write to `id`: the transition within the size
    /// bounds ([`fit`](Self::fit)), then within its owner's bytes. A growing
    /// write past the owner's bound is [`StoreError::LimitReached`] for a status
    /// message or a client's answers (nothing is written), and the task's failure
    /// ([`over_owner_bytes`]) for a result, an error or input requests.
    pub(crate) async fn bound<'t>(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        transition: &'t Transition,
    ) -> Result<Bounded<'t, '_>, StoreError> {
        let (transition, cut) = self.fit(transition);
        let growth = growth(&transition);
        let ends = matches!(
            *transition,
            Transition::Complete { .. } | Transition::Fail { .. }
        );
        if growth == 0 || (ends && growth <= ALWAYS_LANDS) {
            return Ok(Bounded {
                transition,
                cut,
                _admitted: Admitted::none(),
            });
        }
        let owner = match scope {
            Scope::Owner(owner) => Some(owner.cloned()),
            Scope::Any => match self.bytes.owner_of(id) {
                Some(owner) => Some(owner),
                // The first status message of a task this node has not seen: its
                // owner is learned from the write. A status message is short, and
                // needs no read (a worker's progress goes on through a read outage).
                None if matches!(*transition, Transition::Progress { .. }) => None,
                None => self.read_owner(id).await?,
            },
        };
        // `None`: not known, or the task is gone (the write finds nothing either).
        let Some(owner) = owner else {
            return Ok(Bounded {
                transition,
                cut,
                _admitted: Admitted::none(),
            });
        };
        match self.admit_bytes(owner, growth).await {
            Ok(admitted) => Ok(Bounded {
                transition,
                cut,
                _admitted: admitted,
            }),
            Err(StoreError::LimitReached(limit)) => match *transition {
                Transition::Progress { .. } | Transition::Answer { .. } => {
                    Err(StoreError::LimitReached(limit))
                }
                _ => {
                    tracing::warn!(
                        max_bytes_per_owner = self.config.max_bytes_per_owner,
                        "a task's principal stores too many bytes; the task fails instead"
                    );
                    Ok(Bounded {
                        transition: Cow::Owned(over_owner_bytes()),
                        cut: Some(Cut::OwnerBytes),
                        _admitted: Admitted::none(),
                    })
                }
            },
            Err(e) => Err(e),
        }
    }

    /// Whose task `id` is, read from the store. `None` when it is gone.
    async fn read_owner(&self, id: &TaskId) -> Result<Option<Option<Principal>>, StoreError> {
        let found = self.store.get(id, Scope::Any, Timestamp::now()).await?;
        Ok(found.map(|record| {
            self.bytes.note_owner(*id, &record.owner);
            record.owner
        }))
    }

    /// Admits `bytes` more for `owner` when its stored bytes, with what this node
    /// is writing for it meanwhile, stay within `max_bytes_per_owner`.
    async fn admit_bytes(
        &self,
        owner: Option<Principal>,
        bytes: usize,
    ) -> Result<Admitted<'_>, StoreError> {
        let ledger = &self.bytes;
        let max = self.config.max_bytes_per_owner as u64;
        let bytes = bytes as u64;
        if ledger.uncounted.load(Ordering::Relaxed) {
            return Ok(Admitted::none());
        }
        let reading = ledger.start_reading(&owner);
        let read = self.store.owner_bytes(owner.as_ref()).await;
        match read {
            Ok(stored) if reading.finish(stored, bytes, max) => Ok(Admitted {
                ledger: Some(ledger),
                owner: owner.clone(),
                bytes,
            }),
            Ok(stored) => {
                observe::task_refused(Limit::BytesPerOwner.as_str());
                tracing::debug!(
                    stored,
                    bytes,
                    max,
                    "a write past its principal's stored bytes"
                );
                Err(StoreError::LimitReached(Limit::BytesPerOwner))
            }
            Err(StoreError::Unsupported(_)) => {
                if !ledger.uncounted.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "mcp-tasks: the task store does not count bytes per owner (TaskStore::owner_bytes); max_bytes_per_owner is not enforced"
                    );
                }
                Ok(Admitted::none())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary_with_a_mark() {
        assert_eq!(cut_text("short", 10), "short");
        let cut = cut_text("ééééé", 8);
        assert!(cut.len() <= 8, "{cut}");
        assert_eq!(cut, "éé…");
        assert_eq!(
            cut_text(&"x".repeat(100), 10),
            format!("{}…", "x".repeat(7))
        );
        // Too short for the mark: cut alone.
        assert_eq!(cut_text("abcdef", 2), "ab");
        assert_eq!(cut_text("éé", 1), "");
    }

    #[test]
    fn growth_covers_what_a_transition_adds_to_the_record() {
        let mut record = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1));
        let steps = [
            Transition::Progress {
                message: "working on it".repeat(10),
            },
            Transition::RequireInput {
                requests: serde_json::from_value(json!({
                    "a-long-key": {"method": "roots/list"},
                    "b": {"method": "elicitation/create", "params": {"message": "?"}},
                }))
                .unwrap(),
                message: Some("asking".into()),
            },
            Transition::Answer {
                responses: serde_json::from_value(json!({
                    "a-long-key": {"roots": []}, "b": {"action": "accept"},
                }))
                .unwrap(),
            },
            Transition::Complete {
                result: json!({"content": [{"type": "text", "text": "done"}]}),
                message: Some("done".into()),
            },
        ];
        for step in steps {
            let before = encoded_len(&record);
            record.apply(&step, Timestamp::from_millis(2)).unwrap();
            let after = encoded_len(&record);
            assert!(
                after <= before + growth(&step),
                "{step:?}: {before} -> {after}, growth {}",
                growth(&step)
            );
        }
        let mut failing = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1));
        let fail = over_owner_bytes();
        let before = encoded_len(&failing);
        failing.apply(&fail, Timestamp::from_millis(2)).unwrap();
        assert!(encoded_len(&failing) <= before + growth(&fail));
        assert!(
            growth(&fail) <= ALWAYS_LANDS,
            "the layer's failure always lands"
        );
    }
}
