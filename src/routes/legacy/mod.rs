//! The 2025-11-25 era (and the revisions before it), answered from the same store
//! and worker API as 2026-07-28: `initialize` gains the tasks capability,
//! `tools/list` each tool's `execution.taskSupport`, a `tools/call` with
//! `params.task` becomes a task in this revision's shape (decided with every other
//! call in `decide.rs`), and `tasks/get`, `tasks/list`, `tasks/cancel` and
//! `tasks/result` are answered here (`tasks.rs`, `result.rs`). Answers to the
//! questions a `tasks/result` stream carried arrive as JSON-RPC responses in any
//! POST, on any node (`answers.rs`). Anything else passes to the inner service
//! untouched.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use serde_json::Value;
use tower_service::Service;

use super::decide::Era;
use super::{Call, Reply, forward, task_tools};
use crate::body::RequestBody;
use crate::config::TaskMode;
use crate::context::{TaskContext, TaskRefused};
use crate::engine::Engine;
use crate::error::BoxError;
use crate::wire::v2025;

mod answers;
mod result;
mod tasks;

pub(crate) use answers::{answer, is_answer};

/// A request of an earlier revision whose body the layer read.
pub(crate) async fn call<S, B, ResBody>(mut call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    // What the inner service learns of a request it is handed: an earlier
    // revision's, without a task (a call that makes one gets its own context).
    call.parts
        .extensions
        .insert(TaskContext::refused(TaskRefused::LegacyEra));
    match &*call.envelope.method {
        "initialize" => {
            let declared = call
                .envelope
                .param("capabilities")
                .and_then(|c| c.get("tasks"))
                .is_some_and(Value::is_object);
            if !declared {
                return call.forward().await;
            }
            call.forward_edited(advertise).await
        }
        "tools/list" => {
            let engine = call.engine.clone();
            let task_tools = engine.config().task_tools;
            call.forward_edited(move |message| {
                let supported = task_support(&engine, message);
                let added = task_tools && task_tools::add_tools(message);
                supported || added
            })
            .await
        }
        "tools/call" => {
            let task = call.envelope.raw_param("task").is_some();
            if task && let Err(e) = tasks::check_task_param(&call.envelope) {
                return Ok(super::reply(e, call.id()));
            }
            super::tools_call::call(call, Era::Legacy { task }).await
        }
        "tasks/get" | "tasks/list" | "tasks/cancel" | "tasks/result" => {
            Box::pin(tasks::call(call)).await
        }
        _ => {
            let Call {
                inner,
                parts,
                bytes,
                envelope,
                ..
            } = call;
            forward(inner, parts, bytes.clone(), envelope.reply_id()).await
        }
    }
}

/// Adds `capabilities.tasks` to an `initialize` result.
fn advertise(message: &mut Value) -> bool {
    let Some(capabilities) = message
        .get_mut("result")
        .and_then(|r| r.get_mut("capabilities"))
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    capabilities.insert("tasks".into(), v2025::server_capability());
    true
}

/// Sets each listed tool's `execution.taskSupport` from its [`TaskMode`].
fn task_support(engine: &Engine, message: &mut Value) -> bool {
    let Some(tools) = message
        .get_mut("result")
        .and_then(|r| r.get_mut("tools"))
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    for tool in tools.iter_mut() {
        let Some(tool) = tool.as_object_mut() else {
            continue;
        };
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
        if task_tools::is_task_tool(name) && engine.config().task_tools {
            continue;
        }
        let support = match engine.config().mode_for(name) {
            TaskMode::Required | TaskMode::AutoRequired { .. } => "required",
            TaskMode::Optional | TaskMode::Auto { .. } => "optional",
            TaskMode::Never => "forbidden",
        };
        let execution = tool
            .entry("execution")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(execution) = execution.as_object_mut() {
            execution.insert("taskSupport".into(), Value::String(support.into()));
        } else {
            *execution = serde_json::json!({ "taskSupport": support });
        }
    }
    true
}
