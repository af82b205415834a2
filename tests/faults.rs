//! Node kills on a shared store: example servers run as separate processes over one
//! PostgreSQL table or one Redis key prefix, with a 1 s worker lease. One node runs
//! a `slow_compute` task and a `confirm_delete` task waiting for its answer, another
//! an `Auto` task; both are killed with SIGKILL. The surviving node must report each
//! task `failed` (-32603, worker lost) within 1.25 × the lease, and a listen stream
//! open on it must receive each failure.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::http::Client;
use support::procs::{self, Proc};
use support::requests::modern_meta;

/// The lease the nodes run with.
const LEASE_MS: u64 = 1_000;

/// How late past 1.25 × the lease a failure may be seen: the survivor's write, and
/// the test's own polling and start-up noise on a loaded machine.
const SLACK: Duration = Duration::from_millis(1_500);

const ALICE: Option<&str> = Some("alice");

/// What each kill suite records, printed for RELIABILITY.md.
struct Outcome {
    in_flight: usize,
    failed_after: Vec<Duration>,
}

/// Starts `example` on the shared store named by `store_env`.
fn node(example: &str, store_env: &[(&str, &str)]) -> Proc {
    let lease = LEASE_MS.to_string();
    let mut env: Vec<(&str, &str)> = vec![("MCP_LEASE_MS", &lease), ("RUST_LOG", "warn")];
    env.extend_from_slice(store_env);
    procs::spawn(example, &[], &env)
}

/// A `tools/call` that should become a task, declaring elicitation too (so
/// `confirm_delete` asks its question as a task).
async fn start_task(client: &Client, tool: &str, arguments: Value) -> String {
    let mut meta = modern_meta(true);
    meta["io.modelcontextprotocol/clientCapabilities"]["elicitation"] = json!({});
    let reply = client
        .request("tools/call")
        .params(json!({"name": tool, "arguments": arguments}))
        .meta(meta)
        .principal("alice")
        .send()
        .await;
    let result = reply.ok();
    assert_eq!(result["resultType"], "task", "{}: {}", tool, reply.text());
    result["taskId"].as_str().expect("a task id").to_owned()
}

async fn kill_suite(store_env: &[(&str, &str)]) -> Outcome {
    let mut doomed = node("conformance_server", store_env);
    let mut doomed_auto = node("retrofit", store_env);
    let survivor = node("conformance_server", store_env);
    let (on_doomed, on_auto, on_survivor) = (
        Client::new(doomed.addr),
        Client::new(doomed_auto.addr),
        Client::new(survivor.addr),
    );

    let computing = start_task(&on_doomed, "slow_compute", json!({"seconds": 120})).await;
    let asking = start_task(&on_doomed, "confirm_delete", json!({"filename": "a.txt"})).await;
    let auto = start_task(&on_auto, "sleep", json!({"ms": 120_000})).await;
    on_survivor
        .wait_for_status(&asking, ALICE, "input_required")
        .await;
    let ids = [computing.as_str(), asking.as_str(), auto.as_str()];
    let mut stream = on_survivor.listen(ALICE, json!("kills"), &ids).await;
    let ack = stream.next_message().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let snapshot = stream.snapshot(ids.len()).await;
    for id in ids {
        let status = &snapshot[id]["status"];
        assert!(
            status == "working" || status == "input_required",
            "before the kill every task is unfinished: {status}"
        );
    }
    // Let the doomed nodes renew with their holds.
    tokio::time::sleep(Duration::from_millis(LEASE_MS)).await;
    for id in ids {
        let task = on_survivor.get(id, ALICE).await;
        let status = &task.ok()["status"];
        assert!(
            status == "working" || status == "input_required",
            "a live node's task is never failed: {status}"
        );
    }

    let killed = Instant::now();
    doomed.kill();
    doomed_auto.kill();

    let mut failed_at: HashMap<String, Duration> = HashMap::new();
    while failed_at.len() < ids.len() {
        let params = stream.next_task().await;
        if params["status"] == "failed"
            && let Some(id) = params["taskId"].as_str()
        {
            failed_at
                .entry(id.to_owned())
                .or_insert_with(|| killed.elapsed());
        }
    }
    let bound = Duration::from_millis(LEASE_MS * 5 / 4) + SLACK;
    for id in ids {
        let after = failed_at[id];
        assert!(
            after <= bound,
            "a lost task's failure reached the survivor's listen stream {after:?} after the kill"
        );
        let task = on_survivor.get_detailed(id, ALICE).await;
        assert_eq!(task["status"], "failed", "{task}");
        assert_eq!(task["error"]["code"], -32603, "{task}");
        assert!(
            task["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("worker lost")),
            "{task}"
        );
    }
    Outcome {
        in_flight: ids.len(),
        failed_after: ids.iter().map(|id| failed_at[*id]).collect(),
    }
}

fn report(store: &str, outcome: &Outcome) {
    let slowest = outcome
        .failed_after
        .iter()
        .max()
        .copied()
        .unwrap_or_default();
    let fastest = outcome
        .failed_after
        .iter()
        .min()
        .copied()
        .unwrap_or_default();
    eprintln!(
        "node kill on {store}: {} tasks in flight, 0 lost, 0 stranded, failed on the survivor {} to {} ms after the kill (lease {LEASE_MS} ms)",
        outcome.in_flight,
        fastest.as_millis(),
        slowest.as_millis()
    );
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_tasks_fail_on_the_survivor_on_postgres() {
    let Some(url) = support::stores::postgres::database_url() else {
        return;
    };
    let table = support::stores::postgres::scratch_table();
    let _drop = support::stores::postgres::DropTable::new(url.clone(), table.clone());
    let env = [
        ("MCP_STORE", url.as_str()),
        ("MCP_STORE_TABLE", table.as_str()),
    ];
    let outcome = kill_suite(&env).await;
    report("PostgreSQL", &outcome);
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_tasks_fail_on_the_survivor_on_redis() {
    let Some(url) = support::stores::redis::redis_url() else {
        return;
    };
    let prefix = support::stores::redis::unique_prefix();
    let _cleanup = support::stores::redis::KeyJanitor::new(url.clone(), prefix.clone());
    let env = [
        ("MCP_STORE", url.as_str()),
        ("MCP_STORE_PREFIX", prefix.as_str()),
    ];
    let outcome = kill_suite(&env).await;
    report("Redis", &outcome);
}
