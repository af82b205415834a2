//! The gateway's settings: command-line flags, each with an environment variable
//! it falls back to (`flags.rs`, which `--help` is printed from), all checked
//! before anything starts.

mod flags;
#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderName, Uri};
use mcp_tasks::store::NodeId;

use crate::auth::{Hs256, PrincipalSource};
use crate::bridge::BridgeConfig;
use crate::federate::{FederationConfig, MIN_KEY_BYTES};
use crate::proxy::ProxyConfig;
use flags::{Raw, Read};

pub(crate) use flags::help;

/// How logs are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// The store and this node's place among those sharing it.
#[derive(Clone, Debug)]
pub(crate) struct StoreConfig {
    /// `memory`, or the database's URL.
    pub(crate) url: String,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) table: Option<String>,
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) prefix: Option<String>,
    pub(crate) node: Option<NodeId>,
    pub(crate) lease: Option<Duration>,
}

/// Everything the gateway runs with.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) upstream: Uri,
    pub(crate) principal: PrincipalSource,
    pub(crate) listen: SocketAddr,
    pub(crate) store: StoreConfig,
    /// Every tool's `Auto` deadline.
    pub(crate) auto_after: Duration,
    /// The deadlines of tools that have their own.
    pub(crate) auto_after_tools: Vec<(String, Duration)>,
    pub(crate) task_required: Vec<String>,
    pub(crate) task_tools: bool,
    /// The upstream's own tasks, carried under handles.
    pub(crate) federation: FederationConfig,
    pub(crate) proxy: ProxyConfig,
    pub(crate) bridge: BridgeConfig,
    pub(crate) drain_grace: Duration,
    pub(crate) log_format: LogFormat,
    pub(crate) log_filter: String,
}

impl Config {
    /// The `Auto` deadline of `tool`.
    pub(crate) fn auto_after_of(&self, tool: &str) -> Duration {
        self.auto_after_tools
            .iter()
            .rev()
            .find(|(name, _)| name == tool)
            .map_or(self.auto_after, |(_, after)| *after)
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Parsed {
    Run(Box<Config>),
    Help,
    Version,
}

/// Reads the command line (`args`, without the program name), falling back to
/// `env` for each flag not given there, and checks every value.
pub(crate) fn parse(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Parsed, String> {
    match flags::read(args, env)? {
        Read::Flags(raw) => Ok(Parsed::Run(Box::new(config(&raw)?))),
        Read::Help => Ok(Parsed::Help),
        Read::Version => Ok(Parsed::Version),
    }
}

/// The typed settings from the raw values.
fn config(raw: &Raw) -> Result<Config, String> {
    let Some((upstream, from)) = raw.one("upstream") else {
        return Err(
            "--upstream (or MCP_UPSTREAM) is required: the MCP server's URL, \
                    e.g. http://127.0.0.1:3002/mcp"
                .into(),
        );
    };
    let upstream = upstream_url(upstream).map_err(|e| format!("{from}: {e}"))?;
    let principal = principal(raw)?;
    let listen = raw.read(
        "listen",
        SocketAddr::from(([127, 0, 0, 1], 3003)),
        |value| {
            value
                .parse()
                .map_err(|_| format!("{value:?} is not an address such as 127.0.0.1:3003"))
        },
    )?;
    let store = store(raw)?;

    let mut auto_after = Duration::from_millis(250);
    let mut auto_after_tools = Vec::new();
    for (value, from) in raw.all("auto-after") {
        match value.split_once('=') {
            None => auto_after = duration(value).map_err(|e| format!("{from}: {e}"))?,
            Some((tool, after)) => {
                let tool = tool.trim();
                if tool.is_empty() {
                    return Err(format!("{from}: {value:?} names no tool before '='"));
                }
                let after = duration(after).map_err(|e| format!("{from}: {tool}: {e}"))?;
                auto_after_tools.push((tool.to_owned(), after));
            }
        }
    }
    let task_required = raw
        .all("task-required")
        .map(|(tool, _)| tool.to_owned())
        .collect();
    let task_tools = raw.read("task-tools", false, on_off)?;

    let federation = FederationConfig {
        upstream_tasks: raw.read("upstream-tasks", true, on_off)?,
        handle_key: raw.read("task-handle-key", None, |key| {
            if key.len() < MIN_KEY_BYTES {
                return Err(format!(
                    "the key must be at least {MIN_KEY_BYTES} bytes (e.g. `openssl rand -base64 48`)"
                ));
            }
            Ok(Some(key.as_bytes().to_vec()))
        })?,
    };

    let mut proxy = ProxyConfig::default();
    for (name, from) in raw.all("forward-header") {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{from}: {name:?} is not a header name"))?;
        proxy.forward.push(header);
    }
    let timeout = |name, default: Option<Duration>| {
        raw.read(name, default, |value| {
            duration(value).map(|limit| Some(limit).filter(|limit| !limit.is_zero()))
        })
    };
    proxy.connect_timeout = timeout("upstream-connect-timeout", proxy.connect_timeout)?;
    proxy.response_timeout = timeout("upstream-response-timeout", proxy.response_timeout)?;

    let mut bridge = BridgeConfig::default();
    bridge.max_sessions =
        raw.read(
            "upstream-max-sessions",
            bridge.max_sessions,
            |value| match value.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{value:?} is not a positive number")),
            },
        )?;
    bridge.session_idle = raw.read("upstream-session-idle", bridge.session_idle, positive)?;
    bridge.input_timeout = raw.read("upstream-input-timeout", bridge.input_timeout, positive)?;

    let drain_grace = raw.read("drain-grace", Duration::from_secs(10), duration)?;
    let log_format = raw.read("log-format", LogFormat::Text, |value| match value {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!("{other:?} is neither text nor json")),
    })?;
    let log_filter = raw.read("log-filter", "info".to_owned(), |value| {
        tracing_subscriber::EnvFilter::try_new(value)
            .map(|_| value.to_owned())
            .map_err(|e| format!("{value:?} is not a log filter: {e}"))
    })?;

    Ok(Config {
        upstream,
        principal,
        listen,
        store,
        auto_after,
        auto_after_tools,
        task_required,
        task_tools,
        federation,
        proxy,
        bridge,
        drain_grace,
        log_format,
        log_filter,
    })
}

/// A switch: on or off (also 1 or 0, true or false).
fn on_off(value: &str) -> Result<bool, String> {
    match value {
        "on" | "1" | "true" => Ok(true),
        "off" | "0" | "false" => Ok(false),
        other => Err(format!("{other:?} is neither on nor off")),
    }
}

/// An `http://` URL with a host.
fn upstream_url(url: &str) -> Result<Uri, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(format!(
            "{url:?} must be an http:// URL with a host (TLS to the upstream is not supported)"
        ));
    }
    Ok(uri)
}

/// How the principal is found: `--principal` and the flags of its mode.
fn principal(raw: &Raw) -> Result<PrincipalSource, String> {
    let Some((mode, from)) = raw.one("principal") else {
        return Err(
            "--principal (or MCP_PRINCIPAL) is required: bearer-jwt, header or none \
                    (who owns a task must be chosen, not assumed)"
                .into(),
        );
    };
    let only_for = |name: &str, wanted: &str| match raw.get(name) {
        Some(given) => Err(format!("{}: only for --principal {wanted}", given.from)),
        None => Ok(()),
    };
    match mode {
        "bearer-jwt" => {
            only_for("principal-header", "header")?;
            let key = match (raw.one("jwt-secret"), raw.one("jwt-secret-file")) {
                (Some(_), Some((_, file))) => {
                    return Err(format!(
                        "{file}: give the JWT key once, not also as a secret"
                    ));
                }
                (Some((secret, _)), None) => secret.as_bytes().to_vec(),
                (None, Some((path, from))) => {
                    let mut key = std::fs::read(path)
                        .map_err(|e| format!("{from}: cannot read {path:?}: {e}"))?;
                    if key.last() == Some(&b'\n') {
                        key.pop();
                    }
                    key
                }
                (None, None) => {
                    return Err(
                        "--principal bearer-jwt needs --jwt-secret or --jwt-secret-file \
                                (or MCP_JWT_SECRET, MCP_JWT_SECRET_FILE)"
                            .into(),
                    );
                }
            };
            Ok(PrincipalSource::BearerJwt(Hs256::new(&key)?))
        }
        "header" => {
            only_for("jwt-secret", "bearer-jwt")?;
            only_for("jwt-secret-file", "bearer-jwt")?;
            let Some((name, from)) = raw.one("principal-header") else {
                return Err("--principal header needs --principal-header (or \
                            MCP_PRINCIPAL_HEADER): the header a trusted proxy sets"
                    .into());
            };
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{from}: {name:?} is not a header name"))?;
            Ok(PrincipalSource::Header(name))
        }
        "none" => {
            only_for("principal-header", "header")?;
            only_for("jwt-secret", "bearer-jwt")?;
            only_for("jwt-secret-file", "bearer-jwt")?;
            Ok(PrincipalSource::None)
        }
        other => Err(format!(
            "{from}: {other:?} is not bearer-jwt, header or none"
        )),
    }
}

/// The store's URL, checked against the backends this build has.
fn store(raw: &Raw) -> Result<StoreConfig, String> {
    let url = raw.read("store", "memory".to_owned(), |url| {
        let backend = if url == "memory" {
            return Ok(url.to_owned());
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (cfg!(feature = "postgres"), "postgres")
        } else if url.starts_with("redis://") || url.starts_with("rediss://") {
            (cfg!(feature = "redis"), "redis")
        } else {
            return Err(format!(
                "{url:?} is not memory, a postgres:// URL or a redis:// URL"
            ));
        };
        match backend {
            (true, _) => Ok(url.to_owned()),
            (false, feature) => Err(format!(
                "this build has no {feature} store: install with --features {feature}"
            )),
        }
    })?;
    let node = raw.read("node-id", None, |id| {
        NodeId::new(id)
            .map(Some)
            .ok_or_else(|| format!("{id:?} is not 1 to 128 characters without NUL"))
    })?;
    Ok(StoreConfig {
        url,
        table: raw.one("store-table").map(|(table, _)| table.to_owned()),
        prefix: raw.one("store-prefix").map(|(prefix, _)| prefix.to_owned()),
        node,
        lease: raw.read("worker-lease", None, |value| positive(value).map(Some))?,
    })
}

/// A duration: milliseconds, or a whole number with `ms`, `s` or `m`.
pub(crate) fn duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let (number, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => value.split_at(at),
        None => (value, "ms"),
    };
    let wrong = || format!("{value:?} is not a duration (250, 250ms, 30s or 2m)");
    let number: u64 = number.parse().map_err(|_| wrong())?;
    let millis = match unit {
        "ms" => Some(number),
        "s" => number.checked_mul(1000),
        "m" => number.checked_mul(60_000),
        _ => None,
    };
    millis.map(Duration::from_millis).ok_or_else(wrong)
}

/// A duration above zero.
fn positive(value: &str) -> Result<Duration, String> {
    match duration(value)? {
        Duration::ZERO => Err(format!("{value:?} must be above zero")),
        positive => Ok(positive),
    }
}
