//! Stores shared between nodes: announcements to the other node only, remote
//! writes reaching a layer, and the contention rules spread over the nodes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;

use super::contention::{race_terminal_writes, race_updates};
use super::helpers::{HOUR_MS, answer_for, create, record, update};
use super::intercept::{Intercept, StoreHooks};
use crate::error::StoreError;
use crate::input::{InputRequest, InputRequests};
use crate::layer::TasksLayer;
use crate::store::{ChangeFeed, CreateLimits, FeedEvent, TaskStore};
use crate::task::{
    Applied, Principal, Scope, TaskEnd, TaskId, TaskRecord, TaskStatus, Timestamp, Transition,
};

/// How long the multi-node rules wait for any one thing they expect to happen
/// (an announcement, a woken worker, a notification).
const NODE_PATIENCE: Duration = Duration::from_secs(10);

/// How long one warm-up write waits to be heard before it is written again.
const WARM_UP_TRY: Duration = Duration::from_millis(100);

/// Rounds of the cross-node terminal race.
const NODE_ROUNDS: u64 = 4;

/// Multi-node: a write made through one node is announced on the *other* node's
/// [`subscribe`](TaskStore::subscribe) feed, and never on the writer's own; a
/// transition that writes nothing (an ignored answer) announces nothing.
///
/// `a` and `b` are two instances of the store over the same shared state (one
/// database, one key prefix), as two processes would hold them. The rule relies on
/// one node's announcements arriving in the order of its writes.
pub async fn nodes_announce_to_the_other_node_only<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_announce_to_the_other_node_only";
    let (mut on_a, mut on_b) = warm_up(RULE, &a, &b).await;
    let now = Timestamp::now();

    let x = record(None, now, Some(HOUR_MS));
    create(RULE, &b, x.clone(), CreateLimits::default()).await;
    on_a.next_is(RULE, x.id, "b's create of x on a's feed")
        .await;
    progress(RULE, &b, &x.id).await;
    on_a.next_is(RULE, x.id, "b's update of x on a's feed")
        .await;
    let stray = answer_for(&["nobody-asked"]);
    let ignored = update(RULE, &b, &x.id, Scope::Any, &stray, Timestamp::now())
        .await
        .unwrap_or_else(|| panic!("[{RULE}] node b must find the task it created"));
    assert_eq!(
        ignored.outcome,
        Ok(Applied::Unchanged),
        "[{RULE}] an answer while the task is working must be ignored"
    );

    let y = record(Some(Principal::from("alice")), now, Some(HOUR_MS));
    create(RULE, &a, y.clone(), CreateLimits::default()).await;
    // b's own writes of x must not come first.
    on_b.next_is(RULE, y.id, "a's create of y on b's feed")
        .await;
    let z = record(None, now, Some(HOUR_MS));
    create(RULE, &b, z.clone(), CreateLimits::default()).await;
    // Neither the ignored answer nor a's own create of y may come first.
    on_a.next_is(RULE, z.id, "b's create of z on a's feed")
        .await;
    let w = record(None, now, Some(HOUR_MS));
    create(RULE, &a, w.clone(), CreateLimits::default()).await;
    on_b.next_is(RULE, w.id, "a's create of w on b's feed")
        .await;
    progress(RULE, &a, &w.id).await;
    on_b.next_is(RULE, w.id, "a's update of w on b's feed")
        .await;
    on_a.assert_drained(RULE, "a");
    on_b.assert_drained(RULE, "b");
}

/// Multi-node: a [`TasksLayer`] built over node `a` sees what is
/// written through node `b`. An answer given through `b` wakes
/// [`Tasks::wait_for_input`](crate::worker::Tasks::wait_for_input) on `a`, and a cancel
/// through `b` reaches `a`'s notifier, [`Tasks::is_cancelled`](crate::worker::Tasks::is_cancelled)
/// and a worker awaiting [`Tasks::ended`](crate::worker::Tasks::ended).
/// `a`'s notifier sees the task exactly as `input_required` (its own write),
/// `working` and `cancelled` (`b`'s two writes): a store that also announced a
/// node's own writes would notify twice.
///
/// `a` and `b` share state as in [`nodes_announce_to_the_other_node_only`].
pub async fn nodes_remote_writes_reach_the_layer<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_remote_writes_reach_the_layer";
    let a = Arc::new(a);
    let (sink, mut notified) = mpsc::unbounded_channel::<(TaskId, TaskStatus)>();
    let (reads, mut read) = mpsc::unbounded_channel::<TaskId>();
    let layer = TasksLayer::builder(Intercept::new(a.clone(), ReadsReported(reads)))
        .without_janitor()
        .with_notifier(move |task: &TaskRecord| {
            let _ = sink.send((task.id, task.status));
        })
        .build()
        .unwrap_or_else(|e| panic!("[{RULE}] a layer over node a: {e}"));
    let tasks = layer.tasks();

    // The layer's relay may start listening in the background: write through b
    // until a's notifier hears it, so that the writes below cannot go unheard.
    let probe = record(None, Timestamp::now(), Some(HOUR_MS));
    create(RULE, &b, probe.clone(), CreateLimits::default()).await;
    let deadline = tokio::time::Instant::now() + NODE_PATIENCE;
    'warm: loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "[{RULE}] no write through b reached a's notifier within {NODE_PATIENCE:?}"
        );
        progress(RULE, &b, &probe.id).await;
        let tried = tokio::time::Instant::now() + WARM_UP_TRY;
        while let Ok(event) = tokio::time::timeout_at(tried, notified.recv()).await {
            match event {
                Some((id, _)) if id == probe.id => break 'warm,
                Some(_) => {}
                None => panic!("[{RULE}] the notifier was dropped"),
            }
        }
    }

    let task = record(None, Timestamp::now(), Some(HOUR_MS));
    let id = task.id;
    create(RULE, &*a, task, CreateLimits::default()).await;
    let ask = InputRequests::new().with("go", InputRequest::confirm("Go?", "ok"));
    tasks
        .require_input(&id, ask)
        .await
        .unwrap_or_else(|e| panic!("[{RULE}] require_input through the layer on a: {e}"));
    while read.try_recv().is_ok() {}
    let waiter = tokio::spawn({
        let tasks = tasks.clone();
        async move { tasks.wait_for_input(&id).await }
    });
    // Answer only once the worker has read the task as input_required: from then on
    // it can only return by being woken.
    let deadline = tokio::time::Instant::now() + NODE_PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, read.recv()).await {
            Ok(Some(other)) if other == id => break,
            Ok(Some(_)) => {}
            Ok(None) => panic!("[{RULE}] the layer's store was dropped"),
            Err(_) => {
                panic!("[{RULE}] the worker on a did not read its task within {NODE_PATIENCE:?}")
            }
        }
    }

    // The client's tasks/update lands on node b.
    let answer = Transition::Answer {
        responses: [("go".to_owned(), json!({"action": "accept"}))]
            .into_iter()
            .collect(),
    };
    let answered = update(RULE, &b, &id, Scope::Owner(None), &answer, Timestamp::now())
        .await
        .unwrap_or_else(|| panic!("[{RULE}] node b must see the task node a created"));
    assert!(
        answered.changed(),
        "[{RULE}] the answer through b must be applied"
    );
    assert_eq!(
        answered.record.status,
        TaskStatus::Working,
        "[{RULE}] the last answer must make the task working again"
    );
    let answers = match tokio::time::timeout(NODE_PATIENCE, waiter).await {
        Ok(Ok(Ok(answers))) => answers,
        Ok(Ok(Err(e))) => panic!("[{RULE}] wait_for_input on a failed: {e}"),
        Ok(Err(e)) => panic!("[{RULE}] the worker on a did not finish: {e}"),
        Err(_) => panic!(
            "[{RULE}] the worker waiting on a must wake on the answer given through b within {NODE_PATIENCE:?}"
        ),
    };
    assert_eq!(
        answers["go"]["action"], "accept",
        "[{RULE}] the worker on a must receive the answer given through b"
    );

    let worker = tasks.clone();
    let stopped = tokio::spawn(async move { worker.ended(&id).await });
    let cancelled = update(
        RULE,
        &b,
        &id,
        Scope::Owner(None),
        &Transition::Cancel,
        Timestamp::now(),
    )
    .await
    .unwrap_or_else(|| panic!("[{RULE}] node b must see the task node a created"));
    assert!(
        cancelled.changed(),
        "[{RULE}] the cancel through b must be applied"
    );
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + NODE_PATIENCE;
    while seen.last() != Some(&TaskStatus::Cancelled) {
        match tokio::time::timeout_at(deadline, notified.recv()).await {
            Ok(Some((changed, status))) if changed == id => seen.push(status),
            Ok(Some(_)) => {}
            Ok(None) => panic!("[{RULE}] the notifier was dropped"),
            Err(_) => panic!(
                "[{RULE}] the cancel through b never reached a's notifier within {NODE_PATIENCE:?}; it saw {seen:?}"
            ),
        }
    }
    assert!(
        tasks.is_cancelled(&id).await,
        "[{RULE}] the worker on a must see the cancel given through b"
    );
    match tokio::time::timeout(NODE_PATIENCE, stopped).await {
        Ok(Ok(end)) => assert_eq!(
            end,
            TaskEnd::Cancelled,
            "[{RULE}] the worker awaiting the cancel on a must learn it was cancelled"
        ),
        Ok(Err(e)) => panic!("[{RULE}] the worker awaiting the cancel on a panicked: {e}"),
        Err(_) => panic!(
            "[{RULE}] the worker awaiting the cancel on a must wake on the cancel given through b within {NODE_PATIENCE:?}"
        ),
    }
    assert_eq!(
        seen,
        [
            TaskStatus::InputRequired,
            TaskStatus::Working,
            TaskStatus::Cancelled
        ],
        "[{RULE}] a's notifier must see its own write once and b's two writes once each"
    );
}

/// Multi-node contention: the race of [`concurrent_terminal_writes_one_wins`] with
/// its writers spread over `nodes` (two or more instances sharing state). In every
/// round exactly one terminal write wins across all the nodes, and every node then
/// reads the very record the winner's `update` returned. Needs a multi-thread
/// runtime.
///
/// [`concurrent_terminal_writes_one_wins`]: super::concurrent_terminal_writes_one_wins
pub async fn nodes_concurrent_terminal_writes_one_wins<S: TaskStore>(nodes: Vec<S>) {
    const RULE: &str = "nodes_concurrent_terminal_writes_one_wins";
    require_nodes(RULE, &nodes);
    race_terminal_writes(RULE, nodes, NODE_ROUNDS).await;
}

/// Multi-node contention: the writers of [`concurrent_updates_never_lost`] spread
/// over `nodes` (two or more instances sharing state). None may be lost, and every
/// node reads the same record. Needs a multi-thread runtime.
///
/// [`concurrent_updates_never_lost`]: super::concurrent_updates_never_lost
pub async fn nodes_concurrent_updates_never_lost<S: TaskStore>(nodes: Vec<S>) {
    const RULE: &str = "nodes_concurrent_updates_never_lost";
    require_nodes(RULE, &nodes);
    race_updates(RULE, nodes).await;
}

fn require_nodes<S>(rule: &str, nodes: &[S]) {
    assert!(
        nodes.len() >= 2,
        "[{rule}] this rule needs two or more nodes sharing one store, got {}",
        nodes.len()
    );
}

/// Hooks reporting the id of every `get` once it returned, so a rule can tell when
/// a worker has read a task.
#[derive(Debug)]
struct ReadsReported(mpsc::UnboundedSender<TaskId>);

impl StoreHooks for ReadsReported {
    fn after_get(&self, id: &TaskId, _found: &Result<Option<TaskRecord>, StoreError>) {
        let _ = self.0.send(*id);
    }
}

/// A progress write on the working task `id` through `node`, which must find the
/// task and apply the write.
async fn progress<S: TaskStore + ?Sized>(rule: &str, node: &S, id: &TaskId) {
    let progress = Transition::Progress {
        message: "ping".to_owned(),
    };
    let updated = update(rule, node, id, Scope::Any, &progress, Timestamp::now())
        .await
        .unwrap_or_else(|| panic!("[{rule}] the task must be found through every node"));
    assert!(
        updated.changed(),
        "[{rule}] progress on a working task must be applied"
    );
}

/// A node's change feed, as a multi-node rule reads it.
struct Announcements {
    feed: ChangeFeed,
    /// The warm-up task, whose late announcements are skipped.
    probe: TaskId,
}

impl Announcements {
    /// Asserts that the next id announced (after any late warm-up ones) is
    /// `expected`.
    async fn next_is(&mut self, rule: &str, expected: TaskId, what: &str) {
        let announced = loop {
            match tokio::time::timeout(NODE_PATIENCE, self.feed.recv()).await {
                Ok(Some(FeedEvent::Changed(id))) if id == self.probe => continue,
                Ok(Some(FeedEvent::Changed(id))) => break id,
                Ok(Some(FeedEvent::Missed(n))) => {
                    panic!("[{rule}] {what}: the feed skipped {n} ids")
                }
                Ok(None) => panic!("[{rule}] {what}: the feed closed"),
                Err(_) => {
                    panic!("[{rule}] {what}: nothing was announced within {NODE_PATIENCE:?}")
                }
            }
        };
        assert!(
            announced == expected,
            "[{rule}] {what}: another task's id was announced first"
        );
    }

    /// Asserts that nothing more was announced.
    fn assert_drained(&mut self, rule: &str, node: &str) {
        match self.feed.try_recv() {
            None if !self.feed.is_closed() => {}
            None => panic!("[{rule}] node {node}'s feed closed"),
            Some(FeedEvent::Changed(_)) => {
                panic!("[{rule}] node {node}'s feed carried one of node {node}'s own writes")
            }
            Some(event) => panic!("[{rule}] node {node}'s feed failed: {event:?}"),
        }
    }
}

/// Subscribes to both nodes' feeds and makes sure each node hears the other before
/// a rule starts: a store may start listening in the background on `subscribe`, so
/// its first writes may go unheard. Creates a probe task through `a`, then writes
/// it through `a` until `b`'s feed announces it, and through `b` until `a`'s does.
async fn warm_up<S: TaskStore + ?Sized>(
    rule: &str,
    a: &S,
    b: &S,
) -> (Announcements, Announcements) {
    let subscribe = |node: &S, name: &str| {
        node.subscribe().unwrap_or_else(|| {
            panic!("[{rule}] node {name} must have a change feed: subscribe() returned None")
        })
    };
    let (mut feed_a, mut feed_b) = (subscribe(a, "a"), subscribe(b, "b"));
    let probe = record(None, Timestamp::now(), Some(HOUR_MS));
    create(rule, a, probe.clone(), CreateLimits::default()).await;
    for (writer, feed, what) in [
        (a, &mut feed_b, "a on b's feed"),
        (b, &mut feed_a, "b on a's feed"),
    ] {
        let deadline = tokio::time::Instant::now() + NODE_PATIENCE;
        'heard: loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "[{rule}] no write by {what} was announced within {NODE_PATIENCE:?}"
            );
            progress(rule, writer, &probe.id).await;
            let tried = tokio::time::Instant::now() + WARM_UP_TRY;
            while let Ok(announced) = tokio::time::timeout_at(tried, feed.recv()).await {
                match announced {
                    Some(FeedEvent::Changed(id)) if id == probe.id => break 'heard,
                    Some(FeedEvent::Changed(_)) => {}
                    other => panic!("[{rule}] the change feed failed while warming up: {other:?}"),
                }
            }
        }
    }
    let on = |feed| Announcements {
        feed,
        probe: probe.id,
    };
    (on(feed_a), on(feed_b))
}
