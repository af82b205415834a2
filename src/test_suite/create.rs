//! Creating records: what `create` stores, duplicate ids, and the row caps.

use std::sync::Arc;
use std::time::Duration;

use super::helpers::{
    HOUR_MS, WRITERS, cleanup, create, create_accepted, create_refused, get, race, record,
    require_multi_thread, update,
};
use crate::error::{Limit, StoreError};
use serde_json::json;

use crate::store::{Budgeted, CreateLimits, TaskStore, encoded_len};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

/// `create` returns only once `get` finds the record, and `get` returns the record
/// as it was stored, for its owner and for [`Scope::Any`].
pub async fn create_then_get<S: TaskStore>(store: S) {
    const RULE: &str = "create_then_get";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let mut owned = record(Some(alice.clone()), now, Some(HOUR_MS));
    owned.status_message = Some("Queued".to_owned());
    owned.poll_interval_ms = Some(250);
    let anonymous = record(None, now, None);
    for r in [&owned, &anonymous] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let found = get(RULE, &store, &owned.id, Scope::Owner(Some(&alice)), now).await;
    assert_eq!(
        found.as_ref(),
        Some(&owned),
        "[{RULE}] get by the owner right after create must return the stored record unchanged"
    );
    let found = get(RULE, &store, &owned.id, Scope::Any, now).await;
    assert_eq!(
        found.as_ref(),
        Some(&owned),
        "[{RULE}] get with Scope::Any right after create must return the stored record"
    );
    let found = get(RULE, &store, &anonymous.id, Scope::Owner(None), now).await;
    assert_eq!(
        found.as_ref(),
        Some(&anonymous),
        "[{RULE}] an unowned record must be found by Scope::Owner(None) right after create"
    );
}

/// Creating a second record with an id that exists fails with
/// [`StoreError::Duplicate`], leaves the first record as it was, and does not use up
/// room under the row cap.
pub async fn create_rejects_duplicate_id<S: TaskStore>(store: S) {
    const RULE: &str = "create_rejects_duplicate_id";
    let now = Timestamp::now();
    let limits = CreateLimits::new(Some(2), None);
    let first = record(Some(Principal::from("alice")), now, Some(HOUR_MS));
    create(RULE, &store, first.clone(), limits).await;
    let mut twin = record(Some(Principal::from("mallory")), now, None);
    twin.id = first.id;
    match store.create(twin, limits).await {
        Err(StoreError::Duplicate) => {}
        other => panic!(
            "[{RULE}] a second create with an existing id must fail with StoreError::Duplicate, got {other:?}"
        ),
    }
    let found = get(RULE, &store, &first.id, Scope::Any, now).await;
    assert_eq!(
        found.as_ref(),
        Some(&first),
        "[{RULE}] a refused duplicate must leave the existing record untouched"
    );
    let second = record(None, now, Some(HOUR_MS));
    create_accepted(
        RULE,
        &store,
        second,
        limits,
        "a refused duplicate must not take a row: with max_rows 2 and one record, create must succeed",
    )
    .await;
}

/// `max_rows` holds atomically: of many concurrent creates against a cap of K,
/// exactly K succeed and the rest fail with [`StoreError::LimitReached`]; a record
/// removed by `cleanup` frees its row.
pub async fn max_rows_enforced_atomically<S: TaskStore>(store: S) {
    const RULE: &str = "max_rows_enforced_atomically";
    const CAP: usize = 10;
    require_multi_thread(RULE);
    let now = Timestamp::now();
    let store = Arc::new(store);
    let limits = CreateLimits::new(Some(CAP), None);
    let records: Vec<TaskRecord> = (0..WRITERS)
        .map(|i| {
            let owner = (i % 3 != 0).then(|| Principal::from(format!("owner-{}", i % 5)));
            record(owner, now, Some(1_000))
        })
        .collect();
    let results = race(records.clone(), {
        let store = store.clone();
        move |r: TaskRecord| {
            let store = store.clone();
            async move { store.create(r, limits).await }
        }
    })
    .await;
    let mut created = Vec::new();
    for (r, result) in records.iter().zip(results) {
        match result {
            Ok(()) => created.push(r.id),
            Err(StoreError::LimitReached(Limit::Rows)) => {}
            Err(e) => {
                panic!(
                    "[{RULE}] a create over the cap must fail with LimitReached(Limit::Rows), got Err({e})"
                )
            }
        }
    }
    assert_eq!(
        created.len(),
        CAP,
        "[{RULE}] {WRITERS} concurrent creates with max_rows {CAP} must create exactly {CAP}"
    );
    for id in &created {
        assert!(
            get(RULE, &*store, id, Scope::Any, now).await.is_some(),
            "[{RULE}] every successful create must be readable"
        );
    }
    match store.create(record(None, now, None), limits).await {
        Err(StoreError::LimitReached(Limit::Rows)) => {}
        other => {
            panic!(
                "[{RULE}] a create on a full store must fail with LimitReached(Limit::Rows), got {other:?}"
            )
        }
    }
    let swept = now.plus_ms(1_000);
    assert_eq!(
        cleanup(RULE, &*store, swept, Duration::ZERO).await,
        CAP,
        "[{RULE}] cleanup must remove the {CAP} expired records"
    );
    create_accepted(
        RULE,
        &store,
        record(None, swept, None),
        limits,
        "rows freed by cleanup must be usable again",
    )
    .await;
}

/// The per-owner cap counts each owner (and the anonymous owner) separately, holds
/// under concurrent creates, and frees a slot when `cleanup` removes a record.
pub async fn per_owner_cap_enforced<S: TaskStore>(store: S) {
    const RULE: &str = "per_owner_cap_enforced";
    const PER_OWNER: usize = 3;
    require_multi_thread(RULE);
    let now = Timestamp::now();
    let store = Arc::new(store);
    let limits = CreateLimits::new(None, Some(PER_OWNER));
    let alice = Principal::from("alice");
    let records: Vec<TaskRecord> = (0..WRITERS)
        .map(|i| match i % 4 {
            0 => record(None, now, Some(1_000)),
            1 => record(Some(Principal::from("bob")), now, Some(HOUR_MS)),
            _ => record(Some(alice.clone()), now, Some(1_000)),
        })
        .collect();
    let results = race(records.clone(), {
        let store = store.clone();
        move |r: TaskRecord| {
            let store = store.clone();
            async move { store.create(r, limits).await }
        }
    })
    .await;
    let mut per_owner = std::collections::BTreeMap::<Option<Principal>, usize>::new();
    for (r, result) in records.iter().zip(results) {
        match result {
            Ok(()) => *per_owner.entry(r.owner.clone()).or_default() += 1,
            Err(StoreError::LimitReached(Limit::PerOwner)) => {}
            Err(e) => panic!(
                "[{RULE}] a create over the per-owner cap must fail with LimitReached(Limit::PerOwner), got Err({e})"
            ),
        }
    }
    for owner in [None, Some(Principal::from("bob")), Some(alice.clone())] {
        assert_eq!(
            per_owner.get(&owner).copied().unwrap_or(0),
            PER_OWNER,
            "[{RULE}] concurrent creates by {owner:?} with a per-owner cap of {PER_OWNER} must create exactly {PER_OWNER}"
        );
    }
    match store
        .create(record(Some(alice.clone()), now, None), limits)
        .await
    {
        Err(StoreError::LimitReached(Limit::PerOwner)) => {}
        other => {
            panic!(
                "[{RULE}] alice at her cap must be refused with LimitReached(Limit::PerOwner), got {other:?}"
            )
        }
    }
    create_accepted(
        RULE,
        &store,
        record(Some(Principal::from("carol")), now, None),
        limits,
        "another owner must not be limited by alice's cap",
    )
    .await;
    let swept = now.plus_ms(1_000);
    assert_eq!(
        cleanup(RULE, &*store, swept, Duration::ZERO).await,
        2 * PER_OWNER,
        "[{RULE}] cleanup must remove alice's and the anonymous owner's expired records"
    );
    create_accepted(
        RULE,
        &store,
        record(Some(alice), swept, None),
        limits,
        "a slot freed by cleanup must be usable by its owner again",
    )
    .await;
    create_refused(
        RULE,
        &store,
        record(Some(Principal::from("bob")), swept, None),
        limits,
        Limit::PerOwner,
        "bob's records did not expire, so bob must still be at his cap",
    )
    .await;
}

/// Records expired at a new record's `created_at` never count against either cap,
/// swept or not: a store full of expired records (and no janitor) accepts new ones,
/// while live records keep counting.
pub async fn expired_records_never_fill_the_caps<S: TaskStore>(store: S) {
    const RULE: &str = "expired_records_never_fill_the_caps";
    let now = Timestamp::now();
    let later = now.plus_ms(1_000);
    let limits = CreateLimits::new(Some(3), Some(2));
    let alice = Principal::from("alice");
    for _ in 0..2 {
        create(
            RULE,
            &store,
            record(Some(alice.clone()), now, Some(1_000)),
            limits,
        )
        .await;
    }
    create_refused(
        RULE,
        &store,
        record(Some(alice.clone()), now, None),
        limits,
        Limit::PerOwner,
        "alice at her cap of 2 must be refused with LimitReached(Limit::PerOwner)",
    )
    .await;
    create(
        RULE,
        &store,
        record(Some(Principal::from("bob")), now, Some(HOUR_MS)),
        limits,
    )
    .await;
    create_refused(
        RULE,
        &store,
        record(Some(Principal::from("carol")), now, None),
        limits,
        Limit::Rows,
        "a create on a store at max_rows 3 must be refused with LimitReached(Limit::Rows)",
    )
    .await;
    // Alice's two records expired at `later`; nothing swept them.
    for _ in 0..2 {
        create_accepted(
            RULE,
            &store,
            record(Some(alice.clone()), later, None),
            limits,
            "expired records must not count against the caps: alice's create after her records expired must succeed",
        )
        .await;
    }
    create_refused(
        RULE,
        &store,
        record(Some(Principal::from("carol")), later, None),
        limits,
        Limit::Rows,
        "live records keep counting: three live records at max_rows 3 must refuse with LimitReached(Limit::Rows)",
    )
    .await;
}

/// Terminal records without a TTL that retired at or before
/// [`retention_cutoff`](crate::store::retention_cutoff)`(created_at, retention)` never
/// count against either cap when the limits carry a
/// [`retention`](CreateLimits::retention), swept or not: finished tasks the next
/// sweep would remove never block a create. Within their retention they still count,
/// and live records always do.
pub async fn retired_records_past_retention_never_fill_the_caps<S: TaskStore>(store: S) {
    const RULE: &str = "retired_records_past_retention_never_fill_the_caps";
    let now = Timestamp::now();
    let retention = Duration::from_millis(1_000);
    let limits = CreateLimits::new(Some(3), Some(2)).with_retention(retention);
    let alice = Principal::from("alice");
    let finished_at = now.plus_ms(1);
    for _ in 0..2 {
        let r = record(Some(alice.clone()), now, None);
        let id = r.id;
        create(RULE, &store, r, limits).await;
        let cancel = Transition::Cancel;
        let cancelled = update(RULE, &store, &id, Scope::Any, &cancel, finished_at).await;
        assert!(
            cancelled.is_some_and(|u| u.changed()),
            "[{RULE}] cancelling a working task must be applied"
        );
    }
    create(
        RULE,
        &store,
        record(Some(Principal::from("bob")), now, Some(HOUR_MS)),
        limits,
    )
    .await;
    // Within the retention the finished tasks still count.
    let within = finished_at.plus_ms(999);
    let per_owner = CreateLimits::new(None, Some(2)).with_retention(retention);
    create_refused(
        RULE,
        &store,
        record(Some(alice.clone()), within, None),
        per_owner,
        Limit::PerOwner,
        "alice's two finished tasks, still within their retention, must keep her at her cap of 2 (LimitReached(Limit::PerOwner))",
    )
    .await;
    create_refused(
        RULE,
        &store,
        record(Some(Principal::from("carol")), within, None),
        limits,
        Limit::Rows,
        "finished tasks within their retention must keep counting against max_rows 3 (LimitReached(Limit::Rows))",
    )
    .await;
    // At `finished_at + retention` they are past it; nothing swept them.
    let past = finished_at.plus_ms(1_000);
    for _ in 0..2 {
        create_accepted(
            RULE,
            &store,
            record(Some(alice.clone()), past, None),
            limits,
            "finished tasks past their retention must not count against the caps: alice's create must succeed",
        )
        .await;
    }
    create_refused(
        RULE,
        &store,
        record(Some(Principal::from("carol")), past, None),
        limits,
        Limit::Rows,
        "live records keep counting: three live records at max_rows 3 must refuse with LimitReached(Limit::Rows)",
    )
    .await;
    // Without a retention in the limits, retired records count until `cleanup`.
    let dave = Principal::from("dave");
    let one = CreateLimits::new(None, Some(1));
    let r = record(Some(dave.clone()), past, None);
    let id = r.id;
    create(RULE, &store, r, one).await;
    update(RULE, &store, &id, Scope::Any, &Transition::Cancel, past).await;
    create_refused(
        RULE,
        &store,
        record(Some(dave), past.plus_ms(HOUR_MS), None),
        one,
        Limit::PerOwner,
        "without CreateLimits::retention a retired record keeps counting until cleanup: dave at his cap of 1 must be refused with LimitReached(Limit::PerOwner)",
    )
    .await;
}

/// `visible` answers, in one call, which of many ids `get` would find: existing,
/// unexpired and visible in the scope, in the order given, each once; unknown,
/// foreign and expired ids are absent.
pub async fn visible_lists_only_visible_ids<S: TaskStore>(store: S) {
    const RULE: &str = "visible_lists_only_visible_ids";
    for case in visibility_cases(RULE, &store).await {
        match store.visible(&case.ids, case.scope(), case.at).await {
            Ok(found) => assert_eq!(
                found, case.expected,
                "[{RULE}] visible must list {}, in the order asked, each once",
                case.what
            ),
            Err(e) => panic!("[{RULE}] visible failed: {e}"),
        }
    }
    match store.visible(&[], Scope::Any, Timestamp::now()).await {
        Ok(found) => assert!(found.is_empty(), "[{RULE}] no ids asked, none found"),
        Err(e) => panic!("[{RULE}] visible of no ids failed: {e}"),
    }
}

/// `get_many` returns, in one call, the records `get` would return for many ids:
/// existing, unexpired and visible in the scope, in the order given, each once,
/// each exactly as stored; unknown, foreign and expired ids are absent.
pub async fn get_many_reads_only_visible_records<S: TaskStore>(store: S) {
    const RULE: &str = "get_many_reads_only_visible_records";
    for case in visibility_cases(RULE, &store).await {
        match store.get_many(&case.ids, case.scope(), case.at).await {
            Ok(found) => {
                let ids: Vec<crate::task::TaskId> = found.iter().map(|r| r.id).collect();
                assert_eq!(
                    ids, case.expected,
                    "[{RULE}] get_many must return {}, in the order asked, each once",
                    case.what
                );
                for record in found {
                    let one = store.get(&record.id, Scope::Any, case.at).await;
                    match one {
                        Ok(Some(one)) => assert_eq!(
                            record, one,
                            "[{RULE}] get_many must return each record as get does"
                        ),
                        other => panic!("[{RULE}] get of a record get_many found: {other:?}"),
                    }
                }
            }
            Err(e) => panic!("[{RULE}] get_many failed: {e}"),
        }
    }
    match store.get_many(&[], Scope::Any, Timestamp::now()).await {
        Ok(found) => assert!(found.is_empty(), "[{RULE}] no ids asked, none found"),
        Err(e) => panic!("[{RULE}] get_many of no ids failed: {e}"),
    }
}

/// `get_many_within` returns what `get_many` returns while the records found fit
/// the budget together, and nothing but [`Budgeted::OverBudget`] once they pass it:
/// records of twice the budget are refused, records of half of it are all returned,
/// what is returned never takes more than the budget, and foreign, expired and
/// unknown ids count for nothing however large their records.
pub async fn get_many_within_stops_at_the_budget<S: TaskStore>(store: S) {
    const RULE: &str = "get_many_within_stops_at_the_budget";
    const RESULT_BYTES: usize = 64 * 1024;
    const BIG_BYTES: usize = 1024 * 1024;
    for case in visibility_cases(RULE, &store).await {
        let many = store.get_many(&case.ids, case.scope(), case.at).await;
        let within = store
            .get_many_within(&case.ids, case.scope(), case.at, usize::MAX)
            .await;
        match (many, within) {
            (Ok(many), Ok(Budgeted::Within(within))) => assert_eq!(
                within, many,
                "[{RULE}] without a bound, get_many_within must return what get_many does: {}",
                case.what
            ),
            other => panic!("[{RULE}] an unbounded read of {}: {other:?}", case.what),
        }
    }

    let now = Timestamp::now();
    let later = now.plus_ms(1_000);
    let alice = Principal::from("alice");
    let text = |bytes: usize| json!({"content": [{"type": "text", "text": "x".repeat(bytes)}]});
    let mut mine = Vec::new();
    for _ in 0..4 {
        mine.push(finished(RULE, &store, Some(&alice), now, HOUR_MS, text(RESULT_BYTES)).await);
    }
    // Sized beyond every budget below, each of them.
    let bobs = finished(
        RULE,
        &store,
        Some(&Principal::from("bob")),
        now,
        HOUR_MS,
        text(BIG_BYTES),
    )
    .await;
    let expiring = finished(RULE, &store, Some(&alice), now, 1_000, text(BIG_BYTES)).await;
    let size: usize = mine.iter().map(encoded_len).sum();
    let mut ids: Vec<TaskId> = mine.iter().map(|r| r.id).collect();
    ids.extend([bobs.id, expiring.id, TaskId::random(), mine[0].id]);
    let expected: Vec<TaskId> = mine.iter().map(|r| r.id).collect();
    let read = |scope, at, budget| {
        let ids = &ids;
        let store = &store;
        async move {
            store
                .get_many_within(ids, scope, at, budget)
                .await
                .unwrap_or_else(|e| panic!("[{RULE}] get_many_within failed: {e}"))
        }
    };
    let mine_scope = Scope::Owner(Some(&alice));

    match read(mine_scope, later, 2 * size).await {
        Budgeted::Within(found) => {
            let found_ids: Vec<TaskId> = found.iter().map(|r| r.id).collect();
            assert_eq!(
                found_ids, expected,
                "[{RULE}] alice's live records, at half the budget, must all be returned in the order asked, each once; bob's and the expired one must not count"
            );
            let taken: usize = found.iter().map(encoded_len).sum();
            assert!(
                taken <= 2 * size,
                "[{RULE}] the records returned take {taken} bytes, over the budget {}",
                2 * size
            );
        }
        Budgeted::OverBudget => panic!(
            "[{RULE}] alice's live records take {size} bytes, half the budget: bob's record and her expired one must not count against it"
        ),
    }
    match read(mine_scope, later, size / 2).await {
        Budgeted::OverBudget => {}
        Budgeted::Within(found) => panic!(
            "[{RULE}] alice's records take {size} bytes, twice the budget {}: the read must be OverBudget, got {} records",
            size / 2,
            found.len()
        ),
    }
    match read(mine_scope, now, 2 * size).await {
        Budgeted::OverBudget => {}
        Budgeted::Within(found) => panic!(
            "[{RULE}] before it expires, alice's 1 MiB record counts: the read must be OverBudget, got {} records",
            found.len()
        ),
    }
    match read(Scope::Owner(None), now, 0).await {
        Budgeted::Within(found) => assert!(
            found.is_empty(),
            "[{RULE}] an unauthenticated caller finds none of these records"
        ),
        Budgeted::OverBudget => panic!(
            "[{RULE}] records the caller cannot see must not count against its budget, even a budget of 0"
        ),
    }
    match read(Scope::Any, later, BIG_BYTES / 2).await {
        Budgeted::OverBudget => {}
        Budgeted::Within(found) => panic!(
            "[{RULE}] with Scope::Any bob's 1 MiB record counts against a budget of 512 KiB: the read must be OverBudget, got {} records",
            found.len()
        ),
    }
    match store
        .get_many_within(&[], Scope::Any, Timestamp::now(), 0)
        .await
    {
        Ok(Budgeted::Within(found)) => assert!(found.is_empty()),
        other => panic!("[{RULE}] get_many_within of no ids: {other:?}"),
    }
}

/// Creates a task of `owner`'s with a TTL, completes it with `result`, and returns
/// it as stored.
async fn finished<S: TaskStore>(
    rule: &str,
    store: &S,
    owner: Option<&Principal>,
    now: Timestamp,
    ttl_ms: u64,
    result: serde_json::Value,
) -> TaskRecord {
    let r = record(owner.cloned(), now, Some(ttl_ms));
    let id = r.id;
    create(rule, store, r, CreateLimits::default()).await;
    let done = Transition::Complete {
        result,
        message: None,
    };
    match update(rule, store, &id, Scope::Any, &done, now).await {
        Some(updated) if updated.changed() => updated.record,
        other => panic!("[{rule}] completing a working task must be applied: {other:?}"),
    }
}

/// One batched read to check: the ids asked, who asks and when, and what it finds.
struct VisibilityCase {
    ids: Vec<crate::task::TaskId>,
    owner: Option<Option<Principal>>,
    at: Timestamp,
    expected: Vec<crate::task::TaskId>,
    what: &'static str,
}

impl VisibilityCase {
    fn scope(&self) -> Scope<'_> {
        match &self.owner {
            None => Scope::Any,
            Some(owner) => Scope::Owner(owner.as_ref()),
        }
    }
}

/// Stores alice's tasks (one expiring after 1 s), bob's and an unowned one, and
/// returns reads over them and an unknown id, with what each must find.
async fn visibility_cases<S: TaskStore>(rule: &str, store: &S) -> Vec<VisibilityCase> {
    let now = Timestamp::now();
    let later = now.plus_ms(1_000);
    let alice = Principal::from("alice");
    let mine = record(Some(alice.clone()), now, Some(HOUR_MS));
    let mine_short = record(Some(alice.clone()), now, Some(1_000));
    let bobs = record(Some(Principal::from("bob")), now, None);
    let anonymous = record(None, now, Some(HOUR_MS));
    for r in [&mine, &mine_short, &bobs, &anonymous] {
        create(rule, store, r.clone(), CreateLimits::default()).await;
    }
    let unknown = crate::task::TaskId::random();
    let ids = vec![
        unknown,
        mine_short.id,
        bobs.id,
        mine.id,
        anonymous.id,
        mine_short.id,
    ];
    let case = |owner, at, expected, what| VisibilityCase {
        ids: ids.clone(),
        owner,
        at,
        expected,
        what,
    };
    vec![
        case(
            Some(Some(alice.clone())),
            now,
            vec![mine_short.id, mine.id],
            "alice's live ids",
        ),
        case(
            Some(Some(alice)),
            later,
            vec![mine.id],
            "alice's ids once one expired",
        ),
        case(
            Some(None),
            now,
            vec![anonymous.id],
            "the unowned ids for an unauthenticated caller",
        ),
        case(
            None,
            later,
            vec![bobs.id, mine.id, anonymous.id],
            "every unexpired id with Scope::Any",
        ),
    ]
}
