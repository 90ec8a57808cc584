//! The database engine: every table in one `kv` table of a database that
//! speaks the PostgreSQL protocol (SPEC §10), through tokio-postgres and a
//! bounded deadpool pool.
//!
//! Transactions run at READ COMMITTED. A transaction's reads lock the rows
//! they find (`FOR UPDATE`): the store reads every row it is about to change
//! that another transaction could change too (a space's record, a content's
//! reference count, the outbox head), so those transactions take turns. A
//! row read as missing is inserted without `ON CONFLICT`, so two
//! transactions that both found it missing cannot both create it: the
//! second fails with a unique violation. That, a serialization failure
//! (40001, which CockroachDB reports for any conflict) and a deadlock
//! (40P01) re-run the transaction after a jittered backoff, a bounded
//! number of times. Writes are buffered and sent at commit in at most three
//! statements (arrays through `unnest`).
//!
//! The store's methods block; this engine runs its connections on a small
//! runtime of its own and waits for them, from any thread that may block
//! (see [`Postgres::wait`]).
//!
//! A database that does not answer fails calls with STORE_UNAVAILABLE
//! within the connect timeout, and its health is `Unavailable` until a
//! probe gets through again: the pool opens new connections by itself, so
//! the front recovers without a restart.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use prost::bytes::Bytes;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::{Durable, Engine, Entries, Health, Held, KeyRange, Table, Tx};
use crate::error::{Error, Reason, Result};
use crate::store::OpenError;
use crate::store::batched::Batched;

/// The schema, one migration per step, applied in order at open.
const MIGRATIONS: &[&str] = &[include_str!("migrations/0001_kv.sql")];

/// How a transaction starts; the first of its statements follows at once.
const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";
/// The same, for a commit that returns before its WAL is on disk.
const BEGIN_ASYNCHRONOUS: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit TO OFF";

/// How often a transaction that conflicts runs before the call fails.
const MAX_ATTEMPTS: u32 = 12;
/// Rows per page of a range scan: small first (most scans stop early),
/// larger as a scan goes on.
const FIRST_PAGE: i64 = 16;
const LARGEST_PAGE: i64 = 1024;

/// How the database engine connects.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`.
    pub url: String,
    /// Most connections open at once.
    pub pool_size: usize,
    /// How long to wait for a connection (to open one, or for a free one).
    pub connect_timeout: Duration,
    /// Longest a statement may run before the database cancels it.
    pub statement_timeout: Duration,
}

/// The database engine; see the module docs.
pub struct Postgres {
    pool: Pool,
    /// Runs the connections; shut down without waiting when dropped.
    runtime: Option<tokio::runtime::Runtime>,
    display: String,
    /// How long a health probe may take.
    connect_timeout: Duration,
    /// Commits return before their WAL is on disk; [`Engine::durable`]
    /// waits for a group flush ([`flusher`]). `None`: the database cannot
    /// (commits are durable when they return).
    flusher: Option<tokio::sync::mpsc::UnboundedSender<Waiter>>,
    /// Rows held by [`Engine::hold`] now, each on a connection of the pool.
    holds: Arc<AtomicUsize>,
    /// The most holds at once: half the pool, so that the holders' own
    /// commits always find a connection.
    max_holds: usize,
    /// Point reads that callers make at the same moment, read by one
    /// statement (see [`Postgres::read_together`]), on at most a quarter of
    /// the pool's connections at once.
    reads: Batched<Vec<RowKey>, Vec<Option<Bytes>>>,
    /// Point reads asked for, and the statements that read them.
    read_calls: AtomicU64,
    read_statements: AtomicU64,
}

/// A row's table and key, as the `kv` table stores them.
type RowKey = (i16, Vec<u8>);

/// Answered once everything committed before it was queued is durable.
type Waiter = tokio::sync::oneshot::Sender<Result<()>>;

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.pool.close();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Postgres {
    /// Connects, then creates or migrates the schema.
    pub fn open(options: &PostgresOptions) -> Result<Self, OpenError> {
        let display = masked_url(&options.url);
        let failed = |detail: String| OpenError::Engine { path: display.clone(), detail };
        let mut config: tokio_postgres::Config = options.url.parse().map_err(|e| failed(format!("{e}")))?;
        config.connect_timeout(options.connect_timeout);
        config.options(format!("-c statement_timeout={}", options.statement_timeout.as_millis()));
        config.application_name("agentvfs-front");
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("store-postgres")
            .enable_all()
            .build()
            .map_err(OpenError::Thread)?;
        let pool = {
            let _entered = runtime.enter();
            Pool::builder(manager)
                .max_size(options.pool_size.max(1))
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(options.connect_timeout))
                .create_timeout(Some(options.connect_timeout))
                .recycle_timeout(Some(options.connect_timeout))
                .build()
                .map_err(|e| failed(e.to_string()))?
        };
        let mut engine = Self {
            pool,
            runtime: Some(runtime),
            display: display.clone(),
            connect_timeout: options.connect_timeout,
            flusher: None,
            holds: Arc::default(),
            max_holds: (options.pool_size / 2).max(1),
            reads: Batched::new(options.pool_size / 4),
            read_calls: AtomicU64::new(0),
            read_statements: AtomicU64::new(0),
        };
        engine.migrate().map_err(|e| match e {
            Migration::Newer { found } => OpenError::SchemaTooNew { found, supported: MIGRATIONS.len() as i32 },
            Migration::Failed(error) => failed(error.message().to_owned()),
        })?;
        if engine.can_commit_asynchronously() {
            let (waiters, queue) = tokio::sync::mpsc::unbounded_channel();
            let pool = engine.pool.clone();
            engine.runtime.as_ref().map(|runtime| runtime.spawn(flusher(pool, queue)));
            engine.flusher = Some(waiters);
        }
        Ok(engine)
    }

    /// Whether the database lets a transaction commit without waiting for
    /// its WAL to reach disk (PostgreSQL's `synchronous_commit`; other
    /// databases may refuse the setting, and then every commit waits).
    fn can_commit_asynchronously(&self) -> bool {
        self.wait(async {
            let client = self.client().await.ok()?;
            client.batch_execute("BEGIN; SET LOCAL synchronous_commit TO OFF; COMMIT").await.ok()
        })
        .is_some()
    }

    /// Runs `work` on the engine's runtime and waits for it. Any thread may
    /// call it but the thread of a current-thread runtime: on a thread of
    /// the front's runtime it blocks in place, like a blocking store call.
    fn wait<T>(&self, work: impl Future<Output = T>) -> T {
        let handle = self.runtime.as_ref().map(|runtime| runtime.handle().clone());
        let handle = handle.unwrap_or_else(tokio::runtime::Handle::current);
        tokio::task::block_in_place(|| handle.block_on(work))
    }

    async fn client(&self) -> Result<Object> {
        self.pool.get().await.map_err(|error| unavailable(&error.to_string()))
    }

    /// Creates the schema or brings it up to date; refuses one newer than
    /// this build knows.
    fn migrate(&self) -> std::result::Result<(), Migration> {
        self.wait(async {
            let client = self.client().await?;
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS agentvfs_schema \
                     (version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())",
                )
                .await
                .map_err(failure)?;
            loop {
                let row = client.query_one("SELECT coalesce(max(version), 0) FROM agentvfs_schema", &[]).await;
                let found: i32 = row.map_err(failure)?.get(0);
                let Some(migration) = usize::try_from(found).ok().and_then(|n| MIGRATIONS.get(n)) else {
                    return match found > MIGRATIONS.len() as i32 {
                        true => Err(Migration::Newer { found }),
                        false => Ok(()),
                    };
                };
                // A front that starts at the same time may apply it first:
                // then the insert fails and the loop reads the new version.
                client.batch_execute("BEGIN").await.map_err(failure)?;
                let applied = async {
                    client.execute("INSERT INTO agentvfs_schema (version) VALUES ($1)", &[&(found + 1)]).await?;
                    client.batch_execute(migration).await?;
                    client.batch_execute("COMMIT").await
                };
                if let Err(error) = applied.await {
                    let _ = client.batch_execute("ROLLBACK").await;
                    if error.code() != Some(&SqlState::UNIQUE_VIOLATION) {
                        return Err(failure(error).into());
                    }
                }
            }
        })
    }

    /// One page of a range scan.
    async fn page(&self, table: Table, range: &KeyRange, reverse: bool, limit: i64) -> Result<Vec<(Bytes, Bytes)>> {
        let order = if reverse { "DESC" } else { "ASC" };
        let client = self.client().await?;
        let t = table as i16;
        let started = Instant::now();
        let rows = match &range.end {
            Some(end) => {
                let sql =
                    format!("SELECT k, v FROM kv WHERE t = $1 AND k >= $2 AND k < $3 ORDER BY k {order} LIMIT $4");
                let statement = client.prepare_cached(&sql).await.map_err(failure)?;
                client.query(&statement, &[&t, &range.start, end, &limit]).await
            }
            None => {
                let sql = format!("SELECT k, v FROM kv WHERE t = $1 AND k >= $2 ORDER BY k {order} LIMIT $3");
                let statement = client.prepare_cached(&sql).await.map_err(failure)?;
                client.query(&statement, &[&t, &range.start, &limit]).await
            }
        };
        statement_took("scan", started);
        let rows = rows.map_err(failure)?;
        Ok(rows
            .into_iter()
            .map(|row| (Bytes::from(row.get::<_, Vec<u8>>(0)), Bytes::from(row.get::<_, Vec<u8>>(1))))
            .collect())
    }

    /// The rows each of `batches` names, in its order, read by one
    /// statement. Reads that callers make at the same moment come here
    /// together: a statement's round trip and the database's work to start
    /// it cost far more than a row, and one statement reads one snapshot,
    /// taken after every caller asked, so each caller sees every change
    /// committed before its call, as a statement of its own would.
    fn read_together(&self, batches: &[Vec<RowKey>]) -> Result<Vec<Vec<Option<Bytes>>>> {
        let (tables, keys): (Vec<i16>, Vec<&[u8]>) =
            batches.iter().flatten().map(|(table, key)| (*table, key.as_slice())).unzip();
        self.read_statements.fetch_add(1, Ordering::Relaxed);
        let rows = self.wait(async {
            let client = self.client().await?;
            let sql = "SELECT t, k, v FROM kv WHERE (t, k) IN (SELECT * FROM unnest($1::int2[], $2::bytea[]))";
            let statement = client.prepare_cached(sql).await.map_err(failure)?;
            let started = Instant::now();
            let rows = client.query(&statement, &[&tables, &keys]).await;
            statement_took("get", started);
            rows.map_err(failure)
        })?;
        let found: HashMap<(i16, &[u8]), &[u8]> =
            rows.iter().map(|row| ((row.get(0), row.get(1)), row.get(2))).collect();
        Ok(batches
            .iter()
            .map(|batch| {
                batch
                    .iter()
                    .map(|(table, key)| found.get(&(*table, key.as_slice())).map(|v| Bytes::copy_from_slice(v)))
                    .collect()
            })
            .collect())
    }

    /// Runs `work` once in a database transaction; see the module docs.
    fn attempt(&self, work: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> std::result::Result<(), Attempt> {
        let client = self.wait(self.client())?;
        let begin = if self.flusher.is_some() { BEGIN_ASYNCHRONOUS } else { BEGIN };
        let mut tx = PgTx {
            engine: self,
            client: &client,
            begin: Some(begin),
            writes: BTreeMap::new(),
            absent: HashSet::new(),
            read: HashMap::new(),
            failure: None,
        };
        let outcome = match work(&mut tx) {
            Ok(()) => self.wait(tx.commit()),
            Err(error) => Err(tx.failure.take().unwrap_or(Attempt::Failed(error))),
        };
        if outcome.is_err() {
            // A broken connection is dropped by the pool when it is recycled.
            let _ = self.wait(client.batch_execute("ROLLBACK"));
        }
        outcome
    }

    /// Whether the database answers a query through the pool now, within
    /// the connect timeout (a statement on a connection whose peer is gone
    /// could otherwise wait for TCP to give up); why not, when it does not.
    fn probe(&self) -> std::result::Result<(), String> {
        let probe = async {
            let client = self.pool.get().await.map_err(|e| e.to_string())?;
            client.simple_query("SELECT 1").await.map_err(|e| e.to_string())?;
            Ok(())
        };
        let timeout = self.connect_timeout;
        self.wait(async { tokio::time::timeout(timeout, probe).await })
            .unwrap_or_else(|_| Err(format!("the database did not answer within {timeout:?}")))
    }

    /// Gauges of the connection pool, and the retry counter at zero until
    /// the first retry, so that both show in `/metrics` from the start.
    fn record_pool(&self) {
        let status = self.pool.status();
        let in_use = status.size.saturating_sub(status.available);
        metrics::gauge!("agentvfs_store_pool_connections", "state" => "in_use").set(in_use as f64);
        metrics::gauge!("agentvfs_store_pool_connections", "state" => "idle").set(status.available as f64);
        metrics::gauge!("agentvfs_store_pool_max_connections").set(status.max_size as f64);
        metrics::gauge!("agentvfs_store_pool_waiting").set(status.waiting as f64);
        metrics::counter!("agentvfs_store_transaction_retries_total").increment(0);
        let (calls, statements) = self.reads_made();
        metrics::counter!("agentvfs_store_point_reads_total").absolute(calls);
        metrics::counter!("agentvfs_store_read_statements_total").absolute(statements);
    }

    /// Point reads asked for so far, and the statements that read them
    /// (fewer when reads wait together; see [`Postgres::read_together`]).
    fn reads_made(&self) -> (u64, u64) {
        (self.read_calls.load(Ordering::Relaxed), self.read_statements.load(Ordering::Relaxed))
    }
}

impl Engine for Postgres {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.get_many(&[(table, key)])?.pop().flatten())
    }

    fn get_many(&self, keys: &[(Table, &[u8])]) -> Result<Vec<Option<Bytes>>> {
        let wanted = keys.iter().map(|(table, key)| (*table as i16, key.to_vec())).collect();
        self.read_calls.fetch_add(1, Ordering::Relaxed);
        // On a thread of the front's runtime, waiting for the reader in
        // place, as `wait` does.
        tokio::task::block_in_place(|| self.reads.each(wanted, |batches| self.read_together(&batches)))
    }

    fn scan(&self, table: Table, range: KeyRange, reverse: bool) -> Entries<'_> {
        Box::new(Pages { engine: self, table, range, reverse, page: VecDeque::new(), size: FIRST_PAGE, done: false })
    }

    fn scan_snapshot(&self, table: Table, limit: usize) -> Result<Vec<(Bytes, Bytes)>> {
        // One statement reads one snapshot.
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.wait(self.page(table, &KeyRange::from(Vec::new()), false, limit))
    }

    fn transact(&self, work: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        let mut backoff = Duration::from_millis(2);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.attempt(work) {
                Ok(()) => return Ok(()),
                Err(Attempt::Failed(error)) => return Err(error),
                Err(Attempt::Conflict(detail)) if attempt >= MAX_ATTEMPTS => {
                    tracing::warn!(%detail, attempts = attempt, "store transaction kept conflicting");
                    return Err(Error::new(
                        Reason::TransactionConflict,
                        "The change conflicted with concurrent changes too often and was not saved.",
                    ));
                }
                Err(Attempt::Conflict(_)) => {
                    metrics::counter!("agentvfs_store_transaction_retries_total").increment(1);
                    let jitter = fastrand::u64(0..=backoff.as_micros() as u64);
                    std::thread::sleep(Duration::from_micros(backoff.as_micros() as u64 / 2 + jitter / 2));
                    backoff = (backoff * 2).min(Duration::from_millis(250));
                }
            }
        }
    }

    fn durable(&self) -> Durable {
        let Some(flusher) = &self.flusher else {
            // Every commit waited for its WAL to reach disk.
            return Box::pin(std::future::ready(Ok(())));
        };
        let (waiter, answer) = tokio::sync::oneshot::channel();
        let queued = flusher.send(waiter).is_ok();
        Box::pin(async move {
            if !queued {
                return Err(Error::internal("the store's flusher stopped"));
            }
            answer.await.map_err(|_| Error::internal("the store's flusher stopped before answering"))?
        })
    }

    fn check_room(&self, _incoming: u64, _released_chunks: u64) -> Result<()> {
        Ok(())
    }

    fn size_on_disk(&self) -> Result<Option<u64>> {
        // The database's own business, and its metrics'.
        Ok(None)
    }

    fn check_watermark(&self, _watermark: u64) -> Result<(), OpenError> {
        Ok(())
    }

    fn checkpoint(&self, _watermark: u64) -> Result<()> {
        Ok(())
    }

    fn shutdown(&self) -> Result<()> {
        self.pool.close();
        Ok(())
    }

    fn health(&self) -> Health {
        let probed = self.probe();
        // Sampled here, on the health check's beat (every second).
        self.record_pool();
        match probed {
            Ok(()) => Health::Serving,
            Err(detail) => Health::Unavailable(detail),
        }
    }

    /// Any number of fronts may connect to one database.
    fn shared(&self) -> bool {
        true
    }

    fn hold(&self, rows: &[(Table, Vec<u8>)]) -> Result<Held> {
        if self.holds.fetch_add(1, Ordering::AcqRel) >= self.max_holds {
            self.holds.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::new(Reason::TransactionConflict, "Too many changes wait to be planned again at once."));
        }
        let counted = Counted(self.holds.clone());
        let tables: Vec<i16> = rows.iter().map(|(table, _)| *table as i16).collect();
        let keyed: Vec<&[u8]> = rows.iter().map(|(_, key)| key.as_slice()).collect();
        let client = self.wait(async {
            let client = self.client().await?;
            let make = "INSERT INTO kv (t, k, v) SELECT t, k, ''::bytea FROM unnest($1::int2[], $2::bytea[]) AS r(t, k) \
                        ON CONFLICT DO NOTHING";
            let lock = "SELECT k FROM kv WHERE (t, k) IN (SELECT * FROM unnest($1::int2[], $2::bytea[])) \
                        ORDER BY t, k FOR UPDATE";
            let (make, lock) = tokio::try_join!(client.prepare_cached(make), client.prepare_cached(lock))
                .map_err(|error| unavailable(&error.to_string()))?;
            let params: [&(dyn ToSql + Sync); 2] = [&tables, &keyed];
            let started = Instant::now();
            // One round trip: the missing rows made (a transaction of their
            // own), then the lock taken in the transaction that holds it.
            let made = tokio::try_join!(
                client.execute(&make, &params),
                client.batch_execute(BEGIN),
                client.query(&lock, &params)
            );
            statement_took("hold", started);
            match made {
                Ok(_) => Ok(client),
                Err(error) => {
                    // Perhaps inside a failed transaction: not for reuse.
                    drop(Object::take(client));
                    Err(match failure(error) {
                        Attempt::Failed(error) => error,
                        Attempt::Conflict(detail) => Error::new(
                            Reason::TransactionConflict,
                            format!("Holding rows for a change conflicted: {detail}"),
                        ),
                    })
                }
            }
        })?;
        let handle = self.runtime.as_ref().map_or_else(tokio::runtime::Handle::current, |r| r.handle().clone());
        Ok(Box::new(Hold { client: Some(client), handle, counted: Some(counted) }))
    }
}

/// Rows locked by [`Engine::hold`]: the open transaction that locked them.
struct Hold {
    client: Option<Object>,
    handle: tokio::runtime::Handle,
    counted: Option<Counted>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        // Released without waiting; the connection goes back to the pool
        // once its transaction has ended (a broken one is dropped, which
        // ends it too), and only then does the hold stop counting.
        if let (Some(client), counted) = (self.client.take(), self.counted.take()) {
            self.handle.spawn(async move {
                if client.batch_execute("ROLLBACK").await.is_err() {
                    drop(Object::take(client));
                }
                drop(counted);
            });
        }
    }
}

/// One of [`Postgres::holds`], until dropped.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why one run of a transaction ended without committing.
enum Attempt {
    /// Another transaction got in the way: run it again.
    Conflict(String),
    Failed(Error),
}

impl From<Error> for Attempt {
    fn from(error: Error) -> Self {
        Attempt::Failed(error)
    }
}

enum Migration {
    Newer { found: i32 },
    Failed(Error),
}

impl From<Attempt> for Migration {
    fn from(attempt: Attempt) -> Self {
        match attempt {
            Attempt::Conflict(detail) => Migration::Failed(Error::internal(detail)),
            Attempt::Failed(error) => Migration::Failed(error),
        }
    }
}

impl From<Error> for Migration {
    fn from(error: Error) -> Self {
        Migration::Failed(error)
    }
}

/// Makes commits durable in groups: answers every waiter queued when a
/// flush starts once one synchronous commit, which flushes the WAL up to
/// itself and so every commit before it, is done. The commit rewrites a row
/// of this front's own, so fronts do not contend on it.
async fn flusher(pool: Pool, mut queue: tokio::sync::mpsc::UnboundedReceiver<Waiter>) {
    let key = format!("flush.{:032x}", fastrand::u128(..)).into_bytes();
    while let Some(first) = queue.recv().await {
        let mut waiters = vec![first];
        while let Ok(next) = queue.try_recv() {
            waiters.push(next);
        }
        let started = Instant::now();
        let flushed = async {
            let client = pool.get().await.map_err(|error| unavailable(&error.to_string()))?;
            let statement = client.prepare_cached(UPSERT).await.map_err(failure)?;
            let params: [&(dyn ToSql + Sync); 3] = [&vec![Table::Meta as i16], &vec![key.as_slice()], &vec![&b""[..]]];
            client.execute(&statement, &params).await.map_err(failure)?;
            Ok::<_, Attempt>(())
        }
        .await
        .map_err(Error::from);
        statement_took("flush", started);
        metrics::histogram!("agentvfs_flush_batch_writers").record(waiters.len() as f64);
        for waiter in waiters {
            let _ = waiter.send(flushed.clone());
        }
    }
}

/// What a database error means for the call.
fn failure(error: tokio_postgres::Error) -> Attempt {
    let Some(code) = error.code() else {
        // No answer from the database: a closed connection, a timeout.
        return Attempt::Failed(unavailable(&error.to_string()));
    };
    if [SqlState::T_R_SERIALIZATION_FAILURE, SqlState::T_R_DEADLOCK_DETECTED, SqlState::UNIQUE_VIOLATION].contains(code)
    {
        return Attempt::Conflict(error.to_string());
    }
    let class = &code.code()[..2];
    // 08: connection exceptions; 57: cancelled (the statement timeout), shut down, cannot connect now.
    if class == "08" || class == "57" || *code == SqlState::TOO_MANY_CONNECTIONS {
        return Attempt::Failed(unavailable(&error.to_string()));
    }
    Attempt::Failed(Error::internal(format!("database: {error}")))
}

impl From<Attempt> for Error {
    fn from(attempt: Attempt) -> Error {
        match attempt {
            Attempt::Failed(error) => error,
            Attempt::Conflict(detail) => Error::internal(format!("database conflict outside a transaction: {detail}")),
        }
    }
}

fn unavailable(detail: &str) -> Error {
    tracing::warn!(%detail, "the database did not answer");
    Error::new(Reason::StoreUnavailable, "The server's database is not reachable right now; nothing was changed.")
}

fn statement_took(kind: &'static str, started: Instant) {
    metrics::histogram!("agentvfs_store_statement_seconds", "statement" => kind)
        .record(started.elapsed().as_secs_f64());
}

/// `url` with its password replaced by `***`, for logs and `--print-config`.
pub fn masked_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some((credentials, host)) = rest.rsplit_once('@') else { return url.to_owned() };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// A transaction's connection and buffered writes.
struct PgTx<'a> {
    engine: &'a Postgres,
    client: &'a Object,
    /// The statement that begins the transaction, until it is sent: with the
    /// transaction's first statement, in the same round trip.
    begin: Option<&'static str>,
    /// Writes by table and key, sent at commit (`None` deletes).
    writes: BTreeMap<(Table, Vec<u8>), Option<Vec<u8>>>,
    /// Keys the transaction found missing: they are inserted, never upserted.
    absent: HashSet<(Table, Vec<u8>)>,
    /// Rows read (and locked) ahead, by [`Tx::read_ahead`].
    read: HashMap<(Table, Vec<u8>), Option<Bytes>>,
    /// Why a statement failed, when `work` returns with it.
    failure: Option<Attempt>,
}

/// Begins the transaction with `begin`, unless it has begun.
async fn begin_if(client: &Object, begin: Option<&str>) -> std::result::Result<(), tokio_postgres::Error> {
    match begin {
        Some(begin) => client.batch_execute(begin).await,
        None => Ok(()),
    }
}

/// Runs `statement`, when there is one, with `params`.
async fn execute_if(
    client: &Object,
    statement: Option<tokio_postgres::Statement>,
    params: &[&(dyn ToSql + Sync)],
) -> std::result::Result<(), tokio_postgres::Error> {
    match statement {
        Some(statement) => client.execute(&statement, params).await.map(drop),
        None => Ok(()),
    }
}

/// The statements a commit sends.
const DELETE: &str = "DELETE FROM kv WHERE (t, k) IN (SELECT * FROM unnest($1::int2[], $2::bytea[]))";
const INSERT: &str = "INSERT INTO kv (t, k, v) SELECT * FROM unnest($1::int2[], $2::bytea[], $3::bytea[])";
const UPSERT: &str = "INSERT INTO kv (t, k, v) SELECT * FROM unnest($1::int2[], $2::bytea[], $3::bytea[]) \
                      ON CONFLICT (t, k) DO UPDATE SET v = excluded.v";

impl PgTx<'_> {
    async fn commit(self) -> std::result::Result<(), Attempt> {
        let (mut delete_t, mut delete_k) = (Vec::new(), Vec::new());
        let mut insert = (Vec::new(), Vec::new(), Vec::new());
        let mut upsert = (Vec::new(), Vec::new(), Vec::new());
        for ((table, key), value) in &self.writes {
            let t = *table as i16;
            match value {
                None => {
                    delete_t.push(t);
                    delete_k.push(key.as_slice());
                }
                Some(value) => {
                    let target = if self.absent.contains(&(*table, key.clone())) { &mut insert } else { &mut upsert };
                    target.0.push(t);
                    target.1.push(key.as_slice());
                    target.2.push(value.as_slice());
                }
            }
        }
        // Prepared first (once per connection), so that the statements below
        // go out in order, one round trip for all of them.
        let client = self.client;
        let prepare = |sql: &'static str, needed: bool| async move {
            match needed {
                true => client.prepare_cached(sql).await.map(Some),
                false => Ok(None),
            }
        };
        let (delete, insert_new, upsert_any) = tokio::try_join!(
            prepare(DELETE, !delete_t.is_empty()),
            prepare(INSERT, !insert.0.is_empty()),
            prepare(UPSERT, !upsert.0.is_empty()),
        )
        .map_err(failure)?;
        let started = Instant::now();
        let delete_params: [&(dyn ToSql + Sync); 2] = [&delete_t, &delete_k];
        let insert_params: [&(dyn ToSql + Sync); 3] = [&insert.0, &insert.1, &insert.2];
        let upsert_params: [&(dyn ToSql + Sync); 3] = [&upsert.0, &upsert.1, &upsert.2];
        let results = tokio::join!(
            begin_if(client, self.begin),
            execute_if(client, delete, &delete_params),
            execute_if(client, insert_new, &insert_params),
            execute_if(client, upsert_any, &upsert_params),
            client.batch_execute("COMMIT"),
        );
        statement_took("commit", started);
        // The first failure is the cause: after it the transaction is
        // aborted, later statements fail for that, and COMMIT rolls back.
        results.0.and(results.1).and(results.2).and(results.3).and(results.4).map_err(failure)
    }

    fn fail(&mut self, attempt: Attempt) -> Error {
        let error = match &attempt {
            Attempt::Conflict(detail) => Error::internal(format!("database conflict: {detail}")),
            Attempt::Failed(error) => error.clone(),
        };
        self.failure = Some(attempt);
        error
    }
}

impl Tx for PgTx<'_> {
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        if let Some(value) = self.writes.get(&(table, key.to_vec())) {
            return Ok(value.clone().map(Bytes::from));
        }
        if let Some(value) = self.read.get(&(table, key.to_vec())) {
            return Ok(value.clone());
        }
        let (client, begin) = (self.client, self.begin.take());
        let read = self.engine.wait(async {
            let sql = "SELECT v FROM kv WHERE t = $1 AND k = $2 FOR UPDATE";
            let statement = client.prepare_cached(sql).await.map_err(failure)?;
            let started = Instant::now();
            let begun = begin_if(client, begin);
            let t = table as i16;
            let params: [&(dyn ToSql + Sync); 2] = [&t, &key];
            let (begun, row) = tokio::join!(begun, client.query_opt(&statement, &params));
            statement_took("lock", started);
            begun.map_err(failure)?;
            row.map_err(failure)
        });
        match read {
            Ok(Some(row)) => Ok(Some(Bytes::from(row.get::<_, Vec<u8>>(0)))),
            Ok(None) => {
                self.absent.insert((table, key.to_vec()));
                Ok(None)
            }
            Err(attempt) => Err(self.fail(attempt)),
        }
    }

    fn read_ahead(&mut self, keys: &[(Table, Vec<u8>)]) -> Result<()> {
        let tables: Vec<i16> = keys.iter().map(|(table, _)| *table as i16).collect();
        let keyed: Vec<&[u8]> = keys.iter().map(|(_, key)| key.as_slice()).collect();
        let (client, begin) = (self.client, self.begin.take());
        let rows = self.engine.wait(async {
            let sql = "SELECT t, k, v FROM kv WHERE (t, k) IN (SELECT * FROM unnest($1::int2[], $2::bytea[])) \
                 ORDER BY t, k FOR UPDATE";
            let statement = client.prepare_cached(sql).await.map_err(failure)?;
            let started = Instant::now();
            let begun = begin_if(client, begin);
            let params: [&(dyn ToSql + Sync); 2] = [&tables, &keyed];
            let (begun, rows) = tokio::join!(begun, client.query(&statement, &params));
            statement_took("lock", started);
            begun.map_err(failure)?;
            rows.map_err(failure)
        });
        let rows = match rows {
            Ok(rows) => rows,
            Err(attempt) => return Err(self.fail(attempt)),
        };
        for (table, key) in keys {
            self.read.insert((*table, key.clone()), None);
        }
        for row in rows {
            let (t, key): (i16, Vec<u8>) = (row.get(0), row.get(1));
            if let Some((table, _)) = keys.iter().find(|(table, wanted)| *table as i16 == t && *wanted == key) {
                self.read.insert((*table, key), Some(Bytes::from(row.get::<_, Vec<u8>>(2))));
            }
        }
        for (table, key) in keys {
            if self.read.get(&(*table, key.clone())) == Some(&None) {
                self.absent.insert((*table, key.clone()));
            }
        }
        Ok(())
    }

    fn scan_prefix(&mut self, table: Table, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>> {
        let range = KeyRange::prefix(prefix);
        let (client, begin) = (self.client, self.begin.take());
        let rows = self.engine.wait(async {
            let t = table as i16;
            let (sql, params): (_, Vec<&(dyn ToSql + Sync)>) = match &range.end {
                Some(end) => {
                    ("SELECT k, v FROM kv WHERE t = $1 AND k >= $2 AND k < $3 ORDER BY k", vec![&t, &range.start, end])
                }
                // The prefix is all 0xff bytes: every key from it on has it.
                None => ("SELECT k, v FROM kv WHERE t = $1 AND k >= $2 ORDER BY k", vec![&t, &range.start]),
            };
            let statement = client.prepare_cached(sql).await.map_err(failure)?;
            let started = Instant::now();
            let begun = begin_if(client, begin);
            let (begun, rows) = tokio::join!(begun, client.query(&statement, &params));
            statement_took("scan", started);
            begun.map_err(failure)?;
            rows.map_err(failure)
        });
        match rows {
            Ok(rows) => Ok(rows
                .into_iter()
                .map(|row| (Bytes::from(row.get::<_, Vec<u8>>(0)), Bytes::from(row.get::<_, Vec<u8>>(1))))
                .collect()),
            Err(attempt) => Err(self.fail(attempt)),
        }
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.writes.insert((table, key.to_vec()), Some(value.to_vec()));
        Ok(())
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<()> {
        self.writes.insert((table, key.to_vec()), None);
        Ok(())
    }
}

/// A range scan read a page at a time.
struct Pages<'a> {
    engine: &'a Postgres,
    table: Table,
    /// What is left to read.
    range: KeyRange,
    reverse: bool,
    page: VecDeque<(Bytes, Bytes)>,
    size: i64,
    done: bool,
}

impl Iterator for Pages<'_> {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.page.is_empty() && !self.done {
            let page = match self.engine.wait(self.engine.page(self.table, &self.range, self.reverse, self.size)) {
                Ok(page) => page,
                Err(error) => {
                    self.done = true;
                    return Some(Err(error));
                }
            };
            self.done = (page.len() as i64) < self.size;
            if let Some((last, _)) = page.last() {
                if self.reverse {
                    self.range.end = Some(last.to_vec());
                } else {
                    let mut after = last.to_vec();
                    after.push(0);
                    self.range.start = after;
                }
            }
            self.size = (self.size * 4).min(LARGEST_PAGE);
            self.page = page.into();
        }
        self.page.pop_front().map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine of four connections on a database of its own.
    fn on_a_new_database() -> Postgres {
        let options = PostgresOptions {
            url: agentvfs_testdb::Cluster::shared().create_database(),
            pool_size: 4,
            connect_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(30),
        };
        Postgres::open(&options).unwrap()
    }

    #[test]
    fn point_reads_made_at_once_share_a_statement_and_each_gets_its_own_rows() {
        let engine = on_a_new_database();
        let key = |thread: u32, n: u32| format!("row.{thread}.{n}").into_bytes();
        engine
            .transact(&mut |tx| {
                for (thread, n) in (0..16).flat_map(|thread| (0..40).map(move |n| (thread, n))) {
                    // Every other row exists; the rest read as missing.
                    if n % 2 == 0 {
                        tx.put(Table::Meta, &key(thread, n), format!("value {thread} {n}").as_bytes())?;
                    }
                }
                Ok(())
            })
            .unwrap();
        let (calls_before, statements_before) = engine.reads_made();
        std::thread::scope(|scope| {
            for thread in 0..16 {
                let (engine, key) = (&engine, &key);
                scope.spawn(move || {
                    for n in (0..40).step_by(2) {
                        let (present, missing) = (key(thread, n), key(thread, n + 1));
                        let found = engine.get_many(&[(Table::Meta, &present), (Table::Meta, &missing)]).unwrap();
                        let expected = format!("value {thread} {n}");
                        assert_eq!(found, vec![Some(Bytes::from(expected.clone())), None]);
                        let alone = engine.get(Table::Meta, &present).unwrap();
                        assert_eq!(alone, Some(Bytes::from(expected)));
                    }
                });
            }
        });
        let (calls, statements) = engine.reads_made();
        let (calls, statements) = (calls - calls_before, statements - statements_before);
        assert_eq!(calls, 16 * 20 * 2);
        assert!(statements * 2 <= calls, "{statements} statements for {calls} reads");
    }

    #[test]
    fn holds_lock_their_rows_and_leave_the_pool_room_for_commits() {
        let engine = on_a_new_database();
        let row = |key: &[u8]| vec![(Table::Meta, key.to_vec())];
        let first = engine.hold(&row(b"gate.a")).unwrap();
        let second = engine.hold(&row(b"gate.b")).unwrap();
        // Half the pool at most: the rest is for the holders' commits.
        let refused = engine.hold(&row(b"gate.c")).map(drop).unwrap_err();
        assert_eq!(refused.reason, Reason::TransactionConflict);
        // A transaction that locks a held row waits until it is released.
        let (locked, waiting) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                engine
                    .transact(&mut |tx| {
                        tx.read_ahead(&row(b"gate.a"))?;
                        tx.put(Table::Meta, b"after.a", b"")
                    })
                    .unwrap();
                locked.send(()).unwrap();
            });
            let waited = waiting.recv_timeout(Duration::from_millis(300));
            assert!(waited.is_err(), "locked a held row");
            drop(first);
            waiting.recv_timeout(Duration::from_secs(10)).expect("the row was released");
        });
        drop(second);
        // Released holds stop counting once their transactions have ended.
        let deadline = Instant::now() + Duration::from_secs(10);
        let third = loop {
            match engine.hold(&row(b"gate.c")) {
                Ok(held) => break held,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Err(error) => panic!("{error}"),
            }
        };
        drop(third);
    }

    #[test]
    fn passwords_are_masked() {
        assert_eq!(masked_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(masked_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(masked_url("postgres://u:p@ss@h/db"), "postgres://u:***@h/db");
    }
}
