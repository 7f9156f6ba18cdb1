//! A local stand-in for Hugging Face Hub's HTTP API: `HEAD`/`GET /{repo}/resolve/{rev}/{file}`
//! with the Hub's headers (`X-Repo-Commit`, `X-Linked-Etag`, `X-Linked-Size`) and Range
//! support, and `GET /api/models/{repo}`. It serves real files, and can misbehave on demand:
//! cut connections part-way, or claim a wrong checksum.
#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

#[derive(Default)]
pub struct Behaviour {
    /// Cut each of the next GET bodies after this many bytes (one entry per GET).
    pub cuts: Vec<u64>,
    /// Announce this sha256 instead of the real one.
    pub wrong_sha256: bool,
    /// Answer Range requests with the whole file (200), as some proxies do.
    pub ignore_range: bool,
    /// A hostile mirror: send this as the etag (quoted) instead of the sha256.
    pub etag: Option<String>,
    /// ... this as the commit.
    pub commit: Option<String>,
    /// ... these names as the repository's files.
    pub siblings: Option<Vec<String>>,
    /// ... this many bytes more than the announced size.
    pub extra_bytes: usize,
    /// Wait this long after each MiB sent (to overlap two downloads).
    pub delay_per_mib: Option<std::time::Duration>,
}

pub struct StandIn {
    pub url: String,
    pub repo: String,
    pub file: String,
    pub data: Arc<Vec<u8>>,
    pub sha256: String,
    pub behaviour: Arc<Mutex<Behaviour>>,
    /// `METHOD path range` of every request, in order.
    pub log: Arc<Mutex<Vec<String>>>,
}

/// The real SmolLM2 GGUF (98 MB) from the models cache, the smallest real model we have.
pub fn real_model() -> (String, Vec<u8>) {
    let dir = std::env::var_os("SPECULA_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/specula/models"));
    let name = "SmolLM2-135M-Instruct.Q4_1.gguf";
    let data = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}: run scripts/fetch-models.sh"));
    (name.to_string(), data)
}

impl StandIn {
    pub fn start(repo: &str, file: &str, data: Vec<u8>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let sha256 = Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
        let server = StandIn {
            url,
            repo: repo.into(),
            file: file.into(),
            data: Arc::new(data),
            sha256,
            behaviour: Arc::default(),
            log: Arc::default(),
        };
        let shared = server.shared();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let _ = shared.serve(stream);
                });
            }
        });
        server
    }

    fn shared(&self) -> Shared {
        Shared {
            repo: self.repo.clone(),
            file: self.file.clone(),
            data: self.data.clone(),
            sha256: self.sha256.clone(),
            behaviour: self.behaviour.clone(),
            log: self.log.clone(),
        }
    }

    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[derive(Clone)]
struct Shared {
    repo: String,
    file: String,
    data: Arc<Vec<u8>>,
    sha256: String,
    behaviour: Arc<Mutex<Behaviour>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Shared {
    fn serve(&self, stream: TcpStream) -> std::io::Result<()> {
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut stream = stream;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let mut parts = line.split_whitespace();
            let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
            let mut range: Option<u64> = None;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header)?;
                if header.trim().is_empty() {
                    break;
                }
                let lower = header.to_lowercase();
                if let Some(v) = lower.strip_prefix("range: bytes=") {
                    range = v.trim().trim_end_matches('-').parse().ok();
                }
            }
            self.log.lock().unwrap().push(format!("{method} {path} {}", range.map_or("-".into(), |r| r.to_string())));
            if !self.respond(&mut stream, &method, &path, range)? {
                return Ok(());
            }
        }
    }

    /// Returns false when the connection was cut.
    fn respond(&self, stream: &mut TcpStream, method: &str, path: &str, range: Option<u64>) -> std::io::Result<bool> {
        let resolve = format!("/{}/resolve/main/{}", self.repo, self.file);
        let api = format!("/api/models/{}", self.repo);
        if path == api {
            let names = self.behaviour.lock().unwrap().siblings.clone();
            let names = names.unwrap_or_else(|| vec!["README.md".into(), self.file.clone(), "model-Q8_0.gguf".into()]);
            let siblings: Vec<String> = names.iter().map(|n| format!(r#"{{"rfilename":{n:?}}}"#)).collect();
            let body = format!(r#"{{"id":"{}","siblings":[{}]}}"#, self.repo, siblings.join(","));
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )?;
            return Ok(true);
        }
        if path != resolve {
            let body = "Entry not found";
            write!(
                stream,
                "HTTP/1.1 404 Not Found\r\nX-Error-Code: EntryNotFound\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )?;
            return Ok(true);
        }
        let (sha, commit, ignore_range, extra, delay) = {
            let b = self.behaviour.lock().unwrap();
            let sha = if b.wrong_sha256 { "f".repeat(64) } else { self.sha256.clone() };
            let sha = b.etag.clone().unwrap_or(sha);
            let commit = b.commit.clone().unwrap_or_else(|| COMMIT.to_string());
            (sha, commit, b.ignore_range, vec![0x5au8; b.extra_bytes], b.delay_per_mib)
        };
        let total = self.data.len() as u64;
        let hub_headers = format!(
            "X-Repo-Commit: {commit}\r\nX-Linked-Etag: \"{sha}\"\r\nX-Linked-Size: {total}\r\nETag: \"{sha}\"\r\n"
        );
        if method == "HEAD" {
            write!(stream, "HTTP/1.1 200 OK\r\n{hub_headers}Content-Length: {total}\r\n\r\n")?;
            return Ok(true);
        }
        let start = if ignore_range { 0 } else { range.unwrap_or(0).min(total) };
        let status = if start > 0 { "206 Partial Content" } else { "200 OK" };
        let content_range =
            if start > 0 { format!("Content-Range: bytes {start}-{}/{total}\r\n", total - 1) } else { String::new() };
        let length = total - start + extra.len() as u64;
        write!(stream, "HTTP/1.1 {status}\r\n{hub_headers}{content_range}Content-Length: {length}\r\n\r\n")?;
        let body = [&self.data[start as usize..], &extra[..]].concat();
        let cut = {
            let mut b = self.behaviour.lock().unwrap();
            if b.cuts.is_empty() {
                None
            } else {
                Some(b.cuts.remove(0))
            }
        };
        if let Some(delay) = delay {
            for chunk in body.chunks(1 << 20) {
                stream.write_all(chunk)?;
                std::thread::sleep(delay);
            }
            return Ok(true);
        }
        match cut {
            Some(n) if (n as usize) < body.len() => {
                stream.write_all(&body[..n as usize])?;
                stream.flush()?;
                stream.shutdown(std::net::Shutdown::Both)?;
                Ok(false)
            }
            _ => {
                stream.write_all(&body)?;
                Ok(true)
            }
        }
    }
}
