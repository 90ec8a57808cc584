//! The seal: a small file beside sled's own that records how many changes
//! the store had made durable, so that a damaged store is refused rather
//! than served with changes silently missing.
//!
//! sled recovers from a torn tail by dropping what follows the first bad
//! record, which is right after a crash (those writes were never flushed, so
//! never acknowledged) and wrong after damage to flushed data: a truncated
//! or overwritten `db` file opens as a store that lacks acknowledged changes,
//! or as an empty one. The seal tells the two apart.
//!
//! The *watermark* counts every change ever committed: the sum of the live
//! spaces' revisions plus those of deleted spaces (kept in `spaces` under
//! [`RETIRED_KEY`], moved there by the deletion itself), so it never goes
//! down. It is computed, then the store is flushed, then the seal is written
//! (to a temporary file, synced, renamed): a sealed watermark is always on
//! disk. At open, a store whose watermark is below its seal's lost data.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::records::{SpaceRecord, decode};
use super::{OpenError, Store};
use crate::error::{Error, Result};

/// The seal's file name in the data directory.
pub const FILE: &str = "agentvfs.seal";

/// Revisions of deleted spaces, in `spaces` (a big-endian `u64`).
pub const RETIRED_KEY: &[u8] = b"mretired";

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// The sealed watermark, if the store was ever sealed.
pub fn read(dir: &Path) -> Result<Option<u64>, OpenError> {
    let path = path(dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(damaged(&path, format!("cannot read it: {error}"))),
    };
    text.trim()
        .strip_prefix("watermark ")
        .and_then(|n| n.parse().ok())
        .map(Some)
        .ok_or_else(|| damaged(&path, format!("unexpected contents {:?}", text.trim())))
}

/// Refuses a store that holds fewer changes than its seal says were durable.
pub fn check(dir: &Path, sealed: u64, found: u64) -> Result<(), OpenError> {
    if found >= sealed {
        return Ok(());
    }
    let what = if found == 0 { "is empty".to_owned() } else { format!("holds {found} changes") };
    Err(damaged(
        &dir.join("db"),
        format!("the store {what}, but {sealed} had been made durable ({} says so)", path(dir).display()),
    ))
}

/// Refuses a sealed store whose `db` file is gone or empty, without
/// touching anything.
pub fn check_files(dir: &Path, sealed: Option<u64>) -> Result<(), OpenError> {
    let Some(sealed) = sealed.filter(|&n| n > 0) else { return Ok(()) };
    match std::fs::metadata(dir.join("db")) {
        Ok(meta) if meta.len() > 0 => Ok(()),
        _ => check(dir, sealed, 0),
    }
}

pub fn damaged(path: &Path, detail: String) -> OpenError {
    OpenError::Damaged { path: path.display().to_string(), detail }
}

impl Store {
    /// Every change the store has committed (see the module docs).
    pub(crate) fn watermark(&self) -> Result<u64> {
        let spaces = &self.trees().spaces;
        let retired = match spaces.get(RETIRED_KEY)? {
            Some(raw) => u64::from_be_bytes(raw.as_ref().try_into().map_err(|_| Error::internal("bad retired count"))?),
            None => 0,
        };
        let mut total = retired;
        for item in spaces.scan_prefix([b's']).values() {
            total += decode::<SpaceRecord>(&item?)?.revision;
        }
        Ok(total)
    }

    /// Seals what is committed now: computes the watermark, flushes, then
    /// writes the seal. One seal at a time: the sealer task and a shutdown
    /// may seal together, and two writers of the same temporary file fail
    /// each other's rename.
    pub fn seal(&self) -> Result<()> {
        let _one_at_a_time = self.inner.sealing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let watermark = self.watermark()?;
        self.inner.db.flush()?;
        write(&self.inner.dir, watermark).map_err(|e| Error::internal(format!("cannot write the seal: {e}")))
    }
}

fn write(dir: &Path, watermark: u64) -> std::io::Result<()> {
    let temporary = dir.join(format!("{FILE}.tmp"));
    let mut file = std::fs::File::create(&temporary)?;
    writeln!(file, "watermark {watermark}")?;
    file.sync_all()?;
    std::fs::rename(&temporary, path(dir))?;
    std::fs::File::open(dir)?.sync_all()
}
