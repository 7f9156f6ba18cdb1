//! Small files only the user may read (API keys, kept notices), each written whole and read
//! back whole under a lock, so that two writers (two commands, or two copies of the app) never
//! interleave and a crash never leaves half a file.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write `bytes` to `path`: to a temp file of this write's own in the same folder, created new
/// (`O_EXCL`) readable by the user alone (tempfile's default), synced, then renamed into place.
/// A stale temp file from a crash is never reused, whatever its mode.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut temp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Hold the lock that guards `path` (a `.lock` file beside it) until the guard is dropped.
pub fn lock(path: &Path) -> std::io::Result<File> {
    let lock = PathBuf::from(format!("{}.lock", path.display()));
    if let Some(dir) = lock.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(lock)?;
    file.lock()?;
    Ok(file)
}

/// Move a file that cannot be read as what it should be out of the way, beside itself, under a
/// name no earlier move used; never deleted. Returns where it went.
pub fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut target = PathBuf::from(format!("{}.unreadable-{stamp}", path.display()));
    let mut n = 1;
    while target.exists() {
        target = PathBuf::from(format!("{}.unreadable-{stamp}-{n}", path.display()));
        n += 1;
    }
    std::fs::rename(path, &target)?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_stale_loose_temp_file_is_not_reused_and_the_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        // What an older version left behind after a crash: its one fixed temp name, world-readable.
        let stale = dir.path().join("keys.json.tmp");
        std::fs::write(&stale, "stale").unwrap();
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&path, b"{}").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&stale).unwrap(), "stale", "not written through");
    }
}
