//! The fixtures of the ten tasks scenarios: `greet`, `slow_compute`, `failing_job`,
//! `protocol_error_job`, `confirm_delete`, `multi_input` and `test_tool_with_task`.
//! Each worker is a small async fn driving its task through its `TaskHandle`.

use std::future::Future;
use std::time::Duration;

use mcp_tasks::TaskSpec;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::wire::RpcError;
use mcp_tasks::worker::TaskHandle;
use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use crate::Fixtures;
use crate::common::{task_context, text};
use crate::mrtr::{accepted, answered, elicit, input_required, open, seal, tampered};
use crate::tools::{arg_str, tool_error};

/// What a handler returns once it has handed its call to a task: the layer answers
/// with the task instead, so this result is never sent.
fn handed_to_task() -> Result<CallToolResponse, ErrorData> {
    Ok(text("").into())
}

// ---- task workers ----------------------------------------------------------------------
//
// Each stops as soon as its task no longer needs it (cancelled or expired): the sleep
// runs under `run_until_ended`, and a wait for answers ends with the task. The
// `Err` of a final `complete`/`fail` (the task ended meanwhile) is ignored.

/// `slow_compute`: sleeps, then completes with text content.
async fn slow_compute_worker(task: TaskHandle, seconds: f64, label: String) {
    let sleep = tokio::time::sleep(Duration::from_secs_f64(seconds));
    if task.run_until_ended(sleep).await.is_ok() {
        let _ = task
            .complete(text(format!("{label}: done after {seconds} s")))
            .await;
    }
}

/// `failing_job`: after about a second, completes with a tool error (`isError: true`).
async fn failing_job_worker(task: TaskHandle) {
    let sleep = tokio::time::sleep(Duration::from_secs(1));
    if task.run_until_ended(sleep).await.is_ok() {
        let _ = task.complete(tool_error("The job failed")).await;
    }
}

/// `protocol_error_job`: after a short delay, fails with a JSON-RPC error (`failed`).
async fn protocol_error_job_worker(task: TaskHandle) {
    let sleep = tokio::time::sleep(Duration::from_millis(300));
    if task.run_until_ended(sleep).await.is_ok() {
        let _ = task
            .fail(RpcError::internal("The job's backend crashed"))
            .await;
    }
}

/// `confirm_delete`: asks one yes/no question (`input_required`), then completes.
async fn confirm_delete_worker(task: TaskHandle, filename: String) {
    let question = InputRequests::new()
        .with(
            "confirm",
            InputRequest::confirm(format!("Delete {filename}?"), "confirm"),
        )
        .with_status_message(format!("Waiting for confirmation to delete {filename}"));
    let Ok(answers) = task.ask(question).await else {
        return; // cancelled or expired while waiting
    };
    let outcome = match answers.confirmed("confirm", "confirm") {
        true => format!("Deleted {filename}"),
        false => format!("Kept {filename}"),
    };
    let _ = task.complete(text(outcome)).await;
}

/// `multi_input`: asks two questions at once; completes once both are answered.
async fn multi_input_worker(task: TaskHandle) {
    let questions = InputRequests::new()
        .with(
            "name",
            InputRequest::form(
                "Your name?",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ),
        )
        .with("confirm", InputRequest::confirm("Proceed?", "confirm"))
        .with_status_message("Waiting for two answers");
    // Wakes once both keys are answered, whether in one update or two.
    let Ok(answers) = task.ask(questions).await else {
        return;
    };
    let name = match answers.get("name") {
        Some(mcp_tasks::input::InputResponse::Accept(fields)) => fields
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("nobody"),
        _ => "nobody",
    };
    let _ = task
        .complete(text(format!("Thanks for both answers, {name}")))
        .await;
}

/// `test_tool_with_task`: greets the name gathered before the task existed.
async fn greeting_worker(task: TaskHandle, name: String) {
    let _ = task.complete(text(format!("Hello, {name}!"))).await;
}

impl Fixtures {
    /// Hands this call to a new task running `work`, if the layer allows one here
    /// (the client declared the extension and the tool may become a task).
    fn try_task<F, Fut>(&self, cx: &RequestContext<RoleServer>, work: F) -> bool
    where
        F: FnOnce(TaskHandle) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(context) = task_context(cx) else {
            return false;
        };
        context.create(TaskSpec::new().with_work(work)).is_ok()
    }

    /// The seven fixtures of the tasks scenarios; `None` for any other tool.
    pub(crate) async fn task_fixture(
        &self,
        p: &CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        let args = p.arguments.clone().unwrap_or_default();
        let responses = p.input_responses.as_ref();
        let can_elicit = cx
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());
        let answer = match p.name.as_ref() {
            // TaskMode::Never on the layer: always synchronous.
            "greet" => {
                let name = arg_str(&args, "name").unwrap_or("World");
                Ok(text(format!("Hello, {name}!")).into())
            }
            "slow_compute" => {
                let seconds = args
                    .get("seconds")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    .clamp(0.0, 600.0);
                let label = arg_str(&args, "label").unwrap_or("job").to_owned();
                if seconds >= 1.0 {
                    let task_label = label.clone();
                    if self.try_task(cx, move |task| {
                        slow_compute_worker(task, seconds, task_label)
                    }) {
                        return Some(handed_to_task());
                    }
                }
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                Ok(text(format!("{label}: done after {seconds} s")).into())
            }
            // TaskMode::Required: the layer answers -32021 when the client cannot take a task.
            "failing_job" => match self.try_task(cx, failing_job_worker) {
                true => handed_to_task(),
                false => Err(ErrorData::internal_error("tasks are not available", None)),
            },
            "protocol_error_job" => match self.try_task(cx, protocol_error_job_worker) {
                true => handed_to_task(),
                // Synchronously, the same protocol error as a plain JSON-RPC error.
                false => Err(ErrorData::internal_error("The job's backend crashed", None)),
            },
            "confirm_delete" => {
                let filename = arg_str(&args, "filename")
                    .unwrap_or("nothing.txt")
                    .to_owned();
                let task_filename = filename.clone();
                if can_elicit
                    && self.try_task(cx, move |task| confirm_delete_worker(task, task_filename))
                {
                    return Some(handed_to_task());
                }
                // No task: ask through MRTR instead, or keep the file.
                match accepted(responses, "confirm") {
                    Some(c) if c.get("confirm") == Some(&Value::Bool(true)) => {
                        Ok(text(format!("Deleted {filename}")).into())
                    }
                    Some(_) => Ok(text(format!("Kept {filename}")).into()),
                    None if can_elicit => Ok(input_required(
                        json!({"confirm": elicit(&format!("Delete {filename}?"), "confirm", "boolean")}),
                        None,
                    )
                    .into()),
                    None => Ok(text(format!("Kept {filename}: the client cannot confirm")).into()),
                }
            }
            "multi_input" => {
                if can_elicit && self.try_task(cx, multi_input_worker) {
                    return Some(handed_to_task());
                }
                if answered(responses, "name") && answered(responses, "confirm") {
                    Ok(text("Thanks for both answers").into())
                } else if can_elicit {
                    Ok(input_required(
                        json!({"name": elicit("Your name?", "name", "string"),
                            "confirm": elicit("Proceed?", "confirm", "boolean")}),
                        None,
                    )
                    .into())
                } else {
                    Ok(text("Nothing asked: the client cannot answer questions").into())
                }
            }
            // TaskMode::Required. Round 1 asks for a name through MRTR, with no task;
            // the retry carrying the answer becomes the task.
            "test_tool_with_task" => self.tool_with_task(p, cx),
            _ => return None,
        };
        Some(answer)
    }

    fn tool_with_task(
        &self,
        p: &CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        const ROUND_1: &str = "user_name-asked";
        let ask = || {
            input_required(
                json!({"user_name": elicit("What is your name?", "name", "string")}),
                Some(seal(ROUND_1)),
            )
            .into()
        };
        if let Some(state) = p.request_state.as_deref()
            && open(state) != Some(ROUND_1)
        {
            return Err(tampered());
        }
        let Some(name) = accepted(p.input_responses.as_ref(), "user_name")
            .and_then(|c| c.get("name")?.as_str())
            .map(str::to_owned)
        else {
            return Ok(ask());
        };
        match self.try_task(cx, move |task| greeting_worker(task, name)) {
            true => handed_to_task(),
            false => Err(ErrorData::internal_error("tasks are not available", None)),
        }
    }
}
