//! Creation scaling on the shared stores: created/s as the store fills up, on one
//! node and on two.
//!
//! For each store (`CREATE_STORE`: `postgres`, `redis` or `all`, the default) the
//! bench makes a fresh table or key prefix, then for each size N (`CREATE_SIZES`,
//! default 1 000, 10 000 and 100 000):
//!
//! 1. fills the store to N parked working tasks (no TTL) of 256 owners (after a
//!    warm-up of 200 creates that is not counted), with the limits below, or none
//!    with `CREATE_FILL_UNCAPPED=1` (quicker for a store that counts its rows on
//!    every capped create; a store with counter shards must be filled capped);
//! 2. creates `CREATE_COUNT` tasks (default 3 000) on one node with
//!    `CREATE_CONNS` creates in flight (default 16), then the same count spread
//!    over two nodes (two store instances, each with its own connection pool of 8,
//!    each with `CREATE_CONNS` in flight), and reports created/s for each; on
//!    PostgreSQL, the same count again on a third instance built
//!    `without_announcements()`, to show what announcing costs;
//! 3. sweeps the measured tasks away again (they have a 1 ms TTL), so every
//!    size is measured at N stored.
//!
//! Every create passes the limits the layer passes: a row cap of 1 000 000 (above
//! every size, so the capped path runs), a per-owner cap of 10 000 and the
//! default retention. Each answer is checked to be `Ok`.
//!
//! The bench calls the store directly rather than over HTTP: what changes with
//! N is the store's create path, and on a two-core machine the HTTP server and
//! client would share the cores with the database and hide it.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379 \
//!   cargo bench --bench create --features postgres,redis
//! ```
//!
//! BENCHMARKS.md ("Creation scaling") has the results.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcp_tasks::sqlx::postgres::PgPoolOptions;
use mcp_tasks::sqlx::{self, AssertSqlSafe};
use mcp_tasks::store::{CreateLimits, Timestamp};
use mcp_tasks::{
    PostgresStore, Principal, RedisStore, TaskId, TaskRecord, defaults, store::TaskStore,
};

const OWNERS: usize = 256;
const POOL: u32 = 8;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn limits() -> CreateLimits {
    CreateLimits::new(Some(1_000_000), Some(10_000)).with_retention(defaults::RETENTION)
}

fn fill_limits() -> CreateLimits {
    if std::env::var_os("CREATE_FILL_UNCAPPED").is_some() {
        CreateLimits::default()
    } else {
        limits()
    }
}

fn random_suffix() -> String {
    TaskId::random().as_bytes()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` must not run for minutes.
    if !std::env::args().any(|a| a == "--bench") {
        println!("create: run it with `cargo bench --bench create --features postgres,redis`");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let stores: Vec<&str> = match std::env::var("CREATE_STORE").as_deref() {
        Ok("postgres") => vec!["postgres"],
        Ok("redis") => vec!["redis"],
        _ => vec!["postgres", "redis"],
    };
    let sizes: Vec<usize> = std::env::var("CREATE_SIZES")
        .unwrap_or_else(|_| "1000,10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let count: usize = env_or("CREATE_COUNT", 3_000);
    let conns: usize = env_or("CREATE_CONNS", 16);
    println!(
        "| store | stored | created/s, 1 node | created/s, 2 nodes | 1 node / smallest | created/s, 1 node, no announcements | announced / not |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for store in stores {
        let (a, b, quiet, done) = nodes(store).await;
        let mut stored = 0;
        let mut smallest = None;
        // Connections opened and statements prepared before the first point.
        measure(&[a.clone(), b.clone()], 200, conns).await;
        sweep(&a).await;
        for &size in &sizes {
            fill(&[a.clone(), b.clone()], size - stored).await;
            stored = size;
            let one = measure(std::slice::from_ref(&a), count, conns).await;
            sweep(&a).await;
            let two = measure(&[a.clone(), b.clone()], count, conns).await;
            sweep(&a).await;
            let base = *smallest.get_or_insert(one);
            let (alone, ratio) = match &quiet {
                Some(quiet) => {
                    let alone = measure(std::slice::from_ref(quiet), count, conns).await;
                    sweep(&a).await;
                    (format!("{alone:.0}"), format!("{:.2}", one / alone))
                }
                None => ("—".to_owned(), "—".to_owned()),
            };
            println!(
                "| {store} | {size} | {one:.0} | {two:.0} | {:.2} | {alone} | {ratio} |",
                one / base
            );
        }
        done.await;
    }
}

type Done = std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// Two store instances ("nodes") on one fresh table or prefix, a third that
/// announces nothing (PostgreSQL only), and what removes the table or prefix.
async fn nodes(
    store: &str,
) -> (
    Arc<dyn TaskStore>,
    Arc<dyn TaskStore>,
    Option<Arc<dyn TaskStore>>,
    Done,
) {
    match store {
        "postgres" => {
            let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
            let table = format!("mcp_tasks_bench_{}", random_suffix());
            let node = || async {
                let pool = PgPoolOptions::new()
                    .max_connections(POOL)
                    .connect(&url)
                    .await
                    .expect("connect to DATABASE_URL");
                let store = PostgresStore::new(pool).with_table(&table).unwrap();
                store.migrate().await.expect("migrate");
                store
            };
            let (a, b) = (node().await, node().await);
            let quiet: Arc<dyn TaskStore> = Arc::new(node().await.without_announcements());
            let pool = a.pool().clone();
            let done: Done = Box::pin(async move {
                let drop = format!("DROP TABLE IF EXISTS \"{table}\", \"{table}_counts\"");
                sqlx::query(AssertSqlSafe(drop))
                    .execute(&pool)
                    .await
                    .expect("drop the bench table");
            });
            (Arc::new(a), Arc::new(b), Some(quiet), done)
        }
        _ => {
            let url = std::env::var("REDIS_URL").expect("REDIS_URL");
            let prefix = format!("mcp-tasks-bench:{}:", random_suffix());
            let node = || async {
                RedisStore::connect(url.as_str())
                    .await
                    .expect("connect to REDIS_URL")
                    .with_prefix(&prefix)
            };
            let (a, b) = (node().await, node().await);
            let done: Done = Box::pin(async move {
                let client = mcp_tasks::redis::Client::open(url.as_str()).unwrap();
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                let mut cursor = 0u64;
                loop {
                    let (next, keys): (u64, Vec<String>) = mcp_tasks::redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(format!("{prefix}*"))
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    if !keys.is_empty() {
                        let _: u64 = mcp_tasks::redis::cmd("DEL")
                            .arg(&keys)
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                    }
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
            });
            (Arc::new(a), Arc::new(b), None, done)
        }
    }
}

fn task(i: usize, ttl_ms: Option<u64>) -> TaskRecord {
    let owner = Principal::from(format!("owner-{}", i % OWNERS));
    let mut record = TaskRecord::new(TaskId::random(), Some(owner), Timestamp::now());
    record.ttl_ms = ttl_ms;
    record
}

/// Adds `n` parked tasks through both nodes, 32 creates in flight.
async fn fill(nodes: &[Arc<dyn TaskStore>], n: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..32)
        .map(|k| {
            let (store, next) = (nodes[k % nodes.len()].clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    store
                        .create(task(i, None), fill_limits())
                        .await
                        .expect("fill");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
}

/// Created/s for `count` creates spread over `nodes`, `conns` in flight on each.
async fn measure(nodes: &[Arc<dyn TaskStore>], count: usize, conns: usize) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = nodes
        .iter()
        .flat_map(|node| (0..conns).map(move |_| node.clone()))
        .map(|store| {
            let next = next.clone();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return;
                    }
                    store
                        .create(task(i, Some(1)), limits())
                        .await
                        .expect("create");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    count as f64 / started.elapsed().as_secs_f64()
}

/// Removes the measured tasks (expired) so the next point starts at its size.
async fn sweep(store: &Arc<dyn TaskStore>) {
    tokio::time::sleep(Duration::from_millis(5)).await;
    store
        .cleanup(Timestamp::now().plus_ms(1_000), defaults::RETENTION)
        .await
        .expect("cleanup");
}
