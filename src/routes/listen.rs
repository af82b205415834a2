//! `subscriptions/listen`: the `taskIds` filter, the registry of open listen
//! streams, and the SSE body that merges `notifications/tasks` into the inner
//! service's stream (or serves a tasks-only stream when the inner service has no
//! listen support).

use std::collections::{HashSet, VecDeque};
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame};
use http_body_util::BodyExt as _;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::{Call, Reply, forward, reply};
use crate::body::{BoxBody, ReadOutcome, RequestBody, ResponseBody, read_up_to};
use crate::context::{TaskContext, TaskRefused};
use crate::engine::Engine;
use crate::error::BoxError;
use crate::notify::{ByteLimit, SnapshotRead, Subscription};
use crate::observe::{self, Outcome};
use crate::store::Budgeted;
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp};
use crate::wire::sse::{self, Splitter};
use crate::wire::{Envelope, META_SUBSCRIPTION_ID, RawObject, RpcError};

const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// Handles a modern `subscriptions/listen` request that reached the layer: admits
/// it ([`admit`]), hands it to the inner service ([`open`]), and serves the stream
/// ([`serve`]).
///
/// Without `params.notifications.taskIds` the request is the inner service's
/// business alone and passes through. With it: the ids are checked, kept only when
/// the caller owns the task, registered, and removed from the forwarded request; the
/// inner service's stream is then wrapped so that its acknowledgment lists the
/// agreed ids and task notifications are merged in.
///
/// Ids of the inner service's own tasks
/// ([`with_inner_tasks`](crate::TasksLayerBuilder::with_inner_tasks)) stay in the
/// forwarded request, alone: the inner service follows them, and the ids its
/// acknowledgment agrees to are listed beside the layer's own, as it wrote them.
pub(crate) async fn call<S, B, ResBody>(call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let Call {
        engine,
        inner,
        mut parts,
        bytes,
        envelope,
        declared,
    } = call;
    let id = envelope.reply_id();
    parts
        .extensions
        .insert(TaskContext::refused(TaskRefused::NotToolCall));
    let (stream, agreed, inner_ids) = match admit(&engine, &parts, &envelope, declared).await {
        Ok(Some(admitted)) => admitted,
        Ok(None) => return forward(inner, parts, bytes.clone(), id).await,
        Err(refused) => return Ok(reply(refused, id)),
    };
    let inner_refs: Vec<&Value> = inner_ids.iter().collect();
    let bytes = with_task_ids(bytes, &inner_refs).unwrap_or_else(|| bytes.clone());
    if parts.headers.contains_key(header::CONTENT_LENGTH) {
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    }
    let carries_inner = !inner_ids.is_empty();
    let opened = open(&engine, inner, parts, bytes).await?;
    Ok(serve(stream, agreed, carries_inner, opened))
}

/// Admits a listen that names task ids: checks them, registers the stream under
/// the stream caps, and queues each agreed task's current state (its snapshot)
/// within the byte bounds. The stream, the ids agreed (those the caller owns),
/// and the ids of the inner service's own tasks, left for it to follow; `None`
/// for a listen without task ids (or without a request id), the inner service's
/// alone.
async fn admit(
    engine: &Engine,
    parts: &http::request::Parts,
    envelope: &Envelope<'_>,
    declared: bool,
) -> Result<Option<(Stream, Vec<Value>, Vec<Value>)>, RpcError> {
    let requested = requested_task_ids(envelope);
    let id = envelope.reply_id().and_then(raw_id);
    let (Some(requested), Some(subscription_id)) = (requested.as_ref(), id) else {
        return Ok(None);
    };
    if !declared {
        return Err(RpcError::tasks_extension_required());
    }
    let owner = engine.principal(parts);
    engine.admit_owner(owner.as_ref())?;
    let requested = match requested.as_array() {
        Some(ids)
            if ids.len() <= engine.config().max_listen_task_ids
                && ids.iter().all(Value::is_string) =>
        {
            ids
        }
        _ => {
            return Err(RpcError::invalid_params(
                "taskIds must be an array of at most 1000 strings",
            ));
        }
    };

    let (inner_ids, requested): (Vec<&Value>, Vec<&Value>) = requested.iter().partition(|id| {
        id.as_str()
            .is_some_and(|id| engine.config().is_inner_task(id))
    });
    let inner_ids: Vec<Value> = inner_ids.into_iter().cloned().collect();
    // Register before reading the tasks, so that no change made while they are
    // read is missed; ids the caller does not own are dropped right after, and are
    // never delivered in between (delivery checks the owner).
    let mut candidates: Vec<TaskId> = Vec::with_capacity(requested.len());
    if engine.has_notifier() {
        let mut seen = HashSet::with_capacity(requested.len());
        for text in requested.iter().filter_map(|id| id.as_str()) {
            if let Ok(task) = text.parse::<TaskId>()
                && seen.insert(task)
            {
                candidates.push(task);
            }
        }
    }
    let config = engine.config();
    let opened = engine.listen().open(
        owner.clone(),
        &candidates,
        config.max_listen_streams_per_owner,
        config.max_listen_streams,
    );
    let mut subscription = opened.map_err(|limit| {
        tracing::warn!(
            limit = limit.as_str(),
            "listen refused: too many listen streams"
        );
        observe::listen_refused(limit.as_str());
        RpcError::internal("Too many listen streams").with_data(json!({"limit": limit.as_str()}))
    })?;
    let agreed = snapshot(engine, &mut subscription, &owner, &candidates).await?;
    let stream = Stream {
        subscription,
        subscription_id,
        keep_alive: config.keep_alive,
    };
    let agreed = agreed
        .iter()
        .map(|t| Value::String(t.to_string()))
        .collect();
    Ok(Some((stream, agreed, inner_ids)))
}

/// Queues the snapshot of a new stream: each task's state as it is now, all in
/// one owner-scoped store round trip, to follow the acknowledgment, so that a
/// change made before the stream opened is not missed. Read after registering: a
/// change delivered meanwhile is as new or newer, and an older state is never
/// queued after it. Read within the room the principal's streams have left (a
/// snapshot that would not fit is refused before it is fetched; at the layer's
/// total, the largest holder pays first). The ids found, which the stream keeps.
async fn snapshot(
    engine: &Engine,
    subscription: &mut Subscription,
    owner: &Option<Principal>,
    candidates: &[TaskId],
) -> Result<Vec<TaskId>, RpcError> {
    let (records, reservation) = if candidates.is_empty() {
        (Vec::new(), None)
    } else {
        let read = |budget| async move {
            let scope = Scope::Owner(owner.as_ref());
            let read = engine
                .store()
                .get_many_within(candidates, scope, Timestamp::now(), budget);
            match read.await {
                Ok(Budgeted::Within(found)) => Ok(Some(found)),
                Ok(Budgeted::OverBudget) => Ok(None),
                Err(e) => Err(e),
            }
        };
        match engine.listen().read_snapshot(owner, read).await {
            SnapshotRead::Read(found, reservation) => {
                // Only ids asked for (a store could answer others), each once.
                let asked: HashSet<&TaskId> = candidates.iter().collect();
                let mut kept = HashSet::with_capacity(found.len());
                let found = found
                    .into_iter()
                    .filter(|r| asked.contains(&r.id) && kept.insert(r.id))
                    .collect();
                (found, Some(reservation))
            }
            SnapshotRead::TooManyBytes(limit) => return Err(too_many_bytes(limit)),
            SnapshotRead::Failed(e) => {
                tracing::error!(error = %crate::error::Chain(&e), "task store failed while reading the listen snapshot");
                (Vec::new(), None)
            }
        }
    };
    let agreed: Vec<TaskId> = records.iter().map(|r: &TaskRecord| r.id).collect();
    subscription.retain(&agreed);
    subscription
        .snapshot(records, reservation)
        .map_err(too_many_bytes)?;
    Ok(agreed)
}

/// How the inner service answered a listen.
enum Opened<ResBody> {
    /// With an event stream, which began as [`First`] says.
    Stream(http::response::Parts, First),
    /// With an answer of its own for the client (a refusal of the filter, say).
    Answer(Response<ResponseBody<ResBody>>),
    /// Not in time, or with no listen support: the layer serves the task
    /// notifications alone.
    Alone,
}

/// Hands the listen (its task ids removed) to the inner service, which has until
/// the acknowledgment deadline to answer and begin its stream; a stalled one is
/// dropped.
async fn open<S, B, ResBody>(
    engine: &Engine,
    mut inner: S,
    parts: http::request::Parts,
    bytes: Bytes,
) -> Result<Opened<ResBody>, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let deadline = Instant::now() + engine.config().listen_ack_timeout;
    let call = inner.call(Request::from_parts(parts, RequestBody::buffered(bytes)));
    let response = match tokio::time::timeout_at(deadline, call).await {
        Ok(response) => response?,
        Err(_) => {
            tracing::warn!(
                "the inner service did not answer the listen in time; serving task notifications alone"
            );
            return Ok(Opened::Alone);
        }
    };
    let (head, body) = response.into_parts();
    if !head.status.is_success() || !sse::is_event_stream(&head.headers) {
        // Only "no such method" means the inner service has no listen support; any
        // other refusal (a bad filter, a header problem) is the client's to see.
        let passed_on = match head.status {
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => None,
            status if !status.is_success() => {
                return Ok(Opened::Answer(Response::from_parts(
                    head,
                    ResponseBody::inner(body),
                )));
            }
            _ => match tokio::time::timeout_at(
                deadline,
                read_up_to(body, engine.config().max_response_bytes),
            )
            .await
            {
                Ok(Ok(ReadOutcome::Complete(bytes))) => {
                    let code = sse::find_response(&bytes, false)
                        .and_then(|m| m.get("error")?.get("code")?.as_i64());
                    (code != Some(RpcError::METHOD_NOT_FOUND)).then_some(bytes)
                }
                Ok(Ok(overflow @ ReadOutcome::Overflow(..))) => {
                    return Ok(Opened::Answer(Response::from_parts(
                        head,
                        overflow.into_body(),
                    )));
                }
                // A failed or stalled answer: no listen support to speak of.
                Ok(Err(_)) | Err(_) => None,
            },
        };
        if let Some(answer) = passed_on {
            return Ok(Opened::Answer(Response::from_parts(
                head,
                ResponseBody::full(answer),
            )));
        }
        tracing::debug!(
            status = head.status.as_u16(),
            "the inner service has no listen stream; serving task notifications alone"
        );
        return Ok(Opened::Alone);
    }
    let body: BoxBody = Box::pin(body.map_err(Into::into));
    let cap = engine.config().max_response_bytes;
    match tokio::time::timeout_at(deadline, first_message(body, cap)).await {
        Ok(first) => Ok(Opened::Stream(head, first)),
        Err(_) => {
            tracing::warn!(
                "the inner listen stream sent no acknowledgment in time; serving task notifications alone"
            );
            Ok(Opened::Alone)
        }
    }
}

/// The client's response: the inner stream with the task notifications merged in
/// (its acknowledgment listing the `agreed` ids), the layer's own stream of task
/// notifications, or the inner service's answer.
fn serve<B>(
    stream: Stream,
    agreed: Vec<Value>,
    carries_inner: bool,
    opened: Opened<B>,
) -> Response<ResponseBody<B>> {
    let (head, first) = match opened {
        Opened::Answer(answer) => return answer,
        Opened::Alone => return tasks_only(stream, agreed),
        Opened::Stream(head, first) => (head, first),
    };
    match first {
        First::Acknowledged {
            mut ack,
            rest,
            body,
        } => {
            let params = object_entry(&mut ack, "params");
            object_entry_in(params, "_meta");
            let notifications = object_entry_in(params, "notifications");
            let mut task_ids = agreed;
            if carries_inner
                && let Some(Value::Array(inner_agreed)) = notifications.remove("taskIds")
            {
                task_ids.extend(inner_agreed.into_iter().filter(Value::is_string));
            }
            notifications.insert("taskIds".into(), Value::Array(task_ids));
            let ack = stamped(&ack, &stream.subscription_id);
            merged(head, ListenBody::new(stream, ack, rest, Some(body)))
        }
        First::Other { rest, body } => {
            tracing::warn!(
                "the inner listen stream did not start with an acknowledgment; sending one"
            );
            let ack = acknowledgment(&stream.subscription_id, agreed);
            merged(head, ListenBody::new(stream, ack, rest, Some(body)))
        }
        First::Unsupported => {
            tracing::debug!(
                "the inner service refused the listen; serving task notifications alone"
            );
            tasks_only(stream, agreed)
        }
    }
}

/// The refusal of a listen whose snapshot would pass a byte bound.
fn too_many_bytes(limit: ByteLimit) -> RpcError {
    tracing::warn!(
        limit = limit.as_str(),
        "listen refused: the principal's listen streams hold too many bytes"
    );
    observe::listen_refused(limit.as_str());
    RpcError::internal("Too many listen bytes").with_data(json!({"limit": limit.as_str()}))
}

/// The inner stream's head over the merged body: its length no longer holds, and
/// proxies must not buffer the stream.
fn merged<B>(mut head: http::response::Parts, body: ListenBody) -> Response<ResponseBody<B>> {
    observe::outcome(Outcome::Stream);
    head.headers.remove(header::CONTENT_LENGTH);
    head.headers
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Response::from_parts(head, ResponseBody::boxed(Box::pin(body)))
}

/// `params.notifications.taskIds`, read without decoding the rest of the params
/// (`Null` when present but not JSON this side can hold, so that it is refused).
fn requested_task_ids(envelope: &Envelope<'_>) -> Option<Value> {
    let notifications = RawObject::parse(envelope.raw_param("notifications")?.as_bytes())?;
    let ids = notifications.get("taskIds")?;
    Some(serde_json::from_str(ids.get()).unwrap_or(Value::Null))
}

/// The request body with `params.notifications.taskIds` holding only `inner`, the
/// ids of the inner service's own tasks, or removed when there are none: the inner
/// service never sees the layer's ids, and sees every other value as the client
/// wrote it.
fn with_task_ids(bytes: &[u8], inner: &[&Value]) -> Option<Bytes> {
    let mut message = RawObject::parse(bytes)?;
    let edited = message.edit(&["params", "notifications"], |n| match inner.is_empty() {
        true => n.remove("taskIds"),
        false => {
            n.insert("taskIds", inner);
            true
        }
    });
    edited.then(|| Bytes::from(message.to_vec()))
}

fn object_entry<'a>(value: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => object_entry_in(map, key),
        _ => unreachable!("made an object above"),
    }
}

fn object_entry_in<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(map) => map,
        _ => unreachable!("made an object above"),
    }
}

/// The request's id as the subscription's, kept as the client wrote it.
fn raw_id(id: &str) -> Option<Box<RawValue>> {
    RawValue::from_string(id.to_owned()).ok()
}

/// The SSE event of `message` with `params._meta[META_SUBSCRIPTION_ID]` written as
/// `id`'s own text (`params._meta` must be an object).
fn stamped(message: &Value, id: &RawValue) -> Bytes {
    let message = Stamped {
        value: message,
        id,
        path: &["params", "_meta"],
    };
    sse::data_event(&serde_json::to_vec(&message).unwrap_or_default())
}

/// A JSON value written with the subscription id, as its raw text, at the end of
/// `path`: a `Value` would read `18446744073709551616` as a float.
struct Stamped<'a> {
    value: &'a Value,
    id: &'a RawValue,
    path: &'a [&'a str],
}

impl Serialize for Stamped<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let Some(map) = self.value.as_object() else {
            return self.value.serialize(serializer);
        };
        let mut out = serializer.serialize_map(None)?;
        match self.path.split_first() {
            None => {
                for (key, value) in map.iter().filter(|(k, _)| *k != META_SUBSCRIPTION_ID) {
                    out.serialize_entry(key, value)?;
                }
                out.serialize_entry(META_SUBSCRIPTION_ID, self.id)?;
            }
            Some((next, path)) => {
                for (key, value) in map {
                    if key == next {
                        let id = self.id;
                        out.serialize_entry(key, &Stamped { value, id, path })?;
                    } else {
                        out.serialize_entry(key, value)?;
                    }
                }
            }
        }
        out.end()
    }
}

/// The layer's own acknowledgment: only the task ids, for a stream the inner
/// service does not serve.
fn acknowledgment(subscription_id: &RawValue, task_ids: Vec<Value>) -> Bytes {
    let message = json!({
        "jsonrpc": "2.0",
        "method": ACKNOWLEDGED,
        "params": {
            "_meta": {},
            "notifications": {"taskIds": task_ids},
        },
    });
    stamped(&message, subscription_id)
}

/// `{"<META_SUBSCRIPTION_ID>":<id>}`, the id as the client wrote it.
fn subscription_meta(subscription_id: &RawValue) -> String {
    let key = serde_json::to_string(META_SUBSCRIPTION_ID).unwrap_or_default();
    format!("{{{key}:{}}}", subscription_id.get())
}

/// The result of the listen request, ending its stream from the server's side.
fn listen_result(subscription_id: &RawValue) -> Bytes {
    let message = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"resultType\":\"complete\",\"_meta\":{}}}}}",
        subscription_id.get(),
        subscription_meta(subscription_id)
    );
    sse::data_event(message.as_bytes())
}

fn tasks_only<B>(stream: Stream, task_ids: Vec<Value>) -> Response<ResponseBody<B>> {
    observe::outcome(Outcome::Stream);
    let ack = acknowledgment(&stream.subscription_id, task_ids);
    let body = ListenBody::new(stream, ack, Bytes::new(), None);
    let mut response = Response::new(ResponseBody::boxed(Box::pin(body)));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// `data: {"jsonrpc":"2.0","method":"notifications/tasks","params":{"_meta":{…},`
/// for one subscription: a task's DetailedTask fields follow.
fn notification_prefix(subscription_id: &RawValue) -> Bytes {
    let meta = subscription_meta(subscription_id);
    Bytes::from(format!(
        "data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tasks\",\"params\":{{\"_meta\":{meta},"
    ))
}

/// How the inner service's listen stream began.
enum First {
    /// With its acknowledgment; `rest` is what followed it in the bytes read.
    Acknowledged {
        ack: Value,
        rest: Bytes,
        body: BoxBody,
    },
    /// With some other message (kept in `rest`, from that message on).
    Other { rest: Bytes, body: BoxBody },
    /// With an error, or nothing at all: no listen support.
    Unsupported,
}

/// Reads the inner stream up to its first message. Comments before it are dropped.
async fn first_message(mut body: BoxBody, cap: usize) -> First {
    let mut events = Splitter::new();
    loop {
        match body.frame().await {
            None => return First::Unsupported,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "the inner listen stream failed before its acknowledgment");
                return First::Unsupported;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                events.push(&data);
            }
        }
        while let Some(event) = events.next_event() {
            if event.data.is_none() {
                continue;
            }
            let message = event.json().unwrap_or(Value::Null);
            if message.get("error").is_some() && message.get("method").is_none() {
                return First::Unsupported;
            }
            if message.get("method").and_then(Value::as_str) == Some(ACKNOWLEDGED) {
                return First::Acknowledged {
                    ack: message,
                    rest: events.take_rest(),
                    body,
                };
            }
            let mut rest = BytesMut::from(&event.raw[..]);
            rest.extend_from_slice(&events.take_rest());
            return First::Other {
                rest: rest.freeze(),
                body,
            };
        }
        if events.buffered() > cap {
            tracing::warn!("the inner listen stream sent too much before its first message");
            return First::Unsupported;
        }
    }
}

/// What a listen body needs besides the inner stream.
struct Stream {
    subscription: Subscription,
    /// The listen request's id, as the client wrote it.
    subscription_id: Box<RawValue>,
    keep_alive: Duration,
}

/// The response body of a listen request carrying task ids: the acknowledgment,
/// then the inner service's events (whole events only) with the stream's task
/// notifications between them, and keep-alive comments while idle.
struct ListenBody {
    stream: Stream,
    /// Written first: the acknowledgment.
    head: Option<Bytes>,
    /// The inner service's stream; `None` for a tasks-only stream.
    inner: Option<BoxBody>,
    /// The inner stream, cut into whole events.
    events: Splitter,
    idle: Option<Pin<Box<Sleep>>>,
    /// The start of every task notification on this stream, up to the task's
    /// own fields (made on first use).
    prefix: Bytes,
    /// Task notifications taken from the subscription and not yet handed to the
    /// connection: each a prefix, then the change's shared bytes.
    queued: VecDeque<Bytes>,
    /// The inner service ended the stream.
    finished: bool,
}

impl ListenBody {
    fn new(stream: Stream, ack: Bytes, rest: Bytes, inner: Option<BoxBody>) -> Self {
        let mut body = ListenBody {
            stream,
            head: Some(ack),
            inner,
            events: Splitter::new(),
            idle: None,
            prefix: Bytes::new(),
            queued: VecDeque::new(),
            finished: false,
        };
        body.events.push(&rest);
        body
    }

    /// The whole inner events received so far, if any.
    fn whole_events(&mut self) -> Option<Bytes> {
        let first = self.events.next_event()?.raw;
        let Some(second) = self.events.next_event() else {
            return Some(first);
        };
        let mut out = BytesMut::from(&first[..]);
        out.extend_from_slice(&second.raw);
        while let Some(event) = self.events.next_event() {
            out.extend_from_slice(&event.raw);
        }
        Some(out.freeze())
    }

    fn sent(&mut self) {
        if let Some(idle) = &mut self.idle {
            idle.as_mut().reset(Instant::now() + self.stream.keep_alive);
        }
    }

    /// The next piece of the pending task notifications, or `None` after arranging
    /// to be woken by the next one. A change's bytes are shared, never copied: the
    /// frame holds the change until the connection has written it.
    fn notifications(&mut self, cx: &mut Context<'_>) -> Option<Bytes> {
        if let Some(next) = self.queued.pop_front() {
            return Some(next);
        }
        let changes = self.stream.subscription.take_or_wait(cx.waker())?;
        if self.prefix.is_empty() {
            self.prefix = notification_prefix(&self.stream.subscription_id);
        }
        observe::notifications_sent(changes.len());
        for change in changes {
            // `{"taskId":…}` is sent as `<prefix>"taskId":…}}`.
            self.queued.push_back(self.prefix.clone());
            self.queued.push_back(change.frame());
        }
        self.queued.pop_front()
    }
}

impl Body for ListenBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if this.finished {
            return Poll::Ready(None);
        }
        loop {
            // Task notifications go only between whole inner events.
            if !this.events.is_mid_event()
                && let Some(events) = this.notifications(cx)
            {
                this.sent();
                return Poll::Ready(Some(Ok(Frame::data(events))));
            }
            if this.events.buffered() > 0
                && let Some(events) = this.whole_events()
            {
                this.sent();
                return Poll::Ready(Some(Ok(Frame::data(events))));
            }
            if this.stream.subscription.is_ending() {
                // A server-side end: the listen result, then the end of the stream.
                this.inner = None;
                this.finished = true;
                this.stream.subscription.close();
                return Poll::Ready(Some(Ok(Frame::data(listen_result(
                    &this.stream.subscription_id,
                )))));
            }
            let Some(inner) = &mut this.inner else {
                break;
            };
            match inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        this.events.push(&data);
                        continue;
                    }
                    Err(_trailers) => continue,
                },
                Poll::Ready(Some(Err(e))) => {
                    this.inner = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    // The inner service ended the subscription (its result event
                    // has passed through): so does this stream.
                    this.inner = None;
                    this.finished = true;
                    this.stream.subscription.close();
                    let rest = this.events.take_rest();
                    return Poll::Ready((!rest.is_empty()).then(|| Ok(Frame::data(rest))));
                }
                Poll::Pending => break,
            }
        }
        if !this.events.is_mid_event() {
            let keep_alive = this.stream.keep_alive;
            let idle = this
                .idle
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(keep_alive)));
            if idle.as_mut().poll(cx).is_ready() {
                this.sent();
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)))));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    use crate::notify::{ListenNotifier, TaskNotifier as _};
    use crate::task::{Principal, TaskRecord};

    fn record(id: TaskId, owner: Option<&str>, revision: u64, message: &str) -> TaskRecord {
        let mut r = TaskRecord::new(id, owner.map(Principal::from), Timestamp::from_millis(1));
        r.revision = revision;
        r.status_message = Some(message.into());
        r
    }

    fn body(rest: &[u8], listen: &ListenNotifier, tasks: &[TaskId]) -> ListenBody {
        let stream = Stream {
            subscription: listen.register(None, tasks),
            subscription_id: super::raw_id("1").unwrap(),
            keep_alive: Duration::from_secs(60),
        };
        ListenBody::new(stream, Bytes::new(), Bytes::copy_from_slice(rest), None)
    }

    #[test]
    fn only_whole_events_are_split_off() {
        let mut b = body(
            b"data: {\"a\":1}\n\ndata: {\"b\"",
            &ListenNotifier::default(),
            &[],
        );
        assert_eq!(&b.whole_events().unwrap()[..], b"data: {\"a\":1}\n\n");
        assert!(b.whole_events().is_none());
        b.events.push(b":2}\r\n");
        assert!(b.whole_events().is_none());
        b.events.push(b"\r\n: c\n");
        assert_eq!(&b.whole_events().unwrap()[..], b"data: {\"b\":2}\r\n\r\n");
        b.events.push(b"\n");
        assert_eq!(&b.whole_events().unwrap()[..], b": c\n\n");
        assert_eq!(b.events.buffered(), 0);
    }

    #[test]
    fn a_notification_is_one_data_line_of_the_detailed_task() {
        let listen = ListenNotifier::default();
        let task = TaskId::random();
        let mut b = body(b"", &listen, &[task]);
        b.stream.subscription_id = super::raw_id(r#""a \"quoted\"\nid""#).unwrap();
        let mut r = record(task, None, 1, "hi");
        r.result = Some(json!({"content": []}));
        listen.task_changed(&r);
        let mut bytes = BytesMut::new();
        while let Some(piece) = b.notifications(&mut Context::from_waker(Waker::noop())) {
            bytes.extend_from_slice(&piece);
        }
        let text = std::str::from_utf8(&bytes).unwrap();
        assert_eq!(text.matches('\n').count(), 2);
        let line = text.strip_prefix("data: ").unwrap().trim_end();
        let message: Value = serde_json::from_str(line).unwrap();
        let mut params = r.to_detailed_json();
        params.insert(
            "_meta".into(),
            json!({META_SUBSCRIPTION_ID: "a \"quoted\"\nid"}),
        );
        assert_eq!(
            message,
            json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": params})
        );
    }

    #[test]
    fn task_ids_are_removed_from_the_forwarded_request() {
        let request = br#"{"jsonrpc":"2.0","id":3,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"taskIds":["x"]}}}"#;
        let forwarded: Value =
            serde_json::from_slice(&with_task_ids(request, &[]).unwrap()).unwrap();
        assert_eq!(
            forwarded["params"]["notifications"],
            json!({"toolsListChanged": true})
        );
        assert!(with_task_ids(br#"{"params":{"notifications":{}}}"#, &[]).is_none());
        let inner = json!("in.1");
        let forwarded: Value =
            serde_json::from_slice(&with_task_ids(request, &[&inner]).unwrap()).unwrap();
        assert_eq!(
            forwarded["params"]["notifications"],
            json!({"toolsListChanged": true, "taskIds": ["in.1"]})
        );
    }
}
