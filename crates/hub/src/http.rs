//! The Hub's HTTP API, the parts a download needs: file metadata from a HEAD on `resolve`
//! (without following the redirect to the CDN, whose answer lacks the checksum), ranged GETs,
//! and the repository's file list.

use crate::{Error, RemoteFile, Result};
use std::io::Read;
use std::time::Duration;
use ureq::http::{Response, StatusCode};
use ureq::Body;

pub struct Client<'a> {
    pub endpoint: &'a str,
    pub token: Option<&'a str>,
}

impl Client<'_> {
    fn agent(&self, redirects: u32) -> ureq::Agent {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(redirects)
            .max_redirects_will_error(false)
            .timeout_connect(Some(Duration::from_secs(20)))
            // A stalled transfer is a dropped connection: resume it rather than wait forever.
            .timeout_recv_body(Some(Duration::from_secs(60)))
            .build();
        ureq::Agent::new_with_config(config)
    }

    fn resolve_url(&self, repo: &str, revision: &str, file: &str) -> String {
        format!("{}/{repo}/resolve/{revision}/{file}", self.endpoint)
    }

    fn authorize<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match self.token {
            Some(token) => request.header("Authorization", format!("Bearer {token}")),
            None => request,
        }
    }

    pub fn head(&self, repo: &str, revision: &str, file: &str) -> Result<RemoteFile> {
        let url = self.resolve_url(repo, revision, file);
        let response = self.authorize(self.agent(0).head(&url)).call().map_err(|e| transport(&url, e))?;
        self.check_status(&response, &url, &format!("{repo}/{file} at {revision}"))?;
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(unquote);
        let etag = header("x-linked-etag")
            .or_else(|| header("etag"))
            .ok_or_else(|| Error::Http { url: url.clone(), message: "the Hub sent no etag".into() })?;
        let size = header("x-linked-size")
            .or_else(|| header("content-length"))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::Http { url: url.clone(), message: "the Hub sent no size".into() })?;
        let commit = header("x-repo-commit").unwrap_or_else(|| revision.to_string());
        // Both become file names in the cache: a hostile mirror must not name `../../x`.
        if !is_sha256(&etag) && !is_git_sha(&etag) {
            return Err(Error::Http { url, message: format!("the Hub sent an etag that is not a hash: {etag:?}") });
        }
        if !is_git_sha(&commit) && crate::names::check_revision(&commit).is_err() {
            return Err(Error::Http { url, message: format!("the Hub sent a commit that is not a hash: {commit:?}") });
        }
        let sha256 = is_sha256(&etag).then(|| etag.clone());
        Ok(RemoteFile { size, sha256, commit, etag })
    }

    /// The file from byte `from` on; returns the body and the offset it really starts at
    /// (0 when the server ignored the Range).
    pub fn get(&self, repo: &str, revision: &str, file: &str, from: u64) -> Result<(Box<dyn Read + Send>, u64)> {
        let url = self.resolve_url(repo, revision, file);
        let mut request = self.authorize(self.agent(10).get(&url));
        if from > 0 {
            request = request.header("Range", format!("bytes={from}-"));
        }
        let response = request.call().map_err(|e| transport(&url, e))?;
        self.check_status(&response, &url, &format!("{repo}/{file} at {revision}"))?;
        let start = match response.status() {
            StatusCode::PARTIAL_CONTENT => from,
            _ => 0,
        };
        Ok((Box::new(response.into_body().into_reader()), start))
    }

    pub fn list_files(&self, repo: &str) -> Result<Vec<String>> {
        let url = format!("{}/api/models/{repo}", self.endpoint);
        let mut response = self.authorize(self.agent(10).get(&url)).call().map_err(|e| transport(&url, e))?;
        self.check_status(&response, &url, &format!("repository {repo}"))?;
        let text = response.body_mut().read_to_string().map_err(|e| transport(&url, e))?;
        let info: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::Http { url: url.clone(), message: e.to_string() })?;
        let siblings = info["siblings"].as_array().cloned().unwrap_or_default();
        Ok(siblings
            .iter()
            .filter_map(|s| s["rfilename"].as_str())
            .filter(|f| f.ends_with(".gguf"))
            .filter(|f| match crate::names::check_file(f) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("{repo}: skipping a file the Hub listed: {e}");
                    false
                }
            })
            .map(String::from)
            .collect())
    }

    fn check_status(&self, response: &Response<Body>, url: &str, what: &str) -> Result<()> {
        let status = response.status();
        match status.as_u16() {
            200..=399 => Ok(()),
            404 => Err(Error::NotFound { endpoint: self.endpoint.into(), what: what.into() }),
            401 | 403 => Err(Error::Http {
                url: url.into(),
                message: format!("{status}: the repository is gated or private; accept its licence and set HF_TOKEN"),
            }),
            _ => Err(Error::Http { url: url.into(), message: status.to_string() }),
        }
    }
}

fn transport(url: &str, e: ureq::Error) -> Error {
    Error::Http { url: url.into(), message: e.to_string() }
}

/// `"abc"` and `W/"abc"` -> `abc`.
fn unquote(value: &str) -> String {
    value.trim().trim_start_matches("W/").trim_matches('"').to_string()
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A git object id: what the Hub sends as the etag of a small file and as the commit.
fn is_git_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_lose_their_quotes_and_weak_marks() {
        assert_eq!(unquote("\"abc\""), "abc");
        assert_eq!(unquote("W/\"abc\""), "abc");
        assert!(is_sha256(&"a".repeat(64)) && !is_sha256("abc"));
        assert!(is_git_sha(&"0".repeat(40)) && !is_git_sha("../../../../tmp/x/evil"));
    }
}
