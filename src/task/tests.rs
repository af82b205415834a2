use serde_json::{Map, Value};

use super::id::ID_ALPHABET;
use super::time::{LAST_RFC3339_MS, write_rfc3339};
use super::*;
use crate::error::{InvalidTaskId, TransitionError};

#[test]
fn ids_read_and_write_as_the_base64_crate_does() {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2000 {
        let id = TaskId::random();
        let text = id.to_string();
        assert_eq!(text, URL_SAFE_NO_PAD.encode(id.as_bytes()));
        assert_eq!(text.parse::<TaskId>(), Ok(id));
        // Any text of the length, from the alphabet and a few bytes outside it,
        // the last character any: read exactly when the crate reads it.
        let pool = b"AZaz09-_+/=. \xc3";
        let mut text = text.into_bytes();
        for _ in 0..(next() % 3) {
            let at = (next() % 43) as usize;
            text[at] = pool[(next() % pool.len() as u64) as usize];
        }
        text[42] = ID_ALPHABET[(next() % 64) as usize];
        let mine = std::str::from_utf8(&text).ok().map(str::parse::<TaskId>);
        let theirs = std::str::from_utf8(&text).ok().map(|t| {
            let mut out = [0u8; 34];
            match URL_SAFE_NO_PAD.decode_slice(t, &mut out) {
                Ok(32) => Ok(TaskId::from_bytes(out[..32].try_into().unwrap())),
                _ => Err(InvalidTaskId),
            }
        });
        assert_eq!(mine, theirs, "{:?}", String::from_utf8_lossy(&text));
    }
}
use serde_json::json;

fn record() -> TaskRecord {
    TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1_000))
}

fn form(message: &str) -> Value {
    json!({"method":"elicitation/create","params":{"mode":"form","message":message,
        "requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}})
}

fn requests(keys: &[&str]) -> Map<String, Value> {
    keys.iter().map(|k| (k.to_string(), form(k))).collect()
}

#[test]
fn ids_are_43_url_safe_chars_and_round_trip() {
    let id = TaskId::random();
    let text = id.to_string();
    assert_eq!(text.len(), TaskId::LEN);
    assert!(
        text.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    assert_eq!(text.parse::<TaskId>().unwrap(), id);
    assert_ne!(TaskId::random(), id);
}

#[test]
fn id_debug_is_redacted() {
    let id = TaskId::random();
    let debug = format!("{id:?} {:?}", Some(id));
    assert!(!debug.contains(&id.to_string()));
    assert!(debug.contains("redacted"));
}

#[test]
fn malformed_ids_are_rejected() {
    for bad in ["", "abc", &"a".repeat(44), &"!".repeat(43), &"A".repeat(42)] {
        assert!(bad.parse::<TaskId>().is_err(), "{bad}");
    }
}

#[test]
fn timestamps_format_as_rfc3339_millis() {
    assert_eq!(
        Timestamp::from_millis(1_785_578_400_123).to_rfc3339(),
        "2026-08-01T10:00:00.123Z"
    );
    assert_eq!(
        Timestamp::from_millis(0).to_rfc3339(),
        "1970-01-01T00:00:00.000Z"
    );
}

#[test]
fn timestamps_written_by_hand_match_their_display() {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut times = vec![
        0,
        999,
        1_000,
        86_399_999,
        951_782_400_000,   // 2000-02-29
        4_107_542_400_000, // 2100-03-01
        LAST_RFC3339_MS - 1_000,
        LAST_RFC3339_MS,
        LAST_RFC3339_MS + 1,
        u64::MAX,
    ];
    for _ in 0..20_000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        times.push(seed % (LAST_RFC3339_MS + 10_000));
    }
    for ms in times {
        let mut out = Vec::new();
        write_rfc3339(&mut out, Timestamp::from_millis(ms));
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            Rfc3339(Timestamp::from_millis(ms)).to_string(),
            "{ms}"
        );
    }
}

#[test]
fn task_json_written_by_hand_matches_serde_byte_for_byte() {
    let info = json!({"name": "srv", "version": "1.0"});
    let mut records = Vec::new();
    let mut task = TaskRecord::new(
        TaskId::random(),
        None,
        Timestamp::from_millis(1_785_578_400_123),
    );
    records.push(task.clone());
    task.ttl_ms = Some(60_000);
    task.poll_interval_ms = Some(250);
    task.status_message = Some("quote \" backslash \\ tab \t \u{1} é \u{2028} 😀".into());
    records.push(task.clone());
    let mut asking = task.clone();
    asking
        .apply(
            &Transition::RequireInput {
                requests: requests(&["a", "b\"c"]),
                message: None,
            },
            Timestamp::from_millis(1_785_578_400_500),
        )
        .unwrap();
    records.push(asking);
    let mut done = task.clone();
    done.apply(
        &Transition::Complete {
            result: json!({"content": [{"type": "text", "text": "x\ny"}], "n": 1.5e300}),
            message: None,
        },
        Timestamp::from_millis(1_785_578_401_000),
    )
    .unwrap();
    records.push(done);
    let mut failed = task.clone();
    failed
        .apply(
            &Transition::Fail {
                error: ErrorObject::new(-32603, "boom").with_data(json!({"why": [1, 2]})),
                message: None,
            },
            Timestamp::from_millis(1_785_578_401_000),
        )
        .unwrap();
    records.push(failed.clone());
    failed.error = None;
    records.push(failed);
    let mut cancelled = task.clone();
    cancelled
        .apply(&Transition::Cancel, Timestamp::from_millis(u64::MAX))
        .unwrap();
    records.push(cancelled);
    for record in &records {
        let forms = [
            TaskJson::summary(record),
            TaskJson::detailed(record),
            TaskJson::detailed(record).as_result("complete", None),
            TaskJson::summary(record).as_result("task", Some(&info)),
            TaskJson::detailed(record).as_result("complete", Some(&info)),
        ];
        for form in forms {
            let mut out = Vec::new();
            form.write_json(&mut out);
            assert_eq!(
                std::str::from_utf8(&out).unwrap(),
                serde_json::to_string(&form).unwrap()
            );
        }
    }
}

#[test]
fn detailed_json_always_has_ttl_and_omits_absent_fields() {
    let mut task = record();
    let json = Value::Object(task.to_detailed_json());
    assert_eq!(json["ttlMs"], Value::Null);
    assert!(json.as_object().unwrap().contains_key("ttlMs"));
    for absent in [
        "statusMessage",
        "pollIntervalMs",
        "result",
        "error",
        "inputRequests",
    ] {
        assert!(json.get(absent).is_none(), "{absent}");
    }
    task.ttl_ms = Some(60_000);
    task.poll_interval_ms = Some(500);
    let json = Value::Object(task.to_detailed_json());
    assert_eq!(json["ttlMs"], 60_000);
    assert_eq!(json["pollIntervalMs"], 500);
    assert_eq!(json["status"], "working");
}

#[test]
fn terminal_states_are_final() {
    let mut task = record();
    let done = Transition::Complete {
        result: json!({"content": []}),
        message: None,
    };
    assert_eq!(
        task.apply(&done, Timestamp::from_millis(2_000)),
        Ok(Applied::Changed)
    );
    let revision = task.revision;
    for t in [
        done.clone(),
        Transition::Fail {
            error: ErrorObject::new(-32603, "x"),
            message: None,
        },
        Transition::Progress {
            message: "x".into(),
        },
        Transition::RequireInput {
            requests: requests(&["a"]),
            message: None,
        },
    ] {
        assert_eq!(
            task.apply(&t, Timestamp::from_millis(3_000)),
            Err(TransitionError::Terminal)
        );
    }
    assert_eq!(
        task.apply(&Transition::Cancel, Timestamp::from_millis(3_000)),
        Ok(Applied::Unchanged)
    );
    assert_eq!(task.status, TaskStatus::Completed);
    assert_eq!(task.revision, revision);
}

#[test]
fn partial_answers_keep_input_required_until_all_keys_are_answered() {
    let mut task = record();
    task.apply(
        &Transition::RequireInput {
            requests: requests(&["a", "b"]),
            message: Some("Delete a.txt and b.txt?".into()),
        },
        Timestamp::from_millis(2_000),
    )
    .unwrap();
    let answer = |key: &str| Transition::Answer {
        responses: [(key.to_string(), json!({"action":"accept"}))]
            .into_iter()
            .collect(),
    };
    assert_eq!(
        task.apply(&answer("zzz"), Timestamp::from_millis(2_100)),
        Ok(Applied::Unchanged)
    );
    assert_eq!(
        task.apply(&answer("a"), Timestamp::from_millis(2_200)),
        Ok(Applied::Changed)
    );
    assert_eq!(task.status, TaskStatus::InputRequired);
    assert!(task.input_requests.contains_key("b"));
    assert!(!task.input_requests.contains_key("a"));
    // Still waiting: the question stays the status message.
    assert_eq!(
        task.status_message.as_deref(),
        Some("Delete a.txt and b.txt?")
    );
    assert_eq!(
        task.apply(&answer("a"), Timestamp::from_millis(2_300)),
        Ok(Applied::Unchanged)
    );
    task.apply(&answer("b"), Timestamp::from_millis(2_400))
        .unwrap();
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.status_message, None, "the answered question is gone");
    assert_eq!(task.input_responses.len(), 2);
    assert_eq!(task.updated_at, Timestamp::from_millis(2_400));
}

#[test]
fn input_keys_are_single_use_for_the_whole_life() {
    let mut task = record();
    let ask = |keys: &[&str]| Transition::RequireInput {
        requests: requests(keys),
        message: None,
    };
    task.apply(&ask(&["a"]), Timestamp::from_millis(2)).unwrap();
    assert_eq!(
        task.apply(&ask(&["a", "b"]), Timestamp::from_millis(3)),
        Err(TransitionError::DuplicateKeys(vec!["a".into()]))
    );
    assert!(!task.input_requests.contains_key("b"));
}

#[test]
fn malformed_input_requests_are_rejected() {
    let mut task = record();
    for bad in [
        Map::new(),
        [("k".to_string(), json!("text"))].into_iter().collect(),
        [("k".to_string(), json!({"method":"tools/call"}))]
            .into_iter()
            .collect(),
        [("k".to_string(), json!({"method":"roots/list","id":1}))]
            .into_iter()
            .collect(),
    ] {
        let t = Transition::RequireInput {
            requests: bad,
            message: None,
        };
        assert!(matches!(
            task.apply(&t, Timestamp::from_millis(2)),
            Err(TransitionError::Invalid(_))
        ));
    }
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.revision, 0);
}

#[test]
fn failed_tasks_carry_error_and_never_result() {
    let mut task = record();
    task.apply(
        &Transition::Fail {
            error: ErrorObject::new(-32603, "backend crashed"),
            message: None,
        },
        Timestamp::from_millis(5),
    )
    .unwrap();
    let json = Value::Object(task.to_detailed_json());
    assert_eq!(json["error"]["code"], -32603);
    assert_eq!(json["statusMessage"], "Task failed");
    assert!(json.get("result").is_none());
}

#[test]
fn scopes_separate_owners() {
    let alice = Principal::from("alice");
    let bob = Principal::from("bob");
    assert!(Scope::Owner(Some(&alice)).permits(Some(&alice)));
    assert!(!Scope::Owner(Some(&bob)).permits(Some(&alice)));
    assert!(!Scope::Owner(None).permits(Some(&alice)));
    assert!(!Scope::Owner(Some(&alice)).permits(None));
    assert!(Scope::Owner(None).permits(None));
    assert!(Scope::Any.permits(Some(&alice)));
}
