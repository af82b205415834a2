//! What the shared stores' `connect` fails with: the server it tried, shown as a
//! URL without its password, and why (the driver's error, or the connect timeout).

use std::fmt;
use std::time::Duration;

use crate::error::{BoxError, StoreError};

/// A connect to a store's server failed or ran out of time.
#[derive(Debug)]
pub(crate) struct ConnectError {
    /// The server, as a URL whose password is replaced by `***`.
    url: String,
    cause: Cause,
}

#[derive(Debug)]
enum Cause {
    TimedOut(Duration),
    Failed(BoxError),
}

impl ConnectError {
    /// The driver refused or failed the connect to `url` (already redacted).
    pub(crate) fn failed(url: String, cause: impl Into<BoxError>) -> StoreError {
        StoreError::backend(ConnectError {
            url,
            cause: Cause::Failed(cause.into()),
        })
    }

    /// No connection to `url` (already redacted) within `limit`.
    pub(crate) fn timed_out(url: String, limit: Duration) -> StoreError {
        StoreError::backend(ConnectError {
            url,
            cause: Cause::TimedOut(limit),
        })
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Cause::Failed(_) => write!(f, "could not connect to {}", self.url),
            Cause::TimedOut(limit) => write!(
                f,
                "could not connect to {} within the connect timeout of {} ms",
                self.url,
                limit.as_millis()
            ),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            Cause::Failed(e) => Some(&**e),
            Cause::TimedOut(_) => None,
        }
    }
}

/// `scheme://[user][:***]@host/path` as shown in errors and logs: the password,
/// when there is one, becomes `***`.
pub(crate) fn shown_url(
    scheme: &str,
    user: Option<&str>,
    has_password: bool,
    place: &str,
) -> String {
    let user = user.unwrap_or("");
    match (user.is_empty(), has_password) {
        (true, false) => format!("{scheme}://{place}"),
        (false, false) => format!("{scheme}://{user}@{place}"),
        (_, true) => format!("{scheme}://{user}:***@{place}"),
    }
}

/// Whether a connection URL carries a password: in its user info
/// (`user:password@`) or as a `password=` query parameter.
pub(crate) fn url_has_password(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (authority, query) = match rest.find(['/', '?', '#']) {
        Some(end) => (&rest[..end], &rest[end..]),
        None => (rest, ""),
    };
    let in_user_info = authority
        .rsplit_once('@')
        .is_some_and(|(user_info, _)| user_info.contains(':'));
    let in_query = query
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|pair| pair.starts_with("password=")));
    in_user_info || in_query
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Chain;

    #[test]
    fn a_password_is_never_shown() {
        assert!(url_has_password("postgres://app:s3cret@db:5432/app"));
        assert!(url_has_password("redis://:s3cret@127.0.0.1:6379/0"));
        assert!(url_has_password(
            "postgres://db/app?sslmode=require&password=s3cret"
        ));
        assert!(!url_has_password("postgres://app@db:5432/app"));
        assert!(!url_has_password("redis://127.0.0.1:6379"));
        assert_eq!(
            shown_url("postgres", Some("app"), true, "db:5432/app"),
            "postgres://app:***@db:5432/app"
        );
        assert_eq!(
            shown_url("redis", None, false, "127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
    }

    #[test]
    fn the_error_names_the_server_then_the_cause() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = ConnectError::failed("redis://127.0.0.1:1/0".into(), refused);
        assert_eq!(
            Chain(&e).to_string(),
            "the task store backend failed: could not connect to redis://127.0.0.1:1/0: refused"
        );
        let e = ConnectError::timed_out("redis://127.0.0.1:1/0".into(), Duration::from_secs(5));
        assert!(
            Chain(&e)
                .to_string()
                .ends_with("within the connect timeout of 5000 ms")
        );
    }
}
