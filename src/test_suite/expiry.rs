//! Expiry and cleanup: expired records read as absent; `cleanup` frees them, and
//! terminal records without a TTL after the retention.

use std::time::Duration;

use serde_json::json;

use super::helpers::{HOUR_MS, cleanup, create, get, record, update};
use crate::store::{CreateLimits, TaskStore};
use crate::task::{ErrorObject, Principal, Scope, TaskRecord, Timestamp, Transition};

/// A record whose `created_at + ttl` has passed reads as absent on `get` and
/// `update`, in every scope, before any cleanup ran; one instant earlier it is there.
/// An update at or after expiry writes nothing.
pub async fn expired_reads_as_absent<S: TaskStore>(store: S) {
    const RULE: &str = "expired_reads_as_absent";
    let now = Timestamp::now();
    let ttl = 60_000;
    let alice = Principal::from("alice");
    let task = record(Some(alice.clone()), now, Some(ttl));
    let id = task.id;
    create(RULE, &store, task.clone(), CreateLimits::default()).await;
    let last_live = now.plus_ms(ttl - 1);
    let expiry = now.plus_ms(ttl);
    assert!(
        get(RULE, &store, &id, Scope::Owner(Some(&alice)), last_live)
            .await
            .is_some(),
        "[{RULE}] a record must still be found 1 ms before created_at + ttl"
    );
    for (at, when) in [
        (expiry, "exactly at created_at + ttl"),
        (now.plus_ms(10 * ttl), "long after expiry"),
    ] {
        for scope in [Scope::Owner(Some(&alice)), Scope::Any] {
            assert!(
                get(RULE, &store, &id, scope, at).await.is_none(),
                "[{RULE}] get {when} with {scope:?} must return Ok(None) before any cleanup"
            );
            for transition in [
                Transition::Progress {
                    message: "late".to_owned(),
                },
                Transition::Cancel,
            ] {
                assert!(
                    update(RULE, &store, &id, scope, &transition, at)
                        .await
                        .is_none(),
                    "[{RULE}] update ({transition:?}) {when} with {scope:?} must return Ok(None) before any cleanup"
                );
            }
        }
    }
    assert_eq!(
        get(RULE, &store, &id, Scope::Any, last_live).await.as_ref(),
        Some(&task),
        "[{RULE}] updates of an expired record must not write anything"
    );
}

/// `cleanup` removes the records that expired at `now` and returns how many it
/// removed; live records stay, terminal records with a TTL stay until their TTL runs
/// out, and a second sweep finds nothing.
pub async fn cleanup_removes_expired<S: TaskStore>(store: S) {
    const RULE: &str = "cleanup_removes_expired";
    let now = Timestamp::now();
    let retention = Duration::from_secs(24 * 3600);
    let expiring: Vec<TaskRecord> = [1_000, 2_000, 3_000]
        .into_iter()
        .map(|ttl| record(None, now, Some(ttl)))
        .collect();
    let live = record(Some(Principal::from("alice")), now, Some(HOUR_MS));
    let forever = record(None, now, None);
    let finished = record(None, now, Some(HOUR_MS));
    for r in expiring.iter().chain([&live, &forever, &finished]) {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let done = Transition::Complete {
        result: json!({"content": []}),
        message: None,
    };
    update(
        RULE,
        &store,
        &finished.id,
        Scope::Any,
        &done,
        now.plus_ms(1),
    )
    .await;
    let removed = cleanup(RULE, &store, now.plus_ms(500), retention).await;
    assert_eq!(
        removed, 0,
        "[{RULE}] cleanup before any TTL ran out must remove nothing"
    );
    let sweep = now.plus_ms(2_500);
    let removed = cleanup(RULE, &store, sweep, retention).await;
    assert_eq!(
        removed, 2,
        "[{RULE}] cleanup must remove exactly the 2 records whose TTL ran out and return 2"
    );
    assert!(
        get(RULE, &store, &expiring[2].id, Scope::Any, sweep)
            .await
            .is_some(),
        "[{RULE}] a record with TTL left must survive cleanup"
    );
    for r in [&live, &forever, &finished] {
        assert!(
            get(RULE, &store, &r.id, Scope::Any, sweep).await.is_some(),
            "[{RULE}] cleanup removed a record that had not expired (ttl {:?}, status {:?})",
            r.ttl_ms,
            r.status
        );
    }
    assert_eq!(
        cleanup(RULE, &store, sweep, retention).await,
        0,
        "[{RULE}] a second cleanup at the same time must find nothing"
    );
    let removed = cleanup(RULE, &store, now.plus_ms(HOUR_MS), retention).await;
    assert_eq!(
        removed, 3,
        "[{RULE}] at created_at + 1 h the last short record, the live one and the finished one (TTL 1 h) must go"
    );
    assert!(
        get(RULE, &store, &forever.id, Scope::Any, now.plus_ms(HOUR_MS))
            .await
            .is_some(),
        "[{RULE}] a working record without a TTL must never be cleaned up"
    );
}

/// A terminal record without a TTL is removed by `cleanup` only once it has been
/// terminal for longer than the retention; a working record without a TTL is never
/// removed.
pub async fn terminal_without_ttl_evicted_after_retention<S: TaskStore>(store: S) {
    const RULE: &str = "terminal_without_ttl_evicted_after_retention";
    let now = Timestamp::now();
    let retention = Duration::from_secs(600);
    let retention_ms = 600_000;
    let working = record(None, now, None);
    let finished = record(Some(Principal::from("alice")), now, None);
    for r in [&working, &finished] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let done_at = now.plus_ms(5_000);
    let fail = Transition::Fail {
        error: ErrorObject::new(-32603, "broke"),
        message: None,
    };
    update(RULE, &store, &finished.id, Scope::Any, &fail, done_at).await;
    let early = done_at.plus_ms(retention_ms - 1);
    assert_eq!(
        cleanup(RULE, &store, early, retention).await,
        0,
        "[{RULE}] a terminal record without TTL must be kept until it has been terminal for the retention"
    );
    assert!(
        get(RULE, &store, &finished.id, Scope::Any, early)
            .await
            .is_some(),
        "[{RULE}] a terminal record without TTL must be readable within the retention"
    );
    let late = done_at.plus_ms(retention_ms + 1);
    assert_eq!(
        cleanup(RULE, &store, late, retention).await,
        1,
        "[{RULE}] a terminal record without TTL must be removed once terminal for longer than the retention"
    );
    assert!(
        get(RULE, &store, &finished.id, Scope::Any, late)
            .await
            .is_none(),
        "[{RULE}] the evicted record must be gone"
    );
    let far = now.plus_ms(1_000 * retention_ms);
    assert_eq!(
        cleanup(RULE, &store, far, Duration::ZERO).await,
        0,
        "[{RULE}] a working record without TTL must never be removed, whatever the retention"
    );
    assert!(
        get(RULE, &store, &working.id, Scope::Any, far)
            .await
            .is_some(),
        "[{RULE}] a working record without TTL must stay readable"
    );
}
