//! Modern (2026-07-28) requests: the JSON-RPC envelope with `_meta`, and the
//! standard headers `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`. Built
//! standalone for in-process services, or through a [`Client`] to send them.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use serde_json::{Value, json};

use super::http::{Client, EventStream, Frames, Reply};

/// The `_meta` a modern request carries; `declare` adds the tasks extension to the
/// client capabilities.
pub(crate) fn modern_meta(declare: bool) -> Value {
    let capabilities = if declare {
        json!({"extensions": {EXTENSION_ID: {}}})
    } else {
        json!({})
    };
    json!({
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "http-tests", "version": "1.0.0"},
    })
}

/// The `Mcp-Name` a request for `method` with `params` carries: the tool's name or
/// the task id.
pub(crate) fn mcp_name<'a>(method: &str, params: &'a Value) -> Option<&'a str> {
    let key = match method {
        "tools/call" => "name",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params.get(key).and_then(Value::as_str)
}

/// One modern request being built. By default it declares the tasks extension,
/// sends `_meta`, has JSON-RPC id 1 (or the client's next one) and is anonymous.
#[derive(Debug, Clone)]
pub(crate) struct Call<'a> {
    client: Option<&'a Client>,
    method: String,
    id: Value,
    params: Value,
    meta: Option<Value>,
    principal: Option<String>,
    overrides: Vec<(String, Option<String>)>,
    body: Option<Bytes>,
}

impl<'a> Call<'a> {
    /// A request for `method`, to build with [`Call::build`].
    pub(crate) fn new(method: &str) -> Call<'static> {
        Call {
            client: None,
            method: method.to_owned(),
            id: json!(1),
            params: json!({}),
            meta: Some(modern_meta(true)),
            principal: None,
            overrides: Vec::new(),
            body: None,
        }
    }

    /// A request `client` sends, with `id`.
    pub(crate) fn on(client: &'a Client, method: &str, id: Value) -> Call<'a> {
        Call {
            client: Some(client),
            id,
            ..Call::new(method)
        }
    }

    /// The params (without `_meta`, which is added).
    pub(crate) fn params(mut self, params: Value) -> Self {
        self.params = params;
        self
    }

    /// Whether `_meta.clientCapabilities` declares the tasks extension.
    pub(crate) fn declare(mut self, declare: bool) -> Self {
        self.meta = Some(modern_meta(declare));
        self
    }

    /// Replaces the whole `_meta`.
    pub(crate) fn meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Sends no `_meta` at all.
    pub(crate) fn without_meta(mut self) -> Self {
        self.meta = None;
        self
    }

    /// The JSON-RPC id.
    pub(crate) fn id(mut self, id: Value) -> Self {
        self.id = id;
        self
    }

    /// Authenticates as `name` (`Authorization: Bearer <name>`).
    pub(crate) fn principal(mut self, name: &str) -> Self {
        self.principal = Some(name.to_owned());
        self
    }

    /// Authenticates as `name`, or stays anonymous.
    pub(crate) fn principal_opt(self, name: Option<&str>) -> Self {
        match name {
            Some(name) => self.principal(name),
            None => self,
        }
    }

    /// Sets (or replaces) a header.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.overrides
            .push((name.to_ascii_lowercase(), Some(value.to_owned())));
        self
    }

    /// Removes a header the request would otherwise carry.
    pub(crate) fn without_header(mut self, name: &str) -> Self {
        self.overrides.push((name.to_ascii_lowercase(), None));
        self
    }

    /// Sends these bytes as the body instead of the envelope.
    pub(crate) fn raw_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// The body this request sends.
    pub(crate) fn body_bytes(&self) -> Bytes {
        if let Some(body) = &self.body {
            return body.clone();
        }
        let mut params = self.params.clone();
        if let Some(meta) = &self.meta {
            params["_meta"] = meta.clone();
        }
        let envelope =
            json!({"jsonrpc": "2.0", "id": self.id, "method": self.method, "params": params});
        Bytes::from(serde_json::to_vec(&envelope).unwrap())
    }

    /// The headers this request sends.
    pub(crate) fn headers(&self) -> HeaderMap {
        fn set(headers: &mut HeaderMap, name: &str, value: &str) {
            headers.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let mut headers = HeaderMap::new();
        set(&mut headers, "content-type", "application/json");
        set(
            &mut headers,
            "accept",
            "application/json, text/event-stream",
        );
        set(&mut headers, "mcp-protocol-version", PROTOCOL_VERSION);
        set(&mut headers, "mcp-method", &self.method);
        if let Some(name) = mcp_name(&self.method, &self.params) {
            set(&mut headers, "mcp-name", name);
        }
        if let Some(p) = &self.principal {
            set(&mut headers, "authorization", &format!("Bearer {p}"));
        }
        for (name, value) in &self.overrides {
            match value {
                Some(v) => set(&mut headers, name, v),
                None => {
                    headers.remove(name.as_str());
                }
            }
        }
        headers
    }

    /// The request: `POST /mcp` with these headers and this body.
    pub(crate) fn build<B: From<Bytes>>(&self) -> Request<B> {
        let mut request = Request::post("/mcp")
            .body(B::from(self.body_bytes()))
            .unwrap();
        *request.headers_mut() = self.headers();
        request
    }

    fn client(&self) -> &'a Client {
        self.client
            .expect("a request built with Call::new has no client to send it; use Client::request")
    }

    /// Sends it and reads the whole reply.
    pub(crate) async fn send(self) -> Reply {
        self.client().send(self.build::<Frames>()).await
    }

    /// Sends it and returns the response as a stream of events, once its head has
    /// arrived.
    pub(crate) async fn open(self) -> EventStream {
        self.client().open(self.build::<Frames>()).await
    }
}
