//! A change feed cut just before cross-node changes loses none of them: two nodes
//! (two layers, two store instances with their own connections) over one scratch
//! PostgreSQL table or Redis prefix, each served over HTTP. Node A's feed
//! connection is killed on the server (by the name it gives its connection) and,
//! through a proxy between A and the store, kept from reconnecting while node B
//! answers A's worker and cancels A's `Auto` task. Once A's feed is back, the
//! worker wakes with the answer, A's listen stream carries both changes, and the
//! `Auto` inner call is dropped. And when a store reports changes it could not
//! replay, the layer re-reads everything it waits on.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::sqlx;
use mcp_tasks::store::TaskStore;
use serde_json::{Value, json};
use support::faults::{ALICE, Event, Node};
use support::proxy::{Mode, Proxy, target, via};
use support::wait::{self, recv, within};

/// The store timeout of the nodes: short, so nothing in these tests waits long.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// Runs the scenario: `a` reaches the store through `proxy`, `b` directly; `cut`
/// kills `a`'s feed connection and returns once it is gone.
async fn changes_made_while_the_feed_is_cut_still_arrive(
    a: Arc<dyn TaskStore>,
    b: Arc<dyn TaskStore>,
    proxy: &Proxy,
    cut: impl AsyncFnOnce(),
    what: &str,
) {
    let mut node_a = Node::start(a, STORE_TIMEOUT).await;
    let node_b = Node::start(b, STORE_TIMEOUT).await;
    let (client_a, client_b) = (node_a.client(), node_b.client());

    let ask = client_a.create_task_id("ask", json!({}), ALICE).await;
    assert_eq!(
        recv("the worker asks", &mut node_a.events).await,
        Event::Waiting(ask.clone())
    );
    let slow = client_a.create_task_id("slow", json!({}), ALICE).await;
    let mut stream = client_a.listen(ALICE, json!(1), &[&ask, &slow]).await;
    let ack = stream.next_message().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let snapshot = stream.snapshot(2).await;
    assert_eq!(snapshot[&ask]["status"], "input_required");
    assert_eq!(snapshot[&slow]["status"], "working");

    // A's feed goes down and stays down while B makes its changes.
    proxy.set(Mode::Refuse);
    cut().await;
    let answer = json!({"action": "accept", "content": {"ok": true}});
    assert_eq!(
        client_b
            .update(&ask, json!({"go": answer}), ALICE)
            .await
            .ok()["resultType"],
        "complete"
    );
    assert_eq!(
        client_b.cancel(&slow, ALICE).await.ok()["resultType"],
        "complete"
    );
    proxy.set(Mode::Pass);
    let back = std::time::Instant::now();

    // The worker on A wakes with B's answer, and the Auto call on A is dropped on
    // B's cancel, in either order.
    let mut events = vec![
        recv(
            "the worker wakes, the Auto call is dropped",
            &mut node_a.events,
        )
        .await,
        recv(
            "the worker wakes, the Auto call is dropped",
            &mut node_a.events,
        )
        .await,
    ];
    eprintln!(
        "{what}: the feed came back and delivered both changes {:?} after the store was reachable again",
        back.elapsed()
    );
    events.sort_by_key(|event| matches!(event, Event::Dropped));
    assert_eq!(
        events,
        vec![
            Event::Answered(ask.clone(), json!({"go": answer})),
            Event::Dropped
        ]
    );
    // A's listen stream carries both changes.
    let mut seen_ask = false;
    let mut seen_slow = false;
    within("A's listen stream carries both changes", async {
        while !(seen_ask && seen_slow) {
            let params = stream.next_task().await;
            let status = params["status"].as_str().unwrap_or_default().to_owned();
            if params["taskId"] == Value::String(ask.clone()) {
                seen_ask |= status == "working" || status == "completed";
            } else if params["taskId"] == Value::String(slow.clone()) {
                seen_slow |= status == "cancelled";
            }
        }
    })
    .await;
    let done = client_b.wait_for_status(&ask, ALICE, "completed").await;
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("accept")),
        "{done}"
    );
    assert_eq!(client_a.get(&slow, ALICE).await.ok()["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_changes_made_while_the_feed_is_cut_still_arrive() {
    let Some(url) = support::stores::postgres::database_url() else {
        return;
    };
    let proxy = Proxy::start(target(&url)).await;
    let mut nodes =
        support::stores::postgres::nodes_at(&url, &[via(&url, proxy.addr), url.clone()]).await;
    let b = nodes.pop().unwrap();
    let a = nodes.pop().unwrap();
    let name = a.store().feed_connection_name();
    let admin = b.store().pool().clone();
    let cut = async || {
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&name)
        .fetch_all(&admin)
        .await
        .unwrap();
        assert_eq!(killed, vec![true], "A's one feed connection is killed");
        // Gone only once the server says so: a change made before would still
        // reach it.
        let gone = wait::poll(async || {
            let left: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            )
            .bind(&name)
            .fetch_one(&admin)
            .await
            .unwrap();
            (left == 0).then_some(())
        })
        .await;
        assert!(gone.is_some(), "A's feed connection never went away");
    };
    changes_made_while_the_feed_is_cut_still_arrive(
        Arc::new(a),
        Arc::new(b),
        &proxy,
        cut,
        "postgres",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_changes_made_while_the_feed_is_cut_still_arrive() {
    let Some(url) = support::stores::redis::redis_url() else {
        return;
    };
    let proxy = Proxy::start(target(&url)).await;
    let mut nodes =
        support::stores::redis::nodes_at(&url, &[via(&url, proxy.addr), url.clone()]).await;
    let b = nodes.pop().unwrap();
    let a = nodes.pop().unwrap();
    let name = a.store().feed_connection_name();
    let client = mcp_tasks::redis::Client::open(url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let a: Arc<dyn TaskStore> = Arc::new(a);
    // The layer starts A's feed; wait until its connection is named.
    let _feed = a.subscribe();
    let cut = async || {
        let feed_id = wait::poll(async || {
            support::stores::redis::connections_named(&mut admin, &name)
                .await
                .first()
                .copied()
        })
        .await;
        let feed_id = feed_id.expect("A's feed connection shows in CLIENT LIST");
        let killed: i64 = mcp_tasks::redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(feed_id)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(killed, 1, "A's one feed connection is killed");
    };
    changes_made_while_the_feed_is_cut_still_arrive(a, Arc::new(b), &proxy, cut, "redis").await;
}

/// Hooks giving the layer a feed the test drives.
#[derive(Debug)]
struct Feed(mcp_tasks::store::ChangeSender);

impl mcp_tasks::test_suite::StoreHooks for Feed {
    fn subscribe(&self, _store: &dyn TaskStore) -> Option<mcp_tasks::store::ChangeFeed> {
        Some(self.0.subscribe())
    }
}

/// A store that could not catch up reports missed changes: the layer re-reads the
/// tasks of its workers, listen streams and `Auto` runners, so a cancel it was never
/// told of still stops the runner and reaches the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_changes_make_the_layer_re_read_everything_it_waits_on() {
    use mcp_tasks::store::{ChangeSender, Scope, Timestamp, Transition};
    use mcp_tasks::test_suite::Intercept;

    let sender = ChangeSender::default();
    let store = Arc::new(Intercept::new(
        mcp_tasks::MemoryStore::new(),
        Feed(sender.clone()),
    ));
    let mut node = Node::start(store.clone(), STORE_TIMEOUT).await;
    let client = node.client();
    let slow = client.create_task_id("slow", json!({}), ALICE).await;
    let mut stream = client.listen(ALICE, json!(1), &[&slow]).await;
    let ack = stream.next_message().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(stream.snapshot(1).await[&slow]["status"], "working");

    // Another node's cancel whose announcement never arrived.
    let id = slow.parse().unwrap();
    let cancelled = store
        .store()
        .update(&id, Scope::Any, &Transition::Cancel, Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    assert!(cancelled.changed());
    sender.missed();

    assert_eq!(
        recv("the Auto call is dropped", &mut node.events).await,
        Event::Dropped
    );
    let params = within("the stream carries the cancel", stream.next_task()).await;
    assert_eq!(params["taskId"], Value::String(slow.clone()));
    assert_eq!(params["status"], "cancelled");
}
