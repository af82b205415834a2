//! Fuzzing on the stable toolchain, through the public entry points: the whole layer
//! driven in-process with `tower::ServiceExt::oneshot`, with mutated corpus seeds
//! from `fuzz/corpus/<target>/`. Each target runs for `FUZZ_SECS` (default 2 s) and
//! prints its executions; a failing case prints its `FUZZ_SEED` and is saved under
//! `fuzz/crashes/`. RELIABILITY.md ("Fuzzing") has the details.
//!
//! ```text
//! FUZZ_SECS=120 cargo test --test fuzz -- --nocapture --test-threads 1
//! FUZZ_SEED=<hex> cargo test --test fuzz envelope_and_headers -- --nocapture
//! ```

mod support;

#[path = "fuzz/common.rs"]
mod common;
#[path = "fuzz/engine.rs"]
mod engine;
#[path = "fuzz/envelope.rs"]
mod envelope;
#[path = "fuzz/listen_input.rs"]
mod listen_input;
#[path = "fuzz/rmcp_fixture.rs"]
mod rmcp_fixture;
#[path = "fuzz/sse_streams.rs"]
mod sse_streams;

use engine::{Rng, Runner};

/// How many executions a service serves before a fresh one replaces it (its
/// records and tasks would otherwise grow for the whole run).
const EPOCH: u64 = 400;

#[test]
fn envelope_and_headers() {
    common::runtime(envelope::TARGET).block_on(envelope_and_headers_run());
}

async fn envelope_and_headers_run() {
    let seeds: Vec<Vec<u8>> = engine::corpus(envelope::TARGET)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let mut runner = Runner::new(envelope::TARGET);
    let mut stacks = Vec::new();
    while let Some(seed) = runner.next_seed() {
        if runner.n % EPOCH == 1 {
            stacks = vec![
                envelope::raw_stack().await,
                envelope::rmcp_stack(true).await,
                envelope::rmcp_stack(false).await,
            ];
        }
        let mut rng = Rng::new(seed);
        // Three cases in five go to the raw inner service, the rest to rmcp.
        let stack = &stacks[match rng.below(5) {
            0 => 1,
            1 => 2,
            _ => 0,
        }];
        let (input, outcome) = envelope::case(&mut rng, stack, &seeds).await;
        runner.record(seed, &input, outcome);
    }
    runner.finish();
}

#[test]
fn sse_inner_streams() {
    common::runtime(sse_streams::TARGET).block_on(sse_inner_streams_run());
}

async fn sse_inner_streams_run() {
    let seeds: Vec<Vec<u8>> = engine::corpus(sse_streams::TARGET)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let mut runner = Runner::new(sse_streams::TARGET);
    let mut stack = None;
    while let Some(seed) = runner.next_seed() {
        if runner.n % EPOCH == 1 {
            stack = Some(sse_streams::Stack::new().await);
        }
        let mut rng = Rng::new(seed);
        let (input, outcome) = sse_streams::case(&mut rng, stack.as_ref().unwrap(), &seeds).await;
        runner.record(seed, &input, outcome);
    }
    runner.finish();
}

#[test]
fn listen_params_and_input_responses() {
    common::runtime(listen_input::TARGET).block_on(listen_params_and_input_responses_run());
}

async fn listen_params_and_input_responses_run() {
    let seeds: Vec<Vec<u8>> = engine::corpus(listen_input::TARGET)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let mut runner = Runner::new(listen_input::TARGET);
    let mut stack = None;
    while let Some(seed) = runner.next_seed() {
        if runner.n % EPOCH == 1 {
            stack = Some(listen_input::Stack::new().await);
        }
        let mut rng = Rng::new(seed);
        let (input, outcome) = listen_input::case(&mut rng, stack.as_mut().unwrap(), &seeds).await;
        runner.record(seed, &input, outcome);
    }
    runner.finish();
}
