//! Property tests of the state machine, [`TaskRecord::apply`], against a small model
//! written from the specification's rules, not from the implementation:
//!
//! - statuses `working`, `input_required`, `completed`, `failed`, `cancelled`; the
//!   last three are final: any later change is refused with `Terminal`, except a
//!   cancel (`Unchanged`) and an answer (ignored, `Unchanged`);
//! - input keys are single-use for the task's whole life (`DuplicateKeys`);
//! - an input request is `{method, params?}` with method `elicitation/create`,
//!   `sampling/createMessage` or `roots/list` and params an object;
//! - answers for keys not outstanding are ignored; a partial answer keeps
//!   `input_required`; the last outstanding answer brings the task back to `working`;
//! - the revision goes up by exactly one on every `Changed`, `updatedAt` follows;
//! - a result only when `completed`, an error only when `failed`.
//!
//! Random sequences of up to 50 transitions, with input keys from a small alphabet
//! so that collisions happen; after each step the record and the outcome are
//! compared with the model. `PROPTEST_CASES` overrides the number of cases.

use std::collections::{BTreeMap, BTreeSet};

use mcp_tasks::error::TransitionError;
use mcp_tasks::store::{Applied, ErrorObject, Timestamp, Transition};
use mcp_tasks::{Principal, TaskId, TaskRecord, TaskStatus};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// The number of cases: `PROPTEST_CASES`, or `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------

/// The outcome of a transition, as the model predicts it. `Invalid` carries no
/// reason: the model checks only that the transition was refused as malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Changed,
    Unchanged,
    Terminal,
    Duplicate(BTreeSet<String>),
    Invalid,
}

impl Outcome {
    fn of(actual: &Result<Applied, TransitionError>) -> Outcome {
        match actual {
            Ok(Applied::Changed) => Outcome::Changed,
            Ok(Applied::Unchanged) => Outcome::Unchanged,
            Err(TransitionError::Terminal) => Outcome::Terminal,
            Err(TransitionError::DuplicateKeys(keys)) => {
                let set: BTreeSet<String> = keys.iter().cloned().collect();
                assert_eq!(set.len(), keys.len(), "DuplicateKeys names a key twice");
                Outcome::Duplicate(set)
            }
            Err(TransitionError::Invalid(_)) => Outcome::Invalid,
            Err(other) => panic!("an unexpected refusal: {other:?}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    fn of(status: TaskStatus) -> Status {
        match status {
            TaskStatus::Working => Status::Working,
            TaskStatus::InputRequired => Status::InputRequired,
            TaskStatus::Completed => Status::Completed,
            TaskStatus::Failed => Status::Failed,
            TaskStatus::Cancelled => Status::Cancelled,
        }
    }
}

/// What the rules say a task is.
#[derive(Debug, Clone, PartialEq)]
struct Model {
    status: Status,
    message: Option<String>,
    outstanding: BTreeMap<String, Value>,
    issued: BTreeSet<String>,
    answers: BTreeMap<String, Value>,
    revision: u64,
    updated_at: u64,
    result: Option<Value>,
    error: Option<ErrorObject>,
    cancel_requested: bool,
}

const METHODS: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

/// The rule for one input request: an object of `method` (one of [`METHODS`]) and
/// optionally `params` (an object), nothing else.
fn valid_request(request: &Value) -> bool {
    let Some(object) = request.as_object() else {
        return false;
    };
    let method_ok =
        matches!(object.get("method"), Some(Value::String(m)) if METHODS.contains(&m.as_str()));
    let params_ok = match object.get("params") {
        None => true,
        Some(p) => p.is_object(),
    };
    let only_known = object.keys().all(|k| k == "method" || k == "params");
    method_ok && params_ok && only_known
}

impl Model {
    fn new(created_at: u64) -> Model {
        Model {
            status: Status::Working,
            message: None,
            outstanding: BTreeMap::new(),
            issued: BTreeSet::new(),
            answers: BTreeMap::new(),
            revision: 0,
            updated_at: created_at,
            result: None,
            error: None,
            cancel_requested: false,
        }
    }

    /// Applies `transition` at `now` by the rules.
    fn step(&mut self, transition: &Transition, now: u64) -> Outcome {
        let outcome = self.decide(transition);
        if outcome == Outcome::Changed {
            self.revision += 1;
            self.updated_at = self.updated_at.max(now);
        }
        outcome
    }

    fn decide(&mut self, transition: &Transition) -> Outcome {
        let terminal = self.status.terminal();
        match transition {
            Transition::Progress { message } => {
                if terminal {
                    return Outcome::Terminal;
                }
                self.message = Some(message.clone());
                Outcome::Changed
            }
            Transition::RequireInput { requests, message } => {
                if terminal {
                    return Outcome::Terminal;
                }
                if requests.is_empty()
                    || requests
                        .iter()
                        .any(|(k, r)| k.is_empty() || !valid_request(r))
                {
                    return Outcome::Invalid;
                }
                let reused: BTreeSet<String> = requests
                    .keys()
                    .filter(|k| self.issued.contains(*k))
                    .cloned()
                    .collect();
                if !reused.is_empty() {
                    return Outcome::Duplicate(reused);
                }
                for (k, r) in requests {
                    self.issued.insert(k.clone());
                    self.outstanding.insert(k.clone(), r.clone());
                }
                self.status = Status::InputRequired;
                if let Some(m) = message {
                    self.message = Some(m.clone());
                }
                Outcome::Changed
            }
            Transition::Complete { result, message } => {
                if terminal {
                    return Outcome::Terminal;
                }
                if !result.is_object() {
                    return Outcome::Invalid;
                }
                self.status = Status::Completed;
                self.result = Some(result.clone());
                self.outstanding.clear();
                self.message = message.clone();
                Outcome::Changed
            }
            Transition::Fail { error, message } => {
                if terminal {
                    return Outcome::Terminal;
                }
                self.status = Status::Failed;
                self.error = Some(error.clone());
                self.outstanding.clear();
                self.message = Some(message.clone().unwrap_or_else(|| "Task failed".to_owned()));
                Outcome::Changed
            }
            Transition::Answer { responses } => {
                if self.status != Status::InputRequired {
                    return Outcome::Unchanged;
                }
                let relevant: Vec<(&String, &Value)> = responses
                    .iter()
                    .filter(|(k, _)| self.outstanding.contains_key(*k))
                    .collect();
                if relevant.iter().any(|(_, v)| !v.is_object()) {
                    return Outcome::Invalid;
                }
                if relevant.is_empty() {
                    return Outcome::Unchanged;
                }
                for (k, v) in relevant {
                    self.outstanding.remove(k);
                    self.answers.insert(k.clone(), v.clone());
                }
                if self.outstanding.is_empty() {
                    self.status = Status::Working;
                    self.message = None;
                }
                Outcome::Changed
            }
            Transition::Cancel => {
                if terminal {
                    return Outcome::Unchanged;
                }
                self.status = Status::Cancelled;
                self.cancel_requested = true;
                self.outstanding.clear();
                self.message = Some("Cancelled by the client".to_owned());
                Outcome::Changed
            }
            other => panic!("a transition the model does not know: {other:?}"),
        }
    }

    /// Checks `record` against the model; `Err` says what differs.
    fn check(&self, record: &TaskRecord) -> Result<(), String> {
        let map = |m: &Map<String, Value>| -> BTreeMap<String, Value> {
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let actual = Model {
            status: Status::of(record.status),
            message: record.status_message.clone(),
            outstanding: map(&record.input_requests),
            issued: record.issued_keys.clone(),
            answers: map(&record.input_responses),
            revision: record.revision,
            updated_at: record.updated_at.as_millis(),
            result: record.result.clone(),
            error: record.error.clone(),
            cancel_requested: record.cancel_requested,
        };
        if actual != *self {
            return Err(format!("expected {self:#?}\nactual {actual:#?}"));
        }
        // Invariants that hold whatever happened.
        if record.result.is_some() != (record.status == TaskStatus::Completed) {
            return Err("a result without `completed`, or `completed` without one".into());
        }
        if record.error.is_some() != (record.status == TaskStatus::Failed) {
            return Err("an error without `failed`, or `failed` without one".into());
        }
        if (record.status == TaskStatus::InputRequired) == record.input_requests.is_empty() {
            return Err("`input_required` exactly when requests are outstanding".into());
        }
        if !record
            .input_requests
            .keys()
            .chain(record.input_responses.keys())
            .all(|k| record.issued_keys.contains(k))
        {
            return Err("a request or an answer for a key never issued".into());
        }
        if record
            .input_requests
            .keys()
            .any(|k| record.input_responses.contains_key(k))
        {
            return Err("a key both outstanding and answered".into());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Strategies.
// ---------------------------------------------------------------------------------

/// Input keys: a small alphabet, so that reuse happens often.
const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];

/// One input request, mostly well formed, sometimes broken in one of the ways the
/// rules name.
fn request() -> impl Strategy<Value = Value> {
    let method = prop::sample::select(METHODS.to_vec());
    prop_oneof![
        6 => (method.clone(), any::<bool>()).prop_map(|(m, with_params)| if with_params {
            json!({"method": m, "params": {"message": "Continue?"}})
        } else {
            json!({"method": m})
        }),
        1 => prop::sample::select(vec!["tools/call", "elicitation", "", "ROOTS/LIST"])
            .prop_map(|m| json!({"method": m})),
        1 => Just(json!({"params": {}})),
        1 => Just(json!({"method": 7})),
        1 => (method.clone(), prop::sample::select(vec!["id", "jsonrpc", "_meta", "result"]))
            .prop_map(|(m, extra)| json!({"method": m, extra: 1})),
        1 => (method, prop_oneof![Just(json!([])), Just(json!("x")), Just(json!(null))])
            .prop_map(|(m, p)| json!({"method": m, "params": p})),
        1 => prop_oneof![Just(json!("roots/list")), Just(json!(null)), Just(json!([1]))],
    ]
}

fn requests() -> impl Strategy<Value = Map<String, Value>> {
    let key = prop_oneof![
        20 => prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
        1 => Just(String::new()),
    ];
    prop::collection::vec((key, request()), 0..4).prop_map(|entries| entries.into_iter().collect())
}

fn response() -> impl Strategy<Value = Value> {
    prop_oneof![
        10 => prop::sample::select(vec!["accept", "decline", "cancel"])
            .prop_map(|a| json!({"action": a})),
        1 => prop_oneof![Just(json!("yes")), Just(json!(null)), Just(json!([]))],
    ]
}

fn responses() -> impl Strategy<Value = Map<String, Value>> {
    let key = prop_oneof![
        6 => prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["zzz", "unknown", ""]).prop_map(str::to_owned),
    ];
    prop::collection::vec((key, response()), 0..4).prop_map(|entries| entries.into_iter().collect())
}

fn message() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop::sample::select(vec!["one", "two", "three"]).prop_map(str::to_owned))
}

/// A random transition of any kind.
fn transition() -> impl Strategy<Value = Transition> {
    prop_oneof![
        2 => prop::sample::select(vec!["Half way", "Almost"])
            .prop_map(|m| Transition::Progress { message: m.to_owned() }),
        4 => (requests(), message())
            .prop_map(|(requests, message)| Transition::RequireInput { requests, message }),
        1 => (
            prop_oneof![
                5 => Just(json!({"content": [{"type": "text", "text": "done"}]})),
                1 => Just(json!({"content": [], "isError": true})),
                1 => Just(json!("not an object")),
                1 => Just(json!([1, 2])),
            ],
            message()
        )
            .prop_map(|(result, message)| Transition::Complete { result, message }),
        1 => (-32700i64..-32000, message()).prop_map(|(code, message)| Transition::Fail {
            error: ErrorObject::new(code, "it broke"),
            message,
        }),
        6 => responses().prop_map(|responses| Transition::Answer { responses }),
        1 => Just(Transition::Cancel),
    ]
}

/// Up to 50 transitions, each with the milliseconds since the previous one.
fn sequence() -> impl Strategy<Value = Vec<(u64, Transition)>> {
    prop::collection::vec((0u64..1_000, transition()), 1..50)
}

// ---------------------------------------------------------------------------------
// Properties.
// ---------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

    /// Every step of a random sequence: the record and the outcome are the model's.
    #[test]
    fn random_sequences_follow_the_model(
        owned in any::<bool>(),
        ttl in prop::option::of(1u64..10_000_000),
        steps in sequence(),
    ) {
        let created = 1_785_578_400_000u64;
        let owner = owned.then(|| Principal::from("alice"));
        let mut record = TaskRecord::new(TaskId::random(), owner.clone(), Timestamp::from_millis(created));
        record.ttl_ms = ttl;
        let id = record.id;
        let mut model = Model::new(created);
        let mut now = created;
        for (i, (delta, transition)) in steps.iter().enumerate() {
            now += delta;
            let before = record.clone();
            let expected = model.step(transition, now);
            let actual = record.apply(transition, Timestamp::from_millis(now));
            prop_assert_eq!(
                Outcome::of(&actual), expected.clone(),
                "step {}: {:?} on {:?}", i, transition, before.status
            );
            if expected != Outcome::Changed {
                prop_assert_eq!(&record, &before, "step {}: a refused or no-op transition changed the record", i);
            }
            if let Err(diff) = model.check(&record) {
                return Err(TestCaseError::fail(format!("step {i}: {transition:?}\n{diff}")));
            }
            // What no transition touches.
            prop_assert_eq!(record.id, id);
            prop_assert_eq!(&record.owner, &owner);
            prop_assert_eq!(record.created_at, Timestamp::from_millis(created));
            prop_assert_eq!(record.ttl_ms, ttl);
            prop_assert_eq!(record.poll_interval_ms, None);
        }
        // The record survives a store's round trip as JSON unchanged.
        let stored = serde_json::to_string(&record).unwrap();
        prop_assert_eq!(serde_json::from_str::<TaskRecord>(&stored).unwrap(), record);
    }

    /// Input requests are accepted exactly when every entry follows the rules, on a
    /// task in any non-terminal status.
    #[test]
    fn input_request_validation_follows_the_rules(
        first in requests(),
        second in requests(),
    ) {
        let mut record = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(0));
        let mut model = Model::new(0);
        for (now, requests) in [(1, first), (2, second)] {
            let ask = Transition::RequireInput { requests, message: None };
            let expected = model.step(&ask, now);
            let actual = record.apply(&ask, Timestamp::from_millis(now));
            prop_assert_eq!(Outcome::of(&actual), expected, "{:?}", ask);
            if let Err(diff) = model.check(&record) {
                return Err(TestCaseError::fail(diff));
            }
        }
    }
}

/// The model itself, on the cases the rules spell out.
#[test]
fn the_model_follows_the_rules_it_was_written_from() {
    let ask = |keys: &[&str]| Transition::RequireInput {
        requests: keys
            .iter()
            .map(|k| (k.to_string(), json!({"method": "roots/list"})))
            .collect(),
        message: None,
    };
    let answer = |keys: &[&str]| Transition::Answer {
        responses: keys
            .iter()
            .map(|k| (k.to_string(), json!({"roots": []})))
            .collect(),
    };
    let mut m = Model::new(0);
    assert_eq!(m.step(&ask(&["a", "b"]), 1), Outcome::Changed);
    assert_eq!(m.step(&answer(&["zzz"]), 2), Outcome::Unchanged);
    assert_eq!(m.step(&answer(&["a"]), 3), Outcome::Changed);
    assert_eq!(m.status, Status::InputRequired);
    assert_eq!(
        m.step(&ask(&["a", "c"]), 4),
        Outcome::Duplicate(["a".to_owned()].into())
    );
    assert_eq!(m.step(&answer(&["a", "b"]), 5), Outcome::Changed);
    assert_eq!(m.status, Status::Working);
    assert_eq!(m.step(&Transition::Cancel, 6), Outcome::Changed);
    assert_eq!(m.step(&Transition::Cancel, 7), Outcome::Unchanged);
    assert_eq!(m.step(&ask(&["z"]), 8), Outcome::Terminal);
    assert_eq!((m.revision, m.updated_at), (4, 6));
    assert!(!valid_request(&json!({"method": "tools/call"})));
    assert!(!valid_request(&json!({"method": "roots/list", "id": 1})));
    assert!(valid_request(
        &json!({"method": "elicitation/create", "params": {}})
    ));
}
