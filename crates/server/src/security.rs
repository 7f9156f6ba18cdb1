//! Who may talk to the server. On a loopback bind only requests for a local host name are
//! served: a web page the user visits can point its own domain at 127.0.0.1 (DNS rebinding),
//! and its requests then carry that domain in `Host`. With an API key, every API request must
//! send it, compared in constant time.

use crate::ApiError;
use axum::http::{header, HeaderMap, StatusCode};
use subtle::ConstantTimeEq;

/// The server's access rules.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub api_key: Option<String>,
    /// Host names requests may name; `None` accepts any (a server bound beyond loopback,
    /// which then needs a key).
    pub allowed_hosts: Option<Vec<String>>,
}

/// The names a loopback server answers to, plus `extra` (`--allowed-host`).
pub fn loopback_hosts(extra: &[String]) -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]", "::1"].iter().map(|s| s.to_string()).chain(extra.iter().cloned()).collect()
}

impl Access {
    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(allowed) = &self.allowed_hosts else { return Ok(()) };
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        if allowed.iter().any(|name| host_name(host).eq_ignore_ascii_case(name)) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "invalid_request_error",
            "host_not_allowed",
            format!(
                "This server answers requests for localhost only, not `{host}` (a web page reaching it through \
                 DNS rebinding sends its own name). Start it with --allowed-host NAME to allow a name."
            ),
        ))
    }

    /// Whether the request carries the key (always true without one).
    pub fn is_authorized(&self, headers: &HeaderMap) -> bool {
        let Some(key) = &self.api_key else { return true };
        let given =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        given.is_some_and(|given| bool::from(given.as_bytes().ct_eq(key.as_bytes())))
    }

    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match self.is_authorized(headers) {
            true => Ok(()),
            false => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "invalid_api_key",
                "Incorrect or missing API key: send `Authorization: Bearer <key>`",
            )),
        }
    }
}

/// `Host` without its port: `localhost:8080` -> `localhost`, `[::1]:80` -> `[::1]`.
fn host_name(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') && host[..i].chars().filter(|&c| c == ':').count() == 0 => &host[..i],
        Some(i) if host.starts_with('[') && host[..i].ends_with(']') => &host[..i],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap())).collect()
    }

    #[test]
    fn only_local_host_names_pass_on_loopback() {
        let access = Access { api_key: None, allowed_hosts: Some(loopback_hosts(&[])) };
        for ok in ["localhost", "localhost:8080", "127.0.0.1:9", "[::1]:8080", "LOCALHOST"] {
            assert!(access.check_host(&headers(&[("host", ok)])).is_ok(), "{ok}");
        }
        for bad in ["evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io", ""] {
            assert!(access.check_host(&headers(&[("host", bad)])).is_err(), "{bad}");
        }
        assert!(Access::default().check_host(&headers(&[("host", "evil.example")])).is_ok(), "no list: any host");
    }

    #[test]
    fn the_key_must_match_exactly() {
        let access = Access { api_key: Some("s3cret".into()), allowed_hosts: None };
        assert!(access.is_authorized(&headers(&[("authorization", "Bearer s3cret")])));
        for bad in ["Bearer s3cre", "Bearer s3cret2", "s3cret", "Basic s3cret"] {
            assert!(!access.is_authorized(&headers(&[("authorization", bad)])), "{bad}");
        }
        assert!(!access.is_authorized(&HeaderMap::new()));
    }
}
