//! Who a request is for: the principal that owns the tasks it makes, found as
//! `--principal` says, before anything else reads the request.
//!
//! - `bearer-jwt`: `Authorization: Bearer <JWT>`, an HS256 token signed with the
//!   configured key. Its signature, `exp` and `nbf` (with [`LEEWAY`]) are checked and
//!   its `sub` is the principal. A request without a token, or with a bad one, gets
//!   HTTP 401 with `WWW-Authenticate: Bearer` and a JSON-RPC error (-32001), and
//!   goes no further.
//! - `header`: the value of a named header, trusted as it is: for a gateway behind
//!   a proxy that authenticates callers and sets that header (and removes it from
//!   what callers send). Without the header the request is anonymous.
//! - `none`: every request is anonymous.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use hmac::{Hmac, KeyInit as _, Mac as _};
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use mcp_tasks::Principal;
use mcp_tasks::wire::RpcError;
use serde_json::{Value, json};
use sha2::Sha256;
use tower::{Layer, Service, ServiceExt as _};

/// The JSON-RPC code of a refused token (in the implementation-defined server
/// error range).
pub(crate) const UNAUTHORIZED: i64 = -32001;

/// How far `exp` and `nbf` may be off, for clocks that disagree a little.
pub(crate) const LEEWAY: Duration = Duration::from_secs(30);

/// The shortest HS256 key accepted: the hash's own size (RFC 7518, section 3.2).
const MIN_KEY_BYTES: usize = 32;

/// How the principal is found (`--principal`).
#[derive(Clone, Debug)]
pub(crate) enum PrincipalSource {
    /// The `sub` of a verified HS256 bearer token.
    BearerJwt(Hs256),
    /// The value of this header, set by a trusted proxy.
    Header(HeaderName),
    /// No principal: every request is anonymous.
    None,
}

/// An HS256 key, ready to check tokens.
#[derive(Clone)]
pub(crate) struct Hs256(Hmac<Sha256>);

impl std::fmt::Debug for Hs256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hs256(..)")
    }
}

/// Why a token was refused; the text goes to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Missing,
    Malformed,
    Algorithm,
    Signature,
    Expired,
    NotYetValid,
    NoSubject,
}

impl Refused {
    fn describe(self) -> &'static str {
        match self {
            Refused::Missing => "a bearer token is required",
            Refused::Malformed => "the bearer token is not a JWT",
            Refused::Algorithm => "the token is not signed with HS256",
            Refused::Signature => "the token's signature does not verify",
            Refused::Expired => "the token has expired",
            Refused::NotYetValid => "the token is not valid yet",
            Refused::NoSubject => "the token has no sub",
        }
    }
}

impl Hs256 {
    /// The key `secret`, at least [`MIN_KEY_BYTES`] long.
    pub(crate) fn new(secret: &[u8]) -> Result<Hs256, String> {
        if secret.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the JWT key has {} bytes; HS256 wants at least {MIN_KEY_BYTES} bytes",
                secret.len()
            ));
        }
        Hmac::new_from_slice(secret)
            .map(Hs256)
            .map_err(|_| "the JWT key is not usable".into())
    }

    /// The token's subject, once its signature, algorithm and validity period check
    /// out at `now` (seconds since the Unix epoch).
    pub(crate) fn verify(&self, token: &str, now: u64) -> Result<String, Refused> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Malformed);
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| Refused::Malformed);
        let json = |bytes: Vec<u8>| {
            serde_json::from_slice::<Value>(&bytes).map_err(|_| Refused::Malformed)
        };
        if json(decode(header)?)?["alg"] != "HS256" {
            return Err(Refused::Algorithm);
        }
        let mut mac = self.0.clone();
        mac.update(&token.as_bytes()[..header.len() + 1 + payload.len()]);
        mac.verify_slice(&decode(signature)?)
            .map_err(|_| Refused::Signature)?;
        let claims = json(decode(payload)?)?;
        let leeway = LEEWAY.as_secs();
        let time = |claim: &str| match &claims[claim] {
            Value::Null => Ok(None),
            value => value.as_u64().map(Some).ok_or(Refused::Malformed),
        };
        if time("exp")?.is_some_and(|exp| now >= exp.saturating_add(leeway)) {
            return Err(Refused::Expired);
        }
        if time("nbf")?.is_some_and(|nbf| now.saturating_add(leeway) < nbf) {
            return Err(Refused::NotYetValid);
        }
        match claims["sub"].as_str() {
            Some(sub) if !sub.is_empty() => Ok(sub.to_owned()),
            _ => Err(Refused::NoSubject),
        }
    }
}

/// The principal of a request as `source` finds it: `Ok(None)` for an anonymous
/// one, `Err` for a refused token.
fn find(source: &PrincipalSource, headers: &http::HeaderMap) -> Result<Option<Principal>, Refused> {
    match source {
        PrincipalSource::None => Ok(None),
        PrincipalSource::Header(name) => Ok(headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|value| !value.is_empty())
            .map(Principal::from)),
        PrincipalSource::BearerJwt(key) => {
            let token = headers
                .get(AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|token| !token.is_empty())
                .ok_or(Refused::Missing)?;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs());
            key.verify(token, now).map(|sub| Some(Principal::from(sub)))
        }
    }
}

/// The 401 answer to a refused token.
fn unauthorized<B>(refused: Refused) -> Response<Either<B, Full<Bytes>>> {
    let error = RpcError::new(
        UNAUTHORIZED,
        format!("Unauthorized: {}", refused.describe()),
        StatusCode::UNAUTHORIZED,
    )
    .with_data(json!({"reason": "unauthorized"}));
    let mut response = error
        .to_response(None)
        .map(|body| Either::Right(Full::new(body)));
    // RFC 6750, section 3: no error code when no token came.
    let challenge = match refused {
        Refused::Missing => HeaderValue::from_static("Bearer"),
        _ => HeaderValue::from_static("Bearer error=\"invalid_token\""),
    };
    response.headers_mut().insert(WWW_AUTHENTICATE, challenge);
    response
}

/// Puts [`Authenticate`] in front of a service.
#[derive(Clone, Debug)]
pub(crate) struct PrincipalLayer(PrincipalSource);

impl PrincipalLayer {
    pub(crate) fn new(source: PrincipalSource) -> PrincipalLayer {
        PrincipalLayer(source)
    }
}

impl<S> Layer<S> for PrincipalLayer {
    type Service = Authenticate<S>;

    fn layer(&self, inner: S) -> Authenticate<S> {
        Authenticate {
            inner,
            source: self.0.clone(),
        }
    }
}

/// Sets the request's [`Principal`], or answers 401 itself; see the module
/// documentation.
#[derive(Clone, Debug)]
pub(crate) struct Authenticate<S> {
    inner: S,
    source: PrincipalSource,
}

impl<S, B, ResBody> Service<Request<B>> for Authenticate<S>
where
    S: Service<Request<B>, Response = Response<ResBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<Either<ResBody, Full<Bytes>>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Each call drives a clone of the inner service to readiness itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match find(&self.source, request.headers()) {
            Err(refused) => {
                tracing::debug!(
                    reason = refused.describe(),
                    "refused a request's bearer token"
                );
                Box::pin(std::future::ready(Ok(unauthorized(refused))))
            }
            Ok(principal) => {
                if let Some(principal) = principal {
                    request.extensions_mut().insert(principal);
                }
                let inner = self.inner.clone();
                Box::pin(async move { Ok(inner.oneshot(request).await?.map(Either::Left)) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn token(key: &[u8], header: Value, claims: Value) -> String {
        let header = URL_SAFE_NO_PAD.encode(header.to_string());
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(format!("{header}.{claims}").as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{header}.{claims}.{signature}")
    }

    fn hs256() -> Value {
        json!({"alg": "HS256", "typ": "JWT"})
    }

    #[test]
    fn a_good_token_names_its_subject() {
        let key = Hs256::new(KEY).unwrap();
        let good = token(
            KEY,
            hs256(),
            json!({"sub": "alice", "exp": 2000, "nbf": 1000}),
        );
        assert_eq!(key.verify(&good, 1500), Ok("alice".to_owned()));
        let no_times = token(KEY, hs256(), json!({"sub": "bob"}));
        assert_eq!(key.verify(&no_times, 1500), Ok("bob".to_owned()));
    }

    #[test]
    fn bad_tokens_are_refused_for_their_reason() {
        let key = Hs256::new(KEY).unwrap();
        let other = b"another key of thirty-two bytes!";
        let claims = json!({"sub": "alice", "exp": 2000, "nbf": 1000});
        let cases = [
            (
                token(other, hs256(), claims.clone()),
                1500,
                Refused::Signature,
            ),
            (
                token(KEY, json!({"alg": "none"}), claims.clone()),
                1500,
                Refused::Algorithm,
            ),
            (
                token(KEY, json!({"alg": "HS512"}), claims.clone()),
                1500,
                Refused::Algorithm,
            ),
            (token(KEY, hs256(), claims.clone()), 2030, Refused::Expired),
            (
                token(KEY, hs256(), claims.clone()),
                969,
                Refused::NotYetValid,
            ),
            (
                token(KEY, hs256(), json!({"exp": 2000})),
                1500,
                Refused::NoSubject,
            ),
            (
                token(KEY, hs256(), json!({"sub": "a", "exp": "soon"})),
                1500,
                Refused::Malformed,
            ),
            ("a.b".to_owned(), 1500, Refused::Malformed),
            ("not a token".to_owned(), 1500, Refused::Malformed),
        ];
        for (token, now, wanted) in cases {
            assert_eq!(key.verify(&token, now), Err(wanted), "{token}");
        }
        // Within the leeway both ways.
        let edge = token(KEY, hs256(), claims);
        assert!(key.verify(&edge, 2029).is_ok());
        assert!(key.verify(&edge, 970).is_ok());
        // A payload changed after signing.
        let signed = token(KEY, hs256(), json!({"sub": "alice"}));
        let mut parts: Vec<&str> = signed.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(json!({"sub": "mallory"}).to_string());
        parts[1] = &forged;
        assert_eq!(key.verify(&parts.join("."), 1500), Err(Refused::Signature));
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(Hs256::new(b"short").unwrap_err().contains("32 bytes"));
    }
}
