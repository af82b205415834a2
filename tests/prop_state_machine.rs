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

mod support;

use mcp_tasks::store::{ErrorObject, Timestamp, Transition};
use mcp_tasks::{Principal, TaskId, TaskRecord, TaskStatus};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use support::model::{METHODS, Model, Outcome, valid_request};

/// The number of cases: `PROPTEST_CASES`, or `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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
    assert_eq!(m.status, TaskStatus::InputRequired);
    assert_eq!(
        m.step(&ask(&["a", "c"]), 4),
        Outcome::Duplicate(["a".to_owned()].into())
    );
    assert_eq!(m.step(&answer(&["a", "b"]), 5), Outcome::Changed);
    assert_eq!(m.status, TaskStatus::Working);
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
