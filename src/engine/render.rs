//! What results the layer writes share: the `serverInfo` meta, and a JSON length
//! counted only up to a cap. How a task answers the call that made it is the
//! routes' (`routes/decide.rs`); the size bounds of what a task stores are
//! `bytes.rs`'s.

use serde_json::{Map, Value};

use super::Engine;
use crate::wire::ServerInfoMeta;

impl Engine {
    /// `serverInfo` for the `_meta` of results the layer writes.
    pub(crate) fn result_meta(&self, result: &mut Map<String, Value>) {
        if let Some(info) = &self.config.server_info {
            let meta = serde_json::to_value(ServerInfoMeta(info)).unwrap_or(Value::Null);
            result.insert("_meta".into(), meta);
        }
    }
}

/// The length of `value` serialized as JSON, or `None` once it passes `cap`
/// (serializing stops there, so a huge value costs at most `cap` bytes of work).
pub(crate) fn json_len_within(value: &Value, cap: usize) -> Option<usize> {
    struct Count {
        len: usize,
        cap: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.len += buf.len();
            if self.len > self.cap {
                return Err(std::io::Error::other("over the cap"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { len: 0, cap };
    serde_json::to_writer(&mut count, value).ok()?;
    Some(count.len)
}
