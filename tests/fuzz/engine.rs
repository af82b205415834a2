//! The fuzz harness's engine, on the stable toolchain and without extra crates: a
//! seeded PRNG (SplitMix64), the corpus loader, byte-level and JSON-structure
//! mutations, the time budget, and the case loop that prints each failing case's
//! seed and saves its input under `fuzz/crashes/`.
//!
//! - `FUZZ_SECS`: the budget per target, in seconds (default 2, so that the normal
//!   `cargo test` stays fast; CI's fuzz step sets 20).
//! - `FUZZ_SEED`: replays exactly one case, the one a failure printed.
//! - `FUZZ_BASE`: the base seed of a run (default: from the clock, printed).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

/// SplitMix64: small, fast, and good enough to pick mutations.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True one time in `n`.
    pub(crate) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A length skewed towards small values, up to `max`.
    pub(crate) fn len(&mut self, max: usize) -> usize {
        match self.below(4) {
            0 => self.below(4),
            1 => self.below(64),
            2 => self.below(1024),
            _ => self.below(max + 1),
        }
    }
}

/// The seed of case `n` of a run with base seed `base`.
pub(crate) fn case_seed(base: u64, n: u64) -> u64 {
    Rng::new(base ^ n.wrapping_mul(0xA24B_AED4_963E_E407)).next_u64()
}

/// The budget per target.
pub(crate) fn budget() -> Duration {
    let secs = std::env::var("FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

/// The seed files of `target`, from `fuzz/corpus/<target>/`, sorted by name.
pub(crate) fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let seeds: Vec<_> = files
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(p).unwrap())
        })
        .collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// Saves a failing input under `fuzz/crashes/<target>-<seed>.bin` and returns the path.
pub(crate) fn save_crash(target: &str, seed: u64, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/crashes");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{target}-{seed:016x}.bin"));
    let _ = std::fs::write(&path, input);
    path
}

/// One run of a target: hands out case seeds for the budget (or the one
/// `FUZZ_SEED` names), and fails the test at the first failing case, printing its
/// seed and saving its input.
#[derive(Debug)]
pub(crate) struct Runner {
    target: &'static str,
    replay: Option<u64>,
    base: u64,
    budget: Duration,
    started: Instant,
    /// Cases handed out so far.
    pub(crate) n: u64,
}

impl Runner {
    pub(crate) fn new(target: &'static str) -> Runner {
        let hex = |s: String| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok();
        let replay = std::env::var("FUZZ_SEED")
            .ok()
            .map(|s| hex(s).expect("FUZZ_SEED is hexadecimal"));
        let base = std::env::var("FUZZ_BASE")
            .ok()
            .and_then(hex)
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        Runner {
            target,
            replay,
            base,
            budget: budget(),
            started: Instant::now(),
            n: 0,
        }
    }

    /// The next case's seed, or `None` when the budget is spent.
    pub(crate) fn next_seed(&mut self) -> Option<u64> {
        let seed = match self.replay {
            Some(seed) if self.n == 0 => seed,
            Some(_) => return None,
            None if self.n > 0 && self.started.elapsed() >= self.budget => return None,
            None => case_seed(self.base, self.n),
        };
        self.n += 1;
        Some(seed)
    }

    /// What case `seed` did with `input`.
    pub(crate) fn record(&self, seed: u64, input: &[u8], outcome: Result<(), String>) {
        if let Err(what) = outcome {
            let target = self.target;
            let path = save_crash(target, seed, input);
            panic!(
                "fuzz target {target}: case FUZZ_SEED={seed:016x} failed: {what}\n\
                 input saved to {} ({} bytes); replay with \
                 FUZZ_SEED={seed:016x} cargo test --test fuzz {target} -- --nocapture",
                path.display(),
                input.len()
            );
        }
    }

    /// Prints the executions.
    pub(crate) fn finish(self) {
        println!(
            "fuzz target {}: {} executions in {:.1} s (FUZZ_BASE={:016x}), 0 failures",
            self.target,
            self.n,
            self.started.elapsed().as_secs_f64(),
            self.base,
        );
    }
}

// ---------------------------------------------------------------------------
// Mutations

/// Raw JSON fragments spliced in where a value goes: deep nesting, lone
/// surrogates, NUL, numbers serde would not keep, invalid UTF-8.
pub(crate) fn raw_fragment(rng: &mut Rng) -> Vec<u8> {
    match rng.below(14) {
        0 => {
            let depth = *rng.pick(&[10_000usize, 129, 1_000, 100_000]);
            let mut v = vec![b'['; depth];
            v.extend(std::iter::repeat_n(b']', depth));
            v
        }
        1 => {
            let depth = *rng.pick(&[10_000usize, 200]);
            let mut v = Vec::new();
            for _ in 0..depth {
                v.extend_from_slice(b"{\"a\":");
            }
            v.push(b'1');
            v.extend(std::iter::repeat_n(b'}', depth));
            v
        }
        2 => br#""\ud800""#.to_vec(),
        3 => br#""\udc00\ud800x""#.to_vec(),
        4 => br#""a\u0000b""#.to_vec(),
        5 => b"\"\xff\xfe\xc3\"".to_vec(),
        6 => b"1e999999".to_vec(),
        7 => b"-0".to_vec(),
        8 => b"123456789012345678901234567890123456789".to_vec(),
        9 => b"18446744073709551616".to_vec(),
        10 => b"-9223372036854775809".to_vec(),
        11 => b"0.0000000000000000000000001".to_vec(),
        12 => {
            let mut v = b"\"".to_vec();
            v.extend(std::iter::repeat_n(b'x', rng.len(1 << 20)));
            v.push(b'"');
            v
        }
        _ => b"\"\\ud83d\\ude00 \xe2\x80\xae\"".to_vec(),
    }
}

const PLACEHOLDER: &str = "@@RAW@@";

/// A random JSON value of any type.
pub(crate) fn any_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 3 { 9 } else { 12 }) {
        0 => Value::Null,
        1 => json!(rng.one_in(2)),
        2 => json!(rng.next_u64() as i64),
        3 => json!(*rng.pick(&[0i64, -1, 1, 7, i64::MAX, i64::MIN, 4_294_967_296])),
        4 => json!(*rng.pick(&[0.5f64, -1.5, 1e300, f64::MIN_POSITIVE])),
        5 => json!(""),
        6 => json!("x".repeat(rng.len(100_000))),
        7 => json!(any_string(rng)),
        8 => Value::String(PLACEHOLDER.into()),
        9 => Value::Array(
            (0..rng.below(4))
                .map(|_| any_value(rng, depth + 1))
                .collect(),
        ),
        10 => {
            let mut m = Map::new();
            for _ in 0..rng.below(4) {
                m.insert(any_string(rng), any_value(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => json!({"nested": [any_value(rng, depth + 1)]}),
    }
}

/// A short string from a dictionary of the protocol's words, or random text.
pub(crate) fn any_string(rng: &mut Rng) -> String {
    const WORDS: &[&str] = &[
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "tasks/list",
        "tasks/result",
        "tools/call",
        "tools/list",
        "server/discover",
        "subscriptions/listen",
        "notifications/cancelled",
        "2026-07-28",
        "2025-11-25",
        "2.0",
        "1.0",
        "taskId",
        "inputResponses",
        "_meta",
        "params",
        "method",
        "id",
        "jsonrpc",
        "io.modelcontextprotocol/tasks",
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientCapabilities",
        "io.modelcontextprotocol/subscriptionId",
        "extensions",
        "notifications",
        "taskIds",
        "toolsListChanged",
        "greet",
        "work",
        "sse",
        "sse_task",
        "respond_task",
        "task_only",
        "never",
        "auto",
        "__proto__",
        "\u{0}",
        "\u{feff}",
        "é",
        "=?base64?dGFza3MvZ2V0?=",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ];
    if rng.one_in(4) {
        (0..rng.below(12))
            .map(|_| char::from_u32(rng.below(0x11_0000) as u32).unwrap_or('\u{fffd}'))
            .collect()
    } else {
        (*rng.pick(WORDS)).to_owned()
    }
}

/// One structural mutation somewhere inside `value`.
pub(crate) fn mutate_json(rng: &mut Rng, value: &mut Value, depth: usize) {
    let descend = depth < 8 && rng.below(3) != 0;
    match value {
        Value::Object(map) if descend && !map.is_empty() => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = rng.pick(&keys).clone();
            match rng.below(8) {
                0 => {
                    map.remove(&key);
                }
                1 => {
                    let v = any_value(rng, depth);
                    map.insert(any_string(rng), v);
                }
                2 => {
                    let v = map[&key].clone();
                    map.insert(format!("{key}{}", any_string(rng)), v);
                }
                _ => mutate_json(rng, map.get_mut(&key).unwrap(), depth + 1),
            }
        }
        Value::Array(items) if descend && !items.is_empty() => {
            let i = rng.below(items.len());
            match rng.below(6) {
                0 => {
                    items.remove(i);
                }
                1 => {
                    let v = items[i].clone();
                    let copies = rng.len(1_200);
                    items.extend(std::iter::repeat_n(v, copies));
                }
                2 => items.push(any_value(rng, depth)),
                _ => mutate_json(rng, &mut items[i], depth + 1),
            }
        }
        _ => *value = any_value(rng, depth),
    }
}

/// `value` as bytes, each placeholder string replaced by a raw fragment.
pub(crate) fn serialize(rng: &mut Rng, value: &Value) -> Vec<u8> {
    let text = serde_json::to_vec(value).unwrap();
    let quoted = format!("\"{PLACEHOLDER}\"");
    let quoted = quoted.as_bytes();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(quoted) {
            out.extend(raw_fragment(rng));
            i += quoted.len();
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

/// Byte-level mutations, `rounds` of them.
pub(crate) fn mutate_bytes(rng: &mut Rng, data: &mut Vec<u8>, rounds: usize, dict: &[&[u8]]) {
    for _ in 0..rounds {
        let len = data.len();
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = rng.next_u64() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                let b = *rng.pick(&[
                    0u8, b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', 0xff, 0xc0, b'\r', b'\n',
                ]);
                data.insert(i, b);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = rng.below(len - i + 1).min(rng.len(len));
                data.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = rng.below(len - i + 1).min(256);
                let chunk = data[i..i + n].to_vec();
                let at = rng.below(data.len() + 1);
                data.splice(at..at, chunk);
            }
            5 if !dict.is_empty() => {
                let word = *rng.pick(dict);
                let at = rng.below(len + 1);
                data.splice(at..at, word.iter().copied());
            }
            6 if len > 0 => data.truncate(rng.below(len)),
            7 => {
                let at = rng.below(len + 1);
                let frag = raw_fragment(rng);
                data.splice(at..at, frag);
            }
            _ if len > 0 => {
                // An ASCII digit or sign flip: ids and numbers.
                let i = rng.below(len);
                data[i] = *rng.pick(b"0123456789-+.eE");
            }
            _ => data.push(rng.next_u64() as u8),
        }
    }
}

/// Whether `value` is one valid JSON-RPC response object.
pub(crate) fn check_response_object(value: &Value) -> Result<(), String> {
    let Some(obj) = value.as_object() else {
        return Err(format!("not an object: {}", short(&value.to_string())));
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(format!("no jsonrpc 2.0: {}", short(&value.to_string())));
    }
    if !obj.contains_key("id") {
        return Err(format!("no id: {}", short(&value.to_string())));
    }
    match (obj.get("result"), obj.get("error")) {
        (Some(_), None) => Ok(()),
        (None, Some(error)) => {
            if error["code"].is_i64() && error["message"].is_string() {
                Ok(())
            } else {
                Err(format!("a malformed error: {}", short(&value.to_string())))
            }
        }
        _ => Err(format!(
            "not exactly one of result and error: {}",
            short(&value.to_string())
        )),
    }
}

/// At most 300 characters of `s`.
pub(crate) fn short(s: &str) -> String {
    if s.len() <= 300 {
        s.to_owned()
    } else {
        let mut end = 300;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… ({} bytes)", &s[..end], s.len())
    }
}
