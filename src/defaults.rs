//! Every limit and default of the layer: its value, the setter that changes it, and
//! its constant. Limits are on by default; the setters are on
//! [`TasksLayerBuilder`](crate::TasksLayerBuilder) unless named otherwise.
//!
//! | what | default | set with | constant |
//! |---|---|---|---|
//! | tasks one store holds (raise it for more; see below) | 10 000 | `with_max_rows`, `without_max_rows` | [`MAX_ROWS`] |
//! | tasks per principal (anonymous callers together count as one) | 1 000 | `with_max_tasks_per_owner`, `without_max_tasks_per_owner` | [`MAX_TASKS_PER_OWNER`] |
//! | task lifetime | 1 hour (at most 10 years) | `with_default_ttl`, `TaskSpec::with_ttl` / `without_ttl` | [`TTL`], [`MAX_TTL`] |
//! | suggested polling interval | none sent | `with_default_poll_interval`, `TaskSpec::with_poll_interval` | – |
//! | request body the layer reads | 4 MiB (then 413) | `with_max_request_bytes` | [`MAX_REQUEST_BYTES`] |
//! | inner response buffered to decide on a task (an unfinished SSE event, for SSE) | 16 MiB | `with_max_response_bytes` | [`MAX_RESPONSE_BYTES`] |
//! | one answer in a `tasks/update` (then -32602) | 256 KiB | `with_max_input_response_bytes` | [`MAX_INPUT_RESPONSE_BYTES`] |
//! | answers kept per task (then -32602) | 1 MiB | `with_max_task_input_bytes` | [`MAX_TASK_INPUT_BYTES`] |
//! | a task's result or error, and the input requests of one call (then `failed`, -32603 "Result too large" or "Input requests too large") | 8 MiB | `with_max_result_bytes` | [`MAX_RESULT_BYTES`] |
//! | bytes the tasks of one principal store (anonymous callers together count as one; a new task or an answer past it: -32603 "Task limit reached", `{"limit": "bytes_per_owner"}`; a result, error or input requests: the task fails with it; a status message: left out) | 64 MiB | `with_max_bytes_per_owner` | [`MAX_BYTES_PER_OWNER`] |
//! | a status message (longer: cut on a character boundary, ending with "…") | 4 KiB | `with_max_status_message_bytes` | [`MAX_STATUS_MESSAGE_BYTES`] |
//! | task ids in one listen | 1 000 | – | [`MAX_LISTEN_TASK_IDS`] |
//! | open listen streams with task ids per principal | 16 | `with_max_listen_streams_per_owner` | [`MAX_LISTEN_STREAMS_PER_OWNER`] |
//! | open listen streams with task ids in all | 1 000 | `with_max_listen_streams` | [`MAX_LISTEN_STREAMS`] |
//! | task notifications unread listen streams hold, per principal (a change counted once, however many streams name it), and the snapshots being read for new ones | 32 MiB (a new listen past it: -32603 "Too many listen bytes", its snapshot not fetched; an open stream: ended with the listen result) | `with_max_listen_bytes_per_owner` | [`MAX_LISTEN_BYTES_PER_OWNER`] |
//! | task notifications unread listen streams hold, and the snapshots being read for new ones, in all | 256 MiB (as above, once the principal holding the most, if it holds more than the one whose change or listen comes, had its streams ended) | `with_max_listen_bytes` | [`MAX_LISTEN_BYTES`] |
//! | wait for the inner listen acknowledgment | 5 s (then the layer's own, tasks only) | `with_listen_ack_timeout` | [`LISTEN_ACK_TIMEOUT`] |
//! | wait for an inner answer the layer edits (`server/discover`, `tools/list` with the task tools, a 2025-11-25 `initialize`), to its end | 30 s (then -32603, HTTP 504) | `with_edited_answer_timeout` | [`EDITED_ANSWER_TIMEOUT`] |
//! | keep-alive on idle listen streams | 15 s (at most 1 hour) | `with_keep_alive` | [`KEEP_ALIVE`], [`MAX_KEEP_ALIVE`] |
//! | janitor sweeps | every 60 s | `with_janitor`, `without_janitor` | [`JANITOR_INTERVAL`] |
//! | terminal tasks without a TTL kept | 1 hour | `with_janitor` | [`RETENTION`] |
//! | `Auto` task stopped before its TTL | at most 5 s | – | [`AUTO_EXPIRY_MARGIN`] |
//! | one store call made by the layer (then -32603) | 5 s | `with_store_timeout` | [`STORE_TIMEOUT`] |
//! | reaching the server in `PostgresStore::connect` / `RedisStore::connect`, and their `listen` | 5 s | `connect_with_timeout` | [`CONNECT_TIMEOUT`] |
//! | PostgreSQL `statement_timeout` on the connections of `PostgresStore::connect` | 6 s | a pool of your own (`PostgresStore::new`) | [`STATEMENT_TIMEOUT`] |
//! | worker lease (a stopped node's tasks failed within 1.25 ×) | 20 s (at least 100 ms) | `with_worker_lease`, `without_worker_leases` | [`WORKER_LEASE`], [`MIN_WORKER_LEASE`] |
//!
//! **Many tasks on a node.** The row cap counts every task in the store, of all nodes
//! and principals, live or ended within their retention, and the per-principal cap
//! one principal's. A deployment that runs more raises both to fit: a node holding
//! 100 000 running tasks for many principals needs, say, `with_max_rows(250_000)` (the
//! live tasks, plus those ended and kept) and a `with_max_tasks_per_owner` above
//! the busiest principal's share (`without_max_rows` and
//! `without_max_tasks_per_owner` lift them). Worker leases need no setting for it:
//! a renewal's cost follows what changed and never grows faster than what is held
//! (RELIABILITY.md has 100 000 tasks on one node through a stall and an outage,
//! BENCHMARKS.md the renewal times).
//!
//! A setting out of range (a zero cap or duration, a TTL over 10 years, an empty server
//! name) is a [`ConfigError`](crate::error::ConfigError) from `build()`, never a
//! failure at request time; one below or above a bound names it ("worker lease must
//! be at least 100 ms"). The client of the `client` feature has caps of its own,
//! listed on its module page.
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
/// Most bytes the tasks of one principal (or of all anonymous callers together)
/// store (64 MiB, eight results of [`MAX_RESULT_BYTES`]): their records as stored,
/// results, errors, input requests and answers, and status messages included, until
/// the records are removed. A write past it is not stored (a new task and a
/// client's answers are refused with -32603 "Task limit reached"; a result, an error
/// or input requests fail the task with that error instead).
pub const MAX_BYTES_PER_OWNER: usize = 64 * 1024 * 1024;
/// The longest status message a task keeps (4 KiB); a longer one is cut on a
/// character boundary and ends with "…". Progress reports become status messages,
/// up to four times a second per task.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 4 * 1024;
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
/// [`MAX_LISTEN_BYTES_PER_OWNER`], except that a change or a new listen of a
/// principal holding less than another first ends the streams of the principal
/// holding the most.
pub const MAX_LISTEN_BYTES: usize = 256 * 1024 * 1024;
/// How long the layer waits for the inner service's listen stream to start with its
/// acknowledgment (5 s); after it, the client gets the layer's own acknowledgment
/// and a stream of task notifications alone.
pub const LISTEN_ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the layer waits for an inner answer it edits before it answers
/// (`server/discover`, `tools/list` with the task tools, a 2025-11-25 `initialize`),
/// its SSE stream read to the end (30 s): past it the client gets -32603 with HTTP
/// 504 instead of waiting on an inner server that never finishes.
pub const EDITED_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
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
/// How long `PostgresStore::connect` and `RedisStore::connect`, and the first
/// connect of either store's `listen`, may take to reach their server (5 s). A refused connection fails at once, without retries, with the
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
