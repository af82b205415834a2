//! Input requests and answers: outstanding keys, partial answers, single-use keys.

use super::helpers::{
    HOUR_MS, answer_for, create, get, get_found, input_requests, record, update, update_found,
};
use crate::error::TransitionError;
use crate::store::{CreateLimits, TaskStore};
use crate::task::{Applied, Scope, TaskStatus, Timestamp, Transition};

/// Answers for keys that are not outstanding (never issued, already answered, or
/// sent while the task is `working`) are ignored: [`Applied::Unchanged`], no write.
pub async fn answers_for_keys_not_outstanding_are_ignored<S: TaskStore>(store: S) {
    const RULE: &str = "answers_for_keys_not_outstanding_are_ignored";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let early = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["a"]),
        now.plus_ms(1),
    )
    .await;
    assert_eq!(
        early.outcome,
        Ok(Applied::Unchanged),
        "[{RULE}] an answer while the task is working must be ignored"
    );
    assert_eq!(
        early.record.revision, 0,
        "[{RULE}] an ignored answer must not bump the revision"
    );
    let ask = Transition::RequireInput {
        requests: input_requests(&["a", "b"]),
        message: None,
    };
    update(RULE, &store, &id, Scope::Any, &ask, now.plus_ms(2)).await;
    let asked = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(2)).await;
    let stray = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["zzz"]),
        now.plus_ms(3),
    )
    .await;
    assert_eq!(
        stray.outcome,
        Ok(Applied::Unchanged),
        "[{RULE}] an answer for a key never issued must be ignored"
    );
    assert_eq!(
        get(RULE, &store, &id, Scope::Any, now.plus_ms(3))
            .await
            .as_ref(),
        Some(&asked),
        "[{RULE}] an ignored answer must not write anything"
    );
    let first = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["a"]),
        now.plus_ms(4),
    )
    .await;
    assert_eq!(
        first.outcome,
        Ok(Applied::Changed),
        "[{RULE}] an answer for an outstanding key must be applied"
    );
    let again = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["a"]),
        now.plus_ms(5),
    )
    .await;
    assert_eq!(
        again.outcome,
        Ok(Applied::Unchanged),
        "[{RULE}] a second answer for an already answered key must be ignored"
    );
    assert_eq!(
        again.record.revision, first.record.revision,
        "[{RULE}] an ignored answer must not bump the revision"
    );
    let mixed = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["b", "zzz"]),
        now.plus_ms(6),
    )
    .await;
    assert_eq!(
        mixed.outcome,
        Ok(Applied::Changed),
        "[{RULE}] the outstanding part of an answer batch must be applied"
    );
    assert!(
        !mixed.record.input_responses.contains_key("zzz"),
        "[{RULE}] an answer for a key never issued must not be stored"
    );
}

/// Answering some of the outstanding keys keeps the task `input_required` with the
/// rest still outstanding; answering the last one returns it to `working`, with every
/// answer kept.
pub async fn partial_answers_keep_input_required<S: TaskStore>(store: S) {
    const RULE: &str = "partial_answers_keep_input_required";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let ask = Transition::RequireInput {
        requests: input_requests(&["a", "b", "c"]),
        message: None,
    };
    update(RULE, &store, &id, Scope::Any, &ask, now.plus_ms(1)).await;
    for (step, (keys, left)) in [(&["a"][..], &["b", "c"][..]), (&["b"][..], &["c"][..])]
        .into_iter()
        .enumerate()
    {
        update(
            RULE,
            &store,
            &id,
            Scope::Any,
            &answer_for(keys),
            now.plus_ms(2 + step as u64),
        )
        .await;
        let task = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(5)).await;
        assert_eq!(
            task.status,
            TaskStatus::InputRequired,
            "[{RULE}] after answering {keys:?} of [a, b, c] the task must stay input_required"
        );
        let outstanding: Vec<&str> = task.input_requests.keys().map(String::as_str).collect();
        assert_eq!(
            outstanding, left,
            "[{RULE}] after answering {keys:?} the outstanding keys must be {left:?}"
        );
    }
    update(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["c"]),
        now.plus_ms(4),
    )
    .await;
    let task = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(5)).await;
    assert_eq!(
        task.status,
        TaskStatus::Working,
        "[{RULE}] once every key is answered the task must be working again"
    );
    assert!(
        task.input_requests.is_empty(),
        "[{RULE}] no request may stay outstanding"
    );
    let answered: Vec<&str> = task.input_responses.keys().map(String::as_str).collect();
    assert_eq!(
        answered,
        ["a", "b", "c"],
        "[{RULE}] every answer must be kept"
    );
}

/// Input keys are single-use for the task's whole life: asking again with a key that
/// was ever issued (outstanding or answered) is refused with
/// [`TransitionError::DuplicateKeys`] and nothing is written.
pub async fn duplicate_input_keys_rejected<S: TaskStore>(store: S) {
    const RULE: &str = "duplicate_input_keys_rejected";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let ask = |keys: &[&str]| Transition::RequireInput {
        requests: input_requests(keys),
        message: None,
    };
    update(RULE, &store, &id, Scope::Any, &ask(&["a"]), now.plus_ms(1)).await;
    let outstanding = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(1)).await;
    let refused = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &ask(&["a", "b"]),
        now.plus_ms(2),
    )
    .await;
    assert_eq!(
        refused.outcome,
        Err(TransitionError::DuplicateKeys(vec!["a".to_owned()])),
        "[{RULE}] re-issuing an outstanding key must be refused as DuplicateKeys([\"a\"])"
    );
    assert_eq!(
        get(RULE, &store, &id, Scope::Any, now.plus_ms(2))
            .await
            .as_ref(),
        Some(&outstanding),
        "[{RULE}] a refused request batch must not add its other keys"
    );
    update(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["a"]),
        now.plus_ms(3),
    )
    .await;
    let refused = update_found(RULE, &store, &id, Scope::Any, &ask(&["a"]), now.plus_ms(4)).await;
    assert_eq!(
        refused.outcome,
        Err(TransitionError::DuplicateKeys(vec!["a".to_owned()])),
        "[{RULE}] re-issuing an answered key must be refused as DuplicateKeys([\"a\"])"
    );
    let fresh = update_found(RULE, &store, &id, Scope::Any, &ask(&["b"]), now.plus_ms(5)).await;
    assert_eq!(
        fresh.outcome,
        Ok(Applied::Changed),
        "[{RULE}] a never-issued key must be accepted"
    );
}
