//! What each owner's records take: [`TaskStore::owner_bytes`] follows every
//! create, write and removal, for each owner alone, concurrent writers included.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::helpers::{
    HOUR_MS, WRITERS, answer_for, cleanup, create, create_refused, get_found, input_requests, race,
    record, require_multi_thread, update_found,
};
use crate::error::{Limit, StoreError};
use crate::store::{CreateLimits, TaskStore, encoded_len};
use crate::task::{Principal, Scope, TaskId, Timestamp, Transition};

/// How much more than a record's encoded size a store may count for it.
const SLACK_PER_RECORD: u64 = crate::store::COUNT_SLACK as u64;

async fn owner_bytes<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    owner: Option<&Principal>,
) -> u64 {
    store
        .owner_bytes(owner)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] owner_bytes failed: {e}"))
}

/// The encoded size of the records of `ids`, as they are stored now.
async fn stored_size<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    ids: &[TaskId],
    now: Timestamp,
) -> u64 {
    let mut total = 0;
    for id in ids {
        total += encoded_len(&get_found(rule, store, id, Scope::Any, now).await) as u64;
    }
    total
}

/// Asserts that `owner`'s count covers the records of `ids` exactly, or a little
/// more for each (an upper bound), never less.
async fn counts_exactly<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    owner: Option<&Principal>,
    ids: &[TaskId],
    now: Timestamp,
    when: &str,
) {
    let size = stored_size(rule, store, ids, now).await;
    let counted = owner_bytes(rule, store, owner).await;
    let most = size + SLACK_PER_RECORD * ids.len() as u64;
    assert!(
        (size..=most).contains(&counted),
        "[{rule}] {when}: owner_bytes must count the owner's records' encoded size \
         ({size} bytes), never less and at most {SLACK_PER_RECORD} more per record; got {counted}"
    );
}

/// `owner_bytes` of an owner is the encoded size of its records (or a little more
/// for each, never less): it grows with a create, a result, input requests and
/// answers, shrinks when a write makes a record smaller, changes for no other owner,
/// is left as it was by a refused create, a duplicate and a refused transition, and
/// is zero once `cleanup` removed every record.
pub async fn owner_bytes_follow_every_write_and_removal<S: TaskStore>(store: S) {
    const RULE: &str = "owner_bytes_follow_every_write_and_removal";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let bob = Principal::from("bob");
    for owner in [Some(&alice), Some(&bob), None] {
        assert_eq!(
            owner_bytes(RULE, &store, owner).await,
            0,
            "[{RULE}] an owner without records stores no bytes"
        );
    }
    let mut mine = Vec::new();
    for n in 0..3 {
        let mut task = record(Some(alice.clone()), now, Some(HOUR_MS));
        task.status_message = Some(format!("Queued {n}"));
        mine.push(task.id);
        create(RULE, &store, task, CreateLimits::default()).await;
    }
    let theirs = record(Some(bob.clone()), now, Some(HOUR_MS));
    let anonymous = record(None, now, Some(HOUR_MS));
    let (bobs, anonymous_id) = (theirs.id, anonymous.id);
    create(RULE, &store, theirs.clone(), CreateLimits::default()).await;
    create(RULE, &store, anonymous, CreateLimits::default()).await;
    counts_exactly(
        RULE,
        &store,
        Some(&alice),
        &mine,
        now,
        "after three creates",
    )
    .await;
    counts_exactly(
        RULE,
        &store,
        Some(&bob),
        &[bobs],
        now,
        "another owner's create",
    )
    .await;
    counts_exactly(
        RULE,
        &store,
        None,
        &[anonymous_id],
        now,
        "the anonymous owner",
    )
    .await;
    let bob_before = owner_bytes(RULE, &store, Some(&bob)).await;

    // Refused creates change nothing.
    let mut twin = record(Some(alice.clone()), now, Some(HOUR_MS));
    twin.id = mine[0];
    twin.status_message = Some("x".repeat(10_000));
    assert!(
        matches!(
            store.create(twin, CreateLimits::default()).await,
            Err(StoreError::Duplicate)
        ),
        "[{RULE}] a second create of an id must be refused as a duplicate"
    );
    let full = CreateLimits::new(None, Some(3));
    let mut over = record(Some(alice.clone()), now, Some(HOUR_MS));
    over.status_message = Some("x".repeat(10_000));
    create_refused(RULE, &store, over, full, Limit::PerOwner, "alice holds 3").await;
    counts_exactly(
        RULE,
        &store,
        Some(&alice),
        &mine,
        now,
        "after refused creates",
    )
    .await;

    // A result, input requests, answers and a shorter message.
    let result = json!({"content": [{"type": "text", "text": "r".repeat(64 * 1024)}]});
    let done = Transition::Complete {
        result,
        message: None,
    };
    let before = owner_bytes(RULE, &store, Some(&alice)).await;
    update_found(RULE, &store, &mine[0], Scope::Any, &done, now.plus_ms(1)).await;
    let after = owner_bytes(RULE, &store, Some(&alice)).await;
    assert!(
        after >= before + 64 * 1024,
        "[{RULE}] a 64 KiB result must add at least 64 KiB: {before} -> {after}"
    );
    counts_exactly(RULE, &store, Some(&alice), &mine, now, "after a result").await;
    let ask = Transition::RequireInput {
        requests: input_requests(&["a", "b"]),
        message: Some("q".repeat(4_000)),
    };
    update_found(RULE, &store, &mine[1], Scope::Any, &ask, now.plus_ms(2)).await;
    counts_exactly(
        RULE,
        &store,
        Some(&alice),
        &mine,
        now,
        "after input requests",
    )
    .await;
    let scope = Scope::Owner(Some(&alice));
    update_found(
        RULE,
        &store,
        &mine[1],
        scope,
        &answer_for(&["a", "b"]),
        now.plus_ms(3),
    )
    .await;
    counts_exactly(RULE, &store, Some(&alice), &mine, now, "after answers").await;
    let shorter = Transition::Progress {
        message: "ok".to_owned(),
    };
    update_found(RULE, &store, &mine[1], Scope::Any, &shorter, now.plus_ms(4)).await;
    counts_exactly(
        RULE,
        &store,
        Some(&alice),
        &mine,
        now,
        "after a shorter message",
    )
    .await;

    // A transition the state machine refuses writes nothing.
    let late = Transition::Progress {
        message: "l".repeat(10_000),
    };
    let before = owner_bytes(RULE, &store, Some(&alice)).await;
    update_found(RULE, &store, &mine[0], Scope::Any, &late, now.plus_ms(5)).await;
    assert_eq!(
        owner_bytes(RULE, &store, Some(&alice)).await,
        before,
        "[{RULE}] a refused transition must not change the owner's bytes"
    );
    assert_eq!(
        owner_bytes(RULE, &store, Some(&bob)).await,
        bob_before,
        "[{RULE}] another owner's writes must not change bob's bytes"
    );

    let removed = cleanup(RULE, &store, now.plus_ms(HOUR_MS + 1), Duration::ZERO).await;
    assert_eq!(removed, 5, "[{RULE}] every record expired");
    for owner in [Some(&alice), Some(&bob), None] {
        assert_eq!(
            owner_bytes(RULE, &store, owner).await,
            0,
            "[{RULE}] an owner whose records were all removed stores no bytes"
        );
    }
}

/// Writers racing on one owner's tasks (each task written by several at once,
/// results and messages of different sizes) leave `owner_bytes` equal to the size
/// of what was stored in the end: no change is lost or counted twice.
pub async fn owner_bytes_hold_under_concurrent_writes<S: TaskStore>(store: S) {
    const RULE: &str = "owner_bytes_hold_under_concurrent_writes";
    require_multi_thread(RULE);
    const TASKS: usize = 8;
    let store = Arc::new(store);
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let mut ids = Vec::new();
    for _ in 0..TASKS {
        let task = record(Some(alice.clone()), now, Some(HOUR_MS));
        ids.push(task.id);
        create(RULE, &*store, task, CreateLimits::default()).await;
    }
    let writes: Vec<(usize, TaskId)> = (0..WRITERS).map(|n| (n, ids[n % TASKS])).collect();
    let outcomes = race(writes, |(n, id)| {
        let store = store.clone();
        async move {
            let transition = if n % 4 == 3 {
                Transition::Complete {
                    result: json!({"content": [], "pad": "p".repeat(1_000 * n)}),
                    message: None,
                }
            } else {
                Transition::Progress {
                    message: "m".repeat(100 * n),
                }
            };
            let at = now.plus_ms(1 + n as u64);
            for _ in 0..10 {
                match store.update(&id, Scope::Any, &transition, at).await {
                    Err(StoreError::Contention) => continue,
                    other => return other.map(drop).map_err(|e| e.to_string()),
                }
            }
            Ok(())
        }
    })
    .await;
    for outcome in outcomes {
        if let Err(e) = outcome {
            panic!("[{RULE}] a concurrent write failed: {e}");
        }
    }
    counts_exactly(RULE, &*store, Some(&alice), &ids, now, "after the race").await;
    cleanup(RULE, &*store, now.plus_ms(HOUR_MS + 1), Duration::ZERO).await;
    assert_eq!(
        owner_bytes(RULE, &*store, Some(&alice)).await,
        0,
        "[{RULE}] an owner whose records were all removed stores no bytes"
    );
}
