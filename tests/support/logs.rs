//! What the layer logs while a test watches: [`Logged::capture`] makes a buffer the
//! thread's subscriber (a current-thread runtime runs the server there too).

use std::sync::{Arc, Mutex};

/// The log lines written while its guard is held.
#[derive(Clone, Default)]
pub(crate) struct Logged(Arc<Mutex<Vec<u8>>>);

impl Logged {
    /// Captures this thread's logs at `level` and above, plain text, until the guard
    /// is dropped.
    pub(crate) fn capture(level: tracing::Level) -> (Logged, tracing::subscriber::DefaultGuard) {
        let logged = Logged::default();
        let writer = logged.clone();
        let guard = tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_max_level(level)
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish(),
        );
        (logged, guard)
    }

    /// Everything written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines written so far that contain `text`.
    pub(crate) fn lines_with(&self, text: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|line| line.contains(text))
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
