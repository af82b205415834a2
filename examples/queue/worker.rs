//! The worker of the job-queue example: runs the jobs `queue_server` queues, in a
//! process of its own. Any number of workers may run, on any hosts.
//!
//! ```sh
//! MCP_STORE=postgres://postgres@127.0.0.1:5432/test cargo run --example queue_worker --features queue
//! ```
//!
//! Kill it (`kill -9`) while a report runs: once its lock runs out
//! (`MCP_LOCK_LEASE_MS`, default 30000) another worker (or this one, restarted)
//! runs the report again on the same task, whose status message says it resumed;
//! the client sees `working` throughout. On SIGTERM it stops taking jobs, gives the
//! running ones `MCP_WORKER_GRACE_MS` (default 10000) and hands the rest back at
//! once. Environment: `MCP_STORE` (required), `MCP_STORE_TABLE`,
//! `MCP_WORKER_NAME` (the name it locks jobs under; default host, pid and a random
//! suffix), `MCP_LOCK_LEASE_MS`, `MCP_POLL_MS` (default 1000: how often parked jobs
//! are checked for their answers), `RUST_LOG`.

#[path = "../common/mod.rs"]
mod common;
mod setup;

use std::time::Duration;

use mcp_tasks::TasksLayer;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::queue::{self, JobContext, JobError, Worker};
use mcp_tasks::wire::RpcError;
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=info");
    let (store, queue) = setup::store_and_queue().await?;
    // The worker drives tasks by id through a layer on the servers' store. It serves
    // no HTTP and runs no in-process work, so it needs no worker lease: killed, it
    // leaves none for the servers to claim.
    let tasks = TasksLayer::builder(store)
        .without_worker_leases()
        .build()?
        .tasks();
    let name = std::env::var("MCP_WORKER_NAME").ok();
    let mut worker = Worker::new(queue.clone(), tasks, {
        let name = name.clone();
        move |job| handle(job, name.clone())
    })
    .with_lock_lease(setup::millis_from_env(
        "MCP_LOCK_LEASE_MS",
        queue::LOCK_LEASE.as_millis() as u64,
    ))
    .with_poll_interval(setup::millis_from_env(
        "MCP_POLL_MS",
        queue::POLL_INTERVAL.as_millis() as u64,
    ))
    .with_shutdown_grace(setup::millis_from_env("MCP_WORKER_GRACE_MS", 10_000));
    if let Some(name) = name {
        worker = worker.with_name(name);
    }
    let signal = common::shutdown_signal();
    println!("job worker {} ready on {}", worker.name(), queue.table());
    worker.run(signal).await;
    println!("job worker stopped");
    Ok(())
}

/// Runs one job of either tool.
async fn handle(job: JobContext, worker: Option<String>) -> Result<Value, JobError> {
    match job.tool() {
        "report" => report(job, worker).await,
        "deploy" => deploy(job).await,
        other => Err(JobError::fail(RpcError::invalid_params(format!(
            "unknown tool {other}"
        )))),
    }
}

/// `report`: one step a second, each reported once done; the last one's report is
/// the result. A run that resumes starts again from the first step (a real report
/// would keep its own progress), so the status message says it resumed for a second.
async fn report(job: JobContext, worker: Option<String>) -> Result<Value, JobError> {
    let seconds = job.input()["seconds"].as_u64().unwrap_or(30).clamp(1, 3600);
    for step in 1..=seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if step < seconds {
            job.progress(format!("{step} of {seconds} s done")).await?;
        }
    }
    let by = worker.map(|name| format!(" by {name}")).unwrap_or_default();
    Ok(text(format!(
        "Report of {seconds} s written{by} (attempt {})",
        job.attempt()
    )))
}

/// `deploy`: asks for a confirmation; the job parks until the answer comes.
async fn deploy(job: JobContext) -> Result<Value, JobError> {
    let target = job.input()["target"]
        .as_str()
        .unwrap_or("staging")
        .to_owned();
    let question = InputRequests::new()
        .with(
            "confirm",
            InputRequest::confirm(format!("Deploy to {target}?"), "confirm"),
        )
        .with_status_message("Waiting for confirmation");
    let answers = job.ask(question).await?;
    job.progress(format!("Deploying to {target}")).await?;
    let outcome = match answers.confirmed("confirm", "confirm") {
        true => format!("Deployed to {target}"),
        false => format!("Deployment to {target} called off"),
    };
    Ok(text(outcome))
}

fn text(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}
