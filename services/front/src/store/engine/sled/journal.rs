//! How a commit reaches sled's trees whole: one record in a journal tree,
//! then plain writes.
//!
//! sled's own atomic batches across keys (its transactions and
//! `apply_batch`) seal and write out the log's IO buffer twice per batch,
//! on its IO threads: two disk writes and a dozen thread wake-ups for each
//! commit, however small, and most of the CPU a commit takes. A single
//! insert is atomic in sled and costs none of that. So a commit is written
//! as one insert of its whole write set into the journal tree, then as
//! plain inserts and removals into the trees, then the journal record is
//! removed.
//!
//! sled recovers its log in order and stops at the first torn record, so
//! after a crash a write to a tree survives only if the journal record
//! written before it does. At open, [`replay`] writes every record left in
//! the journal again (its writes are absolute values, so writing them twice
//! is harmless) and removes it: a commit is then either all there or not
//! there at all.
//!
//! A commit's idempotency receipts go to no tree: its record is replaced by
//! one of its receipts alone, which stays until the receipts are on a shelf
//! (see [`super::receipts`]); replay stages such a record's receipts again.
//!
//! A record is a list of writes, each: the table (one byte), the key's
//! length (four bytes, big-endian) and the key, then `1`, the value's
//! length and the value for an insert, or `0` for a removal.

use prost::bytes::Bytes;

use super::Table;
use super::receipts::Receipts;

/// The name of the journal's tree.
pub const TREE: &str = "journal";

/// One write of a commit: `None` removes the key.
pub type Write<'a> = (Table, &'a [u8], Option<&'a [u8]>);

/// Encodes a commit's writes as one journal record.
pub fn encode<'a>(writes: impl IntoIterator<Item = Write<'a>>) -> Vec<u8> {
    let mut record = Vec::new();
    for (table, key, value) in writes {
        record.push(table as u8);
        put_bytes(&mut record, key);
        match value {
            Some(value) => {
                record.push(1);
                put_bytes(&mut record, value);
            }
            None => record.push(0),
        }
    }
    record
}

fn put_bytes(record: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or_else(|_| unreachable!("keys and values are far below 4 GiB"));
    record.extend_from_slice(&len.to_be_bytes());
    record.extend_from_slice(bytes);
}

/// Applies `writes` to the trees, in order, as plain writes; receipts are
/// not kept in a tree (see [`super::receipts`]).
pub fn write_all<'a>(trees: &[sled::Tree], writes: impl IntoIterator<Item = Write<'a>>) -> sled::Result<()> {
    for (table, key, value) in writes {
        if table == Table::Receipts {
            continue;
        }
        let tree = &trees[table as usize];
        match value {
            Some(value) => drop(tree.insert(key, value)?),
            None => drop(tree.remove(key)?),
        }
    }
    Ok(())
}

/// Writes every commit left in `journal` into `trees`, oldest first, and
/// stages its receipts in `receipts`: a record of receipts alone stays,
/// until they are shelved; a record of a commit that left none is removed.
/// Returns how many commits were written, and the number after the last
/// record's.
pub fn replay(journal: &sled::Tree, trees: &[sled::Tree], receipts: &Receipts) -> Result<(usize, u64), String> {
    let mut replayed = 0;
    let mut next = 0;
    for item in journal.iter() {
        let (key, record) = item.map_err(|e| format!("cannot read the journal: {e}"))?;
        let number =
            <[u8; 8]>::try_from(&key[..]).map(u64::from_be_bytes).map_err(|_| format!("journal key {key:?}"))?;
        next = number + 1;
        let writes = decode(&Bytes::from_owner(record)).map_err(|e| format!("journal record {number}: {e}"))?;
        let writes: Vec<Write<'_>> =
            writes.iter().map(|(table, key, value)| (*table, &key[..], value.as_deref())).collect();
        let kept: Vec<(&[u8], &[u8])> = writes
            .iter()
            .filter_map(|&(table, key, value)| (table == Table::Receipts).then_some((key, value?)))
            .collect();
        if kept.len() < writes.len() {
            write_all(trees, writes.iter().copied()).map_err(|e| format!("cannot replay the journal: {e}"))?;
            replayed += 1;
        }
        let failed = |e: sled::Error| format!("cannot rewrite the journal: {e}");
        if kept.is_empty() {
            journal.remove(key).map_err(failed)?;
        } else {
            if kept.len() < writes.len() {
                let alone = kept.iter().map(|&(key, value)| (Table::Receipts, key, Some(value)));
                journal.insert(&key, encode(alone)).map_err(failed)?;
            }
            receipts.stage(number, kept.iter().copied());
            receipts.settle(number, kept.iter().map(|&(key, _)| key));
        }
    }
    Ok((replayed, next))
}

/// The writes of a journal record, or why it cannot be read.
pub fn decode(record: &Bytes) -> Result<Vec<(Table, Bytes, Option<Bytes>)>, String> {
    let mut rest = record.clone();
    let mut writes = Vec::new();
    while !rest.is_empty() {
        let table = take(&mut rest, 1)?[0];
        let table = Table::ALL.get(usize::from(table)).copied().ok_or_else(|| format!("unknown table {table}"))?;
        let key = take_bytes(&mut rest)?;
        let value = match take(&mut rest, 1)?[0] {
            0 => None,
            1 => Some(take_bytes(&mut rest)?),
            flag => return Err(format!("unknown write kind {flag}")),
        };
        writes.push((table, key, value));
    }
    Ok(writes)
}

fn take(rest: &mut Bytes, len: usize) -> Result<Bytes, String> {
    if rest.len() < len {
        return Err(format!("a record ends {len} bytes early"));
    }
    Ok(rest.split_to(len))
}

fn take_bytes(rest: &mut Bytes) -> Result<Bytes, String> {
    let len = take(rest, 4)?;
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    take(rest, len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_the_writes_it_was_made_of() {
        let writes = [
            (Table::Spaces, &b"space"[..], Some(&b"record"[..])),
            (Table::Current, &b""[..], Some(&b""[..])),
            (Table::Trash, &b"gone"[..], None),
        ];
        let record = Bytes::from(encode(writes));
        let read = decode(&record).unwrap();
        let read: Vec<_> = read.iter().map(|(t, k, v)| (*t, &k[..], v.as_deref())).collect();
        assert_eq!(read, writes);
        assert_eq!(decode(&Bytes::new()).unwrap(), vec![]);
    }

    #[test]
    fn a_cut_or_foreign_record_is_refused() {
        let record = encode([(Table::Versions, &b"key"[..], Some(&b"value"[..]))]);
        for cut in 1..record.len() {
            assert!(decode(&Bytes::copy_from_slice(&record[..cut])).is_err(), "cut at {cut}");
        }
        assert!(decode(&Bytes::from_static(&[99, 0, 0, 0, 0, 0])).unwrap_err().contains("unknown table"));
        assert!(decode(&Bytes::from_static(&[1, 0, 0, 0, 0, 7])).unwrap_err().contains("write kind"));
    }
}
