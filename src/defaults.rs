//! Every default and every hard limit of the layer, with its value.
//!
//! | constant | value | what it bounds |
//! |---|---|---|
//! | [`MAX_ROWS`] | 10 000 | tasks one store holds (`with_max_rows`) |
//! | [`MAX_TASKS_PER_OWNER`] | 1 000 | tasks one principal (or all anonymous callers) holds (`with_max_tasks_per_owner`) |
//! | [`TTL`] | 1 hour | lifetime of a task whose tool sets none |
//! | [`MAX_TTL`] | 10 years | the longest lifetime accepted |
//! | [`MAX_REQUEST_BYTES`] | 4 MiB | request bodies the layer reads |
//! | [`MAX_RESPONSE_BYTES`] | 16 MiB | inner responses buffered to decide on a task |
//! | [`MAX_INPUT_RESPONSE_BYTES`] | 256 KiB | one answer in a `tasks/update` (`with_max_input_response_bytes`) |
//! | [`MAX_TASK_INPUT_BYTES`] | 1 MiB | answers kept per task (`with_max_task_input_bytes`) |
//! | [`MAX_RESULT_BYTES`] | 8 MiB | a task's serialized result (`with_max_result_bytes`) |
//! | [`MAX_LISTEN_TASK_IDS`] | 1 000 | task ids one `subscriptions/listen` may name |
//! | [`MAX_LISTEN_STREAMS_PER_OWNER`] | 16 | open listen streams with task ids per principal (`with_max_listen_streams_per_owner`) |
//! | [`MAX_LISTEN_STREAMS`] | 1 000 | open listen streams with task ids in all (`with_max_listen_streams`) |
//! | [`MAX_LISTEN_BYTES_PER_OWNER`] | 32 MiB | task notifications one principal's listen streams hold unwritten (`with_max_listen_bytes_per_owner`) |
//! | [`MAX_LISTEN_BYTES`] | 256 MiB | task notifications all listen streams hold unwritten (`with_max_listen_bytes`) |
//! | [`LISTEN_ACK_TIMEOUT`] | 5 s | wait for the inner listen stream's acknowledgment (`with_listen_ack_timeout`) |
//! | [`KEEP_ALIVE`] | 15 s | keep-alive comments on idle listen streams |
//! | [`MAX_KEEP_ALIVE`] | 1 hour | the longest keep-alive interval accepted |
//! | [`JANITOR_INTERVAL`] | 60 s | time between janitor sweeps |
//! | [`RETENTION`] | 1 hour | how long a terminal task without a TTL is kept |
//! | [`AUTO_EXPIRY_MARGIN`] | 5 s | how long before its TTL an `Auto` task is stopped |
//! | [`STORE_TIMEOUT`] | 5 s | one store call the layer makes (`with_store_timeout`) |
//! | [`CONNECT_TIMEOUT`] | 5 s | the first connect of `PostgresStore::connect` and `RedisStore::connect` (`connect_with_timeout`) |
//! | [`STATEMENT_TIMEOUT`] | 6 s | PostgreSQL's `statement_timeout` on the connections of `PostgresStore::connect`: an abandoned statement is cancelled in the database too |
//! | [`WORKER_LEASE`] | 20 s | how long a node's lease on its tasks lasts without renewal (`with_worker_lease`) |
//! | [`MIN_WORKER_LEASE`] | 100 ms | the shortest lease accepted |
//!
//! ```
//! use std::time::Duration;
//! use mcp_tasks::defaults;
//!
//! assert_eq!(defaults::TTL, Duration::from_secs(3600));
//! assert_eq!(defaults::MAX_ROWS, 10_000);
//! assert_eq!(defaults::MAX_TASKS_PER_OWNER, defaults::MAX_ROWS / 10);
//! ```

use std::time::Duration;

/// Most tasks a store holds (10 000): a client looping a task-making tool cannot
/// grow it without bound.
pub const MAX_ROWS: usize = 10_000;
/// Most tasks one principal (or all anonymous callers together) holds (1 000, a
/// tenth of [`MAX_ROWS`]): one client looping a task-making tool is refused long
/// before it fills the store for everyone else. Expired tasks never count.
pub const MAX_TASKS_PER_OWNER: usize = 1_000;
/// Lifetime of a task whose tool sets none (1 hour).
pub const TTL: Duration = Duration::from_secs(3600);
/// The longest task lifetime accepted (10 years); longer ones are refused (use an
/// unlimited TTL instead).
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Largest request body the layer reads for the methods it inspects (4 MiB).
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// Largest inner response buffered while deciding whether a call became a task
/// (16 MiB); a larger one streams through unchanged.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Largest serialized answer one `tasks/update` may give to one input request
/// (256 KiB); a larger one is refused with -32602 and the task is unchanged.
pub const MAX_INPUT_RESPONSE_BYTES: usize = 256 * 1024;
/// Most bytes of answers (keys and serialized values) one task keeps (1 MiB); a
/// `tasks/update` that would pass it is refused with -32602 and the task is
/// unchanged.
pub const MAX_TASK_INPUT_BYTES: usize = 1024 * 1024;
/// Largest serialized task result stored (8 MiB, half rmcp's 16 MiB client
/// limit); a larger completion fails the task with -32603 "Result too large".
pub const MAX_RESULT_BYTES: usize = 8 * 1024 * 1024;
/// Most task ids one `subscriptions/listen` may name (1 000).
pub const MAX_LISTEN_TASK_IDS: usize = 1_000;
/// Most listen streams carrying task ids one principal (or all anonymous callers
/// together) may hold open at once (16); one more is refused with -32603 "Too many
/// listen streams".
pub const MAX_LISTEN_STREAMS_PER_OWNER: usize = 16;
/// Most listen streams carrying task ids the layer holds open at once (1 000).
pub const MAX_LISTEN_STREAMS: usize = 1_000;
/// Most bytes of task notifications one principal's listen streams (or all
/// anonymous callers' together) hold before their readers take them (32 MiB, four
/// results of [`MAX_RESULT_BYTES`]). A change is counted once however many streams
/// name it. A listen whose snapshot would pass it is refused with -32603 "Too many
/// listen bytes"; an open stream whose change would pass it is ended with the
/// listen result.
pub const MAX_LISTEN_BYTES_PER_OWNER: usize = 32 * 1024 * 1024;
/// Most bytes of task notifications all listen streams of the layer hold before
/// their readers take them (256 MiB); past it, as for
/// [`MAX_LISTEN_BYTES_PER_OWNER`].
pub const MAX_LISTEN_BYTES: usize = 256 * 1024 * 1024;
/// How long the layer waits for the inner service's listen stream to start with its
/// acknowledgment (5 s); after it, the client gets the layer's own acknowledgment
/// and a stream of task notifications alone.
pub const LISTEN_ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// Interval between keep-alive comments on an idle listen stream (15 s).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The longest keep-alive interval accepted (1 hour).
pub const MAX_KEEP_ALIVE: Duration = Duration::from_secs(3600);
/// How often the janitor sweeps (60 s).
pub const JANITOR_INTERVAL: Duration = Duration::from_secs(60);
/// How long a terminal task without a TTL is kept (1 hour).
pub const RETENTION: Duration = Duration::from_secs(3600);
/// The longest margin before its TTL at which a running
/// [`TaskMode::Auto`](crate::TaskMode::Auto) task is stopped and marked `failed` (5 s).
pub const AUTO_EXPIRY_MARGIN: Duration = Duration::from_secs(5);
/// The longest one store call made by the layer may take (5 s): past it the call is
/// dropped and a request gets -32603, so a store outage never hangs a client.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `PostgresStore::connect` and `RedisStore::connect` may take to reach
/// their server (5 s). A refused connection fails at once, without retries, with the
/// cause and the server's address; an address that does not answer fails when this
/// runs out. `connect_with_timeout` on either store sets another.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The `statement_timeout` `PostgresStore::connect` sets on its connections (6 s,
/// a little above [`STORE_TIMEOUT`]): a statement the layer gave up on is
/// cancelled in the database as well, instead of holding a connection and locks.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(6);
/// How long a node's lease on the tasks it runs lasts without a renewal (20 s).
/// The node renews every third of it; a surviving node fails the unfinished tasks
/// of a node that stopped at most 1.25 times this after the stop (25 s).
pub const WORKER_LEASE: Duration = Duration::from_secs(20);
/// The shortest worker lease accepted (100 ms).
pub const MIN_WORKER_LEASE: Duration = Duration::from_millis(100);
