//! The flags themselves: one table ([`FLAGS`]) that the command line is read
//! against, that `--help` is printed from, and that names each flag's
//! environment variable.

use std::collections::HashMap;
use std::ffi::OsString;

/// One flag: its name without `--`, the placeholder of its value, the variable it
/// falls back to, its default as `--help` shows it, and what it does.
#[derive(Debug)]
pub(crate) struct Flag {
    pub(crate) name: &'static str,
    value: &'static str,
    pub(crate) env: &'static str,
    default: &'static str,
    /// Given more than once (or as a comma-separated list), it adds values.
    many: bool,
    help: &'static str,
}

const fn flag(
    name: &'static str,
    value: &'static str,
    env: &'static str,
    default: &'static str,
    help: &'static str,
) -> Flag {
    Flag {
        name,
        value,
        env,
        default,
        many: false,
        help,
    }
}

const fn many(
    name: &'static str,
    value: &'static str,
    env: &'static str,
    default: &'static str,
    help: &'static str,
) -> Flag {
    Flag {
        name,
        value,
        env,
        default,
        many: true,
        help,
    }
}

/// Every flag, in the order `--help` lists them.
#[rustfmt::skip]
pub(crate) const FLAGS: &[Flag] = &[
    flag("upstream", "URL", "MCP_UPSTREAM", "required",
        "The MCP server to give tasks to: its Streamable HTTP endpoint, an http:// URL."),
    flag("principal", "MODE", "MCP_PRINCIPAL", "required",
        "Who owns a task. bearer-jwt: the `sub` of an HS256 JWT in `Authorization: Bearer` \
         (signature, exp and nbf checked; a missing or bad token gets HTTP 401); \
         header: the value of --principal-header, as a trusted proxy in front sets it; \
         none: no principal (every caller sees every anonymous task)."),
    flag("principal-header", "NAME", "MCP_PRINCIPAL_HEADER", "none",
        "With --principal header: the request header that names the principal."),
    flag("jwt-secret", "SECRET", "MCP_JWT_SECRET", "none",
        "With --principal bearer-jwt: the HS256 key, at least 32 bytes."),
    flag("jwt-secret-file", "PATH", "MCP_JWT_SECRET_FILE", "none",
        "With --principal bearer-jwt: a file holding the key (one trailing newline ignored)."),
    flag("listen", "ADDR", "MCP_ADDR", "127.0.0.1:3003",
        "The address to serve on: /mcp, /healthz, /readyz and /metrics."),
    flag("store", "URL", "MCP_STORE", "memory",
        "Where tasks are kept: memory, a postgres:// URL (feature postgres) or a redis:// \
         URL (feature redis). Gateways on one database serve the same tasks."),
    flag("store-table", "NAME", "MCP_STORE_TABLE", "mcp_tasks",
        "The PostgreSQL table."),
    flag("store-prefix", "PREFIX", "MCP_STORE_PREFIX", "mcp-tasks:",
        "The Redis key prefix."),
    flag("node-id", "ID", "MCP_NODE_ID", "random",
        "This gateway's name among those sharing a store (a host name, say)."),
    flag("worker-lease", "DURATION", "MCP_LEASE_MS", "20s",
        "On a shared store: how long after this gateway stops its unfinished tasks are \
         failed by another (at most 1.25 times this)."),
    many("auto-after", "[TOOL=]DURATION", "MCP_AUTO_AFTER_MS", "250ms",
        "How long a call may run before it becomes a task (the Auto deadline): DURATION \
         for every tool, TOOL=DURATION for one tool. Repeatable."),
    many("task-required", "TOOL", "MCP_TASK_REQUIRED_TOOLS", "none",
        "A tool too long to call without tasks: clients without the tasks extension get \
         -32021 for it. Repeatable."),
    flag("task-tools", "on|off", "MCP_TASK_TOOLS", "off",
        "Adds the tools task_status, task_answer and task_cancel for clients without the \
         tasks extension (the variable also takes 1 or 0)."),
    flag("upstream-tasks", "on|off", "MCP_UPSTREAM_TASKS", "on",
        "Carry the upstream's own tasks (a 2026-07-28 upstream with the tasks extension): \
         their ids reach clients as handles that any gateway with the same key reverses. \
         Off, the upstream's task answers pass as they are and no tasks/* reaches it."),
    flag("task-handle-key", "KEY", "MCP_TASK_HANDLE_KEY", "random",
        "The key (at least 32 bytes) that signs upstream task handles; the same on every \
         replica. Without it, a random key: handles die with the process."),
    many("forward-header", "NAME", "MCP_FORWARD_HEADERS", "none",
        "A request header to pass upstream besides Mcp-*, Content-Type, Accept, User-Agent, \
         Last-Event-ID, traceparent and tracestate (Authorization and Cookie only if named \
         here; with Cookie, the upstream's Set-Cookie comes back). Repeatable."),
    flag("upstream-connect-timeout", "DURATION", "MCP_UPSTREAM_CONNECT_TIMEOUT_MS", "5s",
        "The longest wait for a connection to the upstream (0: none); past it, 504."),
    flag("upstream-response-timeout", "DURATION", "MCP_UPSTREAM_RESPONSE_TIMEOUT_MS", "300s",
        "The longest wait for the upstream's response head (0: none); past it, 504. An \
         upstream that answers with JSON starts only when the call ends: set it above the \
         longest such call."),
    flag("upstream-max-sessions", "N", "MCP_UPSTREAM_MAX_SESSIONS", "1000",
        "For an upstream on 2025-11-25 or earlier: the most sessions open at once."),
    flag("upstream-session-idle", "DURATION", "MCP_UPSTREAM_SESSION_IDLE_MS", "600s",
        "For an upstream on 2025-11-25 or earlier: how long an unused session stays open."),
    flag("upstream-input-timeout", "DURATION", "MCP_UPSTREAM_INPUT_TIMEOUT_MS", "600s",
        "For an upstream on 2025-11-25 or earlier: how long a question put to a client \
         without a task waits for its retry."),
    flag("drain-grace", "DURATION", "MCP_DRAIN_GRACE_MS", "10s",
        "On SIGTERM or Ctrl-C: how long running tasks get to finish before they are failed \
         (retryable) and the process exits."),
    flag("log-format", "text|json", "MCP_LOG_FORMAT", "text",
        "Logs on stderr: text, or one JSON object a line."),
    flag("log-filter", "FILTER", "RUST_LOG", "info",
        "Which logs: a tracing filter such as info,mcp_tasks=debug."),
];

/// What the command line asks for, before the values are checked.
#[derive(Debug)]
pub(super) enum Read {
    Flags(Raw),
    Help,
    Version,
}

/// The values of one flag and where they came from (`--name` or the variable).
#[derive(Debug)]
pub(super) struct Given {
    values: Vec<String>,
    pub(super) from: String,
}

/// The raw values of every flag that was set, on the command line or else in the
/// environment.
#[derive(Debug)]
pub(super) struct Raw(HashMap<&'static str, Given>);

impl Raw {
    pub(super) fn get(&self, name: &str) -> Option<&Given> {
        debug_assert!(FLAGS.iter().any(|f| f.name == name), "no flag --{name}");
        self.0.get(name)
    }

    /// The one value of a flag, with where it came from.
    pub(super) fn one(&self, name: &str) -> Option<(&str, &str)> {
        let given = self.get(name)?;
        Some((given.values.last()?.as_str(), given.from.as_str()))
    }

    /// A flag's value read by `read`, or `default`.
    pub(super) fn read<T>(
        &self,
        name: &str,
        default: T,
        read: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<T, String> {
        match self.one(name) {
            None => Ok(default),
            Some((value, from)) => read(value).map_err(|e| format!("{from}: {e}")),
        }
    }

    /// Every value of a repeatable flag, each with where it came from.
    pub(super) fn all(&self, name: &str) -> impl Iterator<Item = (&str, &str)> {
        self.get(name).into_iter().flat_map(|given| {
            given
                .values
                .iter()
                .map(|value| (value.as_str(), given.from.as_str()))
        })
    }
}

/// Reads the command line (`args`, without the program name), falling back to
/// `env` for each flag not given there.
pub(super) fn read(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Read, String> {
    let mut given: HashMap<&'static str, Given> = HashMap::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg
            .into_string()
            .map_err(|arg| format!("{arg:?} is not valid UTF-8"))?;
        match arg.as_str() {
            "-h" | "--help" => return Ok(Read::Help),
            "-V" | "--version" => return Ok(Read::Version),
            _ => {}
        }
        let Some(flag) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument {arg:?}: settings are --flags"));
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (flag, None),
        };
        let Some(flag) = FLAGS.iter().find(|f| f.name == name) else {
            return Err(format!("unknown flag --{name}"));
        };
        let value = match inline {
            Some(value) => value,
            None => match args.next().map(OsString::into_string) {
                Some(Ok(value)) if !value.starts_with("--") => value,
                Some(Err(value)) => return Err(format!("--{name}: {value:?} is not valid UTF-8")),
                _ => return Err(format!("--{name} needs a value ({})", flag.value)),
            },
        };
        let entry = given.entry(flag.name).or_insert_with(|| Given {
            values: Vec::new(),
            from: format!("--{name}"),
        });
        if flag.many {
            entry.values.extend(list(&value));
        } else if entry.values.is_empty() {
            entry.values.push(value);
        } else {
            return Err(format!("--{name} is given twice"));
        }
    }
    for flag in FLAGS {
        if given.contains_key(flag.name) {
            continue;
        }
        let Some(value) = env(flag.env) else { continue };
        let values = match flag.many {
            true => list(&value),
            false => vec![value],
        };
        given.insert(
            flag.name,
            Given {
                values,
                from: flag.env.to_owned(),
            },
        );
    }
    Ok(Read::Flags(Raw(given)))
}

/// The items of a comma-separated list, trimmed, empty ones dropped.
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The text `--help` prints.
pub(crate) fn help() -> String {
    let name = crate::NAME;
    let paragraph = |text: &str| wrap(text, 80).join("\n") + "\n\n";
    let mut help = paragraph(&format!(
        "{name} {}: tasks (the MCP Tasks extension, 2026-07-28) for any MCP Streamable \
         HTTP server, whatever its language.",
        env!("CARGO_PKG_VERSION"),
    ));
    help.push_str(&format!(
        "Usage: {name} --upstream URL --principal MODE [--FLAG VALUE]...\n\n"
    ));
    help.push_str(&paragraph(
        "Each flag falls back to the environment variable shown; a flag on the command \
         line wins. A DURATION is milliseconds, or a whole number with ms, s or m (250, \
         1500ms, 30s, 2m). A repeatable flag's variable takes a comma-separated list.",
    ));
    help.push_str("Flags:\n");
    for flag in FLAGS {
        help.push_str(&format!(
            "  --{} {}\n      [env {}] [default: {}]\n",
            flag.name, flag.value, flag.env, flag.default
        ));
        for line in wrap(flag.help, 74) {
            help.push_str(&format!("      {line}\n"));
        }
    }
    help.push_str("  -h, --help\n      Prints this help.\n");
    help.push_str("  -V, --version\n      Prints the version.\n\n");
    help.push_str(&paragraph(
        "Endpoints: /mcp (MCP), /healthz (200 while the process runs), /readyz (200, then \
         503 from the start of a drain), /metrics (Prometheus text). SIGTERM or Ctrl-C \
         drains: /readyz turns 503, running tasks get --drain-grace to finish, then the \
         process exits 0. A bad flag or value exits 2.",
    ));
    help.trim_end().to_owned() + "\n"
}

/// `text` cut into lines of at most `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}
