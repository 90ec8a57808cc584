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
//! The *watermark* counts every change ever committed (the store computes
//! it: [`crate::store::Store::watermark`]), so it never goes down. It is
//! computed, then the store is flushed, then the seal is written (to a
//! temporary file, synced, renamed): a sealed watermark is always on disk.
//! At open, a store whose watermark is below its seal's lost data.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::store::OpenError;

/// The seal's file name in the data directory.
pub const FILE: &str = "agentvfs.seal";

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

pub fn write(dir: &Path, watermark: u64) -> std::io::Result<()> {
    let temporary = dir.join(format!("{FILE}.tmp"));
    let mut file = std::fs::File::create(&temporary)?;
    writeln!(file, "watermark {watermark}")?;
    file.sync_all()?;
    std::fs::rename(&temporary, path(dir))?;
    std::fs::File::open(dir)?.sync_all()
}
