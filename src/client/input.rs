//! Questions a task puts to the client (`inputRequests`), and the caller's answers.

use serde_json::{Map, Value, json};

use crate::error::BoxError;
use crate::store::BoxFuture;

/// One question of a task, read from its `inputRequests`: the input request kinds of
/// the 2026-07-28 wire.
///
/// ```
/// use mcp_tasks::client::Question;
/// use serde_json::json;
///
/// let question = Question::from_json(&json!({"method": "elicitation/create", "params": {
///     "mode": "url", "message": "Sign in to continue", "url": "https://example.com/login",
/// }}));
/// let Question::Url { message, url } = &question else { panic!("a URL question") };
/// assert_eq!((message.as_str(), url.as_str()), ("Sign in to continue", "https://example.com/login"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Question {
    /// `elicitation/create` in form mode: fill in `schema`, a flat JSON Schema object
    /// (`properties`, `required`). A single boolean property is a yes/no question
    /// ([`Question::confirm_field`]).
    Form {
        /// The text to show.
        message: String,
        /// The `requestedSchema`.
        schema: Value,
    },
    /// `elicitation/create` in URL mode: the user visits `url`.
    Url {
        /// The text to show.
        message: String,
        /// Where to send the user.
        url: String,
    },
    /// `sampling/createMessage`: answered with a `CreateMessageResult`.
    Sampling {
        /// The request's `params` (`messages`, `maxTokens`, …).
        params: Value,
    },
    /// `roots/list`: answered with `{"roots": […]}`.
    Roots,
    /// A method this crate does not know.
    Other {
        /// The request's `method`.
        method: String,
        /// The request's `params` (`Null` when absent).
        params: Value,
    },
}

impl Question {
    /// Reads one value of `inputRequests` (`{method, params}`).
    ///
    /// ```
    /// use mcp_tasks::client::Question;
    /// use serde_json::json;
    ///
    /// let question = Question::from_json(&json!({"method": "elicitation/create", "params": {
    ///     "mode": "form", "message": "Deploy?",
    ///     "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
    /// }}));
    /// assert_eq!(question.confirm_field(), Some("ok"));
    /// assert_eq!(Question::from_json(&json!({"method": "roots/list"})), Question::Roots);
    /// ```
    pub fn from_json(request: &Value) -> Self {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let text = |key: &str| {
            params
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        match method {
            "elicitation/create" => match params.get("mode").and_then(Value::as_str) {
                Some("url") => Question::Url {
                    message: text("message"),
                    url: text("url"),
                },
                None | Some("form") => Question::Form {
                    message: text("message"),
                    schema: params
                        .get("requestedSchema")
                        .cloned()
                        .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                },
                Some(_) => Question::Other {
                    method: method.to_owned(),
                    params,
                },
            },
            "sampling/createMessage" => Question::Sampling { params },
            "roots/list" => Question::Roots,
            _ => Question::Other {
                method: method.to_owned(),
                params,
            },
        }
    }

    /// The field of a yes/no form: a form whose schema has exactly one property, a
    /// boolean one.
    pub fn confirm_field(&self) -> Option<&str> {
        let Question::Form { schema, .. } = self else {
            return None;
        };
        let properties = schema.get("properties")?.as_object()?;
        match properties.iter().next() {
            Some((name, property))
                if properties.len() == 1 && property.get("type")? == "boolean" =>
            {
                Some(name)
            }
            _ => None,
        }
    }
}

/// An answer to a [`Question`], as it goes into `tasks/update`'s `inputResponses`.
///
/// ```
/// use mcp_tasks::client::Answer;
/// use serde_json::{Map, json};
///
/// let mut content = Map::new();
/// content.insert("environment".into(), json!("staging"));
/// assert_eq!(Answer::Accept(content).to_json(),
///     json!({"action": "accept", "content": {"environment": "staging"}}));
/// assert_eq!(Answer::Decline.to_json(), json!({"action": "decline"}));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Answer {
    /// An elicitation accepted with these field values.
    Accept(Map<String, Value>),
    /// An elicitation declined.
    Decline,
    /// An elicitation dismissed.
    Cancel,
    /// Any other result, as is: a `CreateMessageResult` for sampling, a
    /// `ListRootsResult` for roots.
    Json(Value),
}

impl Answer {
    /// The answer to a yes/no form: `{field: yes}`, accepted.
    ///
    /// ```
    /// use mcp_tasks::client::Answer;
    /// use serde_json::json;
    ///
    /// assert_eq!(Answer::confirm("ok", true).to_json(),
    ///     json!({"action": "accept", "content": {"ok": true}}));
    /// ```
    pub fn confirm(field: &str, yes: bool) -> Self {
        let mut content = Map::new();
        content.insert(field.to_owned(), Value::Bool(yes));
        Answer::Accept(content)
    }

    /// The answer as JSON.
    pub fn to_json(&self) -> Value {
        match self {
            Answer::Accept(content) => json!({"action": "accept", "content": content}),
            Answer::Decline => json!({"action": "decline"}),
            Answer::Cancel => json!({"action": "cancel"}),
            Answer::Json(value) => value.clone(),
        }
    }
}

/// Answers the questions of a task (`input_required`), one call per key; every key is
/// asked once.
///
/// [`capabilities`](InputHandler::capabilities) is what the client declares in each
/// request's `clientCapabilities` besides the tasks extension (`elicitation`,
/// `sampling`, `roots`), so that servers ask only what the handler can answer.
///
/// ```
/// use mcp_tasks::client::{Answer, InputHandler, Question};
/// use mcp_tasks::error::BoxError;
/// use mcp_tasks::store::BoxFuture;
/// use serde_json::{Value, json};
///
/// /// Says yes to every yes/no question, and declines anything else.
/// struct AlwaysYes;
///
/// impl InputHandler for AlwaysYes {
///     fn capabilities(&self) -> Value {
///         json!({"elicitation": {"form": {}}})
///     }
///     fn answer<'a>(&'a self, _key: &'a str, question: &'a Question)
///         -> BoxFuture<'a, Result<Answer, BoxError>> {
///         Box::pin(async move {
///             Ok(match question.confirm_field() {
///                 Some(field) => Answer::confirm(field, true),
///                 None => Answer::Decline,
///             })
///         })
///     }
/// }
/// ```
pub trait InputHandler: Send + Sync + 'static {
    /// The client capabilities to declare (`{}` for none).
    fn capabilities(&self) -> Value;

    /// The answer to the question under `key`. An error cancels the task.
    fn answer<'a>(
        &'a self,
        key: &'a str,
        question: &'a Question,
    ) -> BoxFuture<'a, Result<Answer, BoxError>>;
}

/// The handler of a client given none: it declares no input capability, declines
/// elicitations and refuses anything else.
///
/// ```
/// use mcp_tasks::client::{Answer, InputHandler, NoInput, Question};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let form = Question::from_json(&json!({"method": "elicitation/create", "params": {
///     "message": "Which region?", "requestedSchema": {"type": "object", "properties": {}},
/// }}));
/// assert_eq!(NoInput.answer("region", &form).await.unwrap(), Answer::Decline);
/// assert!(NoInput.answer("roots", &Question::Roots).await.is_err()); // cancels the task
/// assert_eq!(NoInput.capabilities(), json!({}));
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoInput;

impl InputHandler for NoInput {
    fn capabilities(&self) -> Value {
        json!({})
    }

    fn answer<'a>(
        &'a self,
        _key: &'a str,
        question: &'a Question,
    ) -> BoxFuture<'a, Result<Answer, BoxError>> {
        let answer = match question {
            Question::Form { .. } | Question::Url { .. } => Ok(Answer::Decline),
            _ => Err("no input handler for this kind of question".into()),
        };
        Box::pin(std::future::ready(answer))
    }
}
