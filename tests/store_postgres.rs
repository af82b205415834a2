//! `PostgresStore` against a real database: the public contract suite, its
//! multi-node rules on two store instances over one table, and what is particular
//! to PostgreSQL (table names, the listener's reconnect).
//!
//! `DATABASE_URL` names the database (read at run time). Without it the tests are
//! skipped with a message, except under CI (`CI` set), where they fail. Every test
//! works on a table of its own, dropped at the end, so the tests run in parallel.

mod support;

use std::sync::Arc;

use mcp_tasks::sqlx;
use mcp_tasks::sqlx::postgres::PgPoolOptions;
use mcp_tasks::store::{CreateLimits, FeedEvent, Timestamp};
use mcp_tasks::{
    MemoryStore, PostgresStore, TaskId, TaskRecord, error::ConfigError, store::TaskStore,
};
use support::connect;
use support::logs::Logged;
use support::stores::postgres::{scratch, scratch_on_store_clock, two_nodes};
use support::wait::{self, within};

/// A fresh store for one rule of the suite. Without a database (outside CI) there is
/// nothing to test: the rule then runs against `MemoryStore`, and says so.
async fn fresh_store() -> Arc<dyn TaskStore> {
    match scratch().await {
        Some(store) => Arc::new(store),
        None => {
            eprintln!("this rule ran against MemoryStore, not PostgresStore");
            Arc::new(MemoryStore::new())
        }
    }
}

mod contract {
    mcp_tasks::task_store_tests!(super::fresh_store());
}

/// A fresh store deciding expiry by the database's clock, as in production.
async fn fresh_store_on_store_clock() -> Arc<dyn TaskStore> {
    match scratch_on_store_clock().await {
        Some(store) => Arc::new(store),
        None => {
            eprintln!("this rule ran against MemoryStore, not PostgresStore");
            Arc::new(MemoryStore::new().with_clock(mcp_tasks::store::Clock::Store))
        }
    }
}

mod clock {
    mcp_tasks::task_store_clock_tests!(super::fresh_store_on_store_clock());
}

mod nodes {
    mcp_tasks::task_store_node_tests!(super::two_nodes());
}

/// `list` at scale: 10 000 tasks of 100 owners (created 64 at a time), one
/// owner's listed page by page.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_pages_one_owner_among_many() {
    let Some(store) = scratch().await else {
        return;
    };
    mcp_tasks::test_suite::list_pages_one_owner_among_many(store, 10_000, 100).await;
}

#[tokio::test]
async fn invalid_table_names_are_refused_before_any_query() {
    // A lazy pool never connects unless used: no database needed.
    let pool = PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let store = PostgresStore::new(pool);
    assert_eq!(store.table(), PostgresStore::DEFAULT_TABLE);
    assert_eq!(store.channel(), "mcp_tasks_changes");
    for bad in [
        "",
        "x; DROP TABLE y",
        "public.tasks",
        "\"quoted\"",
        "9lives",
    ] {
        assert!(
            matches!(
                store.clone().with_table(bad),
                Err(ConfigError::InvalidName(_))
            ),
            "{bad:?} must be refused"
        );
    }
    let renamed = store.with_table("Tasks_2").unwrap();
    assert_eq!(renamed.table(), "Tasks_2");
    assert_eq!(renamed.channel(), "Tasks_2_changes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_comes_back_after_its_connection_is_killed() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let mut feed_a = a.subscribe().expect("a has a change feed");
    // Two listening sessions, found by the names the listeners give their
    // connections: a's and b's. Kill them both.
    let names = vec![
        a.store().feed_connection_name(),
        b.store().feed_connection_name(),
    ];
    let listening = |pool: mcp_tasks::sqlx::PgPool, names: Vec<String>| async move {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_activity WHERE application_name = ANY($1)",
        )
        .bind(names)
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let before = listening(b.store().pool().clone(), names.clone()).await;
    assert_eq!(before.len(), 2, "a and b each listen on one session");
    for pid in &before {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(b.store().pool())
            .await
            .unwrap();
    }
    // Wait until both listeners listen again, on new sessions (PostgreSQL announces
    // no new session, so this polls).
    let reconnected = wait::poll(async || {
        let now = listening(b.store().pool().clone(), names.clone()).await;
        (now.len() == 2 && now.iter().all(|pid| !before.contains(pid))).then_some(())
    })
    .await;
    assert!(
        reconnected.is_some(),
        "the listeners did not reconnect within {:?}",
        wait::DEADLINE
    );
    within("a reports its listener ready", a.store().listen())
        .await
        .unwrap();
    let task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    b.create(task.clone(), CreateLimits::default())
        .await
        .unwrap();
    assert!(wait::changed(&mut feed_a, "b's create after the reconnect").await == task.id);
}

#[tokio::test]
async fn listen_to_a_closed_port_fails_at_once_naming_the_server_but_not_the_password() {
    connect::a_closed_port_fails_at_once(
        async |url, _| {
            let pool = PgPoolOptions::new().connect_lazy(&url).unwrap();
            PostgresStore::new(pool).listen().await
        },
        |port| format!("postgres://app:hunter2-secret@127.0.0.1:{port}/tasks"),
        |port| format!("postgres://app@127.0.0.1:{port}/tasks"),
    )
    .await;
}

/// An owner-scoped read checks the owner in the `SELECT`: a foreign row is never
/// sent, so its (here unreadable) record is never decoded, and the read costs what
/// an unknown id costs. The owner's own read does decode it, and fails.
#[tokio::test]
async fn a_foreign_read_never_fetches_nor_decodes_the_record() {
    use mcp_tasks::Principal;

    let Some(scratch) = scratch().await else {
        return;
    };
    let store = scratch.store();
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let record = TaskRecord::new(TaskId::random(), Some(alice.clone()), now);
    let id = record.id;
    store.create(record, CreateLimits::default()).await.unwrap();
    let corrupt = format!(
        "UPDATE \"{}\" SET record = '{{\"not\": \"a task\"}}'::jsonb WHERE id = $1",
        store.table()
    );
    let changed = sqlx::query(sqlx::AssertSqlSafe(corrupt))
        .bind(id.as_bytes().to_vec())
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(changed.rows_affected(), 1);
    support::stores::only_the_owner_decodes(store, id, &alice, now).await;
}

/// A table of the layout before `json` records, `bytea` owners and counter rows
/// (`owner text`, `record jsonb`) is upgraded in place by `migrate`: its records
/// read back unchanged and count against the caps.
#[tokio::test]
async fn a_table_of_the_previous_layout_is_upgraded_in_place() {
    let Some(url) = support::stores::postgres::database_url() else {
        return;
    };
    let table = support::stores::postgres::scratch_table();
    let _drop = support::stores::postgres::DropTable {
        url: url.clone(),
        table: table.clone(),
    };
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let old = format!(
        "CREATE TABLE \"{table}\" (id bytea PRIMARY KEY, owner text, revision bigint NOT NULL, \
         status text NOT NULL, expires_at bigint, retired_at bigint, record jsonb NOT NULL)"
    );
    sqlx::query(sqlx::AssertSqlSafe(old))
        .execute(&pool)
        .await
        .unwrap();
    let now = Timestamp::now();
    let alice = mcp_tasks::Principal::from("alice");
    let records: Vec<TaskRecord> = [Some(alice.clone()), Some(alice.clone()), None]
        .into_iter()
        .map(|owner| TaskRecord::new(TaskId::random(), owner, now))
        .collect();
    for record in &records {
        let insert = format!(
            "INSERT INTO \"{table}\" (id, owner, revision, status, record) VALUES ($1, $2, 0, 'working', $3::jsonb)"
        );
        sqlx::query(sqlx::AssertSqlSafe(insert))
            .bind(record.id.as_bytes().as_slice())
            .bind(record.owner.as_ref().map(|p| p.as_str().to_owned()))
            .bind(serde_json::to_string(record).unwrap())
            .execute(&pool)
            .await
            .unwrap();
    }
    let store = PostgresStore::new(pool)
        .with_table(&table)
        .unwrap()
        .with_clock(mcp_tasks::store::Clock::Caller);
    store.migrate().await.expect("the upgrade");
    store.migrate().await.expect("a second run changes nothing");
    for record in &records {
        let scope = mcp_tasks::store::Scope::Owner(record.owner.as_ref());
        assert_eq!(
            store.get(&record.id, scope, now).await.unwrap().as_ref(),
            Some(record),
            "an upgraded record reads back unchanged, found by its owner"
        );
    }
    let new = |owner: Option<&mcp_tasks::Principal>| {
        TaskRecord::new(TaskId::random(), owner.cloned(), now)
    };
    let per_owner = CreateLimits::new(None, Some(2));
    assert!(
        matches!(
            store.create(new(Some(&alice)), per_owner).await,
            Err(mcp_tasks::error::StoreError::LimitReached(
                mcp_tasks::error::Limit::PerOwner
            ))
        ),
        "alice's two upgraded tasks count against her cap"
    );
    assert!(
        matches!(
            store
                .create(new(None), CreateLimits::new(Some(3), None))
                .await,
            Err(mcp_tasks::error::StoreError::LimitReached(
                mcp_tasks::error::Limit::Rows
            ))
        ),
        "the three upgraded rows count against the row cap"
    );
    let nul = mcp_tasks::Principal::from("a\u{0}b");
    store
        .create(new(Some(&nul)), CreateLimits::new(Some(4), Some(1)))
        .await
        .expect("a fourth row fits a cap of four, U+0000 in the owner and all");
    let listed = store.list(Some(&alice), None, 10, now).await.unwrap();
    let mut alices: Vec<TaskId> = records[..2].iter().map(|r| r.id).collect();
    alices.sort_by(|a, b| b.cmp(a));
    assert_eq!(
        listed.records.iter().map(|r| r.id).collect::<Vec<_>>(),
        alices,
        "the upgraded rows list, the larger id first within their millisecond"
    );
}

/// A table of the layout before `created_at` (rows written by that version
/// included) is upgraded in place by `migrate`: the column is filled from each
/// record's own `created_at`, the index `list` reads is made, and `list` pages
/// through the upgraded rows in order. A row inserted by a node of that version,
/// still running, gets the database's time.
#[tokio::test]
async fn a_table_without_created_at_is_upgraded_in_place_and_lists() {
    use mcp_tasks::store::ListFrom;
    use support::stores::postgres::{DropTable, database_url, node, scratch_table};

    let Some(url) = database_url() else {
        return;
    };
    let table = scratch_table();
    let _drop = DropTable::new(url.clone(), table.clone());
    let store = node(&url, &table).await;
    let now = Timestamp::now();
    let alice = mcp_tasks::Principal::from("alice");
    // Created out of order, two in one millisecond.
    let mut records: Vec<TaskRecord> = [3, 1, 4, 1, 5]
        .into_iter()
        .map(|ms| TaskRecord::new(TaskId::random(), Some(alice.clone()), now.plus_ms(ms)))
        .collect();
    for record in &records {
        store
            .create(record.clone(), CreateLimits::default())
            .await
            .unwrap();
    }
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let run = |statement: String| sqlx::query(sqlx::AssertSqlSafe(statement));
    // The earlier layout: no column, and with it no index.
    run(format!("ALTER TABLE \"{table}\" DROP COLUMN created_at"))
        .execute(&pool)
        .await
        .unwrap();
    store.migrate().await.expect("the upgrade");
    store.migrate().await.expect("a second run changes nothing");
    let index: Option<String> =
        sqlx::query_scalar("SELECT indexdef FROM pg_indexes WHERE indexname = $1")
            .bind(format!("{table}_list_idx"))
            .fetch_optional(&pool)
            .await
            .unwrap();
    assert!(
        index.is_some_and(|def| def.contains("(owner, created_at DESC, id DESC)")),
        "migrate makes the index list reads"
    );
    records.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| b.id.cmp(&a.id))
    });
    let mut listed = Vec::new();
    let mut from: Option<ListFrom> = None;
    loop {
        let page = store.list(Some(&alice), from, 2, now).await.unwrap();
        listed.extend(page.records);
        match page.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    assert_eq!(
        listed, records,
        "the upgraded rows list in order, unchanged"
    );
    // A node of the earlier version inserts without the column.
    let early = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1));
    run(format!(
        "INSERT INTO \"{table}\" (id, owner, revision, status, record) VALUES ($1, NULL, 0, 'working', $2::json)"
    ))
    .bind(early.id.as_bytes().as_slice())
    .bind(serde_json::to_string(&early).unwrap())
    .execute(&pool)
    .await
    .unwrap();
    let stamped: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT created_at FROM \"{table}\" WHERE id = $1"
    )))
    .bind(early.id.as_bytes().as_slice())
    .fetch_one(&pool)
    .await
    .unwrap();
    let db_now = i64::try_from(Timestamp::now().as_millis()).unwrap();
    assert!(
        (db_now - 600_000..=db_now + 600_000).contains(&stamped),
        "a row inserted without created_at gets the database's time, not {stamped}"
    );
    let anonymous = store.list(None, None, 10, now).await.unwrap();
    assert_eq!(anonymous.records, [early]);
}

/// A counts table of the layout before byte counts is upgraded in place by
/// `migrate`: each owner's bytes are summed from its rows (the records as stored),
/// a second run changes nothing, and writes after it keep the count.
#[tokio::test]
async fn a_counts_table_without_bytes_is_upgraded_in_place() {
    use mcp_tasks::store::{Scope, Transition, encoded_len};
    use support::stores::postgres::{DropTable, database_url, node, scratch_table};

    let Some(url) = database_url() else {
        return;
    };
    let table = scratch_table();
    let _drop = DropTable::new(url.clone(), table.clone());
    let store = node(&url, &table).await;
    let now = Timestamp::now();
    let alice = mcp_tasks::Principal::from("alice");
    let mut ids = Vec::new();
    for n in 0..40 {
        let mut record = TaskRecord::new(TaskId::random(), Some(alice.clone()), now);
        record.status_message = Some("m".repeat(n * 100));
        ids.push(record.id);
        store.create(record, CreateLimits::default()).await.unwrap();
    }
    let anonymous = TaskRecord::new(TaskId::random(), None, now);
    store
        .create(anonymous.clone(), CreateLimits::default())
        .await
        .unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let run = |statement: String| sqlx::query(sqlx::AssertSqlSafe(statement));
    run(format!("ALTER TABLE \"{table}_counts\" DROP COLUMN bytes"))
        .execute(&pool)
        .await
        .unwrap();
    store.migrate().await.expect("the upgrade");
    store.migrate().await.expect("a second run changes nothing");
    let size_of = async |ids: &[TaskId]| -> u64 {
        let mut total = 0;
        for id in ids {
            let record = store.get(id, Scope::Any, now).await.unwrap().unwrap();
            total += encoded_len(&record) as u64;
        }
        total
    };
    assert_eq!(
        store.owner_bytes(Some(&alice)).await.unwrap(),
        size_of(&ids).await,
        "alice's bytes are summed from her rows"
    );
    assert_eq!(
        store.owner_bytes(None).await.unwrap(),
        encoded_len(&anonymous) as u64
    );
    let done = Transition::Complete {
        result: serde_json::json!({"text": "r".repeat(50_000)}),
        message: None,
    };
    store
        .update(&ids[0], Scope::Any, &done, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.owner_bytes(Some(&alice)).await.unwrap(),
        size_of(&ids).await,
        "a write after the upgrade keeps the count"
    );
}

/// Writes are announced after their commit, in batches: a burst of concurrent
/// creates on one node, far more than one batch's worth in flight at a time, reaches
/// the other node in full, every id once at least.
#[tokio::test]
async fn a_burst_of_writes_is_announced_in_full() {
    const BURST: usize = 600;
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let mut feed_b = b.subscribe().expect("b has a change feed");
    let a = Arc::new(a);
    let ids: Vec<TaskId> = (0..BURST).map(|_| TaskId::random()).collect();
    let writers: Vec<_> = ids
        .chunks(BURST / 24)
        .map(|chunk| {
            let (a, chunk) = (a.clone(), chunk.to_vec());
            tokio::spawn(async move {
                for id in chunk {
                    let task = TaskRecord::new(id, None, Timestamp::now());
                    a.create(task, CreateLimits::default()).await.unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let mut unheard: std::collections::HashSet<TaskId> = ids.into_iter().collect();
    while !unheard.is_empty() {
        let id = wait::changed(&mut feed_b, "a's burst of creates").await;
        unheard.remove(&id);
    }
}

/// `without_announcements` announces nothing: a create through it is not heard on the
/// other node at once, while the next announced write is. The unannounced one (a
/// writer that died between its commit and its announcement) still arrives, from the
/// change log, within two checkpoint ticks (10 s).
#[tokio::test]
async fn a_store_without_announcements_is_not_heard() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let mut feed_b = b.subscribe().expect("b has a change feed");
    let quiet = a.store().clone().without_announcements();
    let unheard = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    quiet
        .create(unheard.clone(), CreateLimits::default())
        .await
        .unwrap();
    let heard = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    a.create(heard.clone(), CreateLimits::default())
        .await
        .unwrap();
    assert!(wait::changed(&mut feed_b, "a's announced create").await == heard.id);

    let replayed = async {
        loop {
            match feed_b.recv().await {
                Some(FeedEvent::Changed(id)) if id == unheard.id => return,
                Some(FeedEvent::Changed(_)) => {}
                other => panic!("the unannounced create: unexpected {other:?}"),
            }
        }
    };
    let started = std::time::Instant::now();
    tokio::time::timeout(std::time::Duration::from_secs(15), replayed)
        .await
        .expect("the unannounced create is delivered from the change log within two ticks");
    eprintln!(
        "an unannounced write was delivered after {:?}",
        started.elapsed()
    );
}

/// `PostgresStore::connect` sets a `statement_timeout` a little above the layer's
/// store timeout on its connections, so a statement the layer gave up on is
/// cancelled in the database too; `migrate` lifts it for its own transaction only.
#[tokio::test]
async fn connect_sets_a_statement_timeout_above_the_store_timeout() {
    use mcp_tasks::defaults::{STATEMENT_TIMEOUT, STORE_TIMEOUT};
    use support::stores::postgres::{DropTable, database_url, scratch_table};

    const { assert!(STATEMENT_TIMEOUT.as_millis() > STORE_TIMEOUT.as_millis()) };
    let Some(url) = database_url() else {
        return;
    };
    let table = scratch_table();
    let _drop = DropTable::new(url.clone(), table.clone());
    let store = PostgresStore::connect(&url)
        .await
        .unwrap()
        .with_table(&table)
        .unwrap();
    let show = || sqlx::query_scalar::<_, String>("SHOW statement_timeout").fetch_one(store.pool());
    assert_eq!(show().await.unwrap(), "6s");
    store.migrate().await.unwrap();
    assert_eq!(
        show().await.unwrap(),
        "6s",
        "migrate's lift stays in its transaction"
    );
}

#[tokio::test]
async fn a_closed_port_fails_at_once_naming_the_server_but_not_the_password() {
    connect::a_closed_port_fails_at_once(
        async |url, limit| PostgresStore::connect_with_timeout(&url, limit).await,
        |port| format!("postgres://app:hunter2-secret@127.0.0.1:{port}/tasks"),
        |port| format!("postgres://app:***@127.0.0.1:{port}/tasks"),
    )
    .await;
}

#[tokio::test]
async fn a_server_that_never_answers_fails_at_the_connect_timeout() {
    connect::a_silent_server_fails_at_the_connect_timeout(
        async |url, limit| PostgresStore::connect_with_timeout(&url, limit).await,
        |port| format!("postgres://app@127.0.0.1:{port}/tasks?password=hunter2-secret"),
        |port| format!("postgres://app:***@127.0.0.1:{port}/tasks"),
    )
    .await;
}

#[tokio::test]
async fn a_store_says_once_which_server_and_table_it_keeps_tasks_on() {
    let Some(store) = scratch().await else {
        return;
    };
    let (logged, _logs) = Logged::capture(tracing::Level::INFO);
    let table = store.store().table().to_owned();
    let store = Arc::new(store);
    // Two layers on one store: said once.
    let _a = mcp_tasks::TasksLayer::builder(store.clone())
        .without_janitor()
        .build()
        .unwrap();
    let _b = mcp_tasks::TasksLayer::builder(store)
        .without_janitor()
        .build()
        .unwrap();
    let said = logged.lines_with("PostgreSQL store");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains(&format!("table={table}")), "{}", said[0]);
    assert!(said[0].contains("server=postgres://"), "{}", said[0]);
    assert!(!said[0].contains("password"), "{}", said[0]);
}

/// A start on a schema that is there already logs nothing: the `IF NOT EXISTS`
/// statements' notices stay in the database.
#[tokio::test(flavor = "current_thread")]
async fn migrate_on_an_existing_schema_logs_nothing() {
    let Some(store) = scratch().await else {
        return;
    };
    let (logged, _guard) = Logged::capture(tracing::Level::INFO);
    store
        .store()
        .migrate()
        .await
        .expect("a second run changes nothing");
    let text = logged.text();
    assert!(
        !text.contains("NOTICE") && !text.contains("already exists"),
        "{text}"
    );
}
