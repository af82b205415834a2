//! The one harness of the integration tests and benches, shared as `mod support;`
//! (benches: `#[path = "../tests/support/mod.rs"] mod support;`):
//!
//! - [`http`]: the loopback server (127.0.0.1, port 0, `TCP_NODELAY`), the demo
//!   authentication, the client, [`Reply`](http::Reply) and
//!   [`EventStream`](http::EventStream);
//! - [`sse`]: the one SSE event parser of the tests (CR, LF and CRLF line ends);
//! - [`requests`]: modern 2026-07-28 requests, their `_meta` and standard headers;
//! - [`fixtures`]: the inner services and tools the layer wraps, the standard
//!   layer settings, and the [`Server`](fixtures::Server) running them;
//! - [`connect`]: the connect failures every shared store reports alike;
//! - [`stores`]: scratch PostgreSQL and Redis stores from `DATABASE_URL` and
//!   `REDIS_URL`;
//! - [`wait`]: bounded waiting, on signals where there are any;
//! - [`proxy`]: a TCP proxy on loopback that refuses, stalls and cuts store
//!   connections on demand;
//! - [`faults`]: the nodes of the fault tests, whose tools report what happens to
//!   them.
//! - [`everything`]: `@modelcontextprotocol/server-everything` as a real upstream;
//! - [`procs`]: examples built once and run as separate processes, killed on drop.
//! - [`logs`]: what the layer logs while a test watches;
//! - [`model`]: the state machine's model, for the property tests.

// Each test crate uses only part of the harness; the rest is dead code there.
#![allow(dead_code)]

pub(crate) mod connect;
pub(crate) mod everything;
pub(crate) mod faults;
pub(crate) mod fixtures;
pub(crate) mod http;
pub(crate) mod logs;
pub(crate) mod model;
pub(crate) mod procs;
pub(crate) mod proxy;
pub(crate) mod requests;
pub(crate) mod rmcp_server;
pub(crate) mod sse;
pub(crate) mod stores;
pub(crate) mod wait;

/// The process's resident set, in KiB (`VmRSS` of /proc/self/status; 0 where there
/// is none), for the benches that watch memory.
pub(crate) fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Whether `s` is an RFC 3339 timestamp.
pub(crate) fn is_rfc3339(s: &serde_json::Value) -> bool {
    s.as_str().is_some_and(|s| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).is_ok()
    })
}

/// Whether `s` looks like a task id: 43 base64url characters.
pub(crate) fn is_task_id(s: &serde_json::Value) -> bool {
    s.as_str().is_some_and(|s| {
        s.len() == 43
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}
