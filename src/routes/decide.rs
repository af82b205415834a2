//! What a `tools/call` becomes, decided in one place for every era and for the
//! task tools: refused, answered by a task tool, run as an `Auto` task, or handed
//! to the tool's handler with its [`TaskContext`] open or refused; and how a task
//! it makes is answered ([`Shape`]).
//!
//! | era, client | the tool's mode | plan |
//! |---|---|---|
//! | 2026-07-28, declared | `Auto`/`AutoRequired` | `Auto` after its budget (refused while draining); with inner tasks, the inner service may answer with its own |
//! | 2026-07-28, declared | `Required`, `Optional` | handler, context open (refused while draining) |
//! | 2026-07-28, not declared | `Required`/`AutoRequired` | -32021 (or the task tools) |
//! | 2025-11-25 with `params.task` | `Never` | -32601 |
//! | 2025-11-25 with `params.task` | `Auto`/`AutoRequired` | `Auto` at once: always a task |
//! | 2025-11-25 with `params.task` | `Required`, `Optional` | handler, context open: always a task |
//! | earlier revision, no `params.task` | `Required`/`AutoRequired` | -32601 (or the task tools) |
//! | earlier revision, no `params.task` | the rest | handler, context refused (or the task tools) |
//! | any, task tools on, not declared | any | as a task tool's result ([`Shape::ToolResult`]) |

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use serde_json::Value;

use super::Call;
use super::task_tools::{self, AsToolResult};
use crate::config::TaskMode;
use crate::context::{TaskContext, TaskRefused};
use crate::engine::Engine;
use crate::observe;
use crate::task::{TaskJson, TaskRecord};
use crate::wire::{ReplyId, RpcError, result_response, result_response_with, v2025};

/// Which revision's rules a `tools/call` is decided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28: whether `_meta` declared the tasks extension.
    Modern { declared: bool },
    /// 2025-11-25 and earlier: whether the call asked for a task (`params.task`).
    Legacy { task: bool },
}

/// How a task made by a call is answered.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// The 2026-07-28 `CreateTaskResult`.
    Create,
    /// The 2025-11-25 `CreateTaskResult` (`{"task": Task}`). The client asked for a
    /// task and reads nothing else: an answer the tool gives at once is stored as
    /// a task that has already ended.
    Create2025,
    /// A tool result that says how to follow the task with the task tools.
    ToolResult(AsToolResult),
}

impl Shape {
    /// Whether the call must be answered with a task whatever the tool does.
    pub(crate) fn always_task(self) -> bool {
        matches!(self, Shape::Create2025)
    }

    /// The JSON-RPC response answering the call that made `task`.
    pub(crate) fn response(
        self,
        engine: &Engine,
        task: &TaskRecord,
        id: Option<&str>,
    ) -> Response<Bytes> {
        match self {
            Shape::Create => {
                let server_info = engine.config().server_info.as_ref();
                result_response_with(ReplyId::Raw(id), http::HeaderMap::new(), |out| {
                    TaskJson::summary(task)
                        .as_result("task", server_info)
                        .write_json(out);
                })
            }
            Shape::Create2025 => {
                result_response_with(ReplyId::Raw(id), http::HeaderMap::new(), |out| {
                    crate::task::task_2025(task).write_create_result(out);
                })
            }
            Shape::ToolResult(as_tool) => {
                result_response(id, task_tools::task_result(engine, task, as_tool))
            }
        }
    }
}

/// What the layer does with one `tools/call`.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Answered with this error; the tool never runs.
    Refuse(RpcError),
    /// Refused while the layer drains (503, retryable).
    ShuttingDown,
    /// One of the task tools, answered from the store.
    TaskTool,
    /// [`TaskMode::Auto`]: run in the background, a task past `after`. With
    /// `inner_tasks` the inner service may answer with a task of its own
    /// ([`with_inner_tasks`](crate::TasksLayerBuilder::with_inner_tasks)), which
    /// reaches the client as it is.
    Auto {
        after: Duration,
        shape: Shape,
        inner_tasks: bool,
    },
    /// The tool's handler, with this context.
    Handler { context: TaskContext, shape: Shape },
}

/// Decides what `call` (a `tools/call`) becomes under `era`.
pub(crate) fn plan<S>(call: &Call<'_, S>, era: Era) -> Plan {
    let engine = &call.engine;
    let config = engine.config();
    let tool = call.envelope.param_str("name");
    let tool = tool.as_deref().unwrap_or("");
    let task_tools_serve = config.task_tools
        && match era {
            Era::Modern { declared } => !declared,
            Era::Legacy { task } => !task,
        };
    if task_tools_serve && task_tools::is_task_tool(tool) {
        return Plan::TaskTool;
    }
    // The arguments are decoded only for a policy that reads them.
    let mode = match config.task_policy {
        Some(_) => {
            let arguments = call.envelope.param("arguments").unwrap_or(&Value::Null);
            config.mode_for_call(tool, arguments)
        }
        None => config.mode_for(tool),
    };
    let draining = engine.node().is_draining();
    let anonymous_refused = |mode: TaskMode| -> Option<Plan> {
        if mode != TaskMode::Required {
            return None;
        }
        engine
            .admit_owner(call.principal().as_ref())
            .err()
            .map(Plan::Refuse)
    };
    if task_tools_serve {
        let legacy = matches!(era, Era::Legacy { .. });
        let shape = Shape::ToolResult(task_tools::as_tool_result(legacy));
        let refused = match mode {
            _ if draining => Some(TaskRefused::ShuttingDown),
            TaskMode::Never => Some(TaskRefused::ToolNeverTask),
            _ => None,
        };
        if let Some(reason) = refused {
            let context = TaskContext::refused(reason);
            return Plan::Handler { context, shape };
        }
        if let Some(refused) = anonymous_refused(mode) {
            return refused;
        }
        return match mode.auto_after() {
            Some(after) => Plan::Auto {
                after,
                shape,
                inner_tasks: false,
            },
            None => Plan::Handler {
                context: TaskContext::open(),
                shape,
            },
        };
    }
    match era {
        Era::Modern { declared } => {
            let inner_tasks = config.inner_tasks.is_some();
            modern(mode, declared, draining, inner_tasks, anonymous_refused)
        }
        Era::Legacy { task } => legacy(mode, task, draining, anonymous_refused),
    }
}

fn modern(
    mode: TaskMode,
    declared: bool,
    draining: bool,
    inner_tasks: bool,
    anonymous_refused: impl Fn(TaskMode) -> Option<Plan>,
) -> Plan {
    let shape = Shape::Create;
    if draining && declared && mode.requires_extension() {
        return Plan::ShuttingDown;
    }
    if let Some(after) = mode.auto_after()
        && declared
    {
        if !draining {
            return Plan::Auto {
                after,
                shape,
                inner_tasks,
            };
        }
        observe::task_refused("shutting_down");
    }
    if mode.requires_extension() && !declared {
        observe::task_refused("extension_required");
        return Plan::Refuse(RpcError::tasks_extension_required());
    }
    if let Some(refused) = anonymous_refused(mode) {
        return refused;
    }
    let context = match (mode, declared) {
        (TaskMode::Never, _) => TaskContext::refused(TaskRefused::ToolNeverTask),
        (_, false) => TaskContext::refused(TaskRefused::NotDeclared),
        _ if draining => TaskContext::refused(TaskRefused::ShuttingDown),
        _ => TaskContext::open(),
    };
    Plan::Handler { context, shape }
}

fn legacy(
    mode: TaskMode,
    task: bool,
    draining: bool,
    anonymous_refused: impl Fn(TaskMode) -> Option<Plan>,
) -> Plan {
    if !task {
        if mode.requires_extension() {
            observe::task_refused("task_required");
            return Plan::Refuse(v2025::task_support_refused(true));
        }
        let context = TaskContext::refused(TaskRefused::LegacyEra);
        return Plan::Handler {
            context,
            shape: Shape::Create,
        };
    }
    if mode == TaskMode::Never {
        observe::task_refused("task_forbidden");
        return Plan::Refuse(v2025::task_support_refused(false));
    }
    if draining {
        return Plan::ShuttingDown;
    }
    if let Some(refused) = anonymous_refused(mode) {
        return refused;
    }
    let shape = Shape::Create2025;
    match mode.auto_after() {
        Some(_) => Plan::Auto {
            after: Duration::ZERO,
            shape,
            inner_tasks: false,
        },
        None => Plan::Handler {
            context: TaskContext::open(),
            shape,
        },
    }
}
