//! What the machine provides: PostgreSQL's binaries and the account the
//! server runs as.

use std::fs;
use std::path::{Path, PathBuf};

/// Where Debian's `postgresql` package installs the server, one directory
/// per major version.
const INSTALL_ROOT: &str = "/usr/lib/postgresql";

/// The `bin` directory of the newest PostgreSQL under `/usr/lib/postgresql`.
pub(crate) fn bin_dir() -> Result<PathBuf, String> {
    let missing = || {
        format!(
            "PostgreSQL's server binaries are missing (no {INSTALL_ROOT}/*/bin/initdb): \
             install Debian's postgresql package (scripts/ensure-postgres does it as root)"
        )
    };
    let entries = fs::read_dir(INSTALL_ROOT).map_err(|_| missing())?;
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let bin = entry.path().join("bin");
            let version = version_key(&entry.file_name().to_string_lossy())?;
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
        .ok_or_else(missing)
}

/// Orders version directories numerically (`15` after `9.6`), so that the
/// newest wins; names that are not versions are skipped.
fn version_key(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

/// A user and group id to run the server as.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Account {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// The account for `initdb` and `postgres`: none (the current user) unless
/// this process runs as root, which PostgreSQL refuses; then the `postgres`
/// user that Debian's package creates.
pub(crate) fn server_account() -> Result<Option<Account>, String> {
    if effective_uid()? != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd").map_err(|error| format!("cannot read /etc/passwd: {error}"))?;
    passwd
        .lines()
        .find_map(|line| {
            let mut fields = line.split(':');
            if fields.next() != Some("postgres") {
                return None;
            }
            let uid = fields.nth(1)?.parse().ok()?;
            let gid = fields.next()?.parse().ok()?;
            Some(Some(Account { uid, gid }))
        })
        .ok_or_else(|| {
            "PostgreSQL refuses to run as root and there is no `postgres` user to run it as: \
             install Debian's postgresql package, which creates it"
                .to_owned()
        })
}

/// This process's effective user id, from `/proc/self/status` (`Uid:` real,
/// effective, saved, filesystem).
fn effective_uid() -> Result<u32, String> {
    let path = Path::new("/proc/self/status");
    let status = fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:")?.split_whitespace().nth(1)?.parse().ok())
        .ok_or_else(|| format!("no effective uid in {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::version_key;

    #[test]
    fn versions_order_numerically() {
        assert!(version_key("15") > version_key("9.6"));
        assert!(version_key("16") > version_key("15"));
        assert_eq!(version_key("common"), None);
    }
}
