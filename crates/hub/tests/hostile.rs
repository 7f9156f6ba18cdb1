//! A hostile or broken mirror (`HF_ENDPOINT` pointed at it): names that climb out of the cache
//! through the etag, the commit or the file list, a body longer than announced, and two pulls
//! of one file at once. Nothing may be written outside the cache, and the concurrent pulls
//! must end with one correct blob.

mod common;

use common::*;
use specula_hub::{Error, Hub};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const REPO: &str = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF";

/// A small real-looking file: hostile cases need no 98 MB body.
fn small_file() -> Vec<u8> {
    (0..4u32 << 20).map(|i| (i * 7 % 251) as u8).collect()
}

fn sha256_of(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(std::fs::read(path).unwrap()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Every file under `dir`, links included.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A sandbox: the cache lives in `root/cache`; anything written elsewhere under `root`
/// escaped it.
struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("cache/deep/er")).unwrap();
        Sandbox { root }
    }
    fn cache(&self) -> std::path::PathBuf {
        self.root.path().join("cache/deep/er")
    }
    fn escaped(&self) -> Vec<std::path::PathBuf> {
        files_under(self.root.path()).into_iter().filter(|p| !p.starts_with(self.cache())).collect()
    }
}

fn hostile(change: impl FnOnce(&mut Behaviour)) -> (StandIn, Sandbox) {
    let server = StandIn::start(REPO, "model.gguf", small_file());
    change(&mut server.behaviour.lock().unwrap());
    (server, Sandbox::new())
}

fn pull(server: &StandIn, sandbox: &Sandbox, file: &str) -> Result<std::path::PathBuf, Error> {
    Hub::new(&server.url, sandbox.cache()).download(REPO, "main", file, &mut |_| {}, &AtomicBool::new(false))
}

#[test]
fn an_etag_that_climbs_out_of_the_cache_is_refused() {
    let escape = "/tmp/specula-hostile-absolute";
    for etag in ["../../../../x/evil", "../../../evil", escape, "a/b", ".."] {
        let (server, sandbox) = hostile(|b| b.etag = Some(etag.into()));
        let err = pull(&server, &sandbox, "model.gguf").unwrap_err();
        assert!(err.to_string().contains("not a hash"), "{etag}: {err}");
        assert_eq!(sandbox.escaped(), Vec::<std::path::PathBuf>::new(), "{etag}");
        assert!(!Path::new(escape).exists());
    }
}

#[test]
fn a_commit_that_climbs_out_of_the_cache_is_refused() {
    for commit in ["../../../../x", "/tmp/specula-hostile-commit", "..", "a/b"] {
        let (server, sandbox) = hostile(|b| b.commit = Some(commit.into()));
        let err = pull(&server, &sandbox, "model.gguf").unwrap_err();
        assert!(err.to_string().contains("not a hash"), "{commit}: {err}");
        assert_eq!(sandbox.escaped(), Vec::<std::path::PathBuf>::new(), "{commit}");
    }
}

#[test]
fn listed_file_names_that_climb_are_skipped_and_asked_for_names_refused() {
    let names = vec![
        "../../../../x/evil.gguf".to_string(),
        "/etc/evil.gguf".into(),
        "good.gguf".into(),
        "a/../../b.gguf".into(),
    ];
    let (server, sandbox) = hostile(|b| b.siblings = Some(names));
    let hub = Hub::new(&server.url, sandbox.cache());
    assert_eq!(hub.gguf_files(REPO).unwrap(), vec!["good.gguf"]);
    for file in ["../../../../x/evil.gguf", "/etc/evil.gguf"] {
        let err = pull(&server, &sandbox, file).unwrap_err();
        assert_eq!(err.code(), "bad_name", "{err}");
    }
    assert!(hub.download("../x", "main", "m.gguf", &mut |_| {}, &AtomicBool::new(false)).is_err());
    assert_eq!(sandbox.escaped(), Vec::<std::path::PathBuf>::new());
}

#[test]
fn a_body_longer_than_announced_is_not_kept() {
    // With a git etag there is no sha256 to catch it: the announced size must.
    let (server, sandbox) = hostile(|b| {
        b.extra_bytes = 1 << 20;
        b.etag = Some("0123456789abcdef0123456789abcdef01234567".into());
    });
    let err = pull(&server, &sandbox, "model.gguf").unwrap_err();
    assert_eq!(err.code(), "oversized", "{err}");
    let kept: Vec<_> =
        files_under(&sandbox.cache()).into_iter().filter(|p| !p.to_string_lossy().ends_with(".lock")).collect();
    assert!(kept.iter().all(|p| p.ends_with("refs/main") || !p.to_string_lossy().contains("blobs")), "{kept:?}");
}

#[test]
fn two_pulls_of_one_file_at_once_end_with_one_correct_blob() {
    let (server, sandbox) = hostile(|b| b.delay_per_mib = Some(std::time::Duration::from_millis(60)));
    let server = Arc::new(server);
    let cache = sandbox.cache();
    let pulls: Vec<_> = (0..2)
        .map(|_| {
            let (server, cache) = (server.clone(), cache.clone());
            std::thread::spawn(move || {
                Hub::new(&server.url, &cache).download(REPO, "main", "model.gguf", &mut |_| {}, &AtomicBool::new(false))
            })
        })
        .collect();
    let paths: Vec<_> = pulls.into_iter().map(|p| p.join().unwrap().expect("both pulls succeed")).collect();
    assert_eq!(paths[0], paths[1]);
    assert_eq!(sha256_of(&paths[0]), server.sha256);
    let blobs: Vec<_> =
        files_under(&cache).into_iter().filter(|p| p.parent().is_some_and(|d| d.ends_with("blobs"))).collect();
    let data: Vec<_> = blobs.iter().filter(|p| !p.to_string_lossy().ends_with(".lock")).collect();
    assert_eq!(data.len(), 1, "{blobs:?}");
    assert_eq!(std::fs::metadata(data[0]).unwrap().len(), 4 << 20);
    assert_eq!(data[0].file_name().unwrap().to_string_lossy(), server.sha256, "the blob is named by its own sha256");
}

#[test]
fn a_damaged_blob_in_the_cache_is_fetched_again() {
    let (server, sandbox) = hostile(|_| {});
    let path = pull(&server, &sandbox, "model.gguf").unwrap();
    let blob = std::fs::canonicalize(&path).unwrap();
    std::fs::write(&blob, b"damaged").unwrap();
    let again = pull(&server, &sandbox, "model.gguf").unwrap();
    assert_eq!(sha256_of(&again), server.sha256);
}
