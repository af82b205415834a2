//! Who sees a task: its owner, and `Scope::Any`; nobody else.

use serde_json::json;

use super::helpers::{HOUR_MS, create, get, input_requests, record, update};
use crate::store::{CreateLimits, TaskStore};
use crate::task::{Applied, Principal, Scope, TaskId, Timestamp, Transition};

/// A task owned by someone else reads exactly like a missing id, for `get` and for
/// `update`: `Ok(None)` every time, and the record is left untouched.
/// `Scope::Owner(None)` (an unauthenticated caller) and `Scope::Owner(Some(_))` never
/// see each other's tasks.
pub async fn foreign_owner_reads_as_missing<S: TaskStore>(store: S) {
    const RULE: &str = "foreign_owner_reads_as_missing";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let bob = Principal::from("bob");
    let owned = record(Some(alice.clone()), now, Some(HOUR_MS));
    let anonymous = record(None, now, Some(HOUR_MS));
    for r in [&owned, &anonymous] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let missing = TaskId::random();
    let cases: [(&TaskId, Scope<'_>, &str); 5] = [
        (
            &owned.id,
            Scope::Owner(Some(&bob)),
            "alice's task read by bob",
        ),
        (
            &owned.id,
            Scope::Owner(None),
            "alice's task read by an unauthenticated caller",
        ),
        (
            &anonymous.id,
            Scope::Owner(Some(&alice)),
            "an unowned task read by alice",
        ),
        (&missing, Scope::Owner(Some(&alice)), "a missing id"),
        (
            &missing,
            Scope::Owner(None),
            "a missing id (unauthenticated)",
        ),
    ];
    let writes = [
        Transition::Cancel,
        Transition::Progress {
            message: "hijacked".to_owned(),
        },
        Transition::Complete {
            result: json!({"content": []}),
            message: None,
        },
        Transition::RequireInput {
            requests: input_requests(&["stolen"]),
            message: None,
        },
    ];
    for (id, scope, what) in cases {
        match store.get(id, scope, now).await {
            Ok(None) => {}
            Ok(Some(_)) => {
                panic!("[{RULE}] get of {what} must return Ok(None), it returned the record")
            }
            Err(e) => panic!(
                "[{RULE}] get of {what} must return Ok(None) like a missing id, got Err({e})"
            ),
        }
        for transition in &writes {
            match store.update(id, scope, transition, now.plus_ms(1)).await {
                Ok(None) => {}
                Ok(Some(u)) => panic!(
                    "[{RULE}] update of {what} must return Ok(None) like a missing id, got an update with outcome {:?}",
                    u.outcome
                ),
                Err(e) => panic!(
                    "[{RULE}] update of {what} must return Ok(None) like a missing id, got Err({e})"
                ),
            }
        }
    }
    for r in [&owned, &anonymous] {
        let found = get(RULE, &store, &r.id, Scope::Any, now.plus_ms(2)).await;
        assert_eq!(
            found.as_ref(),
            Some(r),
            "[{RULE}] updates in a foreign scope must leave the record untouched"
        );
    }
}

/// [`Scope::Any`] sees and changes every task, owned or not.
pub async fn scope_any_sees_all<S: TaskStore>(store: S) {
    const RULE: &str = "scope_any_sees_all";
    let now = Timestamp::now();
    let owned = record(Some(Principal::from("alice")), now, Some(HOUR_MS));
    let anonymous = record(None, now, None);
    for r in [&owned, &anonymous] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    for r in [&owned, &anonymous] {
        let who = if r.owner.is_some() {
            "owned"
        } else {
            "unowned"
        };
        let found = get(RULE, &store, &r.id, Scope::Any, now).await;
        assert_eq!(
            found.as_ref(),
            Some(r),
            "[{RULE}] Scope::Any must see an {who} task"
        );
        let progress = Transition::Progress {
            message: "half way".to_owned(),
        };
        let updated = update(RULE, &store, &r.id, Scope::Any, &progress, now.plus_ms(1))
            .await
            .unwrap_or_else(|| panic!("[{RULE}] update with Scope::Any must find an {who} task"));
        assert_eq!(
            updated.outcome,
            Ok(Applied::Changed),
            "[{RULE}] progress on an {who} working task through Scope::Any must be applied"
        );
        assert_eq!(
            updated.record.status_message.as_deref(),
            Some("half way"),
            "[{RULE}] the record returned by update must carry the change"
        );
    }
}
