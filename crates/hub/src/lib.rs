//! Model downloads from Hugging Face Hub, into the Hub's own cache layout
//! (`models--org--name/{blobs,snapshots,refs}`) so that files other tools fetched are found
//! and ours are found by them.
//!
//! A download streams into `blobs/<sha256>.incomplete`, hashing as it goes; a dropped
//! connection resumes with an HTTP Range request, and a later `pull` resumes a partial file a
//! killed process left. Only a file whose sha256 matches the Hub's (the LFS oid, sent as
//! `X-Linked-Etag`) becomes a blob with a snapshot link; a cancel, a checksum mismatch or a
//! full disk removes the partial file. Free space is checked before the first byte.

pub mod catalogue;
pub mod doctor;
mod http;
mod library;
pub mod names;

pub use library::{local_models, LocalModel};

use hf_hub::{Cache, Repo, RepoType};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Times a dropped connection is resumed within one download before giving up (the partial
/// file stays for the next attempt).
pub const DEFAULT_RETRIES: usize = 5;
const CHUNK: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} was not found on {endpoint} (check the repository and file names)")]
    NotFound { endpoint: String, what: String },
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error(
        "{file}: the download does not match the Hub's checksum (sha256 {actual}, expected {expected}); it was deleted"
    )]
    Checksum { file: String, expected: String, actual: String },
    #[error("not enough disk space in {dir}: {needed} bytes needed, {available} free")]
    DiskFull { dir: PathBuf, needed: u64, available: u64 },
    #[error("the download was cancelled; nothing was kept")]
    Cancelled,
    #[error("{file}: the connection dropped {attempts} times; {done} of {total} bytes are kept and `pull` resumes from there")]
    Interrupted { file: String, done: u64, total: u64, attempts: usize },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{repo} has no .gguf file{hint}")]
    NoGguf { repo: String, hint: String },
    #[error("the {what} name {name:?} is refused: {why}")]
    BadName { what: String, name: String, why: String },
    #[error("{file}: the server sent more than the {size} bytes it announced; the download was deleted")]
    Oversized { file: String, size: u64 },
}

impl Error {
    /// A stable code for the UI: `not_found`, `checksum`, `disk_full`, ...
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    pub fn error_code(&self) -> specula_protocol::ErrorCode {
        use specula_protocol::ErrorCode;
        match self {
            Error::NotFound { .. } => ErrorCode::NotFound,
            Error::Http { .. } => ErrorCode::Http,
            Error::Checksum { .. } => ErrorCode::Checksum,
            Error::DiskFull { .. } => ErrorCode::DiskFull,
            Error::Cancelled => ErrorCode::Cancelled,
            Error::Interrupted { .. } => ErrorCode::Interrupted,
            Error::Io { .. } => ErrorCode::Io,
            Error::NoGguf { .. } => ErrorCode::NoGguf,
            Error::BadName { .. } => ErrorCode::BadName,
            Error::Oversized { .. } => ErrorCode::Oversized,
        }
    }
}

impl From<Error> for specula_protocol::ErrorInfo {
    fn from(e: Error) -> Self {
        Self::new(e.error_code(), e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// What the Hub says about one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    pub size: u64,
    /// Hex sha256 of the content (LFS files); None for small files kept in git.
    pub sha256: Option<String>,
    /// The commit the revision resolves to.
    pub commit: String,
    /// The blob name in the cache: the sha256, or the git etag.
    pub etag: String,
}

/// Where a download stands, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
    /// Over this session (bytes resumed from disk do not count).
    pub bytes_per_second: f64,
    pub eta_seconds: Option<f64>,
}

/// One file of one repository at one revision, as the Hub described it.
#[derive(Clone, Copy)]
struct Wanted<'a> {
    repo: &'a str,
    revision: &'a str,
    file: &'a str,
    remote: &'a RemoteFile,
}

type SpaceProbe = fn(&Path) -> std::io::Result<u64>;

/// Bytes that downloads running in this process have been promised and not yet written.
static RESERVED: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

/// A download's promise of disk space: it shrinks as bytes are written and ends with the
/// download, however it ends.
struct Reservation {
    left: u64,
}

impl Reservation {
    fn written(&mut self, n: u64) {
        let n = n.min(self.left);
        self.left -= n;
        *RESERVED.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) -= n;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.written(self.left);
    }
}

pub struct Hub {
    endpoint: String,
    token: Option<String>,
    cache: Cache,
    retries: usize,
    available_space: SpaceProbe,
}

impl Hub {
    /// The Hub and cache the environment names: `HF_ENDPOINT`, `HF_TOKEN`, `HF_HOME`.
    pub fn from_env() -> Self {
        let cache = Cache::from_env();
        let token = std::env::var("HF_TOKEN").ok().or_else(|| cache.token());
        let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.into());
        Self::new(endpoint, cache.path().clone()).with_token(token)
    }

    pub fn new(endpoint: impl Into<String>, cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            endpoint: endpoint.into().trim_end_matches('/').to_string(),
            token: None,
            cache: Cache::new(cache_dir.into()),
            retries: DEFAULT_RETRIES,
            available_space: |p| fs4::available_space(p),
        }
    }

    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    pub fn with_retries(mut self, retries: usize) -> Self {
        self.retries = retries;
        self
    }

    /// How free space is measured; tests simulate a full disk with it.
    pub fn with_available_space(mut self, probe: SpaceProbe) -> Self {
        self.available_space = probe;
        self
    }

    pub fn cache_dir(&self) -> &Path {
        self.cache.path()
    }

    fn client(&self) -> http::Client<'_> {
        http::Client { endpoint: &self.endpoint, token: self.token.as_deref() }
    }

    /// The .gguf files of a model repository.
    pub fn gguf_files(&self, repo: &str) -> Result<Vec<String>> {
        names::check_repo(repo)?;
        self.client().list_files(repo)
    }

    /// The file to fetch: `file` when given, else the one whose name holds `quant`
    /// (default Q4_K_M, then the first .gguf).
    pub fn choose_file(&self, repo: &str, file: Option<&str>, quant: Option<&str>) -> Result<String> {
        if let Some(file) = file {
            return Ok(file.to_string());
        }
        let files = self.gguf_files(repo)?;
        let wanted = quant.unwrap_or("Q4_K_M").to_lowercase();
        let chosen = files.iter().find(|f| f.to_lowercase().contains(&wanted));
        let chosen = chosen.or(if quant.is_none() { files.first() } else { None });
        chosen.cloned().ok_or_else(|| Error::NoGguf {
            repo: repo.into(),
            hint: match quant {
                Some(q) => format!(" for quantization {q}; it has: {}", files.join(", ")),
                None => String::new(),
            },
        })
    }

    pub fn remote_file(&self, repo: &str, revision: &str, file: &str) -> Result<RemoteFile> {
        names::check_repo(repo)?;
        names::check_revision(revision)?;
        names::check_file(file)?;
        self.client().head(repo, revision, file)
    }

    /// The cached copy of `file`, if a complete one is there.
    pub fn cached(&self, repo: &str, revision: &str, file: &str) -> Option<PathBuf> {
        if names::check_repo(repo).is_err()
            || names::check_revision(revision).is_err()
            || names::check_file(file).is_err()
        {
            return None;
        }
        let cached = self.cache_repo(repo, revision).get(file)?;
        cached.exists().then_some(cached)
    }

    fn cache_repo(&self, repo: &str, revision: &str) -> hf_hub::CacheRepo {
        self.cache.repo(Repo::with_revision(repo.into(), RepoType::Model, revision.into()))
    }

    fn repo_dir(&self, repo: &str) -> PathBuf {
        self.cache.path().join(Repo::model(repo.into()).folder_name())
    }

    /// Download `file` of `repo` at `revision` into the cache and return its snapshot path.
    /// `progress` is called after every chunk; setting `cancel` stops the download and
    /// deletes what was written.
    pub fn download(
        &self,
        repo: &str,
        revision: &str,
        file: &str,
        progress: &mut dyn FnMut(Progress),
        cancel: &AtomicBool,
    ) -> Result<PathBuf> {
        let remote = self.remote_file(repo, revision, file)?;
        let repo_dir = self.repo_dir(repo);
        let blobs = repo_dir.join("blobs");
        let blob = blobs.join(&remote.etag);
        let partial = blob.with_extension("incomplete");
        let wanted = Wanted { repo, revision, file, remote: &remote };
        std::fs::create_dir_all(&blobs).map_err(|source| Error::Io { path: blobs.clone(), source })?;
        // One download of a blob at a time: a second `pull` of the same file waits here, then
        // finds the blob the first one finished.
        let _lock = lock(&blob.with_extension("lock"))?;
        if blob.exists() && !blob_is_whole(&blob, &remote)? {
            tracing::warn!("{}: the cached copy does not match the Hub's; fetching it again", blob.display());
            std::fs::remove_file(&blob).map_err(|source| Error::Io { path: blob.clone(), source })?;
        }
        let result = match blob.exists() {
            true => Ok(()),
            false => self.fetch_blob(&wanted, &blob, &partial, progress, cancel),
        };
        if let Err(e) = &result {
            // Keep a partial file only where resuming it is the point.
            if !matches!(e, Error::Interrupted { .. } | Error::Http { .. }) {
                let _ = std::fs::remove_file(&partial);
            }
        }
        result?;
        self.link_snapshot(&wanted, &blob)
    }

    fn fetch_blob(
        &self,
        wanted: &Wanted,
        blob: &Path,
        partial: &Path,
        progress: &mut dyn FnMut(Progress),
        cancel: &AtomicBool,
    ) -> Result<()> {
        let Wanted { repo, revision, file, remote } = *wanted;
        let dir = blob.parent().expect("a blob lives in blobs/");
        std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.into(), source })?;
        let (mut hasher, mut done) = hash_existing(partial)?;
        let mut reserved = self.reserve_space(dir, remote.size.saturating_sub(done))?;
        let mut out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(partial)
            .map_err(|source| Error::Io { path: partial.into(), source })?;
        let started = Instant::now();
        let resumed_from = done;
        let mut attempts = 0;
        while done < remote.size {
            if cancel.load(Ordering::Relaxed) {
                return Err(Error::Cancelled);
            }
            let (mut body, start) = self.client().get(repo, revision, file, done)?;
            if start != done {
                // The server ignored the Range: start over.
                out.set_len(0).map_err(|source| Error::Io { path: partial.into(), source })?;
                (hasher, done) = (Sha256::new(), 0);
            }
            let mut buf = vec![0u8; CHUNK];
            let stopped = loop {
                if cancel.load(Ordering::Relaxed) {
                    return Err(Error::Cancelled);
                }
                let n = match body.read(&mut buf) {
                    Ok(0) => break done < remote.size,
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!("{file}: connection dropped at {done} of {} bytes: {e}", remote.size);
                        break true;
                    }
                };
                if done + n as u64 > remote.size {
                    // More than announced: a broken or hostile server. Nothing of it is kept.
                    return Err(Error::Oversized { file: file.into(), size: remote.size });
                }
                write_all(&mut out, &buf[..n], partial, dir, remote.size - done, self.available_space)?;
                reserved.written(n as u64);
                hasher.update(&buf[..n]);
                done += n as u64;
                progress(measure(done, remote.size, done - resumed_from, started));
            };
            if stopped {
                attempts += 1;
                if attempts > self.retries {
                    return Err(Error::Interrupted { file: file.into(), done, total: remote.size, attempts });
                }
            }
        }
        out.sync_all().map_err(|source| Error::Io { path: partial.into(), source })?;
        let actual = hex(&hasher.finalize());
        if let Some(expected) = &remote.sha256 {
            if &actual != expected {
                return Err(Error::Checksum { file: file.into(), expected: expected.clone(), actual });
            }
        }
        std::fs::rename(partial, blob).map_err(|source| Error::Io { path: blob.into(), source })
    }

    /// Check that `needed` bytes are free in `dir`, less what downloads already running in
    /// this process still have to write, and promise them to this one. Free space is measured
    /// once, before the first byte: without the promise, two downloads started together would
    /// each count the same free space.
    fn reserve_space(&self, dir: &Path, needed: u64) -> Result<Reservation> {
        let mut reserved = RESERVED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let measured = (self.available_space)(dir).map_err(|source| Error::Io { path: dir.into(), source })?;
        let available = measured.saturating_sub(*reserved);
        if needed > available {
            return Err(Error::DiskFull { dir: dir.into(), needed, available });
        }
        *reserved += needed;
        Ok(Reservation { left: needed })
    }

    /// `snapshots/<commit>/<file>` -> `../../blobs/<etag>`, and `refs/<revision>` = commit,
    /// as huggingface_hub lays them out.
    fn link_snapshot(&self, wanted: &Wanted, blob: &Path) -> Result<PathBuf> {
        let Wanted { repo, revision, file, remote } = *wanted;
        let cache_repo = self.cache_repo(repo, revision);
        cache_repo.create_ref(&remote.commit).map_err(|source| Error::Io { path: self.repo_dir(repo), source })?;
        let pointer = self.repo_dir(repo).join("snapshots").join(&remote.commit).join(file);
        // Every name was checked, so this holds; it is asserted again before anything is made.
        if !pointer.starts_with(self.repo_dir(repo)) || !blob.starts_with(self.repo_dir(repo)) {
            return Err(Error::BadName {
                what: "file".into(),
                name: file.into(),
                why: "it leads outside the cache".into(),
            });
        }
        let parent = pointer.parent().expect("a snapshot file has a folder");
        std::fs::create_dir_all(parent).map_err(|source| Error::Io { path: parent.into(), source })?;
        if !pointer.exists() {
            let _ = std::fs::remove_file(&pointer); // a dangling link
            link(blob, file, &pointer)?;
        }
        Ok(pointer)
    }
}

/// An exclusive lock on a lock file, removed when the guard drops so that a finished (or
/// cancelled) download leaves nothing behind.
struct Lock {
    path: PathBuf,
    _file: File,
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Unlinked while still held: a waiter then finds its file gone and takes a new one.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lock(path: &Path) -> Result<Lock> {
    use fs4::fs_std::FileExt;
    let io = |source| Error::Io { path: path.into(), source };
    loop {
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(io)?;
        file.lock_exclusive().map_err(io)?;
        // The holder before us may have removed the file we waited on: lock the one there now.
        if is_still_at(&file, path) {
            return Ok(Lock { path: path.into(), _file: file });
        }
    }
}

#[cfg(unix)]
fn is_still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata().map(|m| (m.dev(), m.ino()));
    held.is_ok_and(|held| std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == held))
}

/// Elsewhere an open file cannot be removed, so the file we locked is still the one there.
#[cfg(not(unix))]
fn is_still_at(_file: &File, _path: &Path) -> bool {
    true
}

/// Whether a cached blob is the file the Hub describes: its size, and its sha256 when the
/// Hub gives one (so a blob damaged on disk is fetched again, not reported as present).
fn blob_is_whole(blob: &Path, remote: &RemoteFile) -> Result<bool> {
    let size = std::fs::metadata(blob).map_err(|source| Error::Io { path: blob.into(), source })?.len();
    if size != remote.size {
        return Ok(false);
    }
    match &remote.sha256 {
        Some(expected) => Ok(&hex(&hash_existing(blob)?.0.finalize()) == expected),
        None => Ok(true),
    }
}

/// The hash and length of what an earlier attempt left.
fn hash_existing(partial: &Path) -> Result<(Sha256, u64)> {
    let mut hasher = Sha256::new();
    let Ok(mut file) = File::open(partial) else { return Ok((hasher, 0)) };
    let done = std::io::copy(&mut file, &mut hasher).map_err(|source| Error::Io { path: partial.into(), source })?;
    Ok((hasher, done))
}

fn write_all(out: &mut File, data: &[u8], path: &Path, dir: &Path, left: u64, probe: SpaceProbe) -> Result<()> {
    out.write_all(data).map_err(|source| match source.kind() {
        std::io::ErrorKind::StorageFull => {
            Error::DiskFull { dir: dir.into(), needed: left, available: probe(dir).unwrap_or(0) }
        }
        _ => Error::Io { path: path.into(), source },
    })
}

fn measure(done: u64, total: u64, this_session: u64, started: Instant) -> Progress {
    let seconds = started.elapsed().as_secs_f64().max(1e-3);
    let bytes_per_second = this_session as f64 / seconds;
    let eta_seconds = (bytes_per_second > 0.0).then(|| (total - done) as f64 / bytes_per_second);
    Progress { done, total, bytes_per_second, eta_seconds }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A link from `snapshots/<commit>/<file>` to the blob, relative as huggingface_hub writes
/// it, so the cache can move.
#[cfg(unix)]
fn link(blob: &Path, file: &str, pointer: &Path) -> Result<()> {
    let mut target = PathBuf::from("..");
    for _ in Path::new(file).components() {
        target.push("..");
    }
    let target = target.join("blobs").join(blob.file_name().expect("a blob has a name"));
    std::os::unix::fs::symlink(&target, pointer).map_err(|source| Error::Io { path: pointer.into(), source })
}

#[cfg(not(unix))]
fn link(blob: &Path, _file: &str, pointer: &Path) -> Result<()> {
    std::fs::copy(blob, pointer).map(|_| ()).map_err(|source| Error::Io { path: pointer.into(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reports_speed_and_eta() {
        let started = Instant::now() - std::time::Duration::from_secs(2);
        let p = measure(600, 1000, 400, started);
        assert!((p.bytes_per_second - 200.0).abs() < 5.0, "{p:?}");
        assert!((p.eta_seconds.unwrap() - 2.0).abs() < 0.1, "{p:?}");
    }

    #[test]
    fn sha256_is_lower_hex() {
        assert_eq!(hex(&Sha256::digest(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn parallel_downloads_cannot_promise_the_same_free_space_twice() {
        let dir = std::env::temp_dir();
        let hub = Hub::new("http://unused", &dir).with_available_space(|_| Ok(1_000));
        let mut first = hub.reserve_space(&dir, 600).unwrap();
        let err = hub.reserve_space(&dir, 600).err().expect("only 400 left for a second download");
        assert!(err.to_string().contains("400 free"), "{err}");
        // Written bytes are on the disk, so the probe sees them: the promise shrinks with them.
        first.written(100);
        assert_eq!(*RESERVED.lock().unwrap(), 500);
        drop(first);
        assert_eq!(*RESERVED.lock().unwrap(), 0);
        let again = hub.reserve_space(&dir, 600);
        assert!(again.is_ok());
    }
}
