//! A command-line MCP client: calls one tool and follows its task to the end.
//!
//! ```sh
//! cargo run --example quickstart &                       # a server on 127.0.0.1:3000
//! MCP_URL=http://127.0.0.1:3000/mcp cargo run --example client --features client -- build '{"seconds": 3}'
//! MCP_TOKEN=alice cargo run --example client --features client -- deploy '{"target": "prod"}'
//! ```
//!
//! Each status change is printed on its own line (`working: Built 1 of 3 steps`);
//! questions of the task are asked on the terminal (yes/no, and simple form fields:
//! text, numbers, booleans, choices) and read from stdin; the last line is the
//! tool's result as JSON.
//!
//! - `MCP_URL`: the endpoint (default `http://127.0.0.1:3000/mcp`).
//! - `MCP_TOKEN`: sent as `Authorization: Bearer <token>`.
//!
//! Exit status: 0 with a result, 1 when the task failed (or anything else went
//! wrong), 2 for bad arguments, 130 after Ctrl-C, which cancels the task first and
//! prints the status it ended in.

use std::process::ExitCode;
use std::sync::Arc;

use mcp_tasks::client::{
    Answer, CANCEL_WAIT, Client, ClientError, InputHandler, Question, TaskSnapshot, ToolCall,
};
use mcp_tasks::error::BoxError;
use mcp_tasks::store::BoxFuture;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader, Lines, Stdin};
use tokio::sync::Mutex;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(tool), arguments) = (args.next(), args.next()) else {
        eprintln!("usage: client TOOL ['JSON_ARGS']");
        return ExitCode::from(2);
    };
    let arguments: Value = match serde_json::from_str(arguments.as_deref().unwrap_or("{}")) {
        Ok(value @ Value::Object(_)) => value,
        _ => {
            eprintln!("JSON_ARGS must be a JSON object");
            return ExitCode::from(2);
        }
    };
    let client = match client() {
        Ok(client) => client,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };

    // Registered before the first request, so that Ctrl-C is never the default
    // (killing) action while a task runs.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);

    let call = tokio::select! {
        call = client.call_tool(&tool, arguments) => call,
        _ = &mut interrupted => return ExitCode::from(130), // no task yet
    };
    let task = match call {
        Ok(ToolCall::Task(task)) => task,
        Ok(ToolCall::Complete(result)) => return print_result(&result),
        Err(error) => return failure(error),
    };

    let canceller = task.canceller();
    let task_id = task.task_ref().task_id().to_owned();
    let task = task.on_status(print_status);
    tokio::select! {
        outcome = task.wait() => match outcome {
            Ok(result) => print_result(&result),
            Err(error) => failure(error),
        },
        _ = &mut interrupted => {
            // The follow was dropped (which sends a cancel of its own too); this one
            // is awaited, so the cancel is out before the process ends.
            if let Err(error) = canceller.cancel().await {
                eprintln!("could not cancel the task: {error}");
            }
            print_final_status(&client, &task_id).await;
            ExitCode::from(130)
        }
    }
}

fn client() -> Result<Client, ClientError> {
    let url = std::env::var("MCP_URL").unwrap_or_else(|_| "http://127.0.0.1:3000/mcp".into());
    let client = Client::new(&url)?
        .with_client_info("mcp-tasks-example-client", env!("CARGO_PKG_VERSION"))
        .with_input_handler(Terminal::default());
    match std::env::var("MCP_TOKEN") {
        Ok(token) if !token.is_empty() => client.with_bearer_token(token),
        _ => Ok(client),
    }
}

fn print_status(state: &TaskSnapshot) {
    match &state.status_message {
        Some(message) => println!("{}: {message}", state.status),
        None => println!("{}", state.status),
    }
}

fn print_result(result: &Value) -> ExitCode {
    println!("{result}");
    ExitCode::SUCCESS
}

fn failure(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("{error}");
    ExitCode::from(1)
}

/// After a cancel: polls the task until it ends (at most `CANCEL_WAIT`), and prints
/// the status it ended in.
async fn print_final_status(client: &Client, task_id: &str) {
    let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
    loop {
        match client.get_task(task_id).await {
            Ok(state) if state.status.is_terminal() || tokio::time::Instant::now() >= deadline => {
                print_status(&state);
                return;
            }
            Ok(_) => tokio::time::sleep(mcp_tasks::client::MIN_POLL_INTERVAL).await,
            Err(error) => {
                eprintln!("could not read the task: {error}");
                return;
            }
        }
    }
}

/// Asks the task's questions on the terminal: prompts on stderr, answers from
/// stdin. End of input declines.
#[derive(Clone, Default)]
struct Terminal {
    stdin: Arc<Mutex<Option<Lines<BufReader<Stdin>>>>>,
}

impl Terminal {
    /// One line of input, trimmed; `None` at the end of input.
    async fn read_line(&self, prompt: &str) -> Option<String> {
        eprint!("{prompt}");
        let mut stdin = self.stdin.lock().await;
        let lines = stdin.get_or_insert_with(|| BufReader::new(tokio::io::stdin()).lines());
        lines
            .next_line()
            .await
            .ok()
            .flatten()
            .map(|l| l.trim().to_owned())
    }

    async fn yes_no(&self, prompt: &str) -> Option<bool> {
        loop {
            match self
                .read_line(&format!("{prompt} [y/n] "))
                .await?
                .to_lowercase()
                .as_str()
            {
                "y" | "yes" => return Some(true),
                "n" | "no" => return Some(false),
                _ => eprintln!("please answer y or n"),
            }
        }
    }

    async fn form(&self, message: &str, schema: &Value) -> Option<Answer> {
        eprintln!("{message}");
        let empty = Map::new();
        let properties = schema["properties"].as_object().unwrap_or(&empty);
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut content = Map::new();
        for (name, property) in properties {
            let optional = !required.contains(&name.as_str());
            if let Some(value) = self.field(name, property, optional).await? {
                content.insert(name.clone(), value);
            }
        }
        Some(Answer::Accept(content))
    }

    /// One form field, asked until the answer fits; `Some(None)` for an optional
    /// field left empty.
    async fn field(&self, name: &str, property: &Value, optional: bool) -> Option<Option<Value>> {
        let title = property["title"].as_str().unwrap_or(name);
        let kind = property["type"].as_str().unwrap_or("string");
        let choices: Vec<&str> = property["enum"]
            .as_array()
            .map(|e| e.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(description) = property["description"].as_str() {
            eprintln!("  {description}");
        }
        let hint = match (kind, choices.is_empty()) {
            (_, false) => choices.join("/"),
            ("boolean", _) => "y/n".to_owned(),
            (kind, _) => kind.to_owned(),
        };
        let prompt = format!(
            "  {title} ({hint}){}: ",
            if optional { ", optional" } else { "" }
        );
        loop {
            let line = self.read_line(&prompt).await?;
            if line.is_empty() && optional {
                return Some(None);
            }
            let value = match kind {
                "boolean" => match line.to_lowercase().as_str() {
                    "y" | "yes" | "true" => Some(json!(true)),
                    "n" | "no" | "false" => Some(json!(false)),
                    _ => None,
                },
                "integer" => line.parse::<i64>().ok().map(Value::from),
                "number" => line.parse::<f64>().ok().map(Value::from),
                _ if !choices.is_empty() => choices.contains(&line.as_str()).then(|| json!(line)),
                _ => (!line.is_empty()).then(|| json!(line)),
            };
            match value {
                Some(value) => return Some(Some(value)),
                None => eprintln!("  expected {hint}"),
            }
        }
    }
}

impl InputHandler for Terminal {
    fn capabilities(&self) -> Value {
        json!({"elicitation": {"form": {}, "url": {}}})
    }

    fn answer<'a>(
        &'a self,
        _key: &'a str,
        question: &'a Question,
    ) -> BoxFuture<'a, Result<Answer, BoxError>> {
        Box::pin(async move {
            let answer = match question {
                Question::Form { message, .. } if question.confirm_field().is_some() => {
                    let field = question.confirm_field().unwrap_or_default();
                    self.yes_no(message)
                        .await
                        .map(|yes| Answer::confirm(field, yes))
                }
                Question::Form { message, schema } => self.form(message, schema).await,
                Question::Url { message, url } => {
                    eprintln!("{message}\n  {url}");
                    self.yes_no("Done?").await.map(|done| match done {
                        true => Answer::Accept(Map::new()),
                        false => Answer::Decline,
                    })
                }
                _ => return Err("this client answers only forms and URLs".into()),
            };
            Ok(answer.unwrap_or(Answer::Decline))
        })
    }
}
