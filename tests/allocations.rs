//! How many heap allocations the layer makes to answer one `tasks/get` from the
//! memory store, counted by a global allocator on the calling thread only.
//!
//! With a million tasks stored, a general-purpose allocator's free lists are long
//! and scattered, so each short-lived allocation of a request costs more as the
//! store grows: the count is the part of the poll rate that the layer controls.
//! A budget here keeps the hot path from quietly growing new allocations.
//!
//! The library forbids `unsafe`; this test needs it for its counting allocator.

#![allow(unsafe_code)]

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::body::RequestBody;
use mcp_tasks::store::TaskStore;
use mcp_tasks::store::{CreateLimits, Timestamp};
use mcp_tasks::{MemoryStore, Principal, TaskId, TaskRecord, TasksLayer};
use serde_json::{Value, json};
use tower::{Layer as _, ServiceExt as _};

use support::http::authenticate;
use support::requests::Call;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: the allocator also runs while thread locals are torn down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every call is passed straight to `System`; the counter only reads and
// writes thread-local cells, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn count<T>(f: impl FnOnce() -> T) -> (T, usize) {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    let out = f();
    COUNTING.with(|on| on.set(false));
    (out, ALLOCATIONS.with(Cell::get))
}

/// Most allocations one `tasks/get` of a working task may make in the layer: the
/// boxed future of an inspected request and the reply's bytes. The request's own
/// body, headers and principal (an authentication layer's) are made before; the
/// reply reuses the request's header map, and the store answers without a future.
const TASKS_GET_BUDGET: usize = 2;

#[test]
fn tasks_get_of_a_working_task_stays_within_its_allocation_budget() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    let layer = TasksLayer::builder(store.clone())
        .with_anonymous_tasks()
        .without_janitor()
        .build()
        .unwrap();
    let inner = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
        Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    });
    let service = layer.layer(inner);
    let id = TaskId::random();
    let owner = Principal::new("alice");
    runtime.block_on(async {
        let mut record = TaskRecord::new(id, Some(owner), Timestamp::now());
        record.ttl_ms = Some(60_000);
        store.create(record, CreateLimits::default()).await.unwrap();
    });
    let get = Call::new("tasks/get")
        .params(json!({"taskId": id.to_string()}))
        .principal("alice");

    let mut counts = Vec::new();
    let rounds: usize = std::env::var("ALLOC_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for _ in 0..rounds {
        // The principal as an authentication layer in front would leave it.
        let request: Request<Full<Bytes>> = authenticate(get.build());
        let service = service.clone();
        let (response, allocations) =
            count(|| runtime.block_on(async move { service.oneshot(request).await.unwrap() }));
        let body = runtime.block_on(async { response.into_body().collect().await.unwrap() });
        let body = body.to_bytes();
        let reply: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(reply["result"]["status"], "working", "{reply}");
        assert_eq!(reply["result"]["taskId"], id.to_string(), "{reply}");
        counts.push(allocations);
    }
    // The first call may warm lazily built state; the later ones are the steady cost.
    let steady = *counts.last().unwrap();
    eprintln!("tasks/get allocations: {counts:?}");
    assert!(
        steady <= TASKS_GET_BUDGET,
        "tasks/get made {steady} allocations (budget {TASKS_GET_BUDGET}); all calls: {counts:?}"
    );
}
