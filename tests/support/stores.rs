//! Scratch stores on real backends: a PostgreSQL table or a Redis key prefix of
//! their own for each test, named by `DATABASE_URL` / `REDIS_URL` at run time and
//! removed when the last store over them is dropped. Without the variable the tests
//! are skipped with a message, except under CI (`CI` set), where they fail.

/// The value of the environment variable `var` naming a `what` server, or `None`
/// (after saying so) when the tests should be skipped.
pub(crate) fn server_url(var: &str, what: &str, example: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "{var} is not set: CI must provide a {what} server for these tests, e.g. {var}={example}"
        ),
        _ => {
            eprintln!(
                "{var} is not set: skipping the {what} tests (set it, e.g. to {example}, to run them)"
            );
            None
        }
    }
}

/// After the record of `id`, owned by `owner`, was made unreadable behind the
/// store's back: reads, `visible` and updates scoped to another owner or to no
/// owner find nothing, as for an unknown id (the store compared the owner before it
/// fetched the record, so it never decoded it), while the owner's own read and an
/// unscoped one fetch and decode it, and fail.
pub(crate) async fn only_the_owner_decodes(
    store: &impl mcp_tasks::store::TaskStore,
    id: mcp_tasks::TaskId,
    owner: &mcp_tasks::Principal,
    now: mcp_tasks::store::Timestamp,
) {
    use mcp_tasks::store::{Scope, Transition};

    let other = mcp_tasks::Principal::from(format!("not-{}", owner.as_str()));
    for scope in [Scope::Owner(Some(&other)), Scope::Owner(None)] {
        assert!(matches!(store.get(&id, scope, now).await, Ok(None)));
        let cancel = Transition::Cancel;
        assert!(matches!(
            store.update(&id, scope, &cancel, now).await,
            Ok(None)
        ));
        assert_eq!(store.visible(&[id], scope, now).await.unwrap(), Vec::new());
    }
    assert!(
        store
            .get(&id, Scope::Owner(Some(owner)), now)
            .await
            .is_err(),
        "the owner's read fetches and decodes the record"
    );
    assert!(store.get(&id, Scope::Any, now).await.is_err());
}

/// A name no other test uses: `prefix` and 12 random hex digits.
pub(crate) fn unique_name(prefix: &str) -> String {
    let id = mcp_tasks::TaskId::random();
    let hex: String = id.as_bytes()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{prefix}{hex}")
}

#[cfg(all(feature = "postgres", feature = "test-util"))]
pub(crate) mod postgres {
    //! `PostgresStore` instances on a scratch table.

    use std::sync::Arc;

    use mcp_tasks::PostgresStore;
    use mcp_tasks::sqlx::postgres::PgPoolOptions;
    use mcp_tasks::sqlx::{self, AssertSqlSafe, Connection, Executor};
    use mcp_tasks::store::Clock;
    use mcp_tasks::test_suite::{Intercept, StoreHooks};

    use super::super::wait::{DEADLINE, within};

    /// The database URL from `DATABASE_URL`, or `None` (after saying so) when the
    /// tests should be skipped.
    pub(crate) fn database_url() -> Option<String> {
        super::server_url(
            "DATABASE_URL",
            "PostgreSQL",
            "postgres://postgres@127.0.0.1:5432/test",
        )
    }

    /// A table name no other test uses.
    pub(crate) fn scratch_table() -> String {
        super::unique_name("mcp_tasks_t_")
    }

    /// Drops its table (and the table's counters) when dropped, on a connection of its own (the test's runtime
    /// may be shutting down).
    #[derive(Debug)]
    pub(crate) struct DropTable {
        pub(crate) url: String,
        pub(crate) table: String,
    }

    impl DropTable {
        /// Drops `table` (and its lease tables) under `url` when dropped.
        pub(crate) fn new(url: String, table: String) -> Self {
            DropTable { url, table }
        }
    }

    impl StoreHooks for DropTable {}

    impl Drop for DropTable {
        fn drop(&mut self) {
            let url = self.url.clone();
            let statement = format!(
                "SET lock_timeout = '5s'; DROP TABLE IF EXISTS \"{0}\", \"{0}_leases\", \"{0}_lease_holds\", \"{0}_feed\", \"{0}_counts\", \"{0}_jobs\"; \
                 DROP FUNCTION IF EXISTS \"{0}_feed_fn\"()",
                self.table
            );
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the cleanup");
                runtime.block_on(async move {
                    let mut connection = sqlx::PgConnection::connect(&url).await?;
                    connection.execute(AssertSqlSafe(statement)).await?;
                    connection.close().await
                })
            })
            .join();
            if !matches!(dropped, Ok(Ok(()))) {
                eprintln!("could not drop the scratch table {}", self.table);
            }
        }
    }

    /// A `PostgresStore` on a scratch table that goes away with the last store on
    /// it.
    pub(crate) type Scratch = Intercept<PostgresStore, Arc<DropTable>>;

    /// A store instance ("node") on `table`, with a small pool of its own, migrated.
    pub(crate) async fn node(url: &str, table: &str) -> PostgresStore {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(DEADLINE)
            .connect(url)
            .await
            .expect("connect to DATABASE_URL");
        let store = PostgresStore::new(pool)
            .with_table(table)
            .expect("a valid table name")
            .with_clock(Clock::Caller);
        store.migrate().await.expect("migrate");
        store
    }

    /// A store on a fresh scratch table, taking the time each call passes (the
    /// contract suite drives time); `None` without a database.
    pub(crate) async fn scratch() -> Option<Scratch> {
        let url = database_url()?;
        let table = scratch_table();
        let store = node(&url, &table).await;
        Some(Intercept::new(store, Arc::new(DropTable { url, table })))
    }

    /// Listening store instances on one fresh scratch table, one per URL in `urls`
    /// (the same database, perhaps through a proxy); the table is dropped through
    /// `direct`.
    pub(crate) async fn nodes_at(direct: &str, urls: &[String]) -> Vec<Scratch> {
        let table = scratch_table();
        let drop = Arc::new(DropTable::new(direct.to_owned(), table.clone()));
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            let store = node(url, &table).await;
            within("the listener to start", store.listen())
                .await
                .expect("the listener starts");
            nodes.push(Intercept::new(store, drop.clone()));
        }
        nodes
    }

    /// A store on a fresh scratch table deciding expiry by the database's clock,
    /// as in production; `None` without a database.
    pub(crate) async fn scratch_on_store_clock() -> Option<Scratch> {
        let url = database_url()?;
        let table = scratch_table();
        let store = node(&url, &table).await.with_clock(Clock::Store);
        Some(Intercept::new(store, Arc::new(DropTable { url, table })))
    }

    /// Two listening store instances ("nodes") on one fresh scratch table; `None`
    /// without a database.
    pub(crate) async fn two_nodes() -> Option<(Scratch, Scratch)> {
        let url = database_url()?;
        let table = scratch_table();
        // Both nodes migrate at once: the second run must be a harmless no-op.
        let (a, b) = tokio::join!(node(&url, &table), node(&url, &table));
        for store in [&a, &b] {
            within("the listener to start", store.listen())
                .await
                .expect("the listener starts");
        }
        let table = Arc::new(DropTable { url, table });
        Some((Intercept::new(a, table.clone()), Intercept::new(b, table)))
    }
}

#[cfg(all(feature = "redis", feature = "test-util"))]
pub(crate) mod redis {
    //! `RedisStore` instances under a scratch key prefix.

    use std::sync::Arc;

    use mcp_tasks::RedisStore;
    use mcp_tasks::store::Clock;
    use mcp_tasks::test_suite::{Intercept, StoreHooks};

    /// The ids of the client connections named `name` on `admin`'s server now
    /// (`CLIENT LIST`); none when the list cannot be read.
    pub(crate) async fn connections_named(
        admin: &mut mcp_tasks::redis::aio::MultiplexedConnection,
        name: &str,
    ) -> Vec<u64> {
        let Ok(list) = mcp_tasks::redis::cmd("CLIENT")
            .arg("LIST")
            .query_async::<String>(admin)
            .await
        else {
            return Vec::new();
        };
        list.lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let id = fields.next()?.strip_prefix("id=")?.parse().ok()?;
                fields
                    .any(|field| field.strip_prefix("name=") == Some(name))
                    .then_some(id)
            })
            .collect()
    }

    /// The server from `REDIS_URL`, or `None` (after saying so) when the tests
    /// should be skipped.
    pub(crate) fn redis_url() -> Option<String> {
        super::server_url("REDIS_URL", "Redis", "redis://127.0.0.1:6379")
    }

    /// A key prefix no other test uses.
    pub(crate) fn unique_prefix() -> String {
        format!("{}:", super::unique_name("mcp-tasks-test:"))
    }

    /// Deletes the keys under its prefix when dropped.
    #[derive(Debug)]
    pub(crate) struct KeyJanitor {
        url: String,
        prefix: String,
    }

    impl KeyJanitor {
        /// Deletes the keys under `prefix` on `url` when dropped.
        pub(crate) fn new(url: String, prefix: String) -> Self {
            KeyJanitor { url, prefix }
        }
    }

    impl StoreHooks for KeyJanitor {}

    impl Drop for KeyJanitor {
        fn drop(&mut self) {
            // Best effort, synchronous (Drop cannot await): the prefix is random, so
            // leftovers never disturb another test.
            let Ok(client) = mcp_tasks::redis::Client::open(self.url.as_str()) else {
                return;
            };
            let Ok(mut conn) = client.get_connection() else {
                return;
            };
            let pattern = format!("{}*", self.prefix);
            let mut cursor: u64 = 0;
            loop {
                let Ok((next, keys)): Result<(u64, Vec<String>), _> = mcp_tasks::redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(&mut conn)
                else {
                    return;
                };
                if !keys.is_empty() {
                    let _: Result<u64, _> =
                        mcp_tasks::redis::cmd("DEL").arg(&keys).query(&mut conn);
                }
                if next == 0 {
                    return;
                }
                cursor = next;
            }
        }
    }

    /// A `RedisStore` under a prefix of its own, whose keys are deleted when the
    /// last store under it is dropped.
    pub(crate) type Scratch = Intercept<RedisStore, Arc<KeyJanitor>>;

    /// A node taking the time each call passes (the contract suite drives time).
    async fn node(url: &str, keys: &Arc<KeyJanitor>) -> Scratch {
        let store = RedisStore::connect(url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to REDIS_URL: {e}"))
            .with_prefix(&keys.prefix)
            .with_clock(Clock::Caller);
        Intercept::new(store, keys.clone())
    }

    /// `n` nodes (separate connections and node ids) sharing one fresh prefix;
    /// `None` without a server.
    pub(crate) async fn nodes(n: usize) -> Option<Vec<Scratch>> {
        let url = redis_url()?;
        let keys = Arc::new(KeyJanitor {
            url: url.clone(),
            prefix: unique_prefix(),
        });
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(node(&url, &keys).await);
        }
        Some(nodes)
    }

    /// Store instances sharing one fresh prefix, one per URL in `urls` (the same
    /// server, perhaps through a proxy); the keys are deleted through `direct`.
    pub(crate) async fn nodes_at(direct: &str, urls: &[String]) -> Vec<Scratch> {
        let keys = Arc::new(KeyJanitor {
            url: direct.to_owned(),
            prefix: unique_prefix(),
        });
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            nodes.push(node(url, &keys).await);
        }
        nodes
    }

    /// Two nodes sharing one fresh prefix; `None` without a server.
    pub(crate) async fn two_nodes() -> Option<(Scratch, Scratch)> {
        let mut nodes = nodes(2).await?;
        let b = nodes.pop()?;
        let a = nodes.pop()?;
        Some((a, b))
    }

    /// A store under a fresh prefix; `None` without a server.
    pub(crate) async fn scratch() -> Option<Scratch> {
        nodes(1).await?.pop()
    }

    /// A store under a fresh prefix deciding expiry by the server's clock, as in
    /// production; `None` without a server.
    pub(crate) async fn scratch_on_store_clock() -> Option<Scratch> {
        let url = redis_url()?;
        let prefix = unique_prefix();
        let store = RedisStore::connect(url.as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot connect to REDIS_URL: {e}"))
            .with_prefix(&prefix);
        Some(Intercept::new(store, Arc::new(KeyJanitor { url, prefix })))
    }
}
