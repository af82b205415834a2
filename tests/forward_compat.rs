//! Forward compatibility: what later revisions of the extension may add is accepted
//! and passed on untouched — tasks settings with more in them than `{}`, and
//! `relatedTaskIds` in a `tools/call`'s `_meta`.

mod support;

use std::time::Duration;

use mcp_tasks::TaskMode;
use mcp_tasks::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES};
use serde_json::{Value, json};
use support::fixtures::{ListenSupport, Server, layer_builder};
use support::requests::modern_meta;

const RELATED: &str = "io.modelcontextprotocol/relatedTaskIds";

/// `_meta` declaring the extension with settings a later revision may send.
fn meta_with_settings() -> Value {
    let mut meta = modern_meta(true);
    meta[META_CLIENT_CAPABILITIES]["extensions"][EXTENSION_ID] = json!({
        "version": "2027-01-01",
        "requires": ["io.modelcontextprotocol/tasks#listen"],
        "someFutureKey": {"nested": [1, 2.50, "x"]},
    });
    meta
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_settings_with_unknown_keys_still_declare_the_extension() {
    let server = Server::standard().await;
    let client = server.client();

    // `task_only` is Required: a declaration that is not accepted gets -32021.
    let created = client
        .request("tools/call")
        .params(json!({"name": "task_only", "arguments": {}}))
        .meta(meta_with_settings())
        .principal("alice")
        .send()
        .await;
    assert_eq!(created.ok()["resultType"], "task", "{}", created.text());
    let id = created.ok()["taskId"].as_str().unwrap().to_owned();

    for method in ["tasks/cancel", "tasks/get"] {
        let reply = client
            .request(method)
            .params(json!({"taskId": id}))
            .meta(meta_with_settings())
            .principal("alice")
            .send()
            .await;
        assert_eq!(
            reply.ok()["resultType"],
            "complete",
            "{method}: {}",
            reply.text()
        );
    }
    let task = client.get(&id, Some("alice")).await;
    assert_eq!(task.ok()["status"], "cancelled", "{}", task.text());
    // The settings reach the inner server as they were sent.
    let seen = server.inner.received();
    let call = seen
        .iter()
        .find(|r| r.message["params"]["name"] == "task_only")
        .unwrap();
    assert_eq!(
        call.message["params"]["_meta"][META_CLIENT_CAPABILITIES]["extensions"][EXTENSION_ID],
        meta_with_settings()[META_CLIENT_CAPABILITIES]["extensions"][EXTENSION_ID]
    );

    // A listen stream declared the same way agrees to follow the caller's task.
    let server = Server::listening(ListenSupport::NotFound).await;
    let client = server.client();
    let created = client
        .request("tools/call")
        .params(json!({"name": "job", "arguments": {}}))
        .meta(meta_with_settings())
        .principal("alice")
        .send()
        .await;
    let id = created.ok()["taskId"].as_str().unwrap().to_owned();
    let mut stream = client
        .request("subscriptions/listen")
        .params(json!({"notifications": {"taskIds": [id]}}))
        .meta(meta_with_settings())
        .principal("alice")
        .open()
        .await;
    let ack = stream.next_message().await;
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "{ack}"
    );
    assert_eq!(stream.next_task().await["taskId"], id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn related_task_ids_pass_through_untouched() {
    let builder = layer_builder().with_task_policy(|tool, arguments| {
        (tool == "greet" && arguments["auto"] == true).then_some(TaskMode::Auto {
            after: Duration::from_secs(5),
        })
    });
    let server = Server::with_layer(builder).await;
    let client = server.client();
    let mut meta = modern_meta(true);
    meta[RELATED] = json!(["a-task-id", "another"]);

    // A call the layer forwards as it is: byte for byte.
    let call = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {"name": "Ada"}}))
        .meta(meta.clone());
    let sent = call.body_bytes();
    let reply = call.send().await;
    assert_eq!(reply.ok()["resultType"], "complete", "{}", reply.text());
    let seen = server.inner.received();
    assert_eq!(seen.last().unwrap().body, sent);

    // A call the layer runs itself (`Auto`): the related ids arrive unchanged.
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {"auto": true}}))
        .meta(meta)
        .send()
        .await;
    assert!(reply.code().is_none(), "{}", reply.text());
    let seen = server.inner.received();
    let auto = seen.last().unwrap();
    assert_eq!(auto.message["params"]["arguments"], json!({"auto": true}));
    assert_eq!(
        auto.message["params"]["_meta"][RELATED],
        json!(["a-task-id", "another"])
    );
}
