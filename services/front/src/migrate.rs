//! `agentvfs-front migrate`: copies a stopped embedded store into an empty
//! database (SPEC §10, "Moving up"), then checks the copy by opening the
//! database as a store and reading every version back.
//!
//! The copy goes table by table, in batches of a few hundred rows (or a few
//! MiB) per database transaction, so memory stays bounded whatever the
//! store's size; each batch is read back and compared byte for byte once
//! committed. Keys and values are copied as they are: the store's schema
//! ([`crate::store::keys`]) is the same on both engines.
//!
//! A database that holds any row is refused, so two stores are never mixed.
//! The copy claims the database with a marker row first and writes the
//! store's format mark last, in the transaction that removes the marker:
//! until then a front refuses to open the database (it holds rows but no
//! format mark), and a second copy into it refuses too.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prost::bytes::Bytes;

use crate::error::Error;
use crate::ids::{NodeId, SpaceId};
use crate::store::engine::{Engine, KeyRange, Table};
use crate::store::{
    Durability, OpenError, Postgres, PostgresOptions, SledEngine, SledOptions, Store, StoreLimits, VersionRecord, keys,
    masked_url,
};

/// The store's format mark in `meta` (see [`crate::store::keys`]).
const FORMAT_KEY: &[u8] = b"format";
/// Marks a database a copy is writing into; removed when it completes.
const MARKER_KEY: &[u8] = b"migrate.incomplete";
/// Rows, and bytes, copied per database transaction at most.
const BATCH_ROWS: usize = 500;
const BATCH_BYTES: usize = 4 << 20;
/// Content chunks read per step while a version is checked.
const VERIFY_RUN: u32 = 16;
/// Memory for caching either store: the copy reads each row once.
const CACHE_BYTES: u64 = 16 << 20;
/// How often progress is printed while one table is copied.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// The flags of `agentvfs-front migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateOptions {
    /// Data directory of the embedded store to copy; no front may be running on it.
    #[arg(long, value_name = "DIR")]
    pub from_data_dir: PathBuf,
    /// The empty database to copy it into:
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`.
    #[arg(
        long,
        value_name = "URL",
        required_unless_present = "to_database_url_file",
        conflicts_with = "to_database_url_file"
    )]
    pub to_database_url: Option<String>,
    /// File holding the database URL (a mounted Kubernetes Secret).
    #[arg(long, value_name = "PATH")]
    pub to_database_url_file: Option<PathBuf>,
}

/// Why the migration did not complete; the message is printed as is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MigrateError(pub String);

/// Runs the migration `options` describe, printing progress to stdout.
/// Blocks; call it outside any async runtime.
pub fn run(options: &MigrateOptions) -> Result<(), MigrateError> {
    let url = match (&options.to_database_url, &options.to_database_url_file) {
        (Some(url), None) => url.clone(),
        (None, Some(path)) => crate::config::read_database_url(path).map_err(|e| MigrateError(e.0))?,
        _ => return Err(MigrateError("give --to-database-url or --to-database-url-file, one of them".to_owned())),
    };
    let shown = masked_url(&url);
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(MigrateError(format!(
            "the database URL must start with postgres:// or postgresql://, not {shown:?}"
        )));
    }
    let database = PostgresOptions {
        url,
        pool_size: 2,
        connect_timeout: Duration::from_secs(10),
        // A batch of a few MiB may take a while on a slow link.
        statement_timeout: Duration::from_secs(300),
    };
    let started = Instant::now();
    let dir = &options.from_data_dir;
    println!("migrating the store in {} to {shown}", dir.display());
    check_source(dir)?;
    let target = Postgres::open(&database).map_err(|e| MigrateError(format!("cannot open the database: {e}")))?;
    refuse_non_empty(&target, &shown)?;
    let source = open_source(dir)?;
    claim(&target, &shown)?;
    let mut copy =
        Transfer { source: &source, target: &target, started, live_spaces: HashSet::new(), counts: Counts::default() };
    copy.all().map_err(|e| interrupted(&e, &database.url, copy.counts.rows))?;
    let counts = copy.counts;
    drop(source);
    println!(
        "copied {} rows ({}) from {} tables in {:.1} s",
        counts.rows,
        mib(counts.bytes),
        Table::ALL.len(),
        started.elapsed().as_secs_f64()
    );
    durable(&target).map_err(|e| interrupted(&e, &database.url, counts.rows))?;
    let verified = verify(&target, &database, &counts, started)?;
    println!(
        "done: {} spaces, {} versions and {} contents copied and verified ({} rows, {}) in {:.1} s; \
         run agentvfs-front with --database-url on it now",
        verified.spaces,
        verified.versions,
        verified.contents,
        counts.rows,
        mib(counts.bytes),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Opens the embedded store in `dir` for reading, refusing one that is
/// missing, in use or damaged.
///
/// It is opened as a store first, and closed: that makes every check a
/// front makes at start (format, seal) and finishes what a front finishes
/// at start (purges of deleted spaces, abandoned uploads), so the copy holds
/// nothing the database's first front would have to clean up.
fn open_source(dir: &Path) -> Result<SledEngine, MigrateError> {
    let shown = dir.display();
    let refused = |error: OpenError| MigrateError(format!("cannot open the store in {shown}: {error}"));
    let store = Store::open(dir, Durability::Group, limits()).map_err(&refused)?;
    store.close().map_err(|e| MigrateError(format!("cannot close the store in {shown}: {e}")))?;
    drop(store);
    let options = SledOptions { durability: Durability::Group, cache_bytes: CACHE_BYTES, min_free_bytes: 0 };
    SledEngine::open(dir, options).map_err(&refused)
}

/// Refuses, before anything is opened, a data directory that holds no
/// embedded store (opening one would create it) or whose store another
/// process has open (sled holds an exclusive lock on its `db` file while it
/// runs).
fn check_source(dir: &Path) -> Result<(), MigrateError> {
    if !dir.join("db").is_file() {
        return Err(MigrateError(format!(
            "{} holds no embedded store (there is no file {}); give the --data-dir of the front to move",
            dir.display(),
            dir.join("db").display()
        )));
    }
    let file = std::fs::File::open(dir.join("db"))
        .map_err(|e| MigrateError(format!("cannot read {}/db: {e}", dir.display())))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        // Closing the file releases the lock.
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(MigrateError(format!(
            "the store in {} is in use by another process (a running agentvfs-front?); stop it, then run migrate \
             again",
            dir.display()
        ))),
        Err(error) => Err(MigrateError(format!("cannot check whether {}/db is in use: {error}", dir.display()))),
    }
}

/// Refuses a database that holds any row of any table.
fn refuse_non_empty(target: &Postgres, shown: &str) -> Result<(), MigrateError> {
    if target.get(Table::Meta, MARKER_KEY).map_err(|e| database_error(&e))?.is_some() {
        return Err(MigrateError(format!(
            "the database {shown} holds part of a store from a migration that did not complete (or is running now); \
             drop and recreate the database, then run migrate again"
        )));
    }
    for table in Table::ALL {
        if target
            .scan(table, KeyRange::from(Vec::new()), false)
            .next()
            .transpose()
            .map_err(|e| database_error(&e))?
            .is_some()
        {
            return Err(MigrateError(format!(
                "the database {shown} is not empty (its table {} has rows): migrate copies a store only into an \
                 empty database, never mixing two stores; give a new database, or drop and recreate this one if \
                 nothing in it is needed",
                table.name()
            )));
        }
    }
    Ok(())
}

/// Marks the database as being written into; refuses one another copy
/// marked first (the marker row is inserted, so of two copies that both
/// found it missing, one fails and reads it again).
fn claim(target: &Postgres, shown: &str) -> Result<(), MigrateError> {
    let mut taken = false;
    target
        .transact(&mut |tx| {
            taken = tx.get(Table::Meta, MARKER_KEY)?.is_some();
            if !taken {
                tx.put(Table::Meta, MARKER_KEY, b"")?;
            }
            Ok(())
        })
        .map_err(|e| database_error(&e))?;
    if taken {
        return Err(MigrateError(format!("another migration into {shown} started at the same time; let it finish")));
    }
    Ok(())
}

/// Rows and bytes copied, and what the source holds, for the verification.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    rows: u64,
    bytes: u64,
    spaces: u64,
    versions: u64,
    contents: u64,
    /// Contents whose size record was read back from the database.
    contents_read_back: u64,
}

/// One copy, table by table.
struct Transfer<'a> {
    source: &'a SledEngine,
    target: &'a Postgres,
    started: Instant,
    /// Spaces with a record: versions of any other space (a deletion whose
    /// purge has not finished) are purged by the first store that opens.
    live_spaces: HashSet<[u8; 16]>,
    counts: Counts,
}

impl Transfer<'_> {
    /// Copies every table: `spaces` first (a front refuses rows without a
    /// format mark), `meta` last, its format mark in the final transaction.
    fn all(&mut self) -> Result<(), Error> {
        for table in Table::ALL.into_iter().filter(|&t| t != Table::Meta).chain([Table::Meta]) {
            self.table(table)?;
        }
        let format = self.source.get(Table::Meta, FORMAT_KEY)?.unwrap_or_default();
        let mut opened = false;
        self.target.transact(&mut |tx| {
            opened = tx.get(Table::Meta, FORMAT_KEY)?.is_some();
            if !opened {
                tx.put(Table::Meta, FORMAT_KEY, &format)?;
                tx.delete(Table::Meta, MARKER_KEY)?;
            }
            Ok(())
        })?;
        if opened {
            return Err(Error::internal("a front opened the database while the store was being copied into it"));
        }
        self.check_batch(&[(Bytes::from_static(FORMAT_KEY), format)], Table::Meta)?;
        self.counts.rows += 1;
        Ok(())
    }

    fn table(&mut self, table: Table) -> Result<(), Error> {
        let (rows_before, bytes_before) = (self.counts.rows, self.counts.bytes);
        let mut last_report = Instant::now();
        let mut batch: Vec<(Bytes, Bytes)> = Vec::with_capacity(BATCH_ROWS);
        let mut batch_bytes = 0;
        for item in self.source.scan(table, KeyRange::from(Vec::new()), false) {
            let (key, value) = item?;
            if table == Table::Meta && key.as_ref() == FORMAT_KEY {
                continue;
            }
            self.count(table, &key);
            batch_bytes += key.len() + value.len();
            batch.push((key, value));
            if batch.len() >= BATCH_ROWS || batch_bytes >= BATCH_BYTES {
                self.write(table, &mut batch)?;
                batch_bytes = 0;
                if last_report.elapsed() >= PROGRESS_EVERY {
                    last_report = Instant::now();
                    println!(
                        "  copying {}: {} rows ({}) so far, {:.1} s",
                        table.name(),
                        self.counts.rows - rows_before,
                        mib(self.counts.bytes - bytes_before),
                        self.started.elapsed().as_secs_f64()
                    );
                }
            }
        }
        self.write(table, &mut batch)?;
        println!(
            "copied {}: {} rows ({}), {:.1} s",
            table.name(),
            self.counts.rows - rows_before,
            mib(self.counts.bytes - bytes_before),
            self.started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Counts what the verification expects to find of `key`.
    fn count(&mut self, table: Table, key: &[u8]) {
        match table {
            Table::Spaces if key.len() == 17 && key[0] == b's' => {
                if let Ok(id) = <[u8; 16]>::try_from(&key[1..]) {
                    self.live_spaces.insert(id);
                    self.counts.spaces += 1;
                }
            }
            Table::Versions if key.get(..16).is_some_and(|space| self.live_spaces.contains(space)) => {
                self.counts.versions += 1;
            }
            Table::Content if is_content_meta(key) => self.counts.contents += 1,
            _ => {}
        }
    }

    /// Writes `batch` in one transaction, reads it back, and empties it.
    fn write(&mut self, table: Table, batch: &mut Vec<(Bytes, Bytes)>) -> Result<(), Error> {
        if batch.is_empty() {
            return Ok(());
        }
        self.target.transact(&mut |tx| batch.iter().try_for_each(|(key, value)| tx.put(table, key, value)))?;
        self.check_batch(batch, table)?;
        self.counts.rows += batch.len() as u64;
        self.counts.bytes += batch.iter().map(|(key, value)| (key.len() + value.len()) as u64).sum::<u64>();
        batch.clear();
        Ok(())
    }

    /// Reads `batch` back from the database: every row must be there, byte
    /// for byte.
    fn check_batch(&mut self, batch: &[(Bytes, Bytes)], table: Table) -> Result<(), Error> {
        let keys: Vec<(Table, &[u8])> = batch.iter().map(|(key, _)| (table, key.as_ref())).collect();
        let found = self.target.get_many(&keys)?;
        for ((key, value), found) in batch.iter().zip(found) {
            if table == Table::Content && is_content_meta(key) && found.is_some() {
                self.counts.contents_read_back += 1;
            }
            if found.as_ref() != Some(value) {
                return Err(Error::internal(format!(
                    "a row of table {} read back from the database differs from the one written (key {})",
                    table.name(),
                    hex(key)
                )));
            }
        }
        Ok(())
    }
}

/// What the verification read back.
struct Verified {
    spaces: u64,
    versions: u64,
    contents: u64,
}

/// Opens the database as a store and reads every version of every space
/// back: its record through the store, its content hashed again.
fn verify(
    target: &Postgres,
    database: &PostgresOptions,
    expected: &Counts,
    started: Instant,
) -> Result<Verified, MigrateError> {
    let failed = |what: String| {
        MigrateError(format!(
            "the copy does not check out: {what}; drop and recreate the database, then run migrate again"
        ))
    };
    let store = Store::connect(database, limits())
        .map_err(|e| failed(format!("the database does not open as a store: {e}")))?;
    let read = |e: Error| failed(format!("reading it back failed: {e}"));
    let spaces = store.spaces_by_name(None).try_fold(0u64, |n, space| space.map(|_| n + 1)).map_err(read)?;
    if spaces != expected.spaces {
        return Err(failed(format!("{spaces} spaces, where the embedded store has {}", expected.spaces)));
    }
    let mut versions = 0u64;
    let mut last_report = Instant::now();
    for item in target.scan(Table::Versions, KeyRange::from(Vec::new()), false) {
        let (key, raw) = item.map_err(read)?;
        verify_version(&store, &key, &raw).map_err(|e| failed(format!("version {}: {e}", hex(&key))))?;
        versions += 1;
        if last_report.elapsed() >= PROGRESS_EVERY {
            last_report = Instant::now();
            println!("  verifying: {versions} versions so far, {:.1} s", started.elapsed().as_secs_f64());
        }
    }
    if versions != expected.versions {
        return Err(failed(format!("{versions} versions, where the embedded store has {}", expected.versions)));
    }
    // Counted as each batch was read back, rather than by scanning the
    // content again (its chunks come in pages of up to 64 MiB).
    let contents = expected.contents_read_back;
    if contents != expected.contents {
        return Err(failed(format!("{contents} contents, where the embedded store has {}", expected.contents)));
    }
    store.close().map_err(read)?;
    println!(
        "verified {spaces} spaces, {versions} versions (every content hashed again), {contents} contents, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(Verified { spaces, versions, contents })
}

/// Reads one version back through the store, and its content to the end:
/// its size and BLAKE3 hash must be the version's.
fn verify_version(store: &Store, key: &[u8], raw: &[u8]) -> Result<(), Error> {
    let id = |range: std::ops::Range<usize>| {
        key.get(range)
            .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok())
            .ok_or_else(|| Error::internal("malformed version key"))
    };
    let (space, node) = (SpaceId::from_bytes(id(0..16)?), NodeId::from_bytes(id(16..32)?));
    let number = keys::parse_version_number(key)?;
    let record = store.version(space, node, number)?.ok_or_else(|| Error::internal("the store does not find it"))?;
    if crate::store::records::decode::<VersionRecord>(raw)? != record {
        return Err(Error::internal("the store reads another record than the one stored"));
    }
    let mut reader = store.content_reader(record.hash)?;
    let mut hasher = blake3::Hasher::new();
    let mut size = 0u64;
    loop {
        for chunk in store.read_content_run(&mut reader, VERIFY_RUN)? {
            size += chunk.len() as u64;
            hasher.update(&chunk);
        }
        if reader.finished() {
            break;
        }
    }
    if size != record.size || *hasher.finalize().as_bytes() != record.hash.0 {
        return Err(Error::internal("its content does not have its size and hash"));
    }
    Ok(())
}

/// The stores' limits, with a small cache.
fn limits() -> StoreLimits {
    StoreLimits { cache_bytes: CACHE_BYTES, ..StoreLimits::default() }
}

/// Waits until everything committed to the database is durable.
fn durable(target: &Postgres) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal(format!("cannot start a runtime: {e}")))?;
    runtime.block_on(target.durable())
}

/// The error of a copy that stopped after writing some of the store.
fn interrupted(error: &Error, url: &str, rows: u64) -> MigrateError {
    let name = url.parse::<tokio_postgres::Config>().ok().and_then(|c| c.get_dbname().map(str::to_owned));
    let recreate = match name {
        Some(name) => format!("drop and recreate the database (DROP DATABASE \"{name}\"; CREATE DATABASE \"{name}\")"),
        None => "drop and recreate the database".to_owned(),
    };
    MigrateError(format!(
        "the copy stopped after {rows} rows: {error}. The database now holds part of the store, and fronts and \
         migrate refuse it: {recreate}, then run migrate again"
    ))
}

fn database_error(error: &Error) -> MigrateError {
    MigrateError(format!("cannot read the database: {error}"))
}

/// Whether a `content` key is a content's size record (`hash m`): one per
/// stored content.
fn is_content_meta(key: &[u8]) -> bool {
    key.len() == 33 && key[32] == b'm'
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
