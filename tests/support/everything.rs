//! `@modelcontextprotocol/server-everything` (2025-11-25, with sessions) as a real
//! upstream, from `node_modules` (`npm ci`), with its `streamableHttp` transport.
//! It binds every interface when given only `PORT` (it reads no host setting), so
//! it is started with `scripts/interop/loopback.mjs` preloaded, which makes that
//! 127.0.0.1. Killed by its PID when dropped.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long server-everything may take to say it listens.
pub(crate) const NODE_STARTUP: Duration = Duration::from_secs(30);

/// Node and server-everything from `node_modules`, or `None` (after saying so,
/// naming `tests`) when they are not installed and this is not CI.
pub(crate) fn installed(tests: &str) -> Option<(PathBuf, PathBuf)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let node = root.join("node_modules/node/bin/node");
    let server = root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if node.exists() && server.exists() {
        return Some((node, server));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "node_modules has no Node 22 or no @modelcontextprotocol/server-everything: \
         CI must run `npm ci` before these tests"
    );
    eprintln!(
        "skipping {tests}: node_modules has no Node 22 or no \
         @modelcontextprotocol/server-everything (run `npm ci` to install them)"
    );
    None
}

/// A loopback port nothing listens on (bound, read, released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A running server-everything.
#[derive(Debug)]
pub(crate) struct Everything {
    node: PathBuf,
    server: PathBuf,
    port: u16,
    child: Child,
}

impl Everything {
    /// Starts it on a free loopback port.
    pub(crate) fn start(node: PathBuf, server: PathBuf) -> Everything {
        Self::start_on(node, server, free_port())
    }

    /// Starts it on `port` and waits until it says it listens.
    pub(crate) fn start_on(node: PathBuf, server: PathBuf, port: u16) -> Everything {
        let child = Self::spawn(&node, &server, port);
        Everything {
            node,
            server,
            port,
            child,
        }
    }

    fn spawn(node: &PathBuf, server: &PathBuf, port: u16) -> Child {
        let preload =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/interop/loopback.mjs");
        let mut child = Command::new(node)
            .arg("--import")
            .arg(&preload)
            .arg(server)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node could not be started");
        let (lines, heard) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = lines.send(line);
            }
        });
        let deadline = std::time::Instant::now() + NODE_STARTUP;
        let mut said = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match heard.recv_timeout(left) {
                Ok(line) if line.contains("listening on port") => break,
                Ok(line) => said.push(line),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("server-everything did not start: {}", said.join("\n"));
                }
            }
        }
        // Drains the rest, so that the pipe never fills.
        std::thread::spawn(move || while heard.recv().is_ok() {});
        child
    }

    /// Its MCP endpoint.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Kills the process by its PID and starts a fresh one on the same port: the
    /// new one knows none of the old sessions.
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.child = Self::spawn(&self.node, &self.server, self.port);
    }

    /// Kills the process by its PID and reaps it, unless that was done.
    pub(crate) fn kill(&mut self) {
        if self.child.try_wait().is_ok_and(|status| status.is_some()) {
            return;
        }
        let pid = self.child.id();
        let killed = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !killed {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        self.kill();
    }
}
