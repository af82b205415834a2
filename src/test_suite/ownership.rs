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

/// A foreign id and an unknown id get the same answer from every read: `get`,
/// `update` and `visible` in an owner scope answer `Ok(None)` (or leave the id out)
/// for both, whether the foreign task is live, finished or expired, and whatever
/// the state of its record. A store should also make them cost the same: check the
/// owner before fetching or decoding the record (the built-in stores compare it in
/// memory, in the `SELECT`, or in a server-side script), so the time a read takes
/// does not tell the holder of a leaked id that the task exists. That cost is not
/// measured here: a timing test would flake.
pub async fn foreign_and_unknown_ids_read_alike<S: TaskStore>(store: S) {
    const RULE: &str = "foreign_and_unknown_ids_read_alike";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let mallory = Principal::from("mallory");
    let live = record(Some(alice.clone()), now, Some(HOUR_MS));
    let finished = record(Some(alice.clone()), now, None);
    let short = record(Some(alice.clone()), now, Some(10));
    let anonymous = record(None, now, None);
    for r in [&live, &finished, &short, &anonymous] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let cancel = Transition::Cancel;
    update(
        RULE,
        &store,
        &finished.id,
        Scope::Any,
        &cancel,
        now.plus_ms(1),
    )
    .await;
    let later = now.plus_ms(20);
    let unknown = TaskId::random();
    let scopes: [(Scope<'_>, &str); 2] = [
        (Scope::Owner(Some(&mallory)), "another principal"),
        (Scope::Owner(None), "an unauthenticated caller"),
    ];
    let ids = [
        (&live.id, "a live task of alice"),
        (&finished.id, "a finished task of alice"),
        (&short.id, "an expired task of alice"),
        (&unknown, "an unknown id"),
    ];
    for (scope, who) in scopes {
        for (id, what) in ids {
            let got = store.get(id, scope, later).await;
            assert!(
                matches!(got, Ok(None)),
                "[{RULE}] get of {what} by {who} must answer Ok(None), as for an unknown id, got {got:?}"
            );
            let progress = Transition::Progress {
                message: "probe".to_owned(),
            };
            let updated = store.update(id, scope, &progress, later).await;
            assert!(
                matches!(updated, Ok(None)),
                "[{RULE}] update of {what} by {who} must answer Ok(None), as for an unknown id, got {updated:?}"
            );
        }
        let all: Vec<TaskId> = ids.iter().map(|(id, _)| **id).collect();
        match store.visible(&all, scope, later).await {
            Ok(found) => assert!(
                found.is_empty(),
                "[{RULE}] visible for {who} must leave out foreign and unknown ids alike, it listed {} of them",
                found.len()
            ),
            Err(e) => {
                panic!("[{RULE}] visible for {who} must answer like for unknown ids, got Err({e})")
            }
        }
    }
    // The owner still sees her live and finished tasks, untouched.
    for r in [&live, &finished] {
        let found = get(RULE, &store, &r.id, Scope::Owner(Some(&alice)), later).await;
        let found = found.unwrap_or_else(|| {
            panic!("[{RULE}] the owner must still find her task after foreign probes")
        });
        assert_ne!(
            found.status_message.as_deref(),
            Some("probe"),
            "[{RULE}] a foreign update must write nothing"
        );
    }
    // An unowned task: foreign to every principal, like an unknown id.
    let got = store
        .get(&anonymous.id, Scope::Owner(Some(&alice)), later)
        .await;
    assert!(
        matches!(got, Ok(None)),
        "[{RULE}] an unowned task read by alice must answer Ok(None), got {got:?}"
    );
}

/// Multi-node: [`foreign_and_unknown_ids_read_alike`] across nodes. A task created
/// through one node is read through the other: its owner and [`Scope::Any`] find it,
/// while a foreign `get`, `update` or `visible` answers exactly as for an unknown id
/// and writes nothing.
pub async fn nodes_foreign_and_unknown_ids_read_alike<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_foreign_and_unknown_ids_read_alike";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let mallory = Principal::from("mallory");
    let task = record(Some(alice.clone()), now, Some(HOUR_MS));
    create(RULE, &a, task.clone(), CreateLimits::default()).await;
    let unknown = TaskId::random();
    for scope in [Scope::Owner(Some(&mallory)), Scope::Owner(None)] {
        for id in [&task.id, &unknown] {
            let got = b.get(id, scope, now).await;
            assert!(
                matches!(got, Ok(None)),
                "[{RULE}] a foreign or unknown id read on the other node must answer Ok(None), got {got:?}"
            );
            let updated = b.update(id, scope, &Transition::Cancel, now).await;
            assert!(
                matches!(updated, Ok(None)),
                "[{RULE}] a foreign or unknown id updated on the other node must answer Ok(None), got {updated:?}"
            );
        }
        match b.visible(&[task.id, unknown], scope, now).await {
            Ok(found) => assert!(
                found.is_empty(),
                "[{RULE}] visible on the other node must leave out foreign and unknown ids alike"
            ),
            Err(e) => panic!("[{RULE}] visible on the other node failed: {e}"),
        }
    }
    for scope in [Scope::Owner(Some(&alice)), Scope::Any] {
        let found = get(RULE, &b, &task.id, scope, now).await;
        assert_eq!(
            found.as_ref(),
            Some(&task),
            "[{RULE}] the owner and Scope::Any must find the task, unchanged, on the other node"
        );
    }
}
