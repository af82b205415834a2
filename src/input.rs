//! Typed builders for the input requests a worker puts to the client mid-flight.
//!
//! A worker asks with [`Tasks::require_input`](crate::Tasks::require_input); the task
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
/// [`Tasks::require_input`](crate::Tasks::require_input). The client sees each one
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
/// [`Tasks::require_input`](crate::Tasks::require_input).
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
    /// key is how the client's answer comes back, in the map
    /// [`wait_for_input`](crate::Tasks::wait_for_input) returns.
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
    /// current one).
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
