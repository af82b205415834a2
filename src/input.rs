//! Typed builders for the input requests a worker puts to the client mid-flight.

use serde_json::{Map, Value, json};

/// One question for the client: a form or URL elicitation, a sampling request, or a
/// roots listing. Built only through its constructors, so it is always well formed.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequest(Value);

impl InputRequest {
    /// A form elicitation. `requested_schema` is the flat JSON Schema of the answer
    /// (`{"type":"object","properties":{…},"required":[…]}`).
    pub fn form(message: impl Into<String>, requested_schema: Value) -> Self {
        InputRequest(json!({
            "method": "elicitation/create",
            "params": {"mode": "form", "message": message.into(), "requestedSchema": requested_schema},
        }))
    }

    /// A form elicitation asking a single yes/no question in the boolean field `field`.
    pub fn confirm(message: impl Into<String>, field: &str) -> Self {
        Self::form(
            message,
            json!({"type": "object", "properties": {field: {"type": "boolean"}}, "required": [field]}),
        )
    }

    /// A URL elicitation: the user completes an interaction at `url`.
    pub fn url(message: impl Into<String>, url: impl Into<String>) -> Self {
        InputRequest(json!({
            "method": "elicitation/create",
            "params": {"mode": "url", "message": message.into(), "url": url.into()},
        }))
    }

    /// A sampling request with one user text message.
    pub fn sampling(prompt: impl Into<String>, max_tokens: u32) -> Self {
        InputRequest(json!({
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": prompt.into()}}],
                "maxTokens": max_tokens,
            },
        }))
    }

    /// A request for the client's roots.
    pub fn roots() -> Self {
        InputRequest(json!({"method": "roots/list"}))
    }

    /// The request's JSON (`{method, params}`).
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
    /// No requests yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a request under `key`.
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, request: InputRequest) -> Self {
        self.requests.insert(key.into(), request.0);
        self
    }

    /// The status message shown while the task waits.
    #[must_use]
    pub fn with_status_message(mut self, message: impl Into<String>) -> Self {
        self.status_message = Some(message.into());
        self
    }

    /// How many requests there are.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether there is none (such a set is rejected by `require_input`).
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
