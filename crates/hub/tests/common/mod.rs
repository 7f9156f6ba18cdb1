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
            let body = format!(
                r#"{{"id":"{}","siblings":[{{"rfilename":"README.md"}},{{"rfilename":"{}"}},{{"rfilename":"model-Q8_0.gguf"}}]}}"#,
                self.repo, self.file
            );
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
        let behaviour = &mut *self.behaviour.lock().unwrap();
        let sha = if behaviour.wrong_sha256 { "f".repeat(64) } else { self.sha256.clone() };
        let total = self.data.len() as u64;
        let hub_headers = format!(
            "X-Repo-Commit: {COMMIT}\r\nX-Linked-Etag: \"{sha}\"\r\nX-Linked-Size: {total}\r\nETag: \"{sha}\"\r\n"
        );
        if method == "HEAD" {
            write!(stream, "HTTP/1.1 200 OK\r\n{hub_headers}Content-Length: {total}\r\n\r\n")?;
            return Ok(true);
        }
        let start = if behaviour.ignore_range { 0 } else { range.unwrap_or(0).min(total) };
        let status = if start > 0 { "206 Partial Content" } else { "200 OK" };
        let content_range =
            if start > 0 { format!("Content-Range: bytes {start}-{}/{total}\r\n", total - 1) } else { String::new() };
        write!(stream, "HTTP/1.1 {status}\r\n{hub_headers}{content_range}Content-Length: {}\r\n\r\n", total - start)?;
        let body = &self.data[start as usize..];
        let cut = if behaviour.cuts.is_empty() { None } else { Some(behaviour.cuts.remove(0)) };
        match cut {
            Some(n) if (n as usize) < body.len() => {
                stream.write_all(&body[..n as usize])?;
                stream.flush()?;
                stream.shutdown(std::net::Shutdown::Both)?;
                Ok(false)
            }
            _ => {
                stream.write_all(body)?;
                Ok(true)
            }
        }
    }
}
