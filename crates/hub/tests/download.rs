//! Downloads against a local stand-in for the Hub serving a real GGUF file: resume after a
//! cut connection, resume of a partial file left by an earlier run, checksum, 404, full disk
//! and cancel at any point, and the cache layout other tools read.

mod common;

use common::*;
use specula_hub::{local_models, Error, Hub, Progress};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

const REPO: &str = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF";

fn setup() -> (StandIn, tempfile::TempDir) {
    let (file, data) = real_model();
    (StandIn::start(REPO, &file, data), tempfile::tempdir().unwrap())
}

fn sha256_of(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(std::fs::read(path).unwrap()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Every file under the cache: nothing half-written may be left there.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        out.push(entry.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn pull(hub: &Hub, server: &StandIn, cancel: &AtomicBool) -> Result<std::path::PathBuf, Error> {
    hub.download(REPO, "main", &server.file, &mut |_| {}, cancel)
}

#[test]
fn a_download_lands_in_the_hub_cache_layout_with_the_right_sha256() {
    let (server, cache) = setup();
    let hub = Hub::new(&server.url, cache.path());
    let mut last = None;
    let path =
        hub.download(REPO, "main", &server.file, &mut |p: Progress| last = Some(p), &AtomicBool::new(false)).unwrap();
    assert_eq!(sha256_of(&path), server.sha256);
    let repo_dir = cache.path().join("models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF");
    assert_eq!(path, repo_dir.join("snapshots").join(COMMIT).join(&server.file));
    assert!(path.is_symlink(), "snapshots link to blobs, as huggingface_hub lays them out");
    assert!(repo_dir.join("blobs").join(&server.sha256).is_file());
    assert_eq!(std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(), COMMIT);
    let last = last.unwrap();
    assert_eq!((last.done, last.total), (server.data.len() as u64, server.data.len() as u64));
    assert!(last.bytes_per_second > 0.0);
    // The library finds it, and a second pull finds it cached without fetching again.
    let models = local_models(cache.path(), &[]);
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].repo.as_deref(), Some(REPO));
    assert_eq!(models[0].bytes, server.data.len() as u64);
    let gets = |s: &StandIn| s.requests().iter().filter(|r| r.starts_with("GET")).count();
    let before = gets(&server);
    assert_eq!(pull(&hub, &server, &AtomicBool::new(false)).unwrap(), path);
    assert_eq!(gets(&server), before);
    assert_eq!(hub.cached(REPO, "main", &server.file), Some(path));
}

#[test]
fn a_connection_cut_mid_file_resumes_with_a_range_request() {
    let (server, cache) = setup();
    server.behaviour.lock().unwrap().cuts = vec![10_000_000, 30_000_000];
    let hub = Hub::new(&server.url, cache.path());
    let path = pull(&hub, &server, &AtomicBool::new(false)).unwrap();
    assert_eq!(sha256_of(&path), server.sha256);
    let gets: Vec<String> = server.requests().into_iter().filter(|r| r.starts_with("GET")).collect();
    assert_eq!(gets.len(), 3, "{gets:?}");
    assert!(gets[0].ends_with(" -"), "{gets:?}");
    assert!(gets[1].ends_with(" 10000000"), "the second GET resumes at the cut: {gets:?}");
    assert!(gets[2].ends_with(" 40000000"), "{gets:?}");
}

#[test]
fn a_partial_file_from_an_earlier_run_is_resumed_by_the_next_pull() {
    let (server, cache) = setup();
    server.behaviour.lock().unwrap().cuts = vec![25_000_000];
    let impatient = Hub::new(&server.url, cache.path()).with_retries(0);
    let error = pull(&impatient, &server, &AtomicBool::new(false)).unwrap_err();
    assert!(matches!(error, Error::Interrupted { done: 25_000_000, .. }), "{error}");
    assert!(error.to_string().contains("resumes"), "{error}");
    assert_eq!(
        files_under(cache.path()),
        vec![format!("models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF/blobs/{}.incomplete", server.sha256)]
    );
    assert!(local_models(cache.path(), &[]).is_empty(), "a partial file is not in the library");

    let path = pull(&Hub::new(&server.url, cache.path()), &server, &AtomicBool::new(false)).unwrap();
    assert_eq!(sha256_of(&path), server.sha256);
    assert!(server.requests().iter().any(|r| r.starts_with("GET") && r.ends_with(" 25000000")));
}

#[test]
fn a_server_that_ignores_range_restarts_cleanly() {
    let (server, cache) = setup();
    {
        let mut b = server.behaviour.lock().unwrap();
        b.cuts = vec![5_000_000];
        b.ignore_range = true;
    }
    let path = pull(&Hub::new(&server.url, cache.path()), &server, &AtomicBool::new(false)).unwrap();
    assert_eq!(sha256_of(&path), server.sha256);
}

#[test]
fn a_missing_file_is_a_clear_error_and_leaves_nothing() {
    let (server, cache) = setup();
    let hub = Hub::new(&server.url, cache.path());
    let error = hub.download(REPO, "main", "no-such-file.gguf", &mut |_| {}, &AtomicBool::new(false)).unwrap_err();
    assert_eq!(error.code(), "not_found");
    assert!(error.to_string().contains("no-such-file.gguf"), "{error}");
    assert!(files_under(cache.path()).is_empty());
}

#[test]
fn a_wrong_checksum_is_a_clear_error_and_leaves_nothing() {
    let (server, cache) = setup();
    server.behaviour.lock().unwrap().wrong_sha256 = true;
    let error = pull(&Hub::new(&server.url, cache.path()), &server, &AtomicBool::new(false)).unwrap_err();
    assert_eq!(error.code(), "checksum", "{error}");
    assert!(error.to_string().contains(&server.sha256), "names the sha256 it got: {error}");
    assert!(files_under(cache.path()).is_empty(), "{:?}", files_under(cache.path()));
}

#[test]
fn a_full_disk_is_refused_before_the_first_byte() {
    let (server, cache) = setup();
    let hub = Hub::new(&server.url, cache.path()).with_available_space(|_| Ok(50_000_000));
    let error = pull(&hub, &server, &AtomicBool::new(false)).unwrap_err();
    assert_eq!(error.code(), "disk_full", "{error}");
    assert!(error.to_string().contains("50000000 free"), "{error}");
    assert!(files_under(cache.path()).is_empty(), "{:?}", files_under(cache.path()));
    assert!(!server.requests().iter().any(|r| r.starts_with("GET")), "no byte was fetched");
}

#[test]
fn cancel_at_any_point_leaves_nothing() {
    let (server, cache) = setup();
    let total = server.data.len() as u64;
    // Before the start, after the first chunk, half-way and on the last chunk.
    for at in [0, 1, total / 2, total - 1] {
        let hub = Hub::new(&server.url, cache.path());
        let cancel = AtomicBool::new(at == 0);
        let error = hub
            .download(
                REPO,
                "main",
                &server.file,
                &mut |p: Progress| {
                    if p.done >= at {
                        cancel.store(true, Ordering::Relaxed);
                    }
                },
                &cancel,
            )
            .unwrap_err();
        assert_eq!(error.code(), "cancelled", "cancel at {at}: {error}");
        let left = files_under(cache.path());
        assert!(left.is_empty(), "cancel at {at} left {left:?}");
    }
}

#[test]
fn the_quantization_is_chosen_from_the_repository_listing() {
    let (server, cache) = setup();
    let hub = Hub::new(&server.url, cache.path());
    assert_eq!(hub.gguf_files(REPO).unwrap(), vec![server.file.clone(), "model-Q8_0.gguf".to_string()]);
    assert_eq!(hub.choose_file(REPO, None, Some("q8_0")).unwrap(), "model-Q8_0.gguf");
    assert_eq!(hub.choose_file(REPO, None, None).unwrap(), server.file, "no Q4_K_M here: the first .gguf");
    let error = hub.choose_file(REPO, None, Some("Q2_K")).unwrap_err();
    assert!(error.to_string().contains("model-Q8_0.gguf"), "lists what there is: {error}");
    assert_eq!(hub.gguf_files("nobody/nothing").unwrap_err().code(), "not_found");
}
