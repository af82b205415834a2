//! Every example server, and the gateway, shuts down on SIGTERM, what a deploy, `docker stop` or
//! Kubernetes sends, the way it does on Ctrl-C: the layer drains, the HTTP server
//! stops, and the process exits 0, well within a deploy's usual 30 s grace period.

#![cfg(unix)]

mod support;

use std::time::Duration;

use support::procs::{self, Proc};

/// How long a server may take from SIGTERM to its exit: nothing runs, so the drain
/// waits out no grace period.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

fn exits_cleanly_on_sigterm(example: &str, env: &[(&str, &str)]) {
    let mut env = env.to_vec();
    env.push(("RUST_LOG", "warn,mcp_tasks=info"));
    exits_cleanly(example, procs::spawn(example, &[], &env));
}

/// SIGTERM to `server`: it drains and exits 0 within [`EXIT_WITHIN`].
fn exits_cleanly(example: &str, mut server: Proc) {
    server.terminate();
    let status = server.wait_exit(EXIT_WITHIN);
    let output = server.output().join("\n");
    let status = status
        .unwrap_or_else(|| panic!("{example} still runs {EXIT_WITHIN:?} after SIGTERM:\n{output}"));
    assert_eq!(
        status.code(),
        Some(0),
        "{example} ended {status}:\n{output}"
    );
    // Its last lines may still be in the pipe: wait for them to be read.
    assert!(
        server.wait_for_line("mcp-tasks: draining", Duration::from_secs(5)),
        "{example} exited without draining its tasks:\n{}",
        server.output().join("\n")
    );
}

#[test]
fn quickstart() {
    exits_cleanly_on_sigterm("quickstart", &[]);
}

#[test]
fn retrofit() {
    exits_cleanly_on_sigterm("retrofit", &[]);
}

#[test]
fn conformance_server() {
    exits_cleanly_on_sigterm("conformance_server", &[]);
}

#[test]
fn conformance_retrofit() {
    exits_cleanly_on_sigterm("conformance_retrofit", &[]);
}

#[cfg(feature = "metrics")]
#[test]
fn metrics() {
    exits_cleanly_on_sigterm("metrics", &[]);
}

#[test]
fn gateway() {
    // The upstream is never called: the gateway only starts and stops.
    let env = [
        ("MCP_UPSTREAM", "http://127.0.0.1:9/mcp"),
        ("RUST_LOG", "warn,mcp_tasks=info"),
    ];
    exits_cleanly("gateway", procs::spawn_gateway(&[], &env));
}
