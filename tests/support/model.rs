//! One model of a task's state machine, written from the specification's rules and
//! not from the implementation, for the property tests of `TaskRecord::apply`
//! (`prop_state_machine`) and of the stores (`prop_stores`).

use std::collections::{BTreeMap, BTreeSet};

use mcp_tasks::error::TransitionError;
use mcp_tasks::store::{Applied, ErrorObject, Transition};
use mcp_tasks::{TaskRecord, TaskStatus};
use serde_json::{Map, Value};

/// The outcome of a transition, as the model predicts it. `Invalid` carries no
/// reason: the model checks only that the transition was refused as malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Changed,
    Unchanged,
    Terminal,
    Duplicate(BTreeSet<String>),
    Invalid,
}

impl Outcome {
    pub(crate) fn of(actual: &Result<Applied, TransitionError>) -> Outcome {
        match actual {
            Ok(Applied::Changed) => Outcome::Changed,
            Ok(Applied::Unchanged) => Outcome::Unchanged,
            Err(TransitionError::Terminal) => Outcome::Terminal,
            Err(TransitionError::DuplicateKeys(keys)) => {
                let set: BTreeSet<String> = keys.iter().cloned().collect();
                assert_eq!(set.len(), keys.len(), "DuplicateKeys names a key twice");
                Outcome::Duplicate(set)
            }
            Err(TransitionError::Invalid(_)) => Outcome::Invalid,
            Err(other) => panic!("an unexpected refusal: {other:?}"),
        }
    }
}

/// Whether `status` is final.
pub(crate) fn terminal(status: TaskStatus) -> bool {
    matches!(
        status,
        TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
    )
}

/// What the rules say a task is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Model {
    pub(crate) status: TaskStatus,
    pub(crate) message: Option<String>,
    pub(crate) outstanding: BTreeMap<String, Value>,
    pub(crate) issued: BTreeSet<String>,
    pub(crate) answers: BTreeMap<String, Value>,
    pub(crate) revision: u64,
    pub(crate) updated_at: u64,
    pub(crate) result: Option<Value>,
    pub(crate) error: Option<ErrorObject>,
    pub(crate) cancel_requested: bool,
}

pub(crate) const METHODS: [&str; 3] =
    ["elicitation/create", "sampling/createMessage", "roots/list"];

/// The rule for one input request: an object of `method` (one of [`METHODS`]) and
/// optionally `params` (an object), nothing else.
pub(crate) fn valid_request(request: &Value) -> bool {
    let Some(object) = request.as_object() else {
        return false;
    };
    let method_ok =
        matches!(object.get("method"), Some(Value::String(m)) if METHODS.contains(&m.as_str()));
    let params_ok = match object.get("params") {
        None => true,
        Some(p) => p.is_object(),
    };
    let only_known = object.keys().all(|k| k == "method" || k == "params");
    method_ok && params_ok && only_known
}

impl Model {
    pub(crate) fn new(created_at: u64) -> Model {
        Model {
            status: TaskStatus::Working,
            message: None,
            outstanding: BTreeMap::new(),
            issued: BTreeSet::new(),
            answers: BTreeMap::new(),
            revision: 0,
            updated_at: created_at,
            result: None,
            error: None,
            cancel_requested: false,
        }
    }

    /// Applies `transition` at `now` by the rules.
    pub(crate) fn step(&mut self, transition: &Transition, now: u64) -> Outcome {
        let outcome = self.decide(transition);
        if outcome == Outcome::Changed {
            self.revision += 1;
            self.updated_at = self.updated_at.max(now);
        }
        outcome
    }

    fn decide(&mut self, transition: &Transition) -> Outcome {
        let done = terminal(self.status);
        match transition {
            Transition::Progress { message } => {
                if done {
                    return Outcome::Terminal;
                }
                self.message = Some(message.clone());
                Outcome::Changed
            }
            Transition::RequireInput { requests, message } => {
                if done {
                    return Outcome::Terminal;
                }
                if requests.is_empty()
                    || requests
                        .iter()
                        .any(|(k, r)| k.is_empty() || !valid_request(r))
                {
                    return Outcome::Invalid;
                }
                let reused: BTreeSet<String> = requests
                    .keys()
                    .filter(|k| self.issued.contains(*k))
                    .cloned()
                    .collect();
                if !reused.is_empty() {
                    return Outcome::Duplicate(reused);
                }
                for (k, r) in requests {
                    self.issued.insert(k.clone());
                    self.outstanding.insert(k.clone(), r.clone());
                }
                self.status = TaskStatus::InputRequired;
                if let Some(m) = message {
                    self.message = Some(m.clone());
                }
                Outcome::Changed
            }
            Transition::Complete { result, message } => {
                if done {
                    return Outcome::Terminal;
                }
                if !result.is_object() {
                    return Outcome::Invalid;
                }
                self.status = TaskStatus::Completed;
                self.result = Some(result.clone());
                self.outstanding.clear();
                self.message = message.clone();
                Outcome::Changed
            }
            Transition::Fail { error, message } => {
                if done {
                    return Outcome::Terminal;
                }
                self.status = TaskStatus::Failed;
                self.error = Some(error.clone());
                self.outstanding.clear();
                self.message = Some(message.clone().unwrap_or_else(|| "Task failed".to_owned()));
                Outcome::Changed
            }
            Transition::Answer { responses } => {
                if self.status != TaskStatus::InputRequired {
                    return Outcome::Unchanged;
                }
                let relevant: Vec<(&String, &Value)> = responses
                    .iter()
                    .filter(|(k, _)| self.outstanding.contains_key(*k))
                    .collect();
                if relevant.iter().any(|(_, v)| !v.is_object()) {
                    return Outcome::Invalid;
                }
                if relevant.is_empty() {
                    return Outcome::Unchanged;
                }
                for (k, v) in relevant {
                    self.outstanding.remove(k);
                    self.answers.insert(k.clone(), v.clone());
                }
                if self.outstanding.is_empty() {
                    self.status = TaskStatus::Working;
                    self.message = None;
                }
                Outcome::Changed
            }
            Transition::Cancel => {
                if done {
                    return Outcome::Unchanged;
                }
                self.status = TaskStatus::Cancelled;
                self.cancel_requested = true;
                self.outstanding.clear();
                self.message = Some("Cancelled by the client".to_owned());
                Outcome::Changed
            }
            other => panic!("a transition the model does not know: {other:?}"),
        }
    }

    /// What `record` says the task is, in the model's terms.
    pub(crate) fn of(record: &TaskRecord) -> Model {
        let map = |m: &Map<String, Value>| -> BTreeMap<String, Value> {
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        Model {
            status: record.status,
            message: record.status_message.clone(),
            outstanding: map(&record.input_requests),
            issued: record.issued_keys.clone(),
            answers: map(&record.input_responses),
            revision: record.revision,
            updated_at: record.updated_at.as_millis(),
            result: record.result.clone(),
            error: record.error.clone(),
            cancel_requested: record.cancel_requested,
        }
    }

    /// Checks `record` against the model; `Err` says what differs.
    pub(crate) fn check(&self, record: &TaskRecord) -> Result<(), String> {
        let actual = Model::of(record);
        if actual != *self {
            return Err(format!("expected {self:#?}\nactual {actual:#?}"));
        }
        // Invariants that hold whatever happened.
        if record.result.is_some() != (record.status == TaskStatus::Completed) {
            return Err("a result without `completed`, or `completed` without one".into());
        }
        if record.error.is_some() != (record.status == TaskStatus::Failed) {
            return Err("an error without `failed`, or `failed` without one".into());
        }
        if (record.status == TaskStatus::InputRequired) == record.input_requests.is_empty() {
            return Err("`input_required` exactly when requests are outstanding".into());
        }
        if !record
            .input_requests
            .keys()
            .chain(record.input_responses.keys())
            .all(|k| record.issued_keys.contains(k))
        {
            return Err("a request or an answer for a key never issued".into());
        }
        if record
            .input_requests
            .keys()
            .any(|k| record.input_responses.contains_key(k))
        {
            return Err("a key both outstanding and answered".into());
        }
        Ok(())
    }
}
