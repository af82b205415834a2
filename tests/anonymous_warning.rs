//! A layer that refuses a task to a request without a `Principal` says so once:
//! one warning per layer, naming the likely cause (an authentication layer placed
//! below `TasksLayer`) and `with_anonymous_tasks()`; a layer that allows anonymous
//! tasks says nothing.

mod support;

use std::io;
use std::sync::{Arc, Mutex};

use serde_json::json;
use support::fixtures::{Server, layer_builder, strict_layer_builder};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn warnings(&self) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|line| line.contains("WARN") && line.contains("without a Principal"))
            .count()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_refused_anonymous_task_of_a_layer_logs_one_warning() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("one subscriber per binary");

    // Tasks with a principal: no warning.
    let server = Server::with_layer(strict_layer_builder()).await;
    let client = server.client();
    let task = client
        .create_task_id("work", json!({}), Some("alice"))
        .await;
    client.get(&task, Some("alice")).await.ok();
    assert_eq!(captured.warnings(), 0, "{}", captured.text());

    // Anonymous tasks, refused several times: one warning.
    for _ in 0..3 {
        let refused = client.call_tool("work", json!({}), true, None).await;
        assert_eq!(refused.code(), Some(-32603), "{}", refused.text());
        client.get(&task, None).await;
    }
    assert_eq!(captured.warnings(), 1, "{}", captured.text());
    let text = captured.text();
    assert!(text.contains("below TasksLayer"), "{text}");
    assert!(text.contains("with_anonymous_tasks()"), "{text}");

    // Another layer warns once more, for its own.
    let other = Server::with_layer(strict_layer_builder()).await;
    let client = other.client();
    client.call_tool("work", json!({}), true, None).await;
    client.call_tool("work", json!({}), true, None).await;
    assert_eq!(captured.warnings(), 2, "{}", captured.text());

    // A layer that allows anonymous tasks has nothing to warn of.
    let open = Server::with_layer(layer_builder()).await;
    let client = open.client();
    let task = client.create_task_id("work", json!({}), None).await;
    client.get(&task, None).await.ok();
    assert_eq!(captured.warnings(), 2, "{}", captured.text());
}
