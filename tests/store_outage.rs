//! The store becomes unreachable mid-run: two nodes (two layers, two store
//! instances with their own pools) over one scratch PostgreSQL table or Redis
//! prefix, both reaching the store through a TCP proxy the test owns, which first
//! cuts every connection and stalls the new ones (so pools run dry), then refuses
//! them. Meanwhile requests answer -32603 within the store timeout and nothing
//! hangs; `Auto` tools finish and their runners keep retrying. Once the proxy
//! passes traffic again every task reaches the state it should, with no write
//! lost. A cancel whose write committed but whose answer was lost still stops the
//! local `Auto` runner.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mcp_tasks::error::StoreError;
use mcp_tasks::store::TaskStore;
use mcp_tasks::store::{
    BoxFuture, ChangeFeed, CreateLimits, Scope, Timestamp, Transition, Updated,
};
use mcp_tasks::{TaskId, TaskRecord};
use serde_json::json;
use support::faults::{ALICE, Event, Node};
use support::http::Client;
use support::proxy::{Mode, Proxy, target, via};
use support::wait::{self, recv};

/// The nodes' store timeout.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a request may take during the outage: the timeout, and room for a
/// loaded machine.
const PROMPT: Duration = Duration::from_millis(2_500);
/// `Auto` tasks in flight through the outage.
const AUTO_TASKS: usize = 3;
/// How long the store stalls, then how long it refuses connections.
const STALL_FOR: Duration = Duration::from_secs(2);
const REFUSE_FOR: Duration = Duration::from_secs(1);

/// Requests `task` on every client at once, `rounds` times over: each must answer
/// -32603 (HTTP 200) within [`PROMPT`].
async fn every_request_fails_promptly(clients: &[Client], task: &str, rounds: usize) {
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..rounds {
        for client in clients {
            let (client, task) = (client.clone(), task.to_owned());
            requests.spawn(async move {
                let started = Instant::now();
                let reply = tokio::time::timeout(PROMPT * 4, client.get(&task, ALICE))
                    .await
                    .expect("a request during the outage hangs");
                (reply, started.elapsed())
            });
        }
    }
    while let Some(done) = requests.join_next().await {
        let (reply, took) = done.unwrap();
        reply.assert_error(-32603, 200);
        assert!(took < PROMPT, "a request during the outage took {took:?}");
    }
}

/// Runs the outage through `proxy`, which carries all of `a`'s and `b`'s store
/// traffic.
async fn an_outage_loses_no_write(
    a: Arc<dyn TaskStore>,
    b: Arc<dyn TaskStore>,
    proxy: &Proxy,
    what: &str,
) {
    let mut node_a = Node::start(a, STORE_TIMEOUT).await;
    let node_b = Node::start(b, STORE_TIMEOUT).await;
    let (client_a, client_b) = (node_a.client(), node_b.client());
    let mut later = Vec::new();
    for _ in 0..AUTO_TASKS {
        later.push(client_a.create_task_id("later", json!({}), ALICE).await);
    }
    let ask = client_a.create_task_id("ask", json!({}), ALICE).await;
    assert_eq!(
        recv("the worker asks", &mut node_a.events).await,
        Event::Waiting(ask.clone())
    );

    // The store stalls: open connections are cut, new ones hang.
    let down = Instant::now();
    proxy.set(Mode::Stall);
    proxy.cut();
    // The Auto tools finish now; their runners cannot store the results yet.
    node_a.release.send_replace(true);
    let clients = [client_a.clone(), client_b.clone()];
    // More requests than the pools hold connections.
    every_request_fails_promptly(&clients, &ask, 3).await;
    // The outage lasts its length, whatever the requests took.
    tokio::time::sleep_until((down + STALL_FOR).into()).await;
    // Then it refuses connections.
    proxy.down();
    every_request_fails_promptly(&clients, &ask, 1).await;
    tokio::time::sleep_until((down + STALL_FOR + REFUSE_FOR).into()).await;

    proxy.set(Mode::Pass);
    let back = Instant::now();
    // The client answers the worker on A through B, retrying while the store
    // comes back.
    let answer = json!({"action": "accept", "content": {"ok": true}});
    let answered = wait::poll(async || {
        let reply = client_b.update(&ask, json!({"go": answer}), ALICE).await;
        reply.code().is_none().then_some(())
    })
    .await;
    assert!(
        answered.is_some(),
        "tasks/update never succeeded after the outage"
    );
    assert_eq!(
        recv("the worker on A gets the answer", &mut node_a.events).await,
        Event::Answered(ask.clone(), json!({"go": answer}))
    );
    for id in &later {
        let done = client_b.wait_for_end(id, ALICE).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"]["content"][0]["text"], "late", "{done}");
    }
    let done = client_a.wait_for_status(&ask, ALICE, "completed").await;
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("accept")),
        "{done}"
    );
    eprintln!(
        "{what}: after the outage {} tasks terminal, none lost, {:?} after the store came back",
        AUTO_TASKS + 1,
        back.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_outage_loses_no_write() {
    let Some(url) = support::stores::postgres::database_url() else {
        return;
    };
    let proxy = Proxy::start(target(&url)).await;
    let through = via(&url, proxy.addr);
    let mut nodes = support::stores::postgres::nodes_at(&url, &[through.clone(), through]).await;
    let b = nodes.pop().unwrap();
    let a = nodes.pop().unwrap();
    an_outage_loses_no_write(Arc::new(a), Arc::new(b), &proxy, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_an_outage_loses_no_write() {
    let Some(url) = support::stores::redis::redis_url() else {
        return;
    };
    let proxy = Proxy::start(target(&url)).await;
    let through = via(&url, proxy.addr);
    let mut nodes = support::stores::redis::nodes_at(&url, &[through.clone(), through]).await;
    let b = nodes.pop().unwrap();
    let a = nodes.pop().unwrap();
    an_outage_loses_no_write(Arc::new(a), Arc::new(b), &proxy, "redis").await;
}

/// A store whose next update is applied but answered with an error, as when the
/// connection drops between the commit and the reply.
#[derive(Debug)]
struct LoseReply {
    store: Arc<dyn TaskStore>,
    armed: AtomicBool,
}

impl TaskStore for LoseReply {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.store.create(record, limits)
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        self.store.get(id, scope, now)
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        Box::pin(async move {
            let updated = self.store.update(id, scope, transition, now).await?;
            if self.armed.swap(false, Ordering::SeqCst) {
                return Err(StoreError::backend(
                    "the connection dropped before the reply",
                ));
            }
            Ok(updated)
        })
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        self.store.cleanup(now, retention)
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        self.store.subscribe()
    }
}

/// A cancel on `store`'s node whose answer is lost: the client hears -32603, the
/// task is cancelled, and the node's runner is stopped all the same.
async fn a_cancel_whose_answer_is_lost_stops_the_runner(store: Arc<dyn TaskStore>) {
    let store = Arc::new(LoseReply {
        store,
        armed: AtomicBool::new(false),
    });
    let mut node = Node::start(store.clone(), STORE_TIMEOUT).await;
    let client = node.client();
    let slow = client.create_task_id("slow", json!({}), ALICE).await;
    store.armed.store(true, Ordering::SeqCst);
    client.cancel(&slow, ALICE).await.assert_error(-32603, 200);
    assert_eq!(
        recv("the Auto call is dropped", &mut node.events).await,
        Event::Dropped
    );
    assert_eq!(client.get(&slow, ALICE).await.ok()["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_whose_answer_is_lost_stops_the_runner() {
    let Some(scratch) = support::stores::postgres::scratch().await else {
        return;
    };
    a_cancel_whose_answer_is_lost_stops_the_runner(Arc::new(scratch)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_cancel_whose_answer_is_lost_stops_the_runner() {
    let Some(scratch) = support::stores::redis::scratch().await else {
        return;
    };
    a_cancel_whose_answer_is_lost_stops_the_runner(Arc::new(scratch)).await;
}
