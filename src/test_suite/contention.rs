//! Concurrent writers on one task, through one node or several: exactly one
//! terminal write wins, and no update is lost.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;

use super::helpers::{
    HOUR_MS, WRITERS, create, get, get_found, input_requests, race, record, require_multi_thread,
};
use crate::error::{StoreError, TransitionError};
use crate::store::{CreateLimits, TaskStore, Updated};
use crate::task::{Applied, Principal, Scope, TaskId, TaskStatus, Timestamp, Transition};

/// Times a concurrent writer retries a [`StoreError::Contention`] answer.
const CONTENTION_RETRIES: usize = 1_000;

/// Contention: 64 concurrent tasks on a multi-thread runtime write to
/// ONE task — half try `Complete`, half `Cancel`, and progress writers each ask for
/// a distinct input key. Exactly one terminal write wins, the final status is the
/// winner's, every writer that was told its change applied finds it in the record,
/// and the revision counts every applied change.
pub async fn concurrent_terminal_writes_one_wins<S: TaskStore>(store: S) {
    race_terminal_writes("concurrent_terminal_writes_one_wins", vec![store], 8).await;
}

/// Contention: 64 concurrent `RequireInput` writers, each with a
/// distinct key, plus as many `Progress` writers, on ONE working task. None may be
/// lost: every key is outstanding afterwards and the revision counts every write.
pub async fn concurrent_updates_never_lost<S: TaskStore>(store: S) {
    race_updates("concurrent_updates_never_lost", vec![store]).await;
}

/// The terminal race of [`concurrent_terminal_writes_one_wins`], `rounds` times,
/// writer `i` writing through `nodes[i % nodes.len()]`; afterwards every node must
/// read the winner's record.
pub(super) async fn race_terminal_writes<S: TaskStore>(
    rule: &'static str,
    nodes: Vec<S>,
    rounds: u64,
) {
    require_multi_thread(rule);
    let nodes = Arc::new(nodes);
    let alice = Principal::from("alice");
    for round in 0..rounds {
        let now = Timestamp::now();
        let task = record(Some(alice.clone()), now, Some(HOUR_MS));
        let id = task.id;
        create(rule, &nodes[0], task, CreateLimits::default()).await;
        let writers: Vec<(usize, Transition)> = (0..WRITERS)
            .map(|i| {
                let transition = match i % 4 {
                    0 => Transition::Complete {
                        result: json!({"content": [{"type": "text", "text": format!("writer {i}")}]}),
                        message: None,
                    },
                    1 => Transition::Cancel,
                    _ => Transition::RequireInput {
                        requests: input_requests(&[&format!("key-{i}")]),
                        message: Some(format!("writer {i}")),
                    },
                };
                (i, transition)
            })
            .collect();
        let results = race_over(&nodes, id, &writers, |i| now.plus_ms(1 + (i as u64 % 7))).await;
        let mut winners = Vec::new();
        let mut applied_keys = BTreeSet::new();
        let mut refused_keys = BTreeSet::new();
        let mut changes = 0u64;
        for ((i, transition), result) in writers.iter().zip(results) {
            let updated = match result {
                Ok(Some(updated)) => updated,
                Ok(None) => panic!("[{rule}] round {round}: writer {i} did not find the task"),
                Err(e) => panic!("[{rule}] round {round}: writer {i} got Err({e})"),
            };
            if updated.changed() {
                changes += 1;
            }
            match transition {
                Transition::Complete { .. } | Transition::Cancel => {
                    if updated.changed() {
                        winners.push((*i, transition, updated.record));
                    } else {
                        let expected = if matches!(transition, Transition::Cancel) {
                            Ok(Applied::Unchanged)
                        } else {
                            Err(TransitionError::Terminal)
                        };
                        assert_eq!(
                            updated.outcome, expected,
                            "[{rule}] round {round}: a losing terminal write must be refused as the state machine says"
                        );
                    }
                }
                _ => {
                    let key = format!("key-{i}");
                    match updated.outcome {
                        Ok(Applied::Changed) => applied_keys.insert(key),
                        Err(TransitionError::Terminal) => refused_keys.insert(key),
                        other => panic!(
                            "[{rule}] round {round}: writer {i}'s fresh key must be applied or refused as Terminal, got {other:?}"
                        ),
                    };
                }
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "[{rule}] round {round}: exactly one terminal write must win among {WRITERS} writers on {} node(s), {} did",
            nodes.len(),
            winners.len()
        );
        let (winner, winning, written) = &winners[0];
        for (n, node) in nodes.iter().enumerate() {
            let scope = if n % 2 == 0 {
                Scope::Any
            } else {
                Scope::Owner(Some(&alice))
            };
            let stored = get(rule, node, &id, scope, now.plus_ms(10)).await;
            assert_eq!(
                stored.as_ref(),
                Some(written),
                "[{rule}] round {round}: node {n} must read the record the winning write returned"
            );
        }
        let expected_status = match winning {
            Transition::Cancel => TaskStatus::Cancelled,
            _ => TaskStatus::Completed,
        };
        assert_eq!(
            written.status, expected_status,
            "[{rule}] round {round}: the final status must be the winner's"
        );
        if expected_status == TaskStatus::Completed {
            assert_eq!(
                written.result,
                Some(json!({"content": [{"type": "text", "text": format!("writer {winner}")}]})),
                "[{rule}] round {round}: the stored result must be the winning writer's"
            );
        }
        for key in &applied_keys {
            assert!(
                written.issued_keys.contains(key),
                "[{rule}] round {round}: {key} was reported applied but is missing: an update was lost"
            );
        }
        for key in &refused_keys {
            assert!(
                !written.issued_keys.contains(key),
                "[{rule}] round {round}: {key} was refused but is in the record"
            );
        }
        assert_eq!(
            written.revision, changes,
            "[{rule}] round {round}: the revision must count every applied change"
        );
    }
}

/// The writers of [`concurrent_updates_never_lost`], writer `i` writing through
/// `nodes[i % nodes.len()]`; afterwards every node must read the same record.
pub(super) async fn race_updates<S: TaskStore>(rule: &'static str, nodes: Vec<S>) {
    require_multi_thread(rule);
    let nodes = Arc::new(nodes);
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(rule, &nodes[0], task, CreateLimits::default()).await;
    let writers: Vec<(usize, Transition)> = (0..2 * WRITERS)
        .map(|i| {
            let transition = if i % 2 == 0 {
                Transition::RequireInput {
                    requests: input_requests(&[&format!("key-{i}")]),
                    message: None,
                }
            } else {
                Transition::Progress {
                    message: format!("progress {i}"),
                }
            };
            (i, transition)
        })
        .collect();
    let results = race_over(&nodes, id, &writers, |i| now.plus_ms(1 + i as u64)).await;
    for ((i, transition), result) in writers.iter().zip(results) {
        match result {
            Ok(Some(updated)) if updated.changed() => {}
            other => panic!(
                "[{rule}] writer {i} ({transition:?}) on a live task must be applied, got {:?}",
                other.map(|o| o.map(|u| u.outcome))
            ),
        }
    }
    let at = now.plus_ms(1 + 2 * WRITERS as u64);
    let final_record = get_found(rule, &nodes[0], &id, Scope::Any, at).await;
    let expected: BTreeSet<String> = (0..2 * WRITERS)
        .step_by(2)
        .map(|i| format!("key-{i}"))
        .collect();
    let lost: Vec<&String> = expected
        .iter()
        .filter(|k| !final_record.input_requests.contains_key(*k))
        .collect();
    assert!(
        lost.is_empty(),
        "[{rule}] {} of {WRITERS} concurrent input requests were lost: {lost:?}",
        lost.len()
    );
    assert_eq!(
        final_record.issued_keys, expected,
        "[{rule}] issued_keys must hold exactly the {WRITERS} keys asked for"
    );
    assert_eq!(
        final_record.status,
        TaskStatus::InputRequired,
        "[{rule}] the task must be input_required"
    );
    assert_eq!(
        final_record.revision,
        2 * WRITERS as u64,
        "[{rule}] the revision must count all {} applied writes",
        2 * WRITERS
    );
    for (n, node) in nodes.iter().enumerate().skip(1) {
        assert_eq!(
            get(rule, node, &id, Scope::Any, at).await.as_ref(),
            Some(&final_record),
            "[{rule}] node {n} must read the same record as node 0"
        );
    }
}

/// Runs every writer at once, writer `i` applying its transition to `id` at `at(i)`
/// through `nodes[i % nodes.len()]`; the results in writer order.
async fn race_over<S: TaskStore>(
    nodes: &Arc<Vec<S>>,
    id: TaskId,
    writers: &[(usize, Transition)],
    at: impl Fn(usize) -> Timestamp,
) -> Vec<Result<Option<Updated>, StoreError>> {
    race(writers.to_vec(), |(i, transition): (usize, Transition)| {
        let nodes = nodes.clone();
        let at = at(i);
        async move {
            let node = &nodes[i % nodes.len()];
            update_retrying(node, &id, &transition, at).await
        }
    })
    .await
}

/// An update that retries [`StoreError::Contention`], which promises nothing was
/// written.
async fn update_retrying<S: TaskStore + ?Sized>(
    store: &S,
    id: &TaskId,
    transition: &Transition,
    now: Timestamp,
) -> Result<Option<Updated>, StoreError> {
    let mut tries = 0;
    loop {
        match store.update(id, Scope::Any, transition, now).await {
            Err(StoreError::Contention) if tries < CONTENTION_RETRIES => {
                tries += 1;
                tokio::task::yield_now().await;
            }
            result => return result,
        }
    }
}
