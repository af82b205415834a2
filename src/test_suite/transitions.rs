//! Transitions through the state machine: terminal states, refusals, revisions.

use serde_json::{Map, json};

use super::helpers::{
    HOUR_MS, answer, answer_for, create, get, get_found, input_requests, record, update,
    update_found,
};
use crate::error::TransitionError;
use crate::store::{CreateLimits, TaskStore};
use crate::task::{Applied, ErrorObject, Scope, TaskStatus, Timestamp, Transition};

/// Once `completed`, `failed` or `cancelled`, a task never changes: every later
/// transition is refused with [`TransitionError::Terminal`] (a cancel is accepted as
/// [`Applied::Unchanged`]), and neither the stored record nor its revision moves.
pub async fn terminal_states_never_change<S: TaskStore>(store: S) {
    const RULE: &str = "terminal_states_never_change";
    let now = Timestamp::now();
    let finishers = [
        (
            TaskStatus::Completed,
            Transition::Complete {
                result: json!({"content": [{"type": "text", "text": "done"}]}),
                message: None,
            },
        ),
        (
            TaskStatus::Failed,
            Transition::Fail {
                error: ErrorObject::new(-32603, "broke"),
                message: None,
            },
        ),
        (TaskStatus::Cancelled, Transition::Cancel),
    ];
    let later = [
        Transition::Complete {
            result: json!({"content": []}),
            message: Some("again".to_owned()),
        },
        Transition::Fail {
            error: ErrorObject::new(-32000, "late"),
            message: None,
        },
        Transition::Progress {
            message: "still going?".to_owned(),
        },
        Transition::RequireInput {
            requests: input_requests(&["late"]),
            message: None,
        },
    ];
    for (status, finish) in finishers {
        let task = record(None, now, Some(HOUR_MS));
        let id = task.id;
        create(RULE, &store, task, CreateLimits::default()).await;
        let done = update(RULE, &store, &id, Scope::Any, &finish, now.plus_ms(1))
            .await
            .unwrap_or_else(|| panic!("[{RULE}] a new task must be found by update"));
        assert_eq!(
            done.outcome,
            Ok(Applied::Changed),
            "[{RULE}] finishing a working task as {status} must be applied"
        );
        assert_eq!(
            done.record.status, status,
            "[{RULE}] the task must now be {status}"
        );
        let frozen = get(RULE, &store, &id, Scope::Any, now.plus_ms(1))
            .await
            .unwrap_or_else(|| panic!("[{RULE}] a {status} task must still be found"));
        for (i, transition) in later.iter().enumerate() {
            let at = now.plus_ms(10 + i as u64);
            let refused = update(RULE, &store, &id, Scope::Any, transition, at)
                .await
                .unwrap_or_else(|| panic!("[{RULE}] a {status} task must still be found"));
            assert_eq!(
                refused.outcome,
                Err(TransitionError::Terminal),
                "[{RULE}] {transition:?} on a {status} task must be refused as Terminal"
            );
        }
        let cancel = update(
            RULE,
            &store,
            &id,
            Scope::Any,
            &Transition::Cancel,
            now.plus_ms(20),
        )
        .await
        .unwrap_or_else(|| panic!("[{RULE}] a {status} task must still be found"));
        assert_eq!(
            cancel.outcome,
            Ok(Applied::Unchanged),
            "[{RULE}] cancelling a {status} task must answer Unchanged"
        );
        let after = get(RULE, &store, &id, Scope::Any, now.plus_ms(30)).await;
        assert_eq!(
            after.as_ref(),
            Some(&frozen),
            "[{RULE}] a {status} task must not change at all (status, fields, revision {}) after later transitions",
            frozen.revision
        );
    }
}

/// A transition the state machine refuses leaves the stored record exactly as it
/// was, even when part of it looked valid (an answer batch with one malformed
/// response, a request batch reusing one old key, a non-object result).
pub async fn rejected_transition_changes_nothing<S: TaskStore>(store: S) {
    const RULE: &str = "rejected_transition_changes_nothing";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let ask = Transition::RequireInput {
        requests: input_requests(&["a", "b"]),
        message: Some("Need two answers".to_owned()),
    };
    update(RULE, &store, &id, Scope::Any, &ask, now.plus_ms(1)).await;
    let before = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(1)).await;
    let mut mixed = Map::new();
    mixed.insert("a".to_owned(), answer());
    mixed.insert("b".to_owned(), json!("not an object"));
    let refused = [
        Transition::Answer { responses: mixed },
        Transition::RequireInput {
            requests: input_requests(&["c", "a"]),
            message: Some("reuses a".to_owned()),
        },
        Transition::RequireInput {
            requests: [("d".to_owned(), json!({"method": "tools/call"}))]
                .into_iter()
                .collect(),
            message: None,
        },
        Transition::Complete {
            result: json!("not an object"),
            message: None,
        },
    ];
    for (i, transition) in refused.iter().enumerate() {
        let outcome = update_found(
            RULE,
            &store,
            &id,
            Scope::Any,
            transition,
            now.plus_ms(10 + i as u64),
        )
        .await
        .outcome;
        assert!(
            outcome.is_err(),
            "[{RULE}] {transition:?} must be refused, got {outcome:?}"
        );
        let after = get(RULE, &store, &id, Scope::Any, now.plus_ms(20)).await;
        assert_eq!(
            after.as_ref(),
            Some(&before),
            "[{RULE}] the refused {transition:?} ({outcome:?}) must leave the stored record as it was"
        );
    }
}

/// Every applied change bumps `revision` by exactly one and sets `updated_at`;
/// ignored and refused transitions leave both alone. The record `update` returns is
/// the record `get` reads afterwards.
pub async fn revision_increments_on_every_change<S: TaskStore>(store: S) {
    const RULE: &str = "revision_increments_on_every_change";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let steps = [
        (
            Transition::Progress {
                message: "1".to_owned(),
            },
            true,
        ),
        (
            Transition::Progress {
                message: "2".to_owned(),
            },
            true,
        ),
        (answer_for(&["x"]), false),
        (
            Transition::RequireInput {
                requests: input_requests(&["x", "y"]),
                message: None,
            },
            true,
        ),
        (answer_for(&["x"]), true),
        (answer_for(&["x"]), false),
        (
            Transition::RequireInput {
                requests: input_requests(&["y"]),
                message: None,
            },
            false,
        ),
        (answer_for(&["y"]), true),
        (
            Transition::Progress {
                message: "3".to_owned(),
            },
            true,
        ),
        (
            Transition::Complete {
                result: json!({"content": []}),
                message: None,
            },
            true,
        ),
        (Transition::Cancel, false),
    ];
    let mut revision = 0;
    let mut updated_at = now;
    for (i, (transition, changes)) in steps.iter().enumerate() {
        let at = now.plus_ms(1 + i as u64);
        let updated = update_found(RULE, &store, &id, Scope::Any, transition, at).await;
        assert_eq!(
            updated.changed(),
            *changes,
            "[{RULE}] step {i}: {transition:?} must {}be applied, got {:?}",
            if *changes { "" } else { "not " },
            updated.outcome
        );
        if *changes {
            revision += 1;
            updated_at = at;
        }
        assert_eq!(
            updated.record.revision, revision,
            "[{RULE}] step {i}: after {transition:?} the revision must be {revision}"
        );
        assert_eq!(
            updated.record.updated_at, updated_at,
            "[{RULE}] step {i}: updated_at must move with every change and only then"
        );
        let stored = get(RULE, &store, &id, Scope::Any, at).await;
        assert_eq!(
            stored.as_ref(),
            Some(&updated.record),
            "[{RULE}] step {i}: the record update returned must be the record stored"
        );
    }
}
