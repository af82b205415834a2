//! Worker leases under faults: example servers (`conformance_server`) run as
//! separate processes over one PostgreSQL table or one Redis key prefix, each
//! reaching the store through a loopback TCP proxy of its own that the test owns,
//! with a 500 ms worker lease.
//!
//! - Outages of 1×, 3× and 10× the lease, with every connection stalled (no byte
//!   moves) or refused: every task of the live nodes completes, none is failed as
//!   lost, and no node claims another's lease.
//! - One node cut off for 3× the lease while the other keeps the store: the other
//!   fails the cut-off node's task within the bound; back, the cut-off node logs that
//!   it lost its lease, and its later work runs.
//! - A node killed and restarted at once under the same node id: its predecessor's
//!   task is failed within the bound, its new work is not.
//! - PostgreSQL: a live node whose pool is saturated (every task query blocked on a
//!   table lock for 3× the lease, more requests than connections): no lease lost.
//! - A live node flooded with requests for 3× the lease: no lease lost.
//! - A create applied but answered with an error: the task is failed by a
//!   compensating write, never left `working` with no worker.
//!
//! Each prints its measured times, for RELIABILITY.md.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::http::Client;
use support::procs::{self, Proc};
use support::proxy::{Mode, Proxy, target, via};

/// The lease the nodes run with.
const LEASE_MS: u64 = 500;
const LEASE: Duration = Duration::from_millis(LEASE_MS);

/// How late past 1.25 × the lease a failure may be seen: the survivor's writes and
/// the test's polling on a loaded machine.
const SLACK: Duration = Duration::from_millis(1_500);

const ALICE: Option<&str> = Some("alice");

/// What a node logs when it learns its lease was claimed.
const LOST_LINE: &str = "this node lost its worker lease";
/// What a node logs when it claims another's lease.
const CLAIM_LINE: &str = "stopped renewing its worker lease";

/// One shared store the nodes use: its URL, the variable naming their table or
/// prefix, and what removes it afterwards.
struct Backend {
    name: &'static str,
    url: String,
    scope: (&'static str, String),
    _cleanup: Box<dyn std::any::Any + Send>,
}

fn postgres() -> Option<Backend> {
    let url = support::stores::postgres::database_url()?;
    let table = support::stores::postgres::scratch_table();
    let cleanup = support::stores::postgres::DropTable::new(url.clone(), table.clone());
    Some(Backend {
        name: "PostgreSQL",
        url,
        scope: ("MCP_STORE_TABLE", table),
        _cleanup: Box::new(cleanup),
    })
}

fn redis() -> Option<Backend> {
    let url = support::stores::redis::redis_url()?;
    let prefix = support::stores::redis::unique_prefix();
    let cleanup = support::stores::redis::KeyJanitor::new(url.clone(), prefix.clone());
    Some(Backend {
        name: "Redis",
        url,
        scope: ("MCP_STORE_PREFIX", prefix),
        _cleanup: Box::new(cleanup),
    })
}

/// A node reaching the store through `proxy`, named `id` if given.
fn node(backend: &Backend, proxy: &Proxy, id: Option<&str>) -> Proc {
    let store = via(&backend.url, proxy.addr);
    let lease = LEASE_MS.to_string();
    let mut env = vec![
        ("MCP_STORE", store.as_str()),
        (backend.scope.0, backend.scope.1.as_str()),
        ("MCP_LEASE_MS", lease.as_str()),
        ("RUST_LOG", "warn"),
    ];
    if let Some(id) = id {
        env.push(("MCP_NODE_ID", id));
    }
    procs::spawn("conformance_server", &[], &env)
}

/// Two nodes, each through a proxy of its own.
async fn two_nodes(backend: &Backend) -> ([Proxy; 2], [Proc; 2]) {
    let target = target(&backend.url);
    let proxies = [Proxy::start(target).await, Proxy::start(target).await];
    let nodes = tokio::task::block_in_place(|| {
        [
            node(backend, &proxies[0], None),
            node(backend, &proxies[1], None),
        ]
    });
    (proxies, nodes)
}

async fn slow_task(client: &Client, seconds: f64) -> String {
    client
        .create_task_id("slow_compute", json!({"seconds": seconds}), ALICE)
        .await
}

/// Whether `node` printed a line containing `needle` (within `wait`).
fn printed(node: &Proc, needle: &str, wait: Duration) -> bool {
    tokio::task::block_in_place(|| node.wait_for_line(needle, wait))
}

/// Polls `tasks/get` on `client` until the task is terminal; its status, error
/// message, and when it was first seen so.
async fn end_of(client: &Client, id: &str) -> (String, String, Instant) {
    let task = client.wait_for_end(id, ALICE).await;
    let seen = Instant::now();
    let status = task["status"].as_str().unwrap_or_default().to_owned();
    let detailed = client.get_detailed(id, ALICE).await;
    let message = detailed["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, message, seen)
}

/// Asserts that no node of `nodes` printed that it lost its lease or claimed
/// another's: the nodes were `what` ("live", "busy") and stayed so.
fn no_lease_lost_nor_claimed(nodes: &[Proc], what: &str) {
    for node in nodes {
        let output = node.output().join("\n");
        assert!(
            !output.contains(LOST_LINE),
            "a {what} node lost its lease:\n{output}"
        );
        assert!(
            !output.contains(CLAIM_LINE),
            "a node claimed a {what} lease:\n{output}"
        );
    }
}

/// Asserts that each of `tasks`, run by a busy live node, completed.
async fn all_completed(busy: &Client, tasks: &[String]) {
    for id in tasks {
        let (status, message, _) = end_of(busy, id).await;
        assert_eq!(status, "completed", "a busy live node's task: {message}");
    }
}

/// Outages of 1×, 3× and 10× the lease in `mode`, on two nodes each running two
/// tasks that outlast the outage: every task completes.
async fn outages(backend: Backend, mode: Mode) {
    let (proxies, nodes) = two_nodes(&backend).await;
    let clients = [Client::new(nodes[0].addr), Client::new(nodes[1].addr)];
    for times in [1u32, 3, 10] {
        let outage = LEASE * times;
        let seconds = (outage + Duration::from_millis(3_000)).as_secs_f64();
        let mut tasks = Vec::new();
        for client in &clients {
            for _ in 0..2 {
                tasks.push(slow_task(client, seconds).await);
            }
        }
        // Let the holds reach the leases.
        tokio::time::sleep(LEASE).await;
        for proxy in &proxies {
            match mode {
                Mode::Stall => proxy.set(Mode::Stall),
                _ => proxy.down(),
            }
        }
        tokio::time::sleep(outage).await;
        for proxy in &proxies {
            proxy.set(Mode::Pass);
        }
        let back = Instant::now();
        let mut answering = None;
        for client in &clients {
            let answered = support::wait::poll(async || {
                client
                    .get(&tasks[0], ALICE)
                    .await
                    .code()
                    .is_none()
                    .then_some(())
            })
            .await;
            assert!(answered.is_some(), "a node never answered after the outage");
            answering.get_or_insert(back.elapsed());
        }
        let answering = back.elapsed().max(answering.unwrap_or_default());
        let mut false_failures = 0;
        for id in &tasks {
            let (status, message, _) = end_of(&clients[0], id).await;
            if status != "completed" {
                false_failures += 1;
                eprintln!("a live node's task ended {status}: {message}");
            }
        }
        eprintln!(
            "{} outage of {times}× the lease ({} ms, {mode:?}): {} tasks in flight, {false_failures} false failures, 0 stranded; both nodes answered {} ms after the store came back",
            backend.name,
            outage.as_millis(),
            tasks.len(),
            answering.as_millis()
        );
        assert_eq!(false_failures, 0, "an outage failed a live node's task");
    }
    no_lease_lost_nor_claimed(&nodes, "live");
}

/// Node 0 is cut off for 3× the lease while node 1 keeps the store.
async fn partition(backend: Backend) {
    let (proxies, nodes) = two_nodes(&backend).await;
    let (cut, keeps) = (Client::new(nodes[0].addr), Client::new(nodes[1].addr));
    let stranded = slow_task(&cut, 120.0).await;
    let alive = slow_task(&keeps, (LEASE * 6).as_secs_f64() + 2.0).await;
    // The survivor must have watched the cut-off node's lease for a while.
    tokio::time::sleep(LEASE * 3).await;

    proxies[0].down();
    let cut_at = Instant::now();
    let (status, message, seen) = end_of(&keeps, &stranded).await;
    let detected = seen - cut_at;
    assert_eq!(status, "failed", "{message}");
    assert!(message.contains("lost its lease"), "{message}");
    assert!(
        detected <= LEASE * 5 / 4 + SLACK,
        "the cut-off node's task failed {detected:?} after the cut"
    );
    tokio::time::sleep((LEASE * 3).saturating_sub(cut_at.elapsed())).await;
    proxies[0].set(Mode::Pass);
    let back = Instant::now();
    assert!(
        printed(&nodes[0], LOST_LINE, Duration::from_secs(10)),
        "back, the cut-off node must learn that it lost its lease:\n{}",
        nodes[0].output().join("\n")
    );
    let learned = back.elapsed();
    // Back, it works as before, under a new lease.
    let later = slow_task(&cut, 2.0).await;
    let (status, message, _) = end_of(&keeps, &later).await;
    assert_eq!(status, "completed", "{message}");
    let (status, message, _) = end_of(&keeps, &alive).await;
    assert_eq!(status, "completed", "the live node's task: {message}");
    eprintln!(
        "{} node cut off for 3× the lease ({LEASE_MS} ms): its task failed {} ms after the cut, the node learned it {} ms after it was back; 0 false failures, 0 stranded",
        backend.name,
        detected.as_millis(),
        learned.as_millis()
    );
}

/// Node 0, named, is killed and restarted at once under the same name.
async fn kill_and_restart(backend: Backend) {
    let target = target(&backend.url);
    let proxies = [Proxy::start(target).await, Proxy::start(target).await];
    let (mut doomed, survivor) = tokio::task::block_in_place(|| {
        (
            node(&backend, &proxies[0], Some("node-a")),
            node(&backend, &proxies[1], None),
        )
    });
    let on_survivor = Client::new(survivor.addr);
    let lost = slow_task(&Client::new(doomed.addr), 120.0).await;
    tokio::time::sleep(LEASE * 3).await;

    let killed = Instant::now();
    doomed.kill();
    let restarted = tokio::task::block_in_place(|| node(&backend, &proxies[0], Some("node-a")));
    let fresh = slow_task(&Client::new(restarted.addr), (LEASE * 4).as_secs_f64()).await;
    let (status, message, seen) = end_of(&on_survivor, &lost).await;
    let detected = seen - killed;
    assert_eq!(status, "failed", "{message}");
    assert!(
        detected <= LEASE * 5 / 4 + SLACK,
        "the killed node's task failed {detected:?} after the kill"
    );
    let (status, message, _) = end_of(&on_survivor, &fresh).await;
    assert_eq!(
        status, "completed",
        "the restarted node's own task: {message}"
    );
    eprintln!(
        "{} node killed and restarted under the same id: its task failed {} ms after the kill (lease {LEASE_MS} ms); the new incarnation's task completed",
        backend.name,
        detected.as_millis()
    );
}

/// PostgreSQL: every task query of both nodes waits on a lock the test holds on
/// the task table for 3× the lease, while more requests than the pool has
/// connections wait on node 0: its renewals, on their own connection, go on.
async fn saturated_pool(backend: Backend) {
    use mcp_tasks::sqlx::{AssertSqlSafe, Connection as _, Executor as _};
    const REQUESTS: usize = 40;
    let (_proxies, nodes) = two_nodes(&backend).await;
    let busy = Client::new(nodes[0].addr);
    let seconds = (LEASE * 3).as_secs_f64() + 4.0;
    let tasks = [
        slow_task(&busy, seconds).await,
        slow_task(&busy, seconds).await,
    ];
    tokio::time::sleep(LEASE * 3).await;

    let mut locker = mcp_tasks::sqlx::PgConnection::connect(&backend.url)
        .await
        .expect("a connection for the lock");
    let table = &backend.scope.1;
    locker
        .execute(AssertSqlSafe(format!(
            "BEGIN; LOCK TABLE \"{table}\" IN ACCESS EXCLUSIVE MODE"
        )))
        .await
        .expect("the lock");
    let locked = Instant::now();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..REQUESTS {
        let (client, id) = (busy.clone(), tasks[0].clone());
        requests.spawn(async move { client.get(&id, ALICE).await.code() });
    }
    tokio::time::sleep(LEASE * 3).await;
    locker.execute("COMMIT").await.expect("the lock released");
    let held = locked.elapsed();
    let mut answered = 0;
    while let Some(done) = requests.join_next().await {
        if done.expect("a request").is_none() {
            answered += 1;
        }
    }
    all_completed(&busy, &tasks).await;
    no_lease_lost_nor_claimed(&nodes, "busy");
    eprintln!(
        "{} pool saturated for {} ms ({REQUESTS} requests waiting on a table lock, lease {LEASE_MS} ms): {} tasks in flight, 0 leases lost, 0 false failures; {answered} of the requests answered once the lock was released",
        backend.name,
        held.as_millis(),
        tasks.len()
    );
}

/// Node 0 serves more requests at once than its store connections carry, for 3×
/// the lease, while it runs two tasks: it keeps its lease.
async fn flood(backend: Backend) {
    const CLIENTS: usize = 32;
    let (_proxies, nodes) = two_nodes(&backend).await;
    let busy = Client::new(nodes[0].addr);
    let seconds = (LEASE * 3).as_secs_f64() + 3.0;
    let tasks = [
        slow_task(&busy, seconds).await,
        slow_task(&busy, seconds).await,
    ];
    tokio::time::sleep(LEASE * 3).await;

    let until = Instant::now() + LEASE * 3;
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let (client, id) = (busy.clone(), tasks[0].clone());
        clients.spawn(async move {
            let mut answered = 0usize;
            while Instant::now() < until {
                if client.get(&id, ALICE).await.code().is_none() {
                    answered += 1;
                }
            }
            answered
        });
    }
    let mut answered = 0;
    while let Some(done) = clients.join_next().await {
        answered += done.expect("a client");
    }
    all_completed(&busy, &tasks).await;
    no_lease_lost_nor_claimed(&nodes, "busy");
    eprintln!(
        "{} flood of {CLIENTS} concurrent clients for {} ms (lease {LEASE_MS} ms): {answered} requests answered, {} tasks in flight, 0 leases lost, 0 false failures",
        backend.name,
        (LEASE * 3).as_millis(),
        tasks.len()
    );
}

/// The cases every shared backend runs, each a `#[tokio::test]` in a module named
/// after the backend (`postgres::a_flooded_node_loses_no_lease`): `$backend()` gives
/// its store, `$name` is how the printed times name it. Without the backend's URL
/// a case passes at once.
macro_rules! lease_fault_tests {
    ($backend:ident, $feature:literal, $name:literal) => {
        #[cfg(feature = $feature)]
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_flooded_node_loses_no_lease() {
                if let Some(backend) = super::$backend() {
                    flood(backend).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stalled_outages_fail_no_live_task() {
                if let Some(backend) = super::$backend() {
                    outages(backend, Mode::Stall).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn refused_outages_fail_no_live_task() {
                if let Some(backend) = super::$backend() {
                    outages(backend, Mode::Refuse).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_node_cut_off_loses_its_work_and_learns_it() {
                if let Some(backend) = super::$backend() {
                    partition(backend).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_node_restarted_under_its_id_has_its_old_work_failed() {
                if let Some(backend) = super::$backend() {
                    kill_and_restart(backend).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_create_whose_reply_is_lost_ends() {
                if let Some(scratch) = support::stores::$backend::scratch().await {
                    super::a_create_whose_reply_is_lost_ends(std::sync::Arc::new(scratch), $name)
                        .await;
                }
            }
        }
    };
}

lease_fault_tests!(postgres, "postgres", "PostgreSQL");
lease_fault_tests!(redis, "redis", "Redis");

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_saturated_pool_loses_no_lease() {
    if let Some(backend) = postgres() {
        saturated_pool(backend).await;
    }
}

/// A store whose next create is applied but answered with an error, as when the
/// connection drops between the commit and the reply; it notes the id.
#[derive(Debug)]
struct LoseCreateReply {
    store: std::sync::Arc<dyn mcp_tasks::store::TaskStore>,
    armed: std::sync::atomic::AtomicBool,
    created: std::sync::Mutex<Option<mcp_tasks::TaskId>>,
}

impl mcp_tasks::store::TaskStore for LoseCreateReply {
    fn create<'a>(
        &'a self,
        record: mcp_tasks::TaskRecord,
        limits: mcp_tasks::store::CreateLimits,
    ) -> mcp_tasks::store::BoxFuture<'a, Result<(), mcp_tasks::error::StoreError>> {
        Box::pin(async move {
            let id = record.id;
            self.store.create(record, limits).await?;
            if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                *self.created.lock().unwrap() = Some(id);
                return Err(mcp_tasks::error::StoreError::backend(
                    "the connection dropped before the reply",
                ));
            }
            Ok(())
        })
    }

    fn get<'a>(
        &'a self,
        id: &'a mcp_tasks::TaskId,
        scope: mcp_tasks::store::Scope<'a>,
        now: mcp_tasks::store::Timestamp,
    ) -> mcp_tasks::store::BoxFuture<
        'a,
        Result<Option<mcp_tasks::TaskRecord>, mcp_tasks::error::StoreError>,
    > {
        self.store.get(id, scope, now)
    }

    fn update<'a>(
        &'a self,
        id: &'a mcp_tasks::TaskId,
        scope: mcp_tasks::store::Scope<'a>,
        transition: &'a mcp_tasks::store::Transition,
        now: mcp_tasks::store::Timestamp,
    ) -> mcp_tasks::store::BoxFuture<
        'a,
        Result<Option<mcp_tasks::store::Updated>, mcp_tasks::error::StoreError>,
    > {
        self.store.update(id, scope, transition, now)
    }

    fn cleanup<'a>(
        &'a self,
        now: mcp_tasks::store::Timestamp,
        retention: Duration,
    ) -> mcp_tasks::store::BoxFuture<'a, Result<usize, mcp_tasks::error::StoreError>> {
        self.store.cleanup(now, retention)
    }

    fn subscribe(&self) -> Option<mcp_tasks::store::ChangeFeed> {
        self.store.subscribe()
    }

    fn leases(&self) -> Option<std::sync::Arc<dyn mcp_tasks::store::LeaseStore>> {
        self.store.leases()
    }
}

/// A create committed whose reply was lost: the caller hears -32603, and the stored
/// task does not stay `working` with no worker: a compensating write fails it.
async fn a_create_whose_reply_is_lost_ends(
    store: std::sync::Arc<dyn mcp_tasks::store::TaskStore>,
    name: &str,
) {
    use mcp_tasks::store::TaskStore as _;
    use mcp_tasks::store::{Scope, Timestamp};
    let store = std::sync::Arc::new(LoseCreateReply {
        store,
        armed: std::sync::atomic::AtomicBool::new(true),
        created: std::sync::Mutex::default(),
    });
    let node = support::faults::Node::start(store.clone(), Duration::from_secs(1)).await;
    let asked = Instant::now();
    node.client()
        .call_tool("ask", json!({}), true, ALICE)
        .await
        .assert_error(-32603, 200);
    let id = store
        .created
        .lock()
        .unwrap()
        .expect("the create was applied");
    let ended = support::wait::poll(async || {
        let task = store.get(&id, Scope::Any, Timestamp::now()).await.ok()??;
        task.status.is_terminal().then_some(task)
    })
    .await
    .expect("a task whose create reply was lost must end");
    let took = asked.elapsed();
    assert_eq!(ended.status, mcp_tasks::TaskStatus::Failed);
    let message = ended.error.map(|e| e.message).unwrap_or_default();
    assert!(message.contains("not confirmed"), "{message}");
    eprintln!(
        "{name}: a create whose reply was lost after the commit: the task failed by a compensating write {} ms after the call; 0 stranded",
        took.as_millis()
    );
}
