//! Worker lease renewals against the number of tasks a node holds, on the shared
//! stores side by side.
//!
//! For each store (`LEASE_STORE`: `postgres`, `redis` or `all`, the default; on
//! PostgreSQL twice, the second time with every statement planned generically, as
//! PostgreSQL may after a statement's fifth run) and each size N (`LEASE_SIZES`,
//! default 1 000, 10 000 and 100 000), on a fresh lease in one table or prefix:
//!
//! 1. stores N holds the way the layer sends them: renewals of at most 5 000 ids,
//!    the first one creating the lease (the total time);
//! 2. renews `LEASE_RUNS` times (default 20) with nothing changed, with 200 ids
//!    changed (100 held, 100 released) and with a full batch of 5 000 changed (2 500
//!    each), each the median and the slowest;
//! 3. renews once replacing the whole set with N holds (what a caller that lost
//!    track of the store's copy may send; the layer never does);
//! 4. claims the lease and reads its N holds, as a surviving node would, then
//!    forgets it.
//!
//! Every answer is checked (`New` or `Renewed`; the claim returns N holds). The
//! bench calls the lease store directly: a renewal is one call of the layer's lease
//! keeper, and the rest of the layer does not change with N.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379 \
//!   cargo bench --bench lease --features postgres,redis
//! ```
//!
//! BENCHMARKS.md ("Worker lease renewals") has the results.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use mcp_tasks::sqlx::{self, AssertSqlSafe};
use mcp_tasks::store::{LeaseId, LeaseStore, NodeId, Renewal, Renewed, TaskStore};
use mcp_tasks::{PostgresStore, RedisStore, TaskId};

/// The most ids the layer puts in one renewal.
const BATCH: usize = 5_000;
/// The lease length named in the renewals: the default.
const BOUND: Duration = mcp_tasks::defaults::WORKER_LEASE;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` must not run for minutes.
    if !std::env::args().any(|a| a == "--bench") {
        println!("lease: run it with `cargo bench --bench lease --features postgres,redis`");
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
    let stores: Vec<&str> = match std::env::var("LEASE_STORE").as_deref() {
        Ok("postgres") => vec!["postgres", "postgres-generic"],
        Ok("redis") => vec!["redis"],
        _ => vec!["postgres", "postgres-generic", "redis"],
    };
    let sizes: Vec<usize> = std::env::var("LEASE_SIZES")
        .unwrap_or_else(|_| "1000,10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs: usize = env_or("LEASE_RUNS", 20);
    println!(
        "| store | holds | storing them (ms) | renewal, nothing changed: p50 / max (ms) | 200 changed: p50 / max | 5 000 changed: p50 / max | replacing all (ms) | claim, holds read (ms) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for name in stores {
        let (leases, done) = lease_store(name).await;
        for &size in &sizes {
            measure(name, leases.as_ref(), size, runs).await;
        }
        done.await;
    }
}

/// One size on one store: prints a row.
async fn measure(name: &str, leases: &dyn LeaseStore, size: usize, runs: usize) {
    let lease = LeaseId::new(NodeId::random());
    let holds: Vec<TaskId> = (0..size).map(|_| TaskId::random()).collect();
    let started = Instant::now();
    for (n, batch) in holds.chunks(BATCH).enumerate() {
        renew(leases, &lease, n == 0, batch, &[], false).await;
    }
    let storing = started.elapsed();

    let steady = timed(runs, || renew(leases, &lease, false, &[], &[], false)).await;
    let mut kept = holds.clone();
    let churn = churned(leases, &lease, &mut kept, 100, runs).await;
    let full = churned(leases, &lease, &mut kept, BATCH / 2, runs.min(5)).await;
    let started = Instant::now();
    renew(leases, &lease, false, &kept, &[], true).await;
    let replacing = started.elapsed();

    let count = leases
        .leases()
        .await
        .expect("the leases")
        .into_iter()
        .find(|state| state.lease == lease)
        .expect("the lease")
        .renewals;
    let started = Instant::now();
    let claimed = leases
        .claim(&lease, count)
        .await
        .expect("the claim")
        .expect("claimed at its count");
    let claiming = started.elapsed();
    assert_eq!(claimed.len(), kept.len(), "the claim returns every hold");
    leases.forget(&lease).await.expect("forgotten");

    let store = match name {
        "postgres" => "PostgreSQL",
        "postgres-generic" => "PostgreSQL, generic plans",
        _ => "Redis",
    };
    println!(
        "| {store} | {size} | {} | {} | {} | {} | {} | {} |",
        ms(storing),
        pair(&steady),
        pair(&churn),
        pair(&full),
        ms(replacing),
        ms(claiming)
    );
}

/// `runs` renewals each holding `each` new ids and releasing `each` of `kept`:
/// their times, sorted.
async fn churned(
    leases: &dyn LeaseStore,
    lease: &LeaseId,
    kept: &mut Vec<TaskId>,
    each: usize,
    runs: usize,
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let hold: Vec<TaskId> = (0..each).map(|_| TaskId::random()).collect();
        let release: Vec<TaskId> = kept.drain(..each.min(kept.len())).collect();
        let started = Instant::now();
        renew(leases, lease, false, &hold, &release, false).await;
        times.push(started.elapsed());
        kept.extend(hold);
    }
    times.sort_unstable();
    times
}

/// `runs` calls of `call`: their times, sorted.
async fn timed<F: Future<Output = ()>>(runs: usize, mut call: impl FnMut() -> F) -> Vec<Duration> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        call().await;
        times.push(started.elapsed());
    }
    times.sort_unstable();
    times
}

async fn renew(
    leases: &dyn LeaseStore,
    lease: &LeaseId,
    first: bool,
    hold: &[TaskId],
    release: &[TaskId],
    replace: bool,
) {
    let renewal = Renewal {
        lease,
        bound: BOUND,
        first,
        hold,
        release,
        replace,
    };
    let renewed = leases.renew(renewal).await.expect("a renewal");
    assert!(
        matches!(renewed, Renewed::New | Renewed::Renewed),
        "{renewed:?}"
    );
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// The median and the slowest of sorted times.
fn pair(times: &[Duration]) -> String {
    match times {
        [] => "–".to_owned(),
        _ => format!(
            "{} / {}",
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1])
        ),
    }
}

type Done = std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

fn random_suffix() -> String {
    TaskId::random().as_bytes()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The lease store of a fresh table or prefix, and what removes it.
async fn lease_store(name: &str) -> (Arc<dyn LeaseStore>, Done) {
    match name {
        "postgres" | "postgres-generic" => {
            let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
            let table = format!("mcp_tasks_bench_{}", random_suffix());
            let mut options: PgConnectOptions = url.parse().expect("a PostgreSQL URL");
            if name == "postgres-generic" {
                options = options.options([("plan_cache_mode", "force_generic_plan")]);
            }
            let pool = PgPoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await
                .expect("connect to DATABASE_URL");
            let store = PostgresStore::new(pool.clone()).with_table(&table).unwrap();
            store.migrate().await.expect("migrate");
            let leases = store.leases().expect("the store keeps leases");
            let done: Done = Box::pin(async move {
                let drop = format!(
                    "DROP TABLE IF EXISTS \"{table}\", \"{table}_leases\", \"{table}_lease_holds\", \"{table}_feed\", \"{table}_counts\"; \
                     DROP FUNCTION IF EXISTS \"{table}_feed_fn\"()"
                );
                sqlx::raw_sql(AssertSqlSafe(drop))
                    .execute(&pool)
                    .await
                    .expect("drop the bench table");
            });
            (leases, done)
        }
        _ => {
            let url = std::env::var("REDIS_URL").expect("REDIS_URL");
            let prefix = format!("mcp-tasks-bench:{}:", random_suffix());
            let store = RedisStore::connect(url.as_str())
                .await
                .expect("connect to REDIS_URL")
                .with_prefix(&prefix);
            let leases = store.leases().expect("the store keeps leases");
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
            (leases, done)
        }
    }
}
