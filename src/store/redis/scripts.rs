//! The server-side scripts of the Redis store: every multi-key step runs as one
//! Lua script, so the records, their indexes and the counts change together.

use redis::Script;

/// About how many entries the change stream keeps (the scripts' `MAXLEN ~`).
pub(super) const FEED_MAXLEN: u64 = 100_000;

/// The time a script decides at: its argument, or the server's `TIME` when the
/// argument is empty (the store's clock).
const CLOCK_FN: &str = include_str!("lua/clock.lua");

/// A task's member in its owner's list and back: its id with each character
/// mapped to an alphabet in byte order, so that Redis orders the members of one
/// score as [`TaskId`](crate::TaskId)'s `Ord` orders the ids.
const LISTED_FN: &str = include_str!("lua/listed.lua");

/// Removes one record and its bookkeeping (its owner's index entries included);
/// shared by the scripts that delete.
const DROP_FN: &str = include_str!("lua/drop.lua");

/// KEYS: task, owners, counts, expiry, retired, the owner's expiry, the owner's
/// retired, the owner's list.
/// ARGV: id, owner tag, revision, record, TTL, native TTL, retired ('1' or ''),
/// max rows, max per owner, now ('' for the server's clock), task key prefix, prune
/// batch, channel, payload, retention, owner expiry key prefix, owner retired key
/// prefix, owner list key prefix, the record's `created_at` (the list's score).
/// Empty strings stand for "none". Expiry and retirement are scored by `now` plus
/// the TTL; the key's native expiry is the TTL from now, so no node's clock sets it.
///
/// A full store prunes the oldest expired (and retired) records of any owner; an
/// owner at its cap prunes its own, from its own indexes, so the per-owner cap is
/// exact whatever the other owners hold.
const CREATE: &str = include_str!("lua/create.lua");

/// KEYS: task, retired, owners.
/// ARGV: expected revision, new revision, record, retired ('1' or ''), id, channel,
/// payload, owner retired key prefix, now ('' for the server's clock).
/// Answers {CAS_WRITTEN, ''}, {CAS_GONE, ''} or {CAS_CONFLICT, current record}.
const CAS: &str = include_str!("lua/cas.lua");

/// KEYS: expiry, retired, owners, counts.
/// ARGV: now ('' for the server's clock), retention, task key prefix, batch, owner
/// expiry key prefix, owner retired key prefix, owner list key prefix.
/// Answers {removed, more}.
const CLEANUP: &str = include_str!("lua/cleanup.lua");

/// Owner-scoped reads. KEYS: owners, then one task key per id.
/// ARGV: owner tag, then the ids.
/// Answers, per id, the record if it exists and the owner tag matches, nil
/// otherwise: a foreign record never leaves the server, so it costs what an unknown
/// id costs. Records written before the `own` field existed are checked against the
/// owners hash.
const GET_VISIBLE: &str = include_str!("lua/get_visible.lua");

/// Whether the record at `key` (of the task `id`) exists, is visible in `scope`
/// ('' for any owner, else the owner tag) and, with a `now`, has not expired by
/// its expiry score; shared by the scripts that read many ids. Records written
/// before the `own` field existed are checked against the owners hash.
const VISIBLE_FN: &str = include_str!("lua/visible.lua");

/// Which ids exist, without their records. KEYS: owners, expiry, then one task
/// key per id.
/// ARGV: the scope ('' for any owner, else the owner tag), now ('' when the
/// server's native expiry decides), then the ids.
/// Answers, per id, 1 if the record exists, is visible in the scope and (with a
/// `now`) has not expired by its expiry score, 0 otherwise.
const EXISTING: &str = include_str!("lua/existing.lua");

/// The records of many ids within a byte budget. KEYS: owners, expiry, then one
/// task key per id.
/// ARGV: the scope and now (as for the existing-ids script), the budget in bytes,
/// then the ids.
/// The sizes of the visible records (`HSTRLEN`, nothing fetched) are summed first;
/// past the budget the answer is 'over' and no record leaves the server. Otherwise,
/// per id, the record if visible, nil if not.
const GET_WITHIN: &str = include_str!("lua/get_within.lua");

/// One page of an owner's tasks. KEYS: the owner's list, owners, expiry.
/// ARGV: the owner tag, now ('' when the server's native expiry decides), the task
/// key prefix, the limit, then the `created_at` and id of the task the page
/// follows ('' and '' for the first page).
/// Finds where the page starts by rank (a bisection among the tasks created in
/// that millisecond, so it does not matter whether that task is still there),
/// then reads ranks in batches, skipping records gone or expired, until the page
/// is full and one more visible record is seen. Answers {1 if there is more, the
/// records}.
const LIST: &str = include_str!("lua/list.lua");

pub(super) const CAS_GONE: i64 = 0;
pub(super) const CAS_WRITTEN: i64 = 1;

pub(super) struct Scripts {
    pub(super) create: Script,
    pub(super) cas: Script,
    pub(super) cleanup: Script,
    pub(super) get_visible: Script,
    pub(super) existing: Script,
    pub(super) get_within: Script,
    pub(super) list: Script,
}

/// One script from its parts, with the stream's length bound filled in.
fn source(parts: &[&str]) -> String {
    parts.concat().replace("{maxlen}", &FEED_MAXLEN.to_string())
}

pub(super) static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    create: Script::new(&source(&[CLOCK_FN, LISTED_FN, DROP_FN, CREATE])),
    cas: Script::new(&source(&[CLOCK_FN, CAS])),
    cleanup: Script::new(&source(&[CLOCK_FN, LISTED_FN, DROP_FN, CLEANUP])),
    get_visible: Script::new(&source(&[GET_VISIBLE])),
    existing: Script::new(&source(&[VISIBLE_FN, EXISTING])),
    get_within: Script::new(&source(&[VISIBLE_FN, GET_WITHIN])),
    list: Script::new(&source(&[VISIBLE_FN, LISTED_FN, LIST])),
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskId;

    #[test]
    fn owner_scoped_reads_compare_the_owner_on_the_server() {
        // The record is fetched only after the owner tag matched.
        let compare = GET_VISIBLE.find("own == ARGV[1]").unwrap();
        let fetch = GET_VISIBLE.find("'rec'").unwrap();
        assert!(compare < fetch);
        // Every create stores the tag the script compares.
        assert!(CREATE.contains("'own', ARGV[2]"));
        // A full create prunes retired records past the retention as well.
        assert!(CREATE.contains("prune(KEYS[5], KEYS[5], retired_before)"));
        assert!(CREATE.contains("prune(KEYS[7], KEYS[5], retired_before)"));
    }

    /// The alphabet between two quotes after `name = ` in the list helpers.
    fn alphabet(name: &str) -> &'static [u8] {
        let line = LISTED_FN
            .lines()
            .find(|line| line.starts_with(&format!("local {name} = '")))
            .unwrap();
        line.split('\'').nth(1).unwrap().as_bytes()
    }

    #[test]
    fn list_members_sort_as_task_ids_do() {
        let (ids, listed) = (alphabet("ID_ALPHABET"), alphabet("LIST_ALPHABET"));
        assert_eq!((ids.len(), listed.len()), (64, 64));
        assert!(listed.windows(2).all(|pair| pair[0] < pair[1]));
        let member = |id: &TaskId| -> Vec<u8> {
            id.to_string()
                .bytes()
                .map(|c| listed[ids.iter().position(|&d| d == c).unwrap()])
                .collect()
        };
        let mut pairs: Vec<(TaskId, Vec<u8>)> = (0..500)
            .map(|n| {
                let mut bytes = *TaskId::random().as_bytes();
                // Ids that share a prefix of every length, and the extremes.
                bytes[..n % 33].fill(if n % 2 == 0 { 0 } else { 0xFF });
                TaskId::from_bytes(bytes)
            })
            .map(|id| (id, member(&id)))
            .collect();
        pairs.sort_by_key(|pair| pair.0);
        assert!(pairs.windows(2).all(|pair| pair[0].1 <= pair[1].1));
        // Every create lists the task; every delete takes it off the list.
        assert!(CREATE.contains("redis.call('ZADD', KEYS[8], ARGV[19], listed(ARGV[1]))"));
        assert!(DROP_FN.contains("redis.call('ZREM', owner_list .. tag, listed(id))"));
    }

    #[test]
    fn every_write_appends_to_the_trimmed_change_stream() {
        let (create, cas) = (source(&[CREATE]), source(&[CAS]));
        let append = format!("'XADD', ARGV[13], 'MAXLEN', '~', '{FEED_MAXLEN}', '*', 'c'");
        assert!(create.contains(&append), "{create}");
        let append = format!("'XADD', ARGV[6], 'MAXLEN', '~', '{FEED_MAXLEN}', '*', 'c'");
        assert!(cas.contains(&append), "{cas}");
        assert!(!CREATE.contains("PUBLISH") && !CAS.contains("PUBLISH"));
    }
}
