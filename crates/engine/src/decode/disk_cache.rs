//! Prompts' caches kept on disk, so that a long chat reopened after a restart resumes where it
//! was instead of being read again (llama-server and LM Studio keep theirs in memory only).
//!
//! One file per sequence under `<root>/<model key>/`, named by a hash of its token ids: a header
//! with the ids, the model's saved state as the model writes it, the state's length and a seal
//! (HMAC-SHA256 under a key of this user's, over the model folder's name and every byte before
//! it). The model key hashes the model file (its size and first and last 4 MiB), the KV format
//! and whatever else changes what the state means (a draft's cut output layer), so a snapshot of
//! another model, format or version is never looked at.
//!
//! A file is never trusted: a state resumed for a prompt is the state those exact ids left, or
//! the prompt is read again. The ids are inside the seal and the file's name is checked against
//! them (a header given another prompt's ids, one flipped bit, a file moved from another model's
//! folder or written by anyone without the key all fail), and a file that fails is removed with
//! a log line. The key lives in the root (`cache.key`, 0600); folders are 0700 and files 0600,
//! created exclusively; a root that another user owns or others can write to is refused, and no
//! symbolic link is followed. Writers sharing a folder each write their own temporary file and
//! rename it into place; only a temporary file left for an hour is taken for a crash's.
//! The folder is held under a size cap; the least recently used files go first.

use crate::error::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"SPECULAK";
/// The file layout's version: a change makes older files foreign. 2: the seal replaced a CRC
/// that covered the state only.
const VERSION: u32 = 2;
const TRAILER: &[u8; 4] = b"END.";
/// The most ids a header may list (a context of a million positions).
const MAX_IDS: usize = 1 << 20;
/// The sealing key's file in the root, and its length.
const KEY_FILE: &str = "cache.key";
const KEY_BYTES: usize = 32;
/// A temporary file older than this is a write cut short by a crash; a younger one may be
/// another process's write in progress, and is left alone.
const STALE_WRITE: Duration = Duration::from_secs(3600);

type Seal = Hmac<Sha256>;

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
    /// The model folder's name: sealed into every file, so a file moved between folders fails.
    folder: String,
    key: [u8; KEY_BYTES],
    budget: u64,
    entries: Vec<DiskEntry>,
}

/// Writes the model's state into a file; reads it back.
pub type Encode<'a> = &'a mut dyn FnMut(&mut dyn Write) -> Result<()>;
pub type Decode<'a, T> = &'a mut dyn FnMut(&mut dyn Read) -> Result<T>;

impl DiskCache {
    /// The sequences of the model `key` under `root`, in at most `budget` bytes (all models'
    /// files together). Makes the folders (0700) and the sealing key where missing; refuses,
    /// saying why, a root it cannot trust ([`prepare_folder`]). Files whose header cannot be
    /// read are removed.
    pub fn open(root: &Path, key: &str, budget: u64) -> Result<Self> {
        prepare_folder(root)?;
        let secret = load_or_make_key(root)?;
        let dir = root.join(key);
        prepare_folder(&dir)?;
        let mut cache =
            Self { root: root.to_path_buf(), dir, folder: key.to_string(), key: secret, budget, entries: Vec::new() };
        cache.entries = cache.scan();
        Ok(cache)
    }

    fn scan(&self) -> Vec<DiskEntry> {
        let Ok(listing) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut entries = Vec::new();
        for path in listing.flatten().map(|e| e.path()) {
            if path.extension().is_some_and(|e| e == "tmp") {
                remove_if_stale(&path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "kv") {
                continue;
            }
            match self.open_sealed(&path) {
                Ok((ids, _)) if path.file_stem().is_some_and(|stem| *stem == *sequence_name(&ids)) => {
                    entries.push(DiskEntry { ids, path })
                }
                Ok(_) => discard(&path, &foreign("its name is not that of the token ids it lists")),
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

    /// Read `entry`'s state with `decode`; it is returned only when the file's ids are still
    /// `entry`'s and its seal holds. A file that fails is removed (and forgotten) and the
    /// reason logged; `None` then.
    pub fn load<T>(&mut self, entry: &DiskEntry, decode: Decode<T>) -> Option<T> {
        match self.read_state(entry, decode) {
            Ok(state) => {
                // Least recently used goes first: a read counts as a use.
                touch(&entry.path);
                Some(state)
            }
            Err(e) => {
                discard(&entry.path, &e);
                self.entries.retain(|e| e.path != entry.path);
                None
            }
        }
    }

    /// Whether a state of `bytes` should be written: under the cap (a larger one would be
    /// written and at once evicted, after every reply), and leaving the disk at least
    /// [`DISK_LEFT_FREE`] besides (a cache never fills the disk the history lives on).
    pub fn fits(&self, bytes: u64) -> bool {
        let free = free_space(&self.root);
        bytes < self.budget && free.is_none_or(|free| free > bytes.saturating_add(DISK_LEFT_FREE))
    }

    /// Write the state after `ids` (`encode` writes it), replacing the entries it extends, and
    /// keep the folder under its cap. Written to a temporary file and renamed: a crash leaves
    /// the old files or the new one, never half of one.
    pub fn store(&mut self, ids: &[u32], encode: Encode) -> Result<()> {
        if ids.is_empty() || ids.len() > MAX_IDS {
            return Ok(());
        }
        prepare_folder(&self.dir)?;
        let name = sequence_name(ids);
        let path = self.dir.join(format!("{name}.kv"));
        // Unique per writer: two processes sharing the folder never write one file.
        let temp = self.dir.join(format!("{name}.{}-{:08x}.tmp", std::process::id(), rand::random::<u32>()));
        let written = self.write_file(&temp, ids, encode).and_then(|()| Ok(std::fs::rename(&temp, &path)?));
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
            // Never into a linked folder: its files are not ours to count or remove.
            .filter(|model| model.file_type().is_ok_and(|t| t.is_dir()))
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

/// A sequence's file name: a hash of its ids, checked against the ids it lists.
fn sequence_name(ids: &[u32]) -> String {
    hex(&Sha256::digest(ids.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>())[..12])
}

impl DiskCache {
    /// A seal under this user's key, bound to this model folder.
    fn seal(&self) -> Seal {
        let mut seal = <Seal as Mac>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        seal.update(&(self.folder.len() as u64).to_le_bytes());
        seal.update(self.folder.as_bytes());
        seal
    }

    fn write_file(&self, path: &Path, ids: &[u32], encode: Encode) -> Result<()> {
        let mut out = Sealed { inner: BufWriter::new(create_private(path)?), seal: self.seal(), bytes: 0 };
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&(ids.len() as u32).to_le_bytes())?;
        for id in ids {
            out.write_all(&id.to_le_bytes())?;
        }
        let header = out.bytes;
        encode(&mut out)?;
        let state = out.bytes - header;
        out.write_all(&state.to_le_bytes())?;
        let Sealed { inner: mut out, seal, .. } = out;
        out.write_all(&seal.finalize().into_bytes())?;
        out.write_all(TRAILER)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(())
    }

    /// The ids a file lists, and a reader positioned at its state whose seal has taken in
    /// everything read so far.
    fn open_sealed(&self, path: &Path) -> Result<(Vec<u32>, Sealed<BufReader<File>>)> {
        let file = open_no_follow(path)?;
        if !file.metadata()?.is_file() {
            return Err(foreign("not a regular file"));
        }
        let mut input = Sealed { inner: BufReader::new(file), seal: self.seal(), bytes: 0 };
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

    /// `entry`'s state, decoded as it streams and returned only once the whole file's seal
    /// checks out: nothing of a forged or damaged file reaches the model.
    fn read_state<T>(&self, entry: &DiskEntry, decode: Decode<T>) -> Result<T> {
        let (ids, mut input) = self.open_sealed(&entry.path)?;
        if ids != entry.ids {
            return Err(foreign("its token ids changed since the folder was read"));
        }
        let header = input.bytes;
        let state = decode(&mut input)?;
        let read = input.bytes - header;
        let mut length = [0u8; 8];
        input.read_exact(&mut length)?;
        let Sealed { inner: mut input, seal, .. } = input;
        let mut tag = [0u8; 32];
        input.read_exact(&mut tag)?;
        let mut trailer = [0u8; 4];
        input.read_exact(&mut trailer)?;
        if u64::from_le_bytes(length) != read || &trailer != TRAILER || input.read(&mut [0u8; 1])? != 0 {
            return Err(foreign("its length does not match (a damaged file)"));
        }
        seal.verify_slice(&tag)
            .map_err(|_| foreign("its seal does not match: damaged, moved, or not written by this user's Specula"))?;
        Ok(state)
    }
}

fn read_u32(input: &mut impl Read) -> Result<u32> {
    let mut b = [0u8; 4];
    input.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn foreign(why: &str) -> Error {
    Error::InvalidSetting(format!("a saved prompt cache: {why}"))
}

/// A reader or writer that seals and counts what passes through.
struct Sealed<T> {
    inner: T,
    seal: Seal,
    bytes: u64,
}

impl<W: Write> Write for Sealed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.seal.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Sealed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seal.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Make `path` a folder for this user alone, or say why it cannot be one. A folder another user
/// owns, or that others can write to, could be handed forged files or have ours read; a
/// symbolic link could point anywhere. A folder of ours that others can read (an earlier
/// release made them 0755) is closed to them.
pub fn prepare_folder(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create_private_dir(path)?;
            std::fs::symlink_metadata(path)?
        }
        other => other?,
    };
    let refuse = |why: &str| {
        Err(Error::InvalidSetting(format!(
            "the prompt cache folder {} {why}; name a folder of your own",
            path.display()
        )))
    };
    if meta.file_type().is_symlink() {
        return refuse("is a symbolic link, which is not followed");
    }
    if !meta.is_dir() {
        return refuse("is not a folder");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // SAFETY: geteuid has no preconditions and cannot fail.
        if meta.uid() != unsafe { libc::geteuid() } {
            return refuse("belongs to another user");
        }
        if meta.mode() & 0o022 != 0 {
            return refuse("can be written by other users");
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

fn create_private_dir(path: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

/// A new file readable by this user alone; fails where anything (a link included) is there.
fn create_private(path: &Path) -> std::io::Result<File> {
    let mut options = File::options();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Open for reading without following a symbolic link (or hanging on a FIFO).
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    let mut options = File::options();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW | libc::O_NONBLOCK);
    options.open(path)
}

/// Mark a file used now (for least-recently-used eviction), never through a link.
fn touch(path: &Path) {
    let mut options = File::options();
    options.append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let _ = options.open(path).and_then(|f| f.set_modified(SystemTime::now()));
}

/// Remove a temporary file left by a write that a crash cut short; one younger than
/// [`STALE_WRITE`] may be another process's write in progress.
fn remove_if_stale(path: &Path) {
    let age = std::fs::symlink_metadata(path).ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
    if age.is_some_and(|age| age > STALE_WRITE) {
        let _ = std::fs::remove_file(path);
    }
}

/// This user's sealing key in `root`, made at first use. Written aside and linked into place,
/// so that two processes starting at once agree on one key and none reads half of it.
fn load_or_make_key(root: &Path) -> Result<[u8; KEY_BYTES]> {
    let path = root.join(KEY_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        let temp = root.join(format!("{KEY_FILE}.{}-{:08x}.tmp", std::process::id(), rand::random::<u32>()));
        let key: [u8; KEY_BYTES] = rand::random();
        let mut file = create_private(&temp)?;
        let made = file.write_all(&key).and_then(|()| file.sync_all()).and_then(|()| std::fs::hard_link(&temp, &path));
        let _ = std::fs::remove_file(&temp);
        match made {
            Ok(()) => return Ok(key),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {} // another process won: read its key
            Err(e) => return Err(e.into()),
        }
    }
    let mut file = open_no_follow(&path)?;
    let meta = file.metadata()?;
    let mut private = meta.is_file() && meta.len() == KEY_BYTES as u64;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        private &= meta.uid() == unsafe { libc::geteuid() } && meta.mode() & 0o077 == 0;
    }
    if !private {
        return Err(Error::InvalidSetting(format!(
            "{}: the prompt cache's key is not a {KEY_BYTES}-byte file readable by you alone; remove it to make a new one",
            path.display()
        )));
    }
    let mut key = [0u8; KEY_BYTES];
    file.read_exact(&mut key)?;
    Ok(key)
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
        let mut cache = DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        store(&mut cache, &[1, 2, 3], b"short");
        store(&mut cache, &[1, 2, 3, 4, 5], b"longer state");
        store(&mut cache, &[9, 9], b"other chat");
        assert_eq!(cache.len(), 2, "the longer state of a chat replaces the shorter");
        let reopened = DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        let (entry, shared) = reopened.best(&[1, 2, 3, 4, 5, 6], 1, 100).unwrap();
        assert_eq!((entry.ids.as_slice(), shared), (&[1, 2, 3, 4, 5][..], 5));
        let mut reopened = reopened;
        assert_eq!(load(&mut reopened, &entry, 12).as_deref(), Some(&b"longer state"[..]));
        assert!(DiskCache::open(root.path(), KEY_B, 1 << 20).unwrap().is_empty(), "another model sees none");

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
        assert!(DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap().is_empty());
        assert_eq!(std::fs::read_dir(root.path().join(KEY_A)).unwrap().count(), 0);
    }

    #[test]
    fn a_state_is_written_only_under_the_cap_and_with_the_disk_left_free() {
        let root = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(&root.path().join("not yet made"), KEY_A, 1 << 20).unwrap();
        assert!(free_space(&root.path().join("not yet made")).is_some_and(|free| free > 0));
        assert!(!cache.fits(2 << 20), "over the cap");
        let roomy = DiskCache::open(root.path(), KEY_A, u64::MAX).unwrap();
        let free = free_space(root.path()).unwrap();
        assert!(!roomy.fits(free), "a state that would leave less than DISK_LEFT_FREE");
    }

    #[test]
    fn the_folder_stays_under_its_cap_oldest_first() {
        let root = tempfile::tempdir().unwrap();
        let mut cache = DiskCache::open(root.path(), KEY_A, 3000).unwrap();
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

    /// A file's bytes with its header's ids replaced by `ids` (as many), under `ids`' name:
    /// what a forger without the key can make.
    fn forge(entry: &DiskEntry, ids: &[u32]) -> PathBuf {
        let mut bytes = std::fs::read(&entry.path).unwrap();
        for (i, id) in ids.iter().enumerate() {
            bytes[16 + 4 * i..20 + 4 * i].copy_from_slice(&id.to_le_bytes());
        }
        let forged = entry.path.with_file_name(format!("{}.kv", sequence_name(ids)));
        std::fs::write(&forged, bytes).unwrap();
        std::fs::remove_file(&entry.path).unwrap();
        forged
    }

    #[test]
    fn a_header_given_another_prompts_ids_is_refused_not_resumed() {
        // The harm: a state resumed for a prompt it was not made from changes the answer.
        let root = tempfile::tempdir().unwrap();
        let mut cache = DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        store(&mut cache, &[1, 2, 3], b"the state after 1 2 3");
        let (entry, _) = cache.best(&[1, 2, 3], 1, 100).unwrap();
        let forged = forge(&entry, &[1, 2, 4]);
        let mut reopened = DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        let (entry, shared) = reopened.best(&[1, 2, 4, 5], 1, 100).unwrap();
        assert_eq!(shared, 3, "listed under the ids its header claims");
        assert_eq!(load(&mut reopened, &entry, 21), None, "but its seal fails");
        assert!(!forged.exists() && reopened.is_empty());

        // A header changed without renaming the file: refused as soon as the folder is read.
        store(&mut reopened, &[7, 8, 9], b"state");
        let (entry, _) = reopened.best(&[7, 8, 9], 1, 100).unwrap();
        let mut bytes = std::fs::read(&entry.path).unwrap();
        bytes[16] ^= 1;
        std::fs::write(&entry.path, bytes).unwrap();
        assert!(DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap().is_empty());
        assert!(!entry.path.exists());
    }

    #[test]
    fn a_file_of_another_model_another_key_or_cut_short_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let mut cache = DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        store(&mut cache, &[1, 2, 3], b"model A's state");
        let (entry, _) = cache.best(&[1, 2, 3], 1, 100).unwrap();
        // Moved into another model's folder (same ids, same name): bound to its folder.
        let mut other = DiskCache::open(root.path(), KEY_B, 1 << 20).unwrap();
        let moved = root.path().join(KEY_B).join(entry.path.file_name().unwrap());
        std::fs::copy(&entry.path, &moved).unwrap();
        other.entries = other.scan();
        let (foreign_entry, _) = other.best(&[1, 2, 3], 1, 100).unwrap();
        assert_eq!(load(&mut other, &foreign_entry, 15), None);
        assert!(!moved.exists());
        // Cut short in its state: refused.
        let bytes = std::fs::read(&entry.path).unwrap();
        std::fs::write(&entry.path, &bytes[..bytes.len() - 50]).unwrap();
        assert_eq!(load(&mut cache, &entry, 15), None);
        // Sealed under another key (a new key file: another user's, or a file made by hand).
        store(&mut cache, &[4, 5, 6], b"model A's state");
        std::fs::remove_file(root.path().join(KEY_FILE)).unwrap();
        let mut rekeyed = DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        let (entry, _) = rekeyed.best(&[4, 5, 6], 1, 100).unwrap();
        assert_eq!(load(&mut rekeyed, &entry, 15), None);
    }

    #[cfg(unix)]
    #[test]
    fn folders_and_files_are_private_and_a_root_others_control_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
        let place = tempfile::tempdir().unwrap();
        let root = place.path().join("cache");
        let mut cache = DiskCache::open(&root, KEY_A, 1 << 20).unwrap();
        store(&mut cache, &[1, 2, 3], b"state");
        let (entry, _) = cache.best(&[1, 2, 3], 1, 100).unwrap();
        assert_eq!((mode(&root), mode(&root.join(KEY_A))), (0o700, 0o700));
        assert_eq!((mode(&entry.path), mode(&root.join(KEY_FILE))), (0o600, 0o600));

        // An earlier release's 0755 folder is closed to others.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        DiskCache::open(&root, KEY_A, 1 << 20).unwrap();
        assert_eq!(mode(&root), 0o700);
        // Writable by others: refused, with the folder named.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = DiskCache::open(&root, KEY_A, 1 << 20).err().unwrap().to_string();
        assert!(refused.contains("written by other users") && refused.contains("cache"), "{refused}");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A link to the folder: not followed.
        let link = place.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        assert!(DiskCache::open(&link, KEY_A, 1 << 20).err().unwrap().to_string().contains("symbolic link"));
        // A sequence file that is a link: removed, its target untouched.
        let outside = place.path().join("outside");
        std::fs::write(&outside, b"not ours").unwrap();
        let linked = root.join(KEY_A).join(format!("{}.kv", sequence_name(&[9])));
        std::os::unix::fs::symlink(&outside, &linked).unwrap();
        assert_eq!(DiskCache::open(&root, KEY_A, 1 << 20).unwrap().len(), 1);
        assert!(std::fs::symlink_metadata(&linked).is_err() && outside.exists());
        // Another user's folder (where this test may give one away: as root).
        if std::os::unix::fs::chown(&root, Some(65534), None).is_ok() && unsafe { libc::geteuid() } == 0 {
            let refused = DiskCache::open(&root, KEY_A, 1 << 20).err().unwrap().to_string();
            assert!(refused.contains("another user"), "{refused}");
        }
    }

    #[test]
    fn another_writers_file_in_progress_is_left_alone_and_a_crashs_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        let writing = cache.dir.join("0123.999-00000000.tmp");
        std::fs::write(&writing, b"half a state").unwrap();
        DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        assert!(writing.exists(), "another process may be writing it");
        let old = SystemTime::now() - 2 * STALE_WRITE;
        File::options().append(true).open(&writing).unwrap().set_modified(old).unwrap();
        DiskCache::open(root.path(), KEY_A, 1 << 20).unwrap();
        assert!(!writing.exists(), "left by a crash");
    }
}
