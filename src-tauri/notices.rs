//! What went wrong and was worked around, for the window to say. Most notices belong to one
//! session (settings reset, a history kept in memory). A history moved aside is different:
//! the next start opens the fresh one and would say nothing, so that notice is kept in a file
//! beside the history (`notices.json`, readable by the user alone) until the window reports
//! that the user dismissed it.

use crate::error::ErrorInfo;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub struct Notices {
    kept: PathBuf,
    session: Mutex<Vec<ErrorInfo>>,
}

impl Notices {
    pub fn new(data_dir: &Path) -> Self {
        Self { kept: data_dir.join("notices.json"), session: Mutex::default() }
    }

    /// Say `notice` in this session only.
    pub fn add(&self, notice: ErrorInfo) {
        self.lock().push(notice);
    }

    /// Say `notice` in this session and every later one until it is dismissed. A notice that
    /// cannot be written is still said in this session.
    pub fn keep(&self, notice: ErrorInfo) {
        let mut kept = self.read_kept();
        kept.push(notice.clone());
        if let Err(e) =
            crate::private_file::write(&self.kept, serde_json::to_string(&kept).unwrap_or_default().as_bytes())
        {
            tracing::error!("keeping a notice for the next start: {e}");
            self.add(notice);
        }
    }

    /// The kept notices first (they matter more), then this session's.
    pub fn all(&self) -> Vec<ErrorInfo> {
        let mut all = self.read_kept();
        all.extend(self.lock().iter().cloned());
        all
    }

    /// The user has seen them all.
    pub fn dismiss(&self) {
        self.lock().clear();
        if let Err(e) = std::fs::remove_file(&self.kept) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("forgetting the kept notices: {e}");
            }
        }
    }

    fn read_kept(&self) -> Vec<ErrorInfo> {
        std::fs::read_to_string(&self.kept).ok().and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ErrorInfo>> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn a_kept_notice_outlives_the_session_until_dismissed() {
        let dir = tempfile::tempdir().unwrap();
        let notices = Notices::new(dir.path());
        notices.keep(ErrorInfo::new(ErrorCode::HistorySetAside, "moved aside"));
        notices.add(ErrorInfo::new(ErrorCode::SettingsReset, "settings reset"));
        assert_eq!(notices.all().len(), 2);

        let next_start = Notices::new(dir.path());
        let said: Vec<_> = next_start.all().into_iter().map(|n| n.message).collect();
        assert_eq!(said, ["moved aside"], "only the kept one outlives its session");
        next_start.dismiss();
        assert!(Notices::new(dir.path()).all().is_empty());
    }
}
