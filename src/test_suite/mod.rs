//! The public contract suite for [`TaskStore`] implementations.
//!
//! Every store, the built-in [`MemoryStore`](crate::MemoryStore) or one of your own,
//! must keep the same rules: a foreign owner reads exactly like a missing id,
//! terminal states never change, expired records read as absent before any cleanup,
//! the row caps hold under concurrent creates, concurrent writers on one task
//! never lose an update, [`TaskStore::list`] pages through one owner's live
//! tasks, newest first, neither repeating nor skipping one, and
//! [`TaskStore::owner_bytes`] counts each owner's records through every write and
//! removal. This module checks each rule with one public async
//! function, and [`task_store_tests!`](crate::task_store_tests) turns them all into
//! `#[tokio::test]`s for a store of your choice.
//!
//! # Running the suite on your store
//!
//! Enable the `test-util` feature in your dev-dependencies, then invoke the macro in a
//! module of its own with an expression that evaluates to a future of a fresh, empty
//! store (an `async` block or a call to an `async fn`). The expression is evaluated
//! once per test, so every rule gets its own store.
//!
//! ```no_run
//! use mcp_tasks::store::{BoxFuture, CreateLimits, Scope, Timestamp, Transition, Updated};
//! use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
//! use mcp_tasks::error::StoreError;
//! use mcp_tasks::store::TaskStore;
//! use std::time::Duration;
//!
//! /// A store that adds an audit trail around the memory store.
//! #[derive(Debug, Default)]
//! pub struct AuditedStore {
//!     inner: MemoryStore,
//! }
//!
//! impl TaskStore for AuditedStore {
//!     fn create<'a>(
//!         &'a self,
//!         record: TaskRecord,
//!         limits: CreateLimits,
//!     ) -> BoxFuture<'a, Result<(), StoreError>> {
//!         self.inner.create(record, limits)
//!     }
//!
//!     fn get<'a>(
//!         &'a self,
//!         id: &'a TaskId,
//!         scope: Scope<'a>,
//!         now: Timestamp,
//!     ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
//!         self.inner.get(id, scope, now)
//!     }
//!
//!     fn update<'a>(
//!         &'a self,
//!         id: &'a TaskId,
//!         scope: Scope<'a>,
//!         transition: &'a Transition,
//!         now: Timestamp,
//!     ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
//!         self.inner.update(id, scope, transition, now)
//!     }
//!
//!     fn cleanup<'a>(
//!         &'a self,
//!         now: Timestamp,
//!         retention: Duration,
//!     ) -> BoxFuture<'a, Result<usize, StoreError>> {
//!         self.inner.cleanup(now, retention)
//!     }
//! }
//!
//! async fn fresh_store() -> AuditedStore {
//!     AuditedStore::default()
//! }
//!
//! #[cfg(test)]
//! mod audited_store_contract {
//!     mcp_tasks::task_store_tests!(super::fresh_store());
//! }
//! # fn main() {}
//! ```
//!
//! The generated tests run on a multi-thread tokio runtime, so the test crate needs
//! `tokio` with the `macros` and `rt-multi-thread` features. A store backed by a
//! shared database should hand each test its own namespace (a schema, a key
//! prefix): `cleanup` counts and the row caps are checked exactly.
//!
//! # Calling the rules directly
//!
//! Each function takes a fresh, empty store **by value** (any `S: TaskStore`, which
//! includes `Arc<dyn TaskStore>`) and panics with a message naming the broken rule.
//! They read the wall clock only to pick a starting time, and pass explicit `now`
//! values afterwards, as the [`TaskStore`] contract requires (all but the clock rule,
//! below, which plays nodes whose clocks are off and waits for a TTL in real time). The contention rules
//! spawn tasks and need a multi-thread runtime.
//!
//! A store may answer [`StoreError::Contention`] when a compare-and-swap keeps
//! losing. That answer promises that nothing was written, so the concurrent rules
//! retry it (a bounded number of times) instead of counting it as a loss.
//!
//! # Clocks
//!
//! Every rule but one drives time with explicit timestamps, so it needs a store that
//! takes the `now` it is given as its clock ([`Clock::Caller`], the memory store's
//! default; `with_clock(Clock::Caller)` on the shared stores). A store shared
//! between nodes decides by its own clock in production ([`Clock::Store`]):
//! [`node_clocks_minutes_apart_agree_on_expiry`], run by
//! [`task_store_clock_tests!`](crate::task_store_clock_tests), checks that nodes
//! whose clocks are minutes apart then neither lose tasks early nor see expired
//! ones again.
//!
//! [`Clock::Caller`]: crate::store::Clock::Caller
//! [`Clock::Store`]: crate::store::Clock::Store
//!
//! # Stores shared between nodes
//!
//! A store that several processes share implements
//! [`TaskStore::subscribe`]: each instance announces the writes made through it to
//! the *other* instances, and the layer relays them to its notifier and waiting
//! workers. The `nodes_*` functions check that contract on two (or more) instances
//! over the same fresh shared state, as two nodes would hold them: a write is
//! announced to the other node only, a layer on one node sees answers and cancels
//! given through the other, and concurrent writers spread over the nodes still see
//! exactly one terminal write win and no update lost.
//! Such a store also keeps worker leases ([`TaskStore::leases`]): a lease counts its
//! renewals and keeps its node's lease length, a claim re-checks the count
//! atomically and a claimed lease is never renewed again, a layer on one node fails
//! the unfinished tasks of a node that stopped, an outage of the leases every node
//! shares fails nothing, a node cut off alone learns that it lost its lease, and a
//! task has one holder, the lease that took it last, so the death of an earlier
//! holder fails nothing a live node took over.
//! [`task_store_node_tests!`](crate::task_store_node_tests) turns them into tests.
//! Every wait in them is bounded, and a store may start listening in the
//! background: the rules first write until each node has heard the other.
//!
//! # Watching or breaking a store in a test
//!
//! [`Intercept`] wraps any store and runs [`StoreHooks`] around its calls: count or
//! report reads, announce writes to other nodes, make a call fail, or keep a guard
//! alive as long as the store. Every hook defaults to doing nothing, so a test
//! writes only the one it needs instead of a whole forwarding [`TaskStore`].
//!
//! [`TaskStore`]: crate::store::TaskStore
//! [`TaskStore::list`]: crate::store::TaskStore::list
//! [`TaskStore::owner_bytes`]: crate::store::TaskStore::owner_bytes
//! [`TaskStore::subscribe`]: crate::store::TaskStore::subscribe
//! [`TaskStore::leases`]: crate::store::TaskStore::leases
//! [`StoreError::Contention`]: crate::error::StoreError::Contention

mod bytes;
mod clock;
mod contention;
mod create;
mod expiry;
mod helpers;
mod input;
mod intercept;
mod leases;
mod list;
mod nodes;
mod ownership;
mod transitions;
mod values;

pub use bytes::{
    owner_bytes_follow_every_write_and_removal, owner_bytes_hold_under_concurrent_writes,
};
pub use clock::node_clocks_minutes_apart_agree_on_expiry;
pub use contention::{concurrent_terminal_writes_one_wins, concurrent_updates_never_lost};
pub use create::{
    create_rejects_duplicate_id, create_then_get, expired_records_never_fill_the_caps,
    get_many_reads_only_visible_records, get_many_within_stops_at_the_budget,
    max_rows_enforced_atomically, per_owner_cap_enforced,
    retired_records_past_retention_never_fill_the_caps, visible_lists_only_visible_ids,
};
pub use expiry::{
    cleanup_removes_expired, expired_reads_as_absent, terminal_without_ttl_evicted_after_retention,
};
pub use input::{
    answers_for_keys_not_outstanding_are_ignored, duplicate_input_keys_rejected,
    partial_answers_keep_input_required,
};
pub use intercept::{Intercept, StoreCall, StoreHooks};
pub use leases::{
    nodes_a_hold_takes_the_task_over, nodes_a_node_cut_off_learns_it_lost_its_lease,
    nodes_a_shared_lease_outage_fails_nothing, nodes_leases_count_renewals_and_claim_atomically,
    nodes_lost_workers_fail_on_the_survivor, nodes_work_taken_over_outlives_its_earlier_holder,
};
pub use list::{
    list_continues_after_a_task_that_is_gone, list_leaves_out_expired_tasks,
    list_leaves_out_tasks_removed_by_cleanup, list_limit_zero_is_empty,
    list_newest_first_ties_by_id, list_pages_neither_overlap_nor_skip,
    list_pages_one_owner_among_many, list_shows_only_the_owners_tasks,
};
pub use nodes::{
    nodes_announce_to_the_other_node_only, nodes_concurrent_terminal_writes_one_wins,
    nodes_concurrent_updates_never_lost, nodes_remote_writes_reach_the_layer,
};
pub use ownership::{
    foreign_and_unknown_ids_read_alike, foreign_owner_reads_as_missing,
    nodes_foreign_and_unknown_ids_read_alike, scope_any_sees_all,
};
pub use transitions::{
    rejected_transition_changes_nothing, revision_increments_on_every_change,
    terminal_states_never_change,
};
pub use values::values_round_trip_unchanged;

/// Runs every rule of the suite as a `#[tokio::test]` on a multi-thread runtime.
///
/// The argument is an expression evaluating to a future of a fresh, empty store; it
/// is evaluated once per test. Invoke the macro inside a module of its own, since
/// each rule becomes a test function named after it.
///
/// The `list_*` rules need [`TaskStore::list`](crate::store::TaskStore::list), and
/// the `owner_bytes_*` rules
/// [`TaskStore::owner_bytes`](crate::store::TaskStore::owner_bytes): a store that
/// keeps their default (`Unsupported`) fails them, and can call the other rules one
/// by one instead.
///
/// ```no_run
/// mod memory_store_contract {
///     mcp_tasks::task_store_tests!(async { mcp_tasks::MemoryStore::new() });
/// }
///
/// mod shared_store_contract {
///     use std::sync::Arc;
///
///     async fn shared() -> Arc<dyn mcp_tasks::store::TaskStore> {
///         Arc::new(mcp_tasks::MemoryStore::new())
///     }
///
///     mcp_tasks::task_store_tests!(shared());
/// }
/// # fn main() {}
/// ```
///
/// The test crate needs `tokio` with the `macros` and `rt-multi-thread` features.
#[macro_export]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
macro_rules! task_store_tests {
    ($factory:expr $(,)?) => {
        $crate::task_store_tests!(@rules $factory;
            create_then_get,
            create_rejects_duplicate_id,
            foreign_owner_reads_as_missing,
            foreign_and_unknown_ids_read_alike,
            scope_any_sees_all,
            terminal_states_never_change,
            rejected_transition_changes_nothing,
            answers_for_keys_not_outstanding_are_ignored,
            partial_answers_keep_input_required,
            duplicate_input_keys_rejected,
            expired_reads_as_absent,
            cleanup_removes_expired,
            terminal_without_ttl_evicted_after_retention,
            max_rows_enforced_atomically,
            per_owner_cap_enforced,
            expired_records_never_fill_the_caps,
            retired_records_past_retention_never_fill_the_caps,
            visible_lists_only_visible_ids,
            get_many_reads_only_visible_records,
            get_many_within_stops_at_the_budget,
            revision_increments_on_every_change,
            values_round_trip_unchanged,
            concurrent_terminal_writes_one_wins,
            concurrent_updates_never_lost,
            list_newest_first_ties_by_id,
            list_pages_neither_overlap_nor_skip,
            list_shows_only_the_owners_tasks,
            list_leaves_out_expired_tasks,
            list_leaves_out_tasks_removed_by_cleanup,
            list_limit_zero_is_empty,
            list_continues_after_a_task_that_is_gone,
            owner_bytes_follow_every_write_and_removal,
            owner_bytes_hold_under_concurrent_writes,
        );
    };
    (@rules $factory:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $rule() {
                $crate::test_suite::$rule($factory.await).await;
            }
        )*
    };
}

/// Runs the clock rule of the suite as a `#[tokio::test]`: the contract of a store
/// that decides expiry and retention by its own clock
/// ([`Clock::Store`](crate::store::Clock)), whatever clock its callers have.
///
/// The other rules drive time with explicit timestamps, so they need a store that
/// takes each call's `now` as its clock ([`Clock::Caller`](crate::store::Clock)):
/// the same statements and scripts, with the time bound instead of read on the
/// server. This rule checks the other half: the argument is an expression
/// evaluating to a future of a fresh, empty store *on its own clock*, evaluated
/// once per test. It waits about 3 s of real time.
///
/// ```no_run
/// mod memory_store_clock {
///     use mcp_tasks::store::Clock;
///
///     mcp_tasks::task_store_clock_tests!(async { mcp_tasks::MemoryStore::new().with_clock(Clock::Store) });
/// }
/// # fn main() {}
/// ```
#[macro_export]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
macro_rules! task_store_clock_tests {
    ($factory:expr $(,)?) => {
        $crate::task_store_tests!(@rules $factory; node_clocks_minutes_apart_agree_on_expiry);
    };
}

/// Runs every multi-node rule of the suite (the `nodes_*` functions) as a
/// `#[tokio::test]` on a multi-thread runtime: the contract any store that
/// implements [`TaskStore::subscribe`](crate::store::TaskStore::subscribe) must keep.
///
/// The argument is an expression evaluating to a future of
/// `Option<(S, S)>`: two instances of the store over the same fresh shared state
/// (one database table, one key prefix), as two processes would hold them. It is
/// evaluated once per test. `None` skips the test, for a backend that is not
/// available where the tests run (say so before returning it). Invoke the macro
/// inside a module of its own, next to [`task_store_tests!`](crate::task_store_tests).
///
/// ```no_run
/// mod shared_store_nodes {
///     use std::sync::Arc;
///
///     use mcp_tasks::store::TaskStore;
///
///     /// Two handles on one shared database, or `None` where none is configured.
///     async fn two_nodes() -> Option<(Arc<dyn TaskStore>, Arc<dyn TaskStore>)> {
///         let url = std::env::var("MY_STORE_URL").ok()?;
///         Some((connect(&url).await, connect(&url).await))
///     }
///     # async fn connect(_url: &str) -> Arc<dyn TaskStore> { Arc::new(mcp_tasks::MemoryStore::new()) }
///
///     mcp_tasks::task_store_node_tests!(two_nodes());
/// }
/// # fn main() {}
/// ```
///
/// The test crate needs `tokio` with the `macros` and `rt-multi-thread` features.
#[macro_export]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
macro_rules! task_store_node_tests {
    ($factory:expr $(,)?) => {
        $crate::task_store_node_tests!(@pair $factory;
            nodes_announce_to_the_other_node_only,
            nodes_remote_writes_reach_the_layer,
            nodes_foreign_and_unknown_ids_read_alike,
            nodes_leases_count_renewals_and_claim_atomically,
            nodes_lost_workers_fail_on_the_survivor,
            nodes_a_shared_lease_outage_fails_nothing,
            nodes_a_node_cut_off_learns_it_lost_its_lease,
            nodes_a_hold_takes_the_task_over,
            nodes_work_taken_over_outlives_its_earlier_holder,
        );
        $crate::task_store_node_tests!(@all $factory;
            nodes_concurrent_terminal_writes_one_wins,
            nodes_concurrent_updates_never_lost,
        );
    };
    (@pair $factory:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $rule() {
                if let ::core::option::Option::Some((a, b)) = $factory.await {
                    $crate::test_suite::$rule(a, b).await;
                }
            }
        )*
    };
    (@all $factory:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $rule() {
                if let ::core::option::Option::Some((a, b)) = $factory.await {
                    $crate::test_suite::$rule(::std::vec![a, b]).await;
                }
            }
        )*
    };
}
