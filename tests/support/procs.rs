//! Examples and the gateway binary run as separate processes, for tests that need a
//! real process boundary (an upstream server, a crash, a restart).
//!
//! [`build`] compiles an example once per test binary with a nested
//! `cargo build --example NAME`, [`build_gateway`] the workspace member
//! `mcp-tasks-gateway` with `cargo build -p mcp-tasks-gateway`, both into the target
//! directory this test binary lives in, so that the libraries it already built are
//! reused. [`spawn`] and [`spawn_gateway`] start them with `MCP_ADDR=127.0.0.1:0` and
//! read the bound address from the first output line holding
//! `listening on http://HOST:PORT/mcp` (every one prints one). The process is killed
//! by its PID when the [`Proc`] is dropped, or by [`Proc::kill`].
//!
//! ```ignore
//! let upstream = procs::spawn("retrofit", &[], &[("RUST_LOG", "info")]);
//! let client = Client::new(upstream.addr);
//! ```

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a spawned example may take to print its address.
pub(crate) const STARTUP: Duration = Duration::from_secs(30);

/// The crate features this test binary was built with: building the example with
/// the same ones reuses the compiled library instead of building another variant.
fn own_features() -> Vec<&'static str> {
    let mut features = Vec::new();
    if cfg!(feature = "test-util") {
        features.push("test-util");
    }
    if cfg!(feature = "postgres") {
        features.push("postgres");
    }
    if cfg!(feature = "redis") {
        features.push("redis");
    }
    if cfg!(feature = "metrics") {
        features.push("metrics");
    }
    if cfg!(feature = "client") {
        features.push("client");
    }
    if cfg!(feature = "queue") {
        features.push("queue");
    }
    features
}

/// The target directory and profile directory of this test binary
/// (`<target>/<profile>/deps/<test>`), unless `CARGO_TARGET_DIR` names another.
fn target_and_profile() -> (PathBuf, String) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <target>/<profile>/deps");
    let profile = profile_dir
        .file_name()
        .and_then(|p| p.to_str())
        .unwrap_or("debug")
        .to_owned();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => profile_dir
            .parent()
            .expect("a profile directory inside the target directory")
            .to_path_buf(),
    };
    (target, profile)
}

/// Builds the example `name` with `features` (plus this test binary's own) and
/// returns its executable. Built once per test binary and feature set; concurrent
/// callers wait for the one build. Panics with cargo's output when the build fails.
pub(crate) fn build(name: &str, features: &[&str]) -> PathBuf {
    let wanted = own_features().into_iter().chain(features.iter().copied());
    cargo_build(Target::Example(name), wanted.map(str::to_owned).collect())
}

/// Builds the gateway binary (the workspace member `mcp-tasks-gateway`) with the
/// gateway's `features`, and this test binary's own: the gateway's feature of that
/// name where it has one (`postgres`, `redis`, `metrics`), else the `mcp-tasks`
/// library's, so that the compiled library is reused. Built once per test binary and
/// feature set.
pub(crate) fn build_gateway(features: &[&str]) -> PathBuf {
    let mut wanted: Vec<String> = own_features()
        .into_iter()
        .map(|feature| match feature {
            "postgres" | "redis" | "metrics" => feature.to_owned(),
            library => format!("mcp-tasks/{library}"),
        })
        .collect();
    wanted.extend(features.iter().map(|feature| feature.to_string()));
    cargo_build(Target::Gateway, wanted)
}

/// What [`cargo_build`] builds.
#[derive(Clone, Copy, Debug)]
enum Target<'a> {
    /// An example of the `mcp-tasks` package.
    Example(&'a str),
    /// The `mcp-tasks-gateway` binary.
    Gateway,
}

/// The name of the gateway's package and binary.
const GATEWAY: &str = "mcp-tasks-gateway";

/// Builds `what` with the features `wanted` and returns its executable (once per
/// test binary and feature set; concurrent callers wait for the one build).
fn cargo_build(what: Target<'_>, mut wanted: Vec<String>) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    wanted.sort_unstable();
    wanted.dedup();
    let key = format!("{what:?} {}", wanted.join(","));
    // Held across the build: a second caller waits for it instead of racing cargo.
    let mut built = BUILT
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = built.get(&key) {
        return path.clone();
    }
    let (target, profile) = target_and_profile();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut command = Command::new(cargo);
    command.args(["build", "--quiet"]);
    let (described, path) = match what {
        Target::Example(name) => {
            command.args(["--example", name]);
            (
                format!("--example {name}"),
                Path::new("examples").join(name),
            )
        }
        Target::Gateway => {
            command.args(["-p", GATEWAY, "--bin", GATEWAY]);
            (format!("-p {GATEWAY}"), PathBuf::from(GATEWAY))
        }
    };
    command
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    if !wanted.is_empty() {
        command.args(["--features", &wanted.join(",")]);
    }
    let output = command
        .stdin(Stdio::null())
        .output()
        .expect("cargo could not be started");
    assert!(
        output.status.success(),
        "cargo build {described} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = target.join(&profile).join(path);
    assert!(path.exists(), "cargo built no {}", path.display());
    built.insert(key, path.clone());
    path
}

/// Every line a process wrote on stdout or stderr, in arrival order per stream.
#[derive(Debug, Default)]
struct Output {
    lines: Mutex<Vec<String>>,
    grew: Condvar,
}

impl Output {
    fn push(&self, line: String) {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
        self.grew.notify_all();
    }

    /// The first line for which `find` returns `Some`, waiting up to `timeout`.
    fn wait_for<T>(&self, timeout: Duration, mut find: impl FnMut(&str) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(found) = lines.iter().find_map(|line| find(line)) {
                return Some(found);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            lines = self
                .grew
                .wait_timeout(lines, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Copies each line of `stream` into `output` on a thread of its own.
fn collect(stream: impl Read + Send + 'static, output: Arc<Output>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            output.push(line);
        }
    });
}

/// The address in a `listening on http://HOST:PORT/...` line.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let (_, rest) = line.split_once("listening on http://")?;
    let authority = rest.split(['/', ' ', ',']).next()?;
    authority.parse().ok()
}

/// A running example or gateway. Killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub(crate) struct Proc {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// Its MCP endpoint, `http://ADDR/mcp`.
    pub(crate) url: String,
    child: Child,
    output: Arc<Output>,
}

/// Builds (once) and starts the example `name` with `features`, `MCP_ADDR=127.0.0.1:0`
/// and `env`, and waits until it printed its bound address. Panics with what it
/// printed when it exits or stays silent for [`STARTUP`].
pub(crate) fn spawn(name: &str, features: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut proc = launch(&build(name, features), env);
    proc.await_address(name);
    proc
}

/// Builds (once) and starts the gateway binary with the gateway's `features`, as
/// [`spawn`] does an example. The caller's principal is the whole value of its
/// `Authorization` header (`MCP_PRINCIPAL=header`, `MCP_PRINCIPAL_HEADER=authorization`:
/// `Bearer alice` is one owner, `Bearer bob` another), unless `env`, which comes
/// last, says otherwise.
pub(crate) fn spawn_gateway(features: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut all = vec![
        ("MCP_PRINCIPAL", "header"),
        ("MCP_PRINCIPAL_HEADER", "authorization"),
    ];
    all.extend_from_slice(env);
    start(&build_gateway(features), GATEWAY, &all)
}

/// Starts the executable at `path` as [`spawn`] describes; `name` is for messages.
pub(crate) fn start(path: &Path, name: &str, env: &[(&str, &str)]) -> Proc {
    let mut proc = launch(path, env);
    proc.await_address(name);
    proc
}

/// Builds (once) and starts the example `name`, an example that serves nothing
/// (a worker), and waits until it printed a line holding `ready`. Its `addr` is
/// unspecified. Panics with what it printed when it exits or stays silent for
/// [`STARTUP`].
pub(crate) fn spawn_until(
    name: &str,
    features: &[&str],
    env: &[(&str, &str)],
    ready: &str,
) -> Proc {
    let mut proc = launch(&build(name, features), env);
    if !proc.wait_for_line(ready, STARTUP) {
        proc.startup_failed(name, &format!("printed no {ready:?} line"));
    }
    proc
}

/// Starts the executable at `path` with `MCP_ADDR=127.0.0.1:0` and `env`, its
/// output collected.
fn launch(path: &Path, env: &[(&str, &str)]) -> Proc {
    let mut command = Command::new(path);
    command.env("MCP_ADDR", "127.0.0.1:0");
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} could not be started: {e}", path.display()));
    let output = Arc::new(Output::default());
    collect(child.stdout.take().expect("piped stdout"), output.clone());
    collect(child.stderr.take().expect("piped stderr"), output.clone());
    Proc {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        url: String::new(),
        child,
        output,
    }
}

impl Proc {
    /// Waits until it printed its bound address, and keeps it; panics as
    /// [`Proc::startup_failed`] when it does not within [`STARTUP`].
    fn await_address(&mut self, name: &str) {
        let Some(addr) = self.output.wait_for(STARTUP, listening_addr) else {
            self.startup_failed(name, "printed no address");
        };
        self.addr = addr;
        self.url = format!("http://{addr}/mcp");
    }

    /// Kills a process that did not start as it should, and panics with what it
    /// printed.
    fn startup_failed(&mut self, name: &str, what: &str) -> ! {
        let status = self.child.try_wait().ok().flatten();
        self.kill();
        panic!(
            "{name} {what} within {STARTUP:?} (exit: {status:?}):\n{}",
            self.output().join("\n")
        );
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL and waits until the process is gone. Idempotent.
    pub(crate) fn kill(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Sends SIGTERM, as a deploy does (through `kill`, since the crate has no unsafe
    /// code to call it directly).
    pub(crate) fn terminate(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill could not be started");
        assert!(sent.success(), "kill -TERM {} failed", self.pid());
    }

    /// Sends the signal `name` (`STOP`, `CONT`, …) through `kill`.
    pub(crate) fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .expect("kill could not be started");
        assert!(sent.success(), "kill -{name} {} failed", self.pid());
    }

    /// Waits up to `timeout` for the process to exit on its own; its status, or
    /// `None` when it is still running.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("the process's status") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every line it printed so far (stdout and stderr).
    pub(crate) fn output(&self) -> Vec<String> {
        self.output
            .lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits up to `timeout` for a printed line containing `needle`; whether one came.
    /// Blocks the calling thread: from async code, use a multi-threaded runtime.
    pub(crate) fn wait_for_line(&self, needle: &str, timeout: Duration) -> bool {
        self.output
            .wait_for(timeout, |line| line.contains(needle).then_some(()))
            .is_some()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
