//! Clocks: nodes whose clocks disagree by minutes still agree on when a task
//! expires and when a finished one may go, because the store decides by its own.

use std::time::{Duration, Instant};

use super::helpers::{cleanup, create, get, record, update};
use crate::error::{Limit, StoreError};
use crate::store::{CreateLimits, TaskStore};
use crate::task::{Principal, Scope, TaskId, Timestamp, Transition};

/// How far the two simulated nodes' clocks are from the real time, each way.
const SKEW_MS: u64 = 10 * 60_000;
/// The short tasks' TTL: the rule's first steps must fit in it.
const TTL_MS: u64 = 3_000;

/// Which simulated node a call comes from.
#[derive(Debug, Clone, Copy)]
enum Node {
    Ahead,
    Behind,
}

impl Node {
    fn now(self) -> Timestamp {
        match self {
            Node::Ahead => Timestamp::now().plus_ms(SKEW_MS),
            Node::Behind => Timestamp::now().minus_ms(SKEW_MS),
        }
    }
}

/// On a store that decides by its own clock ([`Clock::Store`](crate::store::Clock)),
/// the `now` of a node whose clock is 10 minutes ahead or behind changes no
/// decision: a task created by either node with a 3 s TTL is found by both at
/// once (no early deletion: not by reads, not by a sweep or a full create from the
/// node ahead); a finished task is kept for the retention (5 minutes, shorter
/// than the skew) whichever node sweeps; and once 3 s have really passed, the
/// short tasks are gone for both nodes (no resurrection on the node behind), and a
/// sweep from the node behind frees exactly their rows.
///
/// The rule waits for the TTL in real time (about 3 s). A store that takes the
/// caller's `now` as its clock fails it, as it should.
pub async fn node_clocks_minutes_apart_agree_on_expiry<S: TaskStore>(store: S) {
    const RULE: &str = "node_clocks_minutes_apart_agree_on_expiry";
    let retention = Duration::from_secs(5 * 60);
    let alice = Principal::from("alice");
    let started = Instant::now();

    let short_ahead = record(Some(alice.clone()), Node::Ahead.now(), Some(TTL_MS));
    let short_behind = record(None, Node::Behind.now(), Some(TTL_MS));
    let done_ahead = record(None, Node::Ahead.now(), None);
    let done_behind = record(Some(alice.clone()), Node::Behind.now(), None);
    for task in [&short_ahead, &short_behind, &done_ahead, &done_behind] {
        create(RULE, &store, task.clone(), CreateLimits::default()).await;
    }
    // Each finished task is ended by the other node.
    for (task, node) in [(&done_ahead, Node::Behind), (&done_behind, Node::Ahead)] {
        let cancelled = update(
            RULE,
            &store,
            &task.id,
            Scope::Any,
            &Transition::Cancel,
            node.now(),
        )
        .await
        .unwrap_or_else(|| panic!("[{RULE}] a fresh task must be found by the {node:?} node"));
        assert!(cancelled.changed(), "[{RULE}] the cancel must be written");
    }
    let all = [
        short_ahead.id,
        short_behind.id,
        done_ahead.id,
        done_behind.id,
    ];
    let short = [short_ahead.id, short_behind.id];

    for node in [Node::Ahead, Node::Behind] {
        for id in &all {
            assert!(
                get(RULE, &store, id, Scope::Any, node.now())
                    .await
                    .is_some(),
                "[{RULE}] a task created moments ago must be found by the {node:?} node"
            );
        }
        let found = store
            .visible(&all, Scope::Any, node.now())
            .await
            .unwrap_or_else(|e| panic!("[{RULE}] visible failed: {e}"));
        assert_eq!(
            found, all,
            "[{RULE}] visible on the {node:?} node must list every task"
        );
    }
    assert_eq!(
        cleanup(RULE, &store, Node::Ahead.now(), retention).await,
        0,
        "[{RULE}] a sweep from the node ahead must remove nothing: no TTL ran out and no task finished longer than the retention ago"
    );
    let full = CreateLimits::new(Some(all.len()), None).with_retention(retention);
    let extra = record(None, Node::Ahead.now(), None);
    assert!(
        matches!(
            store.create(extra, full).await,
            Err(StoreError::LimitReached(Limit::Rows))
        ),
        "[{RULE}] a create from the node ahead must find the store full, not make room by removing live tasks"
    );
    for id in &all {
        assert!(
            get(RULE, &store, id, Scope::Any, Node::Behind.now())
                .await
                .is_some(),
            "[{RULE}] a full create from the node ahead must not remove a live task"
        );
    }
    assert!(
        started.elapsed() < Duration::from_millis(TTL_MS),
        "[{RULE}] the steps before the TTL must take under {TTL_MS} ms (the store was too slow for this rule)"
    );

    // The short tasks' TTL runs out in real time: nothing to wait on but the clock.
    tokio::time::sleep_until((started + Duration::from_millis(TTL_MS + 50)).into()).await;
    let late = Transition::Progress {
        message: "late".to_owned(),
    };
    for node in [Node::Behind, Node::Ahead] {
        for id in &short {
            assert!(
                get(RULE, &store, id, Scope::Any, node.now())
                    .await
                    .is_none(),
                "[{RULE}] an expired task must stay gone for the {node:?} node"
            );
            assert!(
                update(RULE, &store, id, Scope::Any, &late, node.now())
                    .await
                    .is_none(),
                "[{RULE}] an update from the {node:?} node must not reach an expired task"
            );
        }
        let found: Vec<TaskId> = store
            .visible(&all, Scope::Any, node.now())
            .await
            .unwrap_or_else(|e| panic!("[{RULE}] visible failed: {e}"));
        assert_eq!(
            found,
            [done_ahead.id, done_behind.id],
            "[{RULE}] visible on the {node:?} node must list only the finished tasks within their retention"
        );
    }
    assert_eq!(
        cleanup(RULE, &store, Node::Behind.now(), retention).await,
        2,
        "[{RULE}] a sweep from the node behind must remove exactly the two expired tasks"
    );
    for id in [&done_ahead.id, &done_behind.id] {
        assert!(
            get(RULE, &store, id, Scope::Any, Node::Ahead.now())
                .await
                .is_some(),
            "[{RULE}] a task finished moments ago must be kept for the retention"
        );
    }
}
