//! Listing: one owner's tasks, newest first (then the larger id), a page at a
//! time; nobody else's, nothing expired or removed, and pages that neither
//! overlap nor skip, wherever the previous page ended.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::helpers::{HOUR_MS, cleanup, create, record, update_found};
use crate::store::{CreateLimits, ListFrom, ListPage, TaskStore};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

/// The list's order: newest first, then the larger id.
fn list_order(a: &TaskRecord, b: &TaskRecord) -> Ordering {
    b.created_at
        .cmp(&a.created_at)
        .then_with(|| b.id.cmp(&a.id))
}

/// `records` in the list's order.
fn sorted(mut records: Vec<TaskRecord>) -> Vec<TaskRecord> {
    records.sort_by(list_order);
    records
}

fn ids(records: &[TaskRecord]) -> Vec<TaskId> {
    records.iter().map(|r| r.id).collect()
}

fn from(record: &TaskRecord) -> ListFrom {
    ListFrom {
        created_at: record.created_at,
        id: record.id,
    }
}

/// A record of `owner` created at `at`, with a TTL of an hour.
fn owned(owner: Option<&Principal>, at: Timestamp) -> TaskRecord {
    record(owner.cloned(), at, Some(HOUR_MS))
}

/// A record of `owner` created at `at` whose id starts with `first` and ends
/// with `last`, the rest random.
fn with_id(owner: &Principal, at: Timestamp, first: u8, last: u8) -> TaskRecord {
    let mut bytes = *TaskId::random().as_bytes();
    bytes[0] = first;
    bytes[TaskId::BYTES - 1] = last;
    let mut task = owned(Some(owner), at);
    task.id = TaskId::from_bytes(bytes);
    task
}

async fn list<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    owner: Option<&Principal>,
    from: Option<ListFrom>,
    limit: usize,
    now: Timestamp,
) -> ListPage {
    store
        .list(owner, from, limit, now)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] list failed: {e}"))
}

/// Every page of `owner`'s tasks at `now`, `limit` at a time, checking that each
/// page but the last is full and says where the next starts (just after its last
/// record), and that the last says there is no more. The pages' sizes and the
/// records, in order.
async fn walk<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    owner: Option<&Principal>,
    limit: usize,
    now: Timestamp,
    most: usize,
) -> (Vec<usize>, Vec<TaskRecord>) {
    let mut sizes = Vec::new();
    let mut all = Vec::new();
    let mut at = None;
    loop {
        let page = list(rule, store, owner, at, limit, now).await;
        assert!(
            page.records.len() <= limit,
            "[{rule}] a page of limit {limit} held {} records",
            page.records.len()
        );
        sizes.push(page.records.len());
        all.extend(page.records.iter().cloned());
        assert!(
            all.len() <= most,
            "[{rule}] the pages held more than the {most} tasks there are: a page repeated some"
        );
        let Some(next) = page.next else {
            return (sizes, all);
        };
        assert_eq!(
            page.records.len(),
            limit,
            "[{rule}] a page with a next page must be full"
        );
        assert_eq!(
            Some(next),
            page.records.last().map(from),
            "[{rule}] `next` must be the last record of the page"
        );
        at = Some(next);
    }
}

async fn create_all<S: TaskStore + ?Sized>(rule: &str, store: &S, records: &[TaskRecord]) {
    for r in records {
        create(rule, store, r.clone(), CreateLimits::default()).await;
    }
}

/// An owner's tasks list newest first by `created_at`, and those created in one
/// millisecond by id, the larger first (ids as [`TaskId`]'s `Ord` orders them:
/// their bytes, unsigned, first to last), whatever order they were created in.
/// The records listed are the records stored.
pub async fn list_newest_first_ties_by_id<S: TaskStore>(store: S) {
    const RULE: &str = "list_newest_first_ties_by_id";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let mut records = Vec::new();
    for offset in [5, 0, 9, 2, 5, 0, 3, 5, 2, 0, 5, 1] {
        records.push(owned(Some(&alice), now.plus_ms(offset)));
    }
    // One millisecond of ids that differ only in their first or their last byte,
    // across the middle of the byte's range and at its ends.
    let tied = now.plus_ms(7);
    for (first, last) in [
        (0x00, 0x00),
        (0xFF, 0x00),
        (0x7F, 0x10),
        (0x80, 0x10),
        (0x7F, 0x11),
        (0x7F, 0xFF),
        (0x80, 0x0F),
    ] {
        records.push(with_id(&alice, tied, first, last));
    }
    create_all(RULE, &store, &records).await;
    let expected = sorted(records);
    let read = now.plus_ms(100);
    let page = list(RULE, &store, Some(&alice), None, 100, read).await;
    assert_eq!(
        ids(&page.records),
        ids(&expected),
        "[{RULE}] the tasks must list newest first, then by id, the larger first"
    );
    assert_eq!(
        page.records, expected,
        "[{RULE}] a listed record must be the record stored"
    );
    assert_eq!(
        page.next, None,
        "[{RULE}] a page that holds the last task has no next page"
    );
    let exact = list(RULE, &store, Some(&alice), None, expected.len(), read).await;
    assert_eq!(exact.records.len(), expected.len());
    assert_eq!(
        exact.next, None,
        "[{RULE}] a full page that holds the last task has no next page"
    );
}

/// Walking every page, 7 at a time, lists each of 25 tasks exactly once, in
/// order: full pages of 7 that say where the next one starts, then 4 and no
/// next page. Tasks created in one millisecond (three each here) are split
/// between pages too. 21 tasks make three full pages, the last without a next
/// one; one at a time, 21 pages.
pub async fn list_pages_neither_overlap_nor_skip<S: TaskStore>(store: S) {
    const RULE: &str = "list_pages_neither_overlap_nor_skip";
    let now = Timestamp::now();
    let (alice, bob) = (Principal::from("alice"), Principal::from("bob"));
    let alices: Vec<TaskRecord> = (0..25)
        .map(|n| owned(Some(&alice), now.plus_ms(n / 3)))
        .collect();
    let bobs: Vec<TaskRecord> = (0..21)
        .map(|n| owned(Some(&bob), now.plus_ms(n / 3)))
        .collect();
    create_all(RULE, &store, &alices).await;
    create_all(RULE, &store, &bobs).await;
    let read = now.plus_ms(100);
    let (sizes, listed) = walk(RULE, &store, Some(&alice), 7, read, 25).await;
    assert_eq!(sizes, [7, 7, 7, 4], "[{RULE}] 25 tasks, 7 a page");
    assert_eq!(
        ids(&listed),
        ids(&sorted(alices)),
        "[{RULE}] the pages together must list every task once, in order"
    );
    let bobs = ids(&sorted(bobs));
    let (sizes, listed) = walk(RULE, &store, Some(&bob), 7, read, 21).await;
    assert_eq!(
        sizes,
        [7, 7, 7],
        "[{RULE}] 21 tasks, 7 a page: the third page is the last"
    );
    assert_eq!(ids(&listed), bobs);
    let (sizes, listed) = walk(RULE, &store, Some(&bob), 1, read, 21).await;
    assert_eq!(sizes, [1; 21], "[{RULE}] 21 tasks, one a page");
    assert_eq!(ids(&listed), bobs);
}

/// `list` shows the owner's tasks and nobody else's: not another owner's, not
/// the anonymous ones (which only an anonymous list shows), and an owner named
/// by the empty string is not the anonymous one. An owner without tasks lists
/// nothing.
pub async fn list_shows_only_the_owners_tasks<S: TaskStore>(store: S) {
    const RULE: &str = "list_shows_only_the_owners_tasks";
    let now = Timestamp::now();
    let owners = [
        Some(Principal::from("alice")),
        Some(Principal::from("bob")),
        Some(Principal::from("")),
        None,
    ];
    let mut mine: Vec<Vec<TaskRecord>> = vec![Vec::new(); owners.len()];
    // Interleaved, in the same milliseconds.
    for n in 0..5u64 {
        for (k, owner) in owners.iter().enumerate() {
            if n < 5 - k as u64 {
                let task = owned(owner.as_ref(), now.plus_ms(n));
                create(RULE, &store, task.clone(), CreateLimits::default()).await;
                mine[k].push(task);
            }
        }
    }
    let read = now.plus_ms(10);
    for (owner, tasks) in owners.iter().zip(mine) {
        let page = list(RULE, &store, owner.as_ref(), None, 100, read).await;
        assert_eq!(
            ids(&page.records),
            ids(&sorted(tasks)),
            "[{RULE}] the list of {owner:?} must hold its own tasks and no other"
        );
    }
    let mallory = Principal::from("mallory");
    let page = list(RULE, &store, Some(&mallory), None, 100, read).await;
    assert_eq!(
        page,
        ListPage::default(),
        "[{RULE}] an owner without tasks lists nothing"
    );
}

/// An expired task is not listed, swept or not, by the rule `get` follows: gone
/// exactly at `created_at + ttl`, there 1 ms before. A page skips expired tasks
/// and is still full when more live ones follow.
pub async fn list_leaves_out_expired_tasks<S: TaskStore>(store: S) {
    const RULE: &str = "list_leaves_out_expired_tasks";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    // Every other task expires after 1 s; the rest live an hour.
    let tasks: Vec<TaskRecord> = (0..12u64)
        .map(|n| {
            let ttl = if n % 2 == 0 { 1_000 } else { HOUR_MS };
            record(Some(alice.clone()), now.plus_ms(n), Some(ttl))
        })
        .collect();
    create_all(RULE, &store, &tasks).await;
    let all = sorted(tasks.clone());
    let (_, listed) = walk(RULE, &store, Some(&alice), 5, now.plus_ms(20), 12).await;
    assert_eq!(
        ids(&listed),
        ids(&all),
        "[{RULE}] before any TTL ran out, every task lists"
    );
    let live: Vec<TaskRecord> = all
        .iter()
        .filter(|t| t.ttl_ms == Some(HOUR_MS))
        .cloned()
        .collect();
    let late = now.plus_ms(5_000);
    let (sizes, listed) = walk(RULE, &store, Some(&alice), 4, late, 12).await;
    assert_eq!(
        ids(&listed),
        ids(&live),
        "[{RULE}] expired tasks must not list, before any cleanup"
    );
    assert_eq!(
        sizes,
        [4, 2],
        "[{RULE}] a page skips expired tasks and still fills when live ones follow"
    );
    // The boundary, on the newest expiring task (created at now + 10, TTL 1 s),
    // which follows the newest task.
    let newest = &all[1];
    assert_eq!(newest.created_at, now.plus_ms(10));
    let after_first = Some(from(&all[0]));
    let at = |ms| list(RULE, &store, Some(&alice), after_first, 1, now.plus_ms(ms));
    assert_eq!(
        ids(&at(1_009).await.records),
        [newest.id],
        "[{RULE}] a task must still list 1 ms before created_at + ttl"
    );
    assert_ne!(
        ids(&at(1_010).await.records),
        [newest.id],
        "[{RULE}] a task must not list at created_at + ttl"
    );
}

/// Tasks `cleanup` removed (expired ones, and finished ones past the retention)
/// are no longer listed, even at a time before they expired; tasks created
/// afterwards list with those that stayed.
pub async fn list_leaves_out_tasks_removed_by_cleanup<S: TaskStore>(store: S) {
    const RULE: &str = "list_leaves_out_tasks_removed_by_cleanup";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let expiring: Vec<TaskRecord> = (0..3)
        .map(|n| record(Some(alice.clone()), now.plus_ms(n), Some(1_000)))
        .collect();
    let finished: Vec<TaskRecord> = (3..6)
        .map(|n| record(Some(alice.clone()), now.plus_ms(n), None))
        .collect();
    let staying: Vec<TaskRecord> = (6..9)
        .map(|n| record(Some(alice.clone()), now.plus_ms(n), None))
        .collect();
    create_all(RULE, &store, &expiring).await;
    create_all(RULE, &store, &finished).await;
    create_all(RULE, &store, &staying).await;
    let done = Transition::Complete {
        result: json!({"content": []}),
        message: None,
    };
    for task in &finished {
        let scope = Scope::Owner(Some(&alice));
        update_found(RULE, &store, &task.id, scope, &done, now.plus_ms(10)).await;
    }
    let before = list(RULE, &store, Some(&alice), None, 100, now.plus_ms(20)).await;
    assert_eq!(before.records.len(), 9, "[{RULE}] every task lists first");
    let removed = cleanup(RULE, &store, now.plus_ms(5_000), Duration::from_secs(1)).await;
    assert_eq!(
        removed, 6,
        "[{RULE}] the sweep removes the 3 expired tasks and the 3 finished past the retention"
    );
    let later = owned(Some(&alice), now.plus_ms(5_000));
    create(RULE, &store, later.clone(), CreateLimits::default()).await;
    let mut expected = staying;
    expected.push(later);
    let expected = ids(&sorted(expected));
    for read in [now.plus_ms(20), now.plus_ms(5_001)] {
        let (_, listed) = walk(RULE, &store, Some(&alice), 2, read, 10).await;
        assert_eq!(
            ids(&listed),
            expected,
            "[{RULE}] tasks removed by cleanup must not list (read at {read:?})"
        );
    }
}

/// A page of at most 0 records is empty and has no next page, however many
/// tasks the owner has.
pub async fn list_limit_zero_is_empty<S: TaskStore>(store: S) {
    const RULE: &str = "list_limit_zero_is_empty";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let tasks: Vec<TaskRecord> = (0..3).map(|_| owned(Some(&alice), now)).collect();
    create_all(RULE, &store, &tasks).await;
    let after = Some(from(&sorted(tasks.clone())[0]));
    for start in [None, after] {
        let page = list(RULE, &store, Some(&alice), start, 0, now).await;
        assert_eq!(
            page,
            ListPage::default(),
            "[{RULE}] limit 0 must give an empty page without a next one"
        );
    }
    let page = list(RULE, &store, Some(&alice), None, 3, now).await;
    assert_eq!(page.records.len(), 3, "[{RULE}] the tasks are there");
}

/// A page that starts after a task no longer stored (removed since the
/// previous page) starts where that task was: neither the tasks before it again
/// nor any after it left out. The same for a `from` that never named a task:
/// in the middle of the tasks of one millisecond, after the newest, or before
/// the oldest.
pub async fn list_continues_after_a_task_that_is_gone<S: TaskStore>(store: S) {
    const RULE: &str = "list_continues_after_a_task_that_is_gone";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    // Three tasks a millisecond, no TTL.
    let tasks: Vec<TaskRecord> = (0..12u64)
        .map(|n| record(Some(alice.clone()), now.plus_ms(n / 3), None))
        .collect();
    create_all(RULE, &store, &tasks).await;
    let all = sorted(tasks);
    let read = now.plus_ms(10);
    let first = list(RULE, &store, Some(&alice), None, 4, read).await;
    assert_eq!(ids(&first.records), ids(&all[..4]));
    let next = first.next.unwrap_or_else(|| {
        panic!("[{RULE}] a full page of 4 among 12 tasks must have a next page")
    });
    // The task the page ended on and the one after it finish and are swept.
    let done = Transition::Complete {
        result: json!({"content": []}),
        message: None,
    };
    for task in &all[3..5] {
        update_found(RULE, &store, &task.id, Scope::Any, &done, now.plus_ms(10)).await;
    }
    let removed = cleanup(RULE, &store, now.plus_ms(20), Duration::ZERO).await;
    assert_eq!(removed, 2, "[{RULE}] the two finished tasks are swept");
    let rest: Vec<TaskRecord> = all[..3].iter().chain(&all[5..]).cloned().collect();
    let second = list(RULE, &store, Some(&alice), Some(next), 4, read).await;
    assert_eq!(
        ids(&second.records),
        ids(&all[5..9]),
        "[{RULE}] the page after a task that went must start where it was"
    );
    // Points that never were tasks: between the ids of one millisecond, and at
    // either end.
    let mut points: Vec<ListFrom> = (0..6)
        .map(|n| ListFrom {
            created_at: all[n * 2].created_at,
            id: TaskId::random(),
        })
        .collect();
    points.push(ListFrom {
        created_at: now.plus_ms(1_000),
        id: TaskId::random(),
    });
    points.push(ListFrom {
        created_at: now,
        id: TaskId::from_bytes([0; TaskId::BYTES]),
    });
    for point in points {
        let probe = TaskRecord::new(point.id, None, point.created_at);
        let after: Vec<TaskId> = rest
            .iter()
            .filter(|t| list_order(t, &probe) == Ordering::Greater)
            .map(|t| t.id)
            .collect();
        let page = list(RULE, &store, Some(&alice), Some(point), 3, read).await;
        assert_eq!(
            ids(&page.records),
            after[..after.len().min(3)],
            "[{RULE}] a page must start just after its `from`, whether or not a task is there"
        );
        assert_eq!(
            page.next.is_some(),
            after.len() > 3,
            "[{RULE}] a next page exactly when tasks are left"
        );
    }
}

/// At scale: `tasks` tasks spread over `owners` owners (the first of them
/// anonymous), several created in each millisecond; one owner's tasks, and the
/// anonymous ones, list exactly, page by page. Creates run 64 at a time. The
/// built-in stores run it with 100 000 tasks of 1 000 owners (the memory store)
/// and 10 000 of 100 (PostgreSQL and Redis).
pub async fn list_pages_one_owner_among_many<S: TaskStore>(store: S, tasks: usize, owners: usize) {
    const RULE: &str = "list_pages_one_owner_among_many";
    assert!(owners >= 2 && tasks >= 2 * owners, "[{RULE}] too few tasks");
    let store = Arc::new(store);
    let now = Timestamp::now();
    let names: Vec<Option<Principal>> = (0..owners)
        .map(|k| (k > 0).then(|| Principal::from(format!("owner-{k}"))))
        .collect();
    let make = |n: usize| {
        // Each owner gets two tasks a millisecond.
        let at = now.plus_ms((n / (2 * owners)) as u64);
        owned(names[n % owners].as_ref(), at)
    };
    let all: Vec<TaskRecord> = (0..tasks).map(make).collect();
    for chunk in all.chunks(64) {
        let mut set = tokio::task::JoinSet::new();
        for task in chunk {
            let (store, task) = (store.clone(), task.clone());
            set.spawn(async move { store.create(task, CreateLimits::default()).await });
        }
        while let Some(done) = set.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("[{RULE}] create of a fresh record failed: {e}"),
                Err(e) => panic!("[{RULE}] a create did not finish: {e}"),
            }
        }
    }
    let read = now.plus_ms((tasks / owners) as u64 + 10);
    for k in [owners / 2 + 1, 0] {
        let owner = names[k].as_ref();
        let expected: Vec<TaskRecord> = all
            .iter()
            .enumerate()
            .filter(|(n, _)| n % owners == k)
            .map(|(_, t)| t.clone())
            .collect();
        let expected = sorted(expected);
        for limit in [7, 50] {
            let (sizes, listed) = walk(RULE, &*store, owner, limit, read, expected.len()).await;
            assert_eq!(
                ids(&listed),
                ids(&expected),
                "[{RULE}] the pages of {owner:?} (limit {limit}) must list its {} tasks exactly",
                expected.len()
            );
            assert_eq!(sizes.len(), expected.len().div_ceil(limit));
        }
    }
}
