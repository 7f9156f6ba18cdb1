//! Prompts' caches kept on disk, so that a long chat reopened after a restart resumes where it
//! was instead of being read again (llama-server and LM Studio keep theirs in memory only).
//!
//! One file per sequence under `<root>/<model key>/`: a header with the token ids it holds, the
//! model's saved state as the model writes it, and a trailer with the state's length and CRC-32.
//! The model key hashes the model file (its size and first and last 4 MiB), the KV format and
//! whatever else changes what the state means (a draft's cut output layer), so a snapshot of
//! another model, format or version is never looked at. A file that cannot be read, does not
//! check out, or does not fit the model is ignored with a log line and removed: never trusted.
//! The folder is held under a size cap; the least recently used files go first.

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

const MAGIC: &[u8; 8] = b"SPECULAK";
/// The file layout's version: a change makes older files foreign.
const VERSION: u32 = 1;
const TRAILER: &[u8; 4] = b"END.";
/// The most ids a header may list (a context of a million positions).
const MAX_IDS: usize = 1 << 20;

/// What identifies a model's state: its file, and what else decides the state's meaning.
pub fn model_key(path: &Path, variant: &str) -> std::io::Result<String> {
    const EDGE: u64 = 4 << 20;
    let mut file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut hash = Sha256::new();
    hash.update(size.to_le_bytes());
    let mut edge = Vec::new();
    (&mut file).take(EDGE).read_to_end(&mut edge)?;
    hash.update(&edge);
    file.seek(SeekFrom::Start(size.saturating_sub(EDGE)))?;
    edge.clear();
    file.take(EDGE).read_to_end(&mut edge)?;
    hash.update(&edge);
    hash.update(variant.as_bytes());
    Ok(hex(&hash.finalize()[..12]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One saved sequence on disk.
#[derive(Debug, Clone)]
pub struct DiskEntry {
    pub ids: Vec<u32>,
    path: PathBuf,
}

/// A model's saved sequences on disk.
pub struct DiskCache {
    root: PathBuf,
    dir: PathBuf,
    budget: u64,
    entries: Vec<DiskEntry>,
}

/// Writes the model's state into a file; reads it back.
pub type Encode<'a> = &'a mut dyn FnMut(&mut dyn Write) -> Result<()>;
pub type Decode<'a, T> = &'a mut dyn FnMut(&mut dyn Read) -> Result<T>;

impl DiskCache {
    /// The sequences of the model `key` under `root`, in at most `budget` bytes (all models'
    /// files together). Files whose header cannot be read are removed.
    pub fn open(root: &Path, key: &str, budget: u64) -> Self {
        let dir = root.join(key);
        let mut cache = Self { root: root.to_path_buf(), dir, budget, entries: Vec::new() };
        cache.entries = cache.scan();
        cache
    }

    fn scan(&self) -> Vec<DiskEntry> {
        let Ok(listing) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut entries = Vec::new();
        for path in listing.flatten().map(|e| e.path()) {
            if path.extension().is_some_and(|e| e == "tmp") {
                let _ = std::fs::remove_file(&path); // a write cut short
                continue;
            }
            if path.extension().is_none_or(|e| e != "kv") {
                continue;
            }
            match read_header(&path) {
                Ok((ids, _)) => entries.push(DiskEntry { ids, path }),
                Err(e) => discard(&path, &e),
            }
        }
        entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a sequence of exactly `ids` is on disk.
    pub fn holds(&self, ids: &[u32]) -> bool {
        self.entries.iter().any(|e| e.ids == ids)
    }

    /// The entry sharing the most (at least `at_least`, at least one) leading tokens with
    /// `context`, among those a cache of `capacity` positions can hold (a longer one stays on
    /// disk for a later load with more room).
    pub fn best(&self, context: &[u32], at_least: usize, capacity: usize) -> Option<(DiskEntry, usize)> {
        let (entry, shared) = self
            .entries
            .iter()
            .filter(|e| e.ids.len() <= capacity)
            .map(|e| (e, crate::tokenizer::common_prefix(&e.ids, context)))
            .max_by_key(|&(_, shared)| shared)?;
        (shared >= at_least.max(1)).then(|| (entry.clone(), shared))
    }

    /// Read `entry`'s state with `decode`, checked against its CRC. A file that fails is
    /// removed (and forgotten) and the reason logged; `None` then.
    pub fn load<T>(&mut self, entry: &DiskEntry, decode: Decode<T>) -> Option<T> {
        match read_state(&entry.path, decode) {
            Ok(state) => {
                // Least recently used goes first: a read counts as a use.
                let _ = File::options().append(true).open(&entry.path).and_then(|f| f.set_modified(SystemTime::now()));
                Some(state)
            }
            Err(e) => {
                discard(&entry.path, &e);
                self.entries.retain(|e| e.path != entry.path);
                None
            }
        }
    }

    /// Write the state after `ids` (`encode` writes it), replacing the entries it extends, and
    /// keep the folder under its cap. Written to a temporary file and renamed: a crash leaves
    /// the old files or the new one, never half of one.
    /// Whether a state of `bytes` should be written: under the cap (a larger one would be
    /// written and at once evicted, after every reply), and leaving the disk at least
    /// [`DISK_LEFT_FREE`] besides (a cache never fills the disk the history lives on).
    pub fn fits(&self, bytes: u64) -> bool {
        let free = free_space(&self.root);
        bytes < self.budget && free.is_none_or(|free| free > bytes.saturating_add(DISK_LEFT_FREE))
    }

    pub fn store(&mut self, ids: &[u32], encode: Encode) -> Result<()> {
        if ids.is_empty() || ids.len() > MAX_IDS {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        let name = hex(&Sha256::digest(ids.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>())[..12]);
        let path = self.dir.join(format!("{name}.kv"));
        let temp = self.dir.join(format!("{name}.{}.tmp", std::process::id()));
        let written = write_file(&temp, ids, encode).and_then(|()| Ok(std::fs::rename(&temp, &path)?));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        // Sequences this one extends (the same chat, earlier) are served by it as well.
        let (extended, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(|e| e.path != path && crate::tokenizer::common_prefix(&e.ids, ids) == e.ids.len());
        for old in extended {
            let _ = std::fs::remove_file(&old.path);
        }
        self.entries = kept.into_iter().filter(|e| e.path != path).collect();
        self.entries.push(DiskEntry { ids: ids.to_vec(), path });
        self.evict();
        Ok(())
    }

    /// Remove the least recently used files, of any model, until the folder is under its cap.
    /// Only files of our own naming are counted or removed: the folder is the user's to name.
    fn evict(&mut self) {
        let mut files: Vec<(SystemTime, u64, PathBuf)> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|model| model.file_name().to_str().is_some_and(is_model_folder))
            .filter_map(|model| std::fs::read_dir(model.path()).ok())
            .flatten()
            .flatten()
            .filter(|f| f.file_name().to_str().is_some_and(is_sequence_file))
            .filter_map(|f| {
                let meta = f.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), f.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, bytes, path) in files {
            if total <= self.budget {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= bytes;
                self.entries.retain(|e| e.path != path);
            }
        }
    }
}

/// Disk a write of the cache leaves free, at least.
pub const DISK_LEFT_FREE: u64 = 1 << 30;

/// Bytes this process may still write on the file system holding `path` (or its nearest
/// existing parent); `None` where that cannot be told.
fn free_space(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
        // SAFETY: a NUL-terminated path and a zeroed struct for the call to fill.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(name.as_ptr(), &mut stat) } != 0 {
            return None;
        }
        Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
    }
    #[cfg(not(unix))]
    {
        let _ = existing;
        None
    }
}

/// `<24 hex digits>-<variant>`, as [`model_key`] and the caller name a model's folder.
fn is_model_folder(name: &str) -> bool {
    name.len() > 25 && name.as_bytes()[24] == b'-' && name[..24].bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<24 hex digits>.kv`, as [`DiskCache::store`] names a sequence's file.
fn is_sequence_file(name: &str) -> bool {
    name.len() == 27 && name.ends_with(".kv") && name[..24].bytes().all(|b| b.is_ascii_hexdigit())
}

fn discard(path: &Path, why: &Error) {
    tracing::warn!("{}: a saved prompt cache is ignored and removed: {why}", path.display());
    let _ = std::fs::remove_file(path);
}

fn write_file(path: &Path, ids: &[u32], encode: Encode) -> Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&(ids.len() as u32).to_le_bytes())?;
    for id in ids {
        out.write_all(&id.to_le_bytes())?;
    }
    let mut counted = Checksummed { inner: out, crc: crc32fast::Hasher::new(), bytes: 0 };
    encode(&mut counted)?;
    let Checksummed { inner: mut out, crc, bytes } = counted;
    out.write_all(&bytes.to_le_bytes())?;
    out.write_all(&crc.finalize().to_le_bytes())?;
    out.write_all(TRAILER)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}

fn read_header(path: &Path) -> Result<(Vec<u32>, BufReader<File>)> {
    let mut input = BufReader::new(File::open(path)?);
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC || read_u32(&mut input)? != VERSION {
        return Err(foreign("not a prompt cache of this version"));
    }
    let n = read_u32(&mut input)? as usize;
    if n == 0 || n > MAX_IDS {
        return Err(foreign("an impossible token count"));
    }
    let mut bytes = vec![0u8; n * 4];
    input.read_exact(&mut bytes)?;
    let ids = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    Ok((ids, input))
}

fn read_state<T>(path: &Path, decode: Decode<T>) -> Result<T> {
    let (_, input) = read_header(path)?;
    let mut counted = Checksummed { inner: input, crc: crc32fast::Hasher::new(), bytes: 0 };
    let state = decode(&mut counted)?;
    let Checksummed { inner: mut input, crc, bytes } = counted;
    let mut trailer = [0u8; 16];
    input.read_exact(&mut trailer)?;
    let length = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
    let sum = u32::from_le_bytes(trailer[8..12].try_into().expect("4 bytes"));
    if length != bytes || sum != crc.finalize() || &trailer[12..] != TRAILER {
        return Err(foreign("its checksum does not match (a damaged file)"));
    }
    Ok(state)
}

fn read_u32(input: &mut impl Read) -> Result<u32> {
    let mut b = [0u8; 4];
    input.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn foreign(why: &str) -> Error {
    Error::InvalidSetting(format!("a saved prompt cache: {why}"))
}

/// A reader or writer that checksums and counts what passes through.
struct Checksummed<T> {
    inner: T,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Checksummed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "0123456789abcdef01234567-all";
    const KEY_B: &str = "0123456789abcdef01234568-all";

    fn store(cache: &mut DiskCache, ids: &[u32], payload: &[u8]) {
        cache.store(ids, &mut |w: &mut dyn Write| Ok(w.write_all(payload)?)).unwrap();
    }

    fn load(cache: &mut DiskCache, entry: &DiskEntry, len: usize) -> Option<Vec<u8>> {
        cache.load(entry, &mut |r: &mut dyn Read| {
            let mut back = vec![0u8; len];
            r.read_exact(&mut back)?;
            Ok(back)
        })
    }

    #[test]
    fn a_stored_sequence_comes_back_after_a_restart_and_a_damaged_one_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let mut cache = DiskCache::open(root.path(), KEY_A, 1 << 20);
        store(&mut cache, &[1, 2, 3], b"short");
        store(&mut cache, &[1, 2, 3, 4, 5], b"longer state");
        store(&mut cache, &[9, 9], b"other chat");
        assert_eq!(cache.len(), 2, "the longer state of a chat replaces the shorter");
        let reopened = DiskCache::open(root.path(), KEY_A, 1 << 20);
        let (entry, shared) = reopened.best(&[1, 2, 3, 4, 5, 6], 1, 100).unwrap();
        assert_eq!((entry.ids.as_slice(), shared), (&[1, 2, 3, 4, 5][..], 5));
        let mut reopened = reopened;
        assert_eq!(load(&mut reopened, &entry, 12).as_deref(), Some(&b"longer state"[..]));
        assert!(DiskCache::open(root.path(), KEY_B, 1 << 20).is_empty(), "another model sees none");

        // One flipped byte in the state: ignored, removed, forgotten.
        let mut bytes = std::fs::read(&entry.path).unwrap();
        let at = bytes.len() - 20;
        bytes[at] ^= 1;
        std::fs::write(&entry.path, bytes).unwrap();
        assert_eq!(load(&mut reopened, &entry, 12), None);
        assert!(!entry.path.exists());
        assert_eq!(reopened.len(), 1);
        // A file cut short, and one of another format, are removed at open.
        let (other, _) = reopened.best(&[9, 9], 1, 100).unwrap();
        let bytes = std::fs::read(&other.path).unwrap();
        std::fs::write(&other.path, &bytes[..10]).unwrap();
        std::fs::write(root.path().join(KEY_A).join("junk.kv"), b"SPECULAK\x07\0\0\0").unwrap();
        assert!(DiskCache::open(root.path(), KEY_A, 1 << 20).is_empty());
        assert_eq!(std::fs::read_dir(root.path().join(KEY_A)).unwrap().count(), 0);
    }

    #[test]
    fn a_state_is_written_only_under_the_cap_and_with_the_disk_left_free() {
        let root = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(&root.path().join("not yet made"), KEY_A, 1 << 20);
        assert!(free_space(&root.path().join("not yet made")).is_some_and(|free| free > 0));
        assert!(!cache.fits(2 << 20), "over the cap");
        let roomy = DiskCache::open(root.path(), KEY_A, u64::MAX);
        let free = free_space(root.path()).unwrap();
        assert!(!roomy.fits(free), "a state that would leave less than DISK_LEFT_FREE");
    }

    #[test]
    fn the_folder_stays_under_its_cap_oldest_first() {
        let root = tempfile::tempdir().unwrap();
        let mut cache = DiskCache::open(root.path(), KEY_A, 3000);
        for chat in 0..5u32 {
            store(&mut cache, &[100 + chat, 1], &[0u8; 1000]);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(cache.len(), 2, "two files of ~1 KiB fit under 3,000 bytes");
        assert!(cache.holds(&[104, 1]) && cache.holds(&[103, 1]));
        // Files not of our naming are the folder owner's: never counted, never removed.
        std::fs::write(root.path().join("notes.kv"), [0u8; 5000]).unwrap();
        std::fs::create_dir(root.path().join("photos")).unwrap();
        std::fs::write(root.path().join("photos/a.kv"), [0u8; 5000]).unwrap();
        store(&mut cache, &[105, 1], &[0u8; 1000]);
        assert!(root.path().join("notes.kv").exists() && root.path().join("photos/a.kv").exists());
        assert_eq!(cache.len(), 2);
        assert!(cache.best(&[104, 1], 1, 1).is_none(), "longer than the cache can hold: not offered");
    }
}
