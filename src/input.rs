//! Typed builders for the input requests a worker puts to the client mid-flight.
//!
//! A worker asks with [`Tasks::require_input`](crate::worker::Tasks::require_input); the task
//! is `input_required`, and `tasks/get` shows every outstanding request under
//! `inputRequests`, by key, until the client answers it with `tasks/update`:
//!
//! ```
//! use mcp_tasks::input::{InputRequest, InputRequests};
//! use serde_json::json;
//!
//! let requests = InputRequests::new()
//!     .with("confirm-1", InputRequest::confirm("Delete a.txt?", "confirm"))
//!     .with_status_message("Waiting for confirmation");
//! assert_eq!(requests.len(), 1);
//! // The client's answer, in tasks/update's `inputResponses`:
//! let answer = json!({"confirm-1": {"action": "accept", "content": {"confirm": true}}});
//! # let _ = answer;
//! ```

use serde_json::{Map, Value, json};

/// One question for the client: a form or URL elicitation, a sampling request, or a
/// roots listing. Built only through its constructors, so it is always well formed.
///
/// Put questions on a task with [`InputRequests`] and
/// [`Tasks::require_input`](crate::worker::Tasks::require_input). The client sees each one
/// under its key in the task's `inputRequests` and answers with `tasks/update`: an
/// elicitation with `{"action": "accept" | "decline" | "cancel", "content": {…}}`, a
/// sampling request with a `CreateMessageResult`, a roots request with
/// `{"roots": […]}`. Ask only for what the client declared in its capabilities
/// (`elicitation`, `sampling`, `roots`).
///
/// ```
/// use mcp_tasks::input::InputRequest;
/// use serde_json::json;
///
/// let question = InputRequest::confirm("Delete a.txt?", "confirm");
/// assert_eq!(question.as_json()["method"], "elicitation/create");
/// assert_eq!(question.as_json()["params"]["requestedSchema"]["required"], json!(["confirm"]));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequest(Value);

impl InputRequest {
    /// A form elicitation. `requested_schema` is the flat JSON Schema of the answer
    /// (`{"type":"object","properties":{…},"required":[…]}`; properties are
    /// primitives or enums).
    ///
    /// ```
    /// use mcp_tasks::input::InputRequest;
    /// use serde_json::json;
    ///
    /// let schema = json!({
    ///     "type": "object",
    ///     "properties": {"region": {"type": "string", "enum": ["eu", "us"]}},
    ///     "required": ["region"],
    /// });
    /// let question = InputRequest::form("Where should it run?", schema);
    /// assert_eq!(question.as_json()["params"]["mode"], "form");
    /// assert_eq!(question.as_json()["params"]["message"], "Where should it run?");
    /// ```
    pub fn form(message: impl Into<String>, requested_schema: Value) -> Self {
        InputRequest(json!({
            "method": "elicitation/create",
            "params": {"mode": "form", "message": message.into(), "requestedSchema": requested_schema},
        }))
    }

    /// A form elicitation asking a single yes/no question in the boolean field `field`.
    /// The client's answer reads `{"action": "accept", "content": {<field>: true}}`.
    ///
    /// ```
    /// use mcp_tasks::input::InputRequest;
    ///
    /// let question = InputRequest::confirm("Deploy now?", "deploy");
    /// let schema = &question.as_json()["params"]["requestedSchema"];
    /// assert_eq!(schema["properties"]["deploy"]["type"], "boolean");
    /// ```
    pub fn confirm(message: impl Into<String>, field: &str) -> Self {
        Self::form(
            message,
            json!({"type": "object", "properties": {field: {"type": "boolean"}}, "required": [field]}),
        )
    }

    /// A URL elicitation: the user completes an interaction at `url` (a sign-in, a
    /// payment), outside the client.
    ///
    /// ```
    /// use mcp_tasks::input::InputRequest;
    ///
    /// let question = InputRequest::url("Sign in to GitHub", "https://github.com/login/device");
    /// assert_eq!(question.as_json()["params"]["mode"], "url");
    /// assert_eq!(question.as_json()["params"]["url"], "https://github.com/login/device");
    /// ```
    pub fn url(message: impl Into<String>, url: impl Into<String>) -> Self {
        InputRequest(json!({
            "method": "elicitation/create",
            "params": {"mode": "url", "message": message.into(), "url": url.into()},
        }))
    }

    /// A sampling request with one user text message, answered by the client's model
    /// in at most `max_tokens` tokens.
    ///
    /// ```
    /// use mcp_tasks::input::InputRequest;
    ///
    /// let question = InputRequest::sampling("Summarise this changelog: …", 200);
    /// assert_eq!(question.as_json()["method"], "sampling/createMessage");
    /// assert_eq!(question.as_json()["params"]["maxTokens"], 200);
    /// ```
    pub fn sampling(prompt: impl Into<String>, max_tokens: u32) -> Self {
        InputRequest(json!({
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": prompt.into()}}],
                "maxTokens": max_tokens,
            },
        }))
    }

    /// A request for the client's roots (the directories it lets the server see).
    ///
    /// ```
    /// use mcp_tasks::input::InputRequest;
    /// use serde_json::json;
    ///
    /// assert_eq!(InputRequest::roots().as_json(), &json!({"method": "roots/list"}));
    /// ```
    pub fn roots() -> Self {
        InputRequest(json!({"method": "roots/list"}))
    }

    /// The request's JSON (`{method, params}`), as the client sees it in
    /// `inputRequests`.
    ///
    /// ```
    /// use mcp_tasks::input::InputRequest;
    ///
    /// let json = InputRequest::url("Pay", "https://pay.example/1").as_json().to_string();
    /// assert!(json.starts_with(r#"{"method":"elicitation/create""#));
    /// ```
    pub fn as_json(&self) -> &Value {
        &self.0
    }
}

/// A set of input requests by key, as put on a task with
/// [`Tasks::require_input`](crate::worker::Tasks::require_input).
///
/// Keys are single-use over a task's whole life.
///
/// ```
/// use mcp_tasks::input::{InputRequest, InputRequests};
///
/// let requests = InputRequests::new()
///     .with("confirm-1", InputRequest::confirm("Delete a.txt?", "confirm"))
///     .with("roots-1", InputRequest::roots());
/// assert_eq!(requests.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputRequests {
    pub(crate) requests: Map<String, Value>,
    pub(crate) status_message: Option<String>,
}

impl InputRequests {
    /// No requests yet (add them with [`with`](Self::with)).
    ///
    /// ```
    /// use mcp_tasks::input::InputRequests;
    ///
    /// assert!(InputRequests::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a request under `key` (a later one under the same key replaces it). The
    /// key is how the client's answer comes back, in the [`InputResponses`]
    /// [`wait_for_input`](crate::worker::Tasks::wait_for_input) returns.
    ///
    /// ```
    /// use mcp_tasks::input::{InputRequest, InputRequests};
    ///
    /// let requests = InputRequests::new()
    ///     .with("approve-1", InputRequest::confirm("Approve the invoice?", "approve"))
    ///     .with("sign-in-1", InputRequest::url("Sign in", "https://example.com/login"));
    /// assert_eq!(requests.len(), 2);
    /// ```
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, request: InputRequest) -> Self {
        self.requests.insert(key.into(), request.0);
        self
    }

    /// The status message shown while the task waits (default: the task keeps its
    /// current one). The last answer clears it: the task is `working` again with no
    /// status message until the work sets one.
    ///
    /// ```
    /// use mcp_tasks::input::{InputRequest, InputRequests};
    ///
    /// let requests = InputRequests::new()
    ///     .with("ok-1", InputRequest::confirm("Proceed?", "ok"))
    ///     .with_status_message("Waiting for your go-ahead");
    /// assert_eq!(requests.len(), 1);
    /// ```
    #[must_use]
    pub fn with_status_message(mut self, message: impl Into<String>) -> Self {
        self.status_message = Some(message.into());
        self
    }

    /// How many requests there are.
    ///
    /// ```
    /// use mcp_tasks::input::{InputRequest, InputRequests};
    ///
    /// assert_eq!(InputRequests::new().with("r", InputRequest::roots()).len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether there is none (such a set is rejected by `require_input`).
    ///
    /// ```
    /// use mcp_tasks::input::InputRequests;
    ///
    /// assert!(InputRequests::new().with_status_message("Waiting").is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// The client's answers to a task's questions, by key, as
/// [`Tasks::wait_for_input`](crate::worker::Tasks::wait_for_input) returns them.
///
/// Elicitations come typed ([`InputResponse::Accept`] with its content,
/// [`Decline`](InputResponse::Decline), [`Cancel`](InputResponse::Cancel)); a
/// sampling or roots answer is [`InputResponse::Other`], its JSON as sent.
///
/// ```
/// use mcp_tasks::input::{InputResponse, InputResponses};
/// use serde_json::json;
///
/// let answers = InputResponses::from_json(json!({
///     "go": {"action": "accept", "content": {"ok": true}},
///     "region": {"action": "decline"},
/// }).as_object().unwrap().clone());
/// assert!(answers.confirmed("go", "ok"));
/// assert_eq!(answers.get("region"), Some(InputResponse::Decline));
/// assert_eq!(answers.get("missing"), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputResponses(Map<String, Value>);

/// One answer, read from its JSON: what the user did with an elicitation, or the
/// result of a sampling or roots request.
///
/// ```
/// use mcp_tasks::input::{InputResponse, InputResponses};
/// use serde_json::json;
///
/// let answers = InputResponses::from_json(json!({
///     "region": {"action": "accept", "content": {"region": "eu"}},
/// }).as_object().unwrap().clone());
/// let region = match answers.get("region") {
///     Some(InputResponse::Accept(fields)) => fields["region"].as_str().unwrap_or("us"),
///     // Declined, dismissed, unanswered, or not a form answer: the default.
///     _ => "us",
/// };
/// assert_eq!(region, "eu");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum InputResponse<'a> {
    /// The user submitted the form (or completed the URL interaction); the fields
    /// it filled in (empty when it sent no `content`).
    Accept(&'a Map<String, Value>),
    /// The user said no.
    Decline,
    /// The user dismissed the question without choosing.
    Cancel,
    /// Not an elicitation answer: a sampling `CreateMessageResult`, a roots
    /// `{"roots": […]}`, or a shape this crate does not read.
    Other(&'a Value),
}

impl InputResponses {
    /// Wraps answers as a task keeps them (`inputResponses` objects by key).
    ///
    /// ```
    /// use mcp_tasks::input::InputResponses;
    ///
    /// assert!(InputResponses::from_json(serde_json::Map::new()).is_empty());
    /// ```
    pub fn from_json(answers: Map<String, Value>) -> Self {
        InputResponses(answers)
    }

    /// The answer under `key`, if the client gave one.
    ///
    /// ```
    /// use mcp_tasks::input::{InputResponse, InputResponses};
    /// use serde_json::json;
    ///
    /// let answers = InputResponses::from_json(json!({
    ///     "form": {"action": "accept", "content": {"region": "eu"}},
    ///     "roots": {"roots": [{"uri": "file:///src"}]},
    /// }).as_object().unwrap().clone());
    /// let Some(InputResponse::Accept(fields)) = answers.get("form") else { panic!() };
    /// assert_eq!(fields["region"], "eu");
    /// assert!(matches!(answers.get("roots"), Some(InputResponse::Other(_))));
    /// ```
    pub fn get(&self, key: &str) -> Option<InputResponse<'_>> {
        static NO_CONTENT: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let answer = self.0.get(key)?;
        let action = answer.get("action").and_then(Value::as_str);
        Some(match action {
            Some("accept") => match answer.get("content") {
                Some(Value::Object(content)) => InputResponse::Accept(content),
                None | Some(Value::Null) => InputResponse::Accept(NO_CONTENT.get_or_init(Map::new)),
                Some(_) => InputResponse::Other(answer),
            },
            Some("decline") => InputResponse::Decline,
            Some("cancel") => InputResponse::Cancel,
            _ => InputResponse::Other(answer),
        })
    }

    /// Whether the user accepted the question under `key` with the boolean field
    /// `field` set to `true` (the answer to an
    /// [`InputRequest::confirm`] with that field).
    ///
    /// ```
    /// use mcp_tasks::input::InputResponses;
    /// use serde_json::json;
    ///
    /// let answers = InputResponses::from_json(json!({
    ///     "yes": {"action": "accept", "content": {"ok": true}},
    ///     "no": {"action": "accept", "content": {"ok": false}},
    /// }).as_object().unwrap().clone());
    /// assert!(answers.confirmed("yes", "ok"));
    /// assert!(!answers.confirmed("no", "ok"));
    /// assert!(!answers.confirmed("unasked", "ok"));
    /// ```
    pub fn confirmed(&self, key: &str, field: &str) -> bool {
        matches!(self.get(key), Some(InputResponse::Accept(content)) if content.get(field) == Some(&Value::Bool(true)))
    }

    /// How many answers there are.
    ///
    /// ```
    /// use mcp_tasks::input::InputResponses;
    /// use serde_json::json;
    ///
    /// let answers = InputResponses::from_json(json!({"a": {"action": "cancel"}}).as_object().unwrap().clone());
    /// assert_eq!(answers.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    ///
    /// ```
    /// use mcp_tasks::input::InputResponses;
    ///
    /// assert!(InputResponses::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The answers as JSON, by key, as the client sent them.
    ///
    /// ```
    /// use mcp_tasks::input::InputResponses;
    /// use serde_json::json;
    ///
    /// let raw = json!({"a": {"action": "cancel"}}).as_object().unwrap().clone();
    /// assert_eq!(InputResponses::from_json(raw.clone()).as_json(), &raw);
    /// ```
    pub fn as_json(&self) -> &Map<String, Value> {
        &self.0
    }

    /// The answers as JSON, by key, taken out.
    ///
    /// ```
    /// use mcp_tasks::input::InputResponses;
    ///
    /// assert!(InputResponses::default().into_json().is_empty());
    /// ```
    pub fn into_json(self) -> Map<String, Value> {
        self.0
    }
}

/// The raw answer under a key, `null` when there is none (as indexing a
/// `serde_json::Value` reads).
///
/// ```
/// use mcp_tasks::input::InputResponses;
/// use serde_json::json;
///
/// let answers = InputResponses::from_json(json!({"go": {"action": "accept"}}).as_object().unwrap().clone());
/// assert_eq!(answers["go"]["action"], "accept");
/// assert!(answers["missing"].is_null());
/// ```
impl std::ops::Index<&str> for InputResponses {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        const NULL: Value = Value::Null;
        self.0.get(key).unwrap_or(&NULL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_produce_the_wire_shapes() {
        let form = InputRequest::confirm("Sure?", "confirm");
        assert_eq!(form.as_json()["params"]["mode"], "form");
        assert_eq!(
            form.as_json()["params"]["requestedSchema"]["properties"]["confirm"]["type"],
            "boolean"
        );
        assert_eq!(
            InputRequest::url("Sign in", "https://example.com").as_json()["params"]["mode"],
            "url"
        );
        assert_eq!(
            InputRequest::sampling("hi", 10).as_json()["method"],
            "sampling/createMessage"
        );
        assert_eq!(
            InputRequest::roots().as_json(),
            &json!({"method": "roots/list"})
        );
    }
}
