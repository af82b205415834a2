//! How [`MemoryStore`](super::MemoryStore) keeps a record: the fields every task has
//! inline, and the ones most tasks never set (result, error, input) behind one
//! optional box. A parked working task then costs about a third of a full
//! [`TaskRecord`] in memory.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::json_len;
use crate::task::{ErrorObject, Principal, Scope, TaskId, TaskRecord, TaskStatus, Timestamp};

/// One stored task, without its id (the table's key).
#[derive(Debug)]
pub(super) struct Stored {
    owner: Option<Principal>,
    status_message: Option<Box<str>>,
    created_at: Timestamp,
    updated_at: Timestamp,
    ttl_ms: u64,
    poll_interval_ms: u64,
    revision: u64,
    status: TaskStatus,
    cancel_requested: bool,
    /// Which of `ttl_ms` and `poll_interval_ms` are set ([`HAS_TTL`], [`HAS_POLL`]).
    set: u8,
    /// How far the store's clock was ahead of `created_at` when the record was
    /// stored (0 on the caller's clock): its expiry by the store's clock is
    /// `created_at + skew_ms + ttl`.
    skew_ms: i32,
    rest: Option<Box<Rest>>,
}

/// The most the fields of bounded length add to a record's JSON: the keys, the
/// id, the status, the times, the numbers and the flag at their longest.
const BOUNDED_FIELDS_MAX: usize = 512;

const HAS_TTL: u8 = 1;
const HAS_POLL: u8 = 2;

fn unpack(value: u64, set: u8, bit: u8) -> Option<u64> {
    (set & bit != 0).then_some(value)
}

/// What a task has only once it finished or asked for input.
#[derive(Debug)]
struct Rest {
    result: Option<Value>,
    error: Option<ErrorObject>,
    input_requests: Map<String, Value>,
    issued_keys: BTreeSet<String>,
    input_responses: Map<String, Value>,
    /// The length of these fields' JSON, counted at the first read that asks (a
    /// write replaces the whole `Rest`, and with it this count).
    json_len: OnceLock<usize>,
}

impl Rest {
    fn json_len(&self) -> usize {
        *self.json_len.get_or_init(|| {
            self.result
                .as_ref()
                .map_or(0, json_len)
                .saturating_add(self.error.as_ref().map_or(0, json_len))
                .saturating_add(json_len(&self.input_requests))
                .saturating_add(json_len(&self.issued_keys))
                .saturating_add(json_len(&self.input_responses))
        })
    }
}

impl Stored {
    pub(super) fn owner(&self) -> Option<&Principal> {
        self.owner.as_ref()
    }

    pub(super) fn into_owner(self) -> Option<Principal> {
        self.owner
    }

    /// The same record stored `skew_ms` after its `created_at` by the store's clock.
    pub(super) fn with_skew(mut self, skew_ms: i32) -> Self {
        self.skew_ms = skew_ms;
        self
    }

    pub(super) fn skew_ms(&self) -> i32 {
        self.skew_ms
    }

    pub(super) fn created_at(&self) -> Timestamp {
        self.created_at
    }

    /// When the record expires by the store's clock, if it has a TTL.
    pub(super) fn expires_at(&self) -> Option<Timestamp> {
        unpack(self.ttl_ms, self.set, HAS_TTL)
            .map(|ttl| shift(self.created_at, self.skew_ms).plus_ms(ttl))
    }

    /// [`TaskRecord::is_visible`] on the stored fields, `now` read on the store's
    /// clock.
    pub(super) fn is_visible(&self, scope: Scope<'_>, now: Timestamp) -> bool {
        scope.permits(self.owner.as_ref()) && self.expires_at().is_none_or(|at| at > now)
    }

    /// An upper bound of the record's encoded size ([`encoded_len`]): the fields of
    /// any length (owner, status message, result, error, input) counted exactly, the
    /// others at their longest, without building the record; the result, error and
    /// input are counted once per write, at the first read that asks. At most
    /// [`BOUNDED_FIELDS_MAX`] over the exact size.
    ///
    /// [`encoded_len`]: crate::store::encoded_len
    pub(super) fn encoded_len_bound(&self) -> usize {
        BOUNDED_FIELDS_MAX
            .saturating_add(self.owner.as_ref().map_or(0, json_len))
            .saturating_add(self.status_message.as_deref().map_or(0, json_len))
            .saturating_add(self.rest.as_ref().map_or(0, |rest| rest.json_len()))
    }

    /// The full record, for a reader.
    pub(super) fn to_record(&self, id: TaskId) -> TaskRecord {
        let mut record = TaskRecord::new(id, self.owner.clone(), self.created_at);
        record.status = self.status;
        record.status_message = self.status_message.as_deref().map(str::to_owned);
        record.updated_at = self.updated_at;
        record.ttl_ms = unpack(self.ttl_ms, self.set, HAS_TTL);
        record.poll_interval_ms = unpack(self.poll_interval_ms, self.set, HAS_POLL);
        record.revision = self.revision;
        record.cancel_requested = self.cancel_requested;
        if let Some(rest) = &self.rest {
            record.result = rest.result.clone();
            record.error = rest.error.clone();
            record.input_requests = rest.input_requests.clone();
            record.issued_keys = rest.issued_keys.clone();
            record.input_responses = rest.input_responses.clone();
        }
        record
    }
}

impl From<TaskRecord> for Stored {
    fn from(record: TaskRecord) -> Self {
        let has_rest = record.result.is_some()
            || record.error.is_some()
            || !record.input_requests.is_empty()
            || !record.issued_keys.is_empty()
            || !record.input_responses.is_empty();
        let rest = has_rest.then(|| {
            Box::new(Rest {
                result: record.result,
                error: record.error,
                input_requests: record.input_requests,
                issued_keys: record.issued_keys,
                input_responses: record.input_responses,
                json_len: OnceLock::new(),
            })
        });
        Stored {
            owner: record.owner,
            status_message: record.status_message.map(String::into_boxed_str),
            created_at: record.created_at,
            updated_at: record.updated_at,
            ttl_ms: record.ttl_ms.unwrap_or(0),
            poll_interval_ms: record.poll_interval_ms.unwrap_or(0),
            revision: record.revision,
            status: record.status,
            cancel_requested: record.cancel_requested,
            set: (u8::from(record.ttl_ms.is_some()) * HAS_TTL)
                | (u8::from(record.poll_interval_ms.is_some()) * HAS_POLL),
            skew_ms: 0,
            rest,
        }
    }
}

/// `at` moved by `ms` (either way), saturating.
pub(super) fn shift(at: Timestamp, ms: i32) -> Timestamp {
    match u64::try_from(ms) {
        Ok(ahead) => at.plus_ms(ahead),
        Err(_) => at.minus_ms(u64::from(ms.unsigned_abs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Transition;
    use crate::task::Scope;
    use serde_json::json;

    fn round_trip(record: &TaskRecord) -> TaskRecord {
        Stored::from(record.clone()).to_record(record.id)
    }

    #[test]
    fn a_stored_task_is_small() {
        // One per stored task: keep it within 96 bytes.
        assert!(
            std::mem::size_of::<Stored>() <= 96,
            "{}",
            std::mem::size_of::<Stored>()
        );
    }

    #[test]
    fn every_field_survives_the_compact_form() {
        let bare = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(5));
        assert_eq!(round_trip(&bare), bare);
        let mut zeros = bare.clone();
        zeros.ttl_ms = Some(0);
        zeros.poll_interval_ms = Some(0);
        zeros.status_message = Some(String::new());
        assert_eq!(round_trip(&zeros), zeros);
        let mut record = TaskRecord::new(
            TaskId::random(),
            Some(Principal::from("alice")),
            Timestamp::from_millis(1_000),
        );
        record.ttl_ms = Some(60_000);
        record.poll_interval_ms = Some(500);
        record.status_message = Some("Working".into());
        assert_eq!(round_trip(&record), record);

        let ask = Transition::RequireInput {
            requests: [("k".to_owned(), json!({"method": "elicitation/create"}))]
                .into_iter()
                .collect(),
            message: Some("Question".into()),
        };
        record.apply(&ask, Timestamp::from_millis(2_000)).unwrap();
        assert_eq!(round_trip(&record), record);
        let answer = Transition::Answer {
            responses: [("k".to_owned(), json!({"action": "accept"}))]
                .into_iter()
                .collect(),
        };
        record
            .apply(&answer, Timestamp::from_millis(3_000))
            .unwrap();
        let done = Transition::Complete {
            result: json!({"content": []}),
            message: None,
        };
        record.apply(&done, Timestamp::from_millis(4_000)).unwrap();
        assert!(record.result.is_some() && !record.issued_keys.is_empty());
        assert_eq!(round_trip(&record), record);
    }

    #[test]
    fn the_size_bound_is_never_below_the_encoded_size_nor_far_above_it() {
        let mut longest = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(u64::MAX));
        longest.status = crate::task::TaskStatus::InputRequired;
        longest.updated_at = Timestamp::from_millis(u64::MAX);
        longest.ttl_ms = Some(u64::MAX);
        longest.poll_interval_ms = Some(u64::MAX);
        longest.revision = u64::MAX;
        longest.cancel_requested = true;
        let mut full = longest.clone();
        full.owner = Some(Principal::from("al\u{0}ice \"quoted\""));
        full.status_message = Some("\n".repeat(100));
        full.result = Some(json!({"content": [{"type": "text", "text": "x".repeat(70_000)}]}));
        full.error = Some(ErrorObject::new(-32603, "\u{1}".repeat(10)));
        full.input_requests = [("k".to_owned(), json!({"a": [1, 2.5, null]}))]
            .into_iter()
            .collect();
        full.issued_keys = ["k".to_owned(), "j".to_owned()].into_iter().collect();
        full.input_responses = [("j".to_owned(), json!({"action": "accept"}))]
            .into_iter()
            .collect();
        let bare = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(0));
        for record in [bare, longest, full] {
            let exact = crate::store::encoded_len(&record);
            assert_eq!(exact, serde_json::to_vec(&record).unwrap().len());
            let bound = Stored::from(record).encoded_len_bound();
            assert!(
                (exact..=exact + BOUNDED_FIELDS_MAX).contains(&bound),
                "{bound} for {exact}"
            );
        }
    }

    #[test]
    fn visibility_matches_the_record() {
        let mut record = TaskRecord::new(
            TaskId::random(),
            Some(Principal::from("alice")),
            Timestamp::from_millis(0),
        );
        record.ttl_ms = Some(10);
        let stored = Stored::from(record.clone());
        let alice = Principal::from("alice");
        for now in [0, 9, 10, 11] {
            let now = Timestamp::from_millis(now);
            for scope in [Scope::Any, Scope::Owner(Some(&alice)), Scope::Owner(None)] {
                assert_eq!(stored.is_visible(scope, now), record.is_visible(scope, now));
            }
        }
    }
}
