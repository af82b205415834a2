//! The connect failures every shared store reports alike: a closed port fails at
//! once, a server that never answers fails at the connect timeout, and both
//! errors name the server with its password (`hunter2-secret` in the tests' URLs)
//! as `***`.

use std::future::Future;
use std::time::{Duration, Instant};

use mcp_tasks::error::StoreError;

/// A port nothing listens on: `connect(url(port), limit)` is refused at once, well
/// within the limit, and the error shows the server as `shown(port)`.
pub(crate) async fn a_closed_port_fails_at_once<S, Fut>(
    connect: impl Fn(String, Duration) -> Fut,
    url: impl Fn(u16) -> String,
    shown: impl Fn(u16) -> String,
) where
    Fut: Future<Output = Result<S, StoreError>>,
{
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let limit = Duration::from_secs(3);
    let started = Instant::now();
    let refused = connect(url(port), limit)
        .await
        .err()
        .expect("a closed port refuses the connection");
    assert!(started.elapsed() < limit, "took {:?}", started.elapsed());
    let text = described(&refused);
    let expected = format!("could not connect to {}", shown(port));
    assert!(text.contains(&expected), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// A server whose kernel completes the handshake and that never answers:
/// `connect(url(port), 300 ms)` gives up at its timeout, and the error says so,
/// showing the server as `shown(port)`.
pub(crate) async fn a_silent_server_fails_at_the_connect_timeout<S, Fut>(
    connect: impl Fn(String, Duration) -> Fut,
    url: impl Fn(u16) -> String,
    shown: impl Fn(u16) -> String,
) where
    Fut: Future<Output = Result<S, StoreError>>,
{
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let limit = Duration::from_millis(300);
    let started = Instant::now();
    let timed_out = connect(url(port), limit)
        .await
        .err()
        .expect("a silent server times the connect out");
    let took = started.elapsed();
    assert!(took >= limit && took < limit * 5, "took {took:?}");
    let text = described(&timed_out);
    let expected = format!(
        "could not connect to {} within the connect timeout of 300 ms",
        shown(port)
    );
    assert!(text.contains(&expected), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// An error, each cause under it, and its `Debug` form: everything a log or a
/// `main` returning the error could print.
pub(crate) fn described(e: &StoreError) -> String {
    let mut text = format!("{e:?}");
    let mut level: Option<&dyn std::error::Error> = Some(e);
    while let Some(error) = level {
        text.push('\n');
        text.push_str(&error.to_string());
        level = error.source();
    }
    text
}
