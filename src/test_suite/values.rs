//! Values: whatever JSON the memory store keeps, every store gives back unchanged,
//! U+0000 and exotic numbers included, through every write path.

use serde_json::{Map, Value, json};

use super::helpers::{HOUR_MS, create, get_found, record, update_found};
use crate::error::{Limit, StoreError};
use crate::store::{CreateLimits, TaskStore};
use crate::task::{ErrorObject, Principal, Scope, Timestamp, Transition};

/// Strings and numbers a database might refuse or rewrite: U+0000 (which
/// PostgreSQL's `jsonb` and `text` refuse), control and non-BMP characters, escapes,
/// negative zero, integers at the ends of their range, tiny and huge floats.
fn awkward() -> Value {
    json!({
        "nul": "a\u{0}b",
        "only\u{0}": "\u{0}",
        "controls": "\u{1}\u{8}\u{1f}\u{7f}",
        "unicode": "é ✓ 𝄞 \u{feff} \u{2028}",
        "escapes": "\"\\/\n\r\t",
        "numbers": [0, -0.0, 1.0, 1.5, 0.1, -2.5e-8, 1e300, 123_456.789, u64::MAX, i64::MIN],
        "nested": {"deep": [[[{"": null}]]], "empty": {}, "list": []},
        "flags": [true, false, null],
    })
}

fn keyed(key: &str, value: Value) -> Map<String, Value> {
    [(key.to_owned(), value)].into_iter().collect()
}

/// Every value a record carries — the owner, status messages, input requests and
/// their keys, answers, results, errors — reads back exactly as written, through
/// `create` and every kind of `update`, U+0000 included. Owners that differ only
/// after a U+0000 stay apart, in reads and in the per-owner cap.
pub async fn values_round_trip_unchanged<S: TaskStore>(store: S) {
    const RULE: &str = "values_round_trip_unchanged";
    let now = Timestamp::now();
    let owner = Principal::from("own\u{0}er \u{1} 𝄞");
    let me = Scope::Owner(Some(&owner));

    let mut asking = record(Some(owner.clone()), now, Some(HOUR_MS));
    asking.status_message = Some("status \u{0} message".to_owned());
    asking.poll_interval_ms = Some(u64::from(u32::MAX));
    let id = asking.id;
    create(RULE, &store, asking.clone(), CreateLimits::default()).await;
    let read = get_found(RULE, &store, &id, me, now).await;
    assert_eq!(
        read, asking,
        "[{RULE}] create must keep the owner and status message, U+0000 included"
    );

    let steps = [
        Transition::Progress {
            message: "progress \u{0}".to_owned(),
        },
        Transition::RequireInput {
            requests: keyed(
                "key \u{0} one",
                json!({"method": "elicitation/create", "params": {"message": "?\u{0}", "requestedSchema": awkward()}}),
            ),
            message: Some("input \u{0} please".to_owned()),
        },
        Transition::Answer {
            responses: keyed(
                "key \u{0} one",
                json!({"action": "accept", "content": awkward()}),
            ),
        },
        Transition::Complete {
            result: json!({"content": [{"type": "text", "text": "done \u{0}"}], "structuredContent": awkward()}),
            message: Some("finished \u{0}".to_owned()),
        },
    ];
    let mut expected = asking;
    for (i, step) in steps.iter().enumerate() {
        let at = now.plus_ms(1 + i as u64);
        let outcome = expected.apply(step, at);
        assert!(outcome.is_ok(), "[{RULE}] the model refused {step:?}");
        let updated = update_found(RULE, &store, &id, me, step, at).await;
        assert_eq!(
            updated.record, expected,
            "[{RULE}] update ({step:?}) must return the record as written"
        );
        assert_eq!(
            get_found(RULE, &store, &id, me, at).await,
            expected,
            "[{RULE}] after {step:?} the record must read back unchanged"
        );
    }

    let failing = record(Some(owner.clone()), now, None);
    let failed_id = failing.id;
    create(RULE, &store, failing.clone(), CreateLimits::default()).await;
    let fail = Transition::Fail {
        error: ErrorObject::new(i64::MIN, "broke \u{0} here").with_data(awkward()),
        message: Some("failed \u{0}".to_owned()),
    };
    let mut expected = failing;
    expected.apply(&fail, now.plus_ms(1)).unwrap();
    update_found(RULE, &store, &failed_id, me, &fail, now.plus_ms(1)).await;
    assert_eq!(
        get_found(RULE, &store, &failed_id, me, now.plus_ms(1)).await,
        expected,
        "[{RULE}] a failed task's error, data and message must read back unchanged"
    );

    // The owner is compared exactly: a prefix up to the U+0000 is someone else.
    let prefix = Principal::from("own");
    assert!(
        store
            .get(&id, Scope::Owner(Some(&prefix)), now)
            .await
            .unwrap_or_else(|e| panic!("[{RULE}] get failed: {e}"))
            .is_none(),
        "[{RULE}] an owner equal up to a U+0000 must read as another owner"
    );
    let ids = [id, failed_id];
    let seen = store
        .visible(&ids, me, now.plus_ms(10))
        .await
        .unwrap_or_else(|e| panic!("[{RULE}] visible failed: {e}"));
    assert_eq!(seen, ids, "[{RULE}] visible must find the owner's tasks");

    let one = CreateLimits::new(None, Some(1));
    for name in ["cap\u{0}a", "cap\u{0}b"] {
        let first = record(Some(Principal::from(name)), now, Some(HOUR_MS));
        create(RULE, &store, first, one).await;
    }
    let again = record(Some(Principal::from("cap\u{0}a")), now, Some(HOUR_MS));
    assert!(
        matches!(
            store.create(again, one).await,
            Err(StoreError::LimitReached(Limit::PerOwner))
        ),
        "[{RULE}] owners that differ after a U+0000 have caps of their own, and each is kept"
    );
}
