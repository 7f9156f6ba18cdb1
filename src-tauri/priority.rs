//! The webview gives way to decoding.
//!
//! On a 2-core machine the engine decodes on both cores, and its kernel pool waits at every
//! matrix product for the worker on the other core. The webview (WebKit's web process) paints a
//! few times a second while a reply streams; each time it wakes, the scheduler may put it on the
//! worker's core at equal priority, and the engine's calling thread spins until the worker is
//! back. Measured under Xvfb with the real pair (PROFILE.md, "The app as fast as the engine"):
//! with the web process at nice 10, a 256-token speculative reply ran at 0.90-0.96x the CLI's
//! rate against 0.76-0.86x at nice 0, back to back. The webview needs well under a tenth of a
//! core while it streams, which nice 10 still gives it under full load, and all of the
//! machine when the engine is idle: nice lowers a share, it sets no cap.
//!
//! Only the web process is lowered, never the app's own threads: a thread inherits its
//! creator's nice, and an engine thread started later from a lowered thread could not raise
//! itself back without privileges.

/// The web process's nice value. SPECULA_WEBVIEW_NICE overrides it (0 leaves it alone).
#[cfg(target_os = "linux")]
const WEBVIEW_NICE: i32 = 10;

/// Lower every WebKit process this app started (the web and network processes, sandboxed
/// or not) to nice 10 (Linux; elsewhere nothing yet). Called when a page has loaded, so that a web process WebKit
/// starts again after a crash is lowered too. Failures are logged: a webview at normal
/// priority is slower decoding, not a broken app.
pub fn webview_gives_way() {
    #[cfg(target_os = "linux")]
    linux::lower_webkit_children(nice_setting());
}

#[cfg(target_os = "linux")]
fn nice_setting() -> i32 {
    match std::env::var("SPECULA_WEBVIEW_NICE") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            tracing::warn!("SPECULA_WEBVIEW_NICE={v:?} is not a number; using {WEBVIEW_NICE}");
            WEBVIEW_NICE
        }),
        Err(_) => WEBVIEW_NICE,
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashSet;
    use std::fs;

    pub fn lower_webkit_children(nice: i32) {
        if nice <= 0 {
            return;
        }
        for pid in descendants(std::process::id()) {
            if command_name(pid).is_some_and(|name| name.starts_with("WebKit")) {
                if let Err(e) = lower_process(pid, nice) {
                    tracing::warn!("could not lower the webview's priority (pid {pid}): {e}");
                }
            }
        }
    }

    /// Every process below `root` (children, their children...), from /proc.
    pub fn descendants(root: u32) -> Vec<u32> {
        let parents: Vec<(u32, u32)> = processes().filter_map(|pid| Some((pid, parent(pid)?))).collect();
        let mut found: HashSet<u32> = HashSet::from([root]);
        let mut order = Vec::new();
        // Parents can have higher pids than their children (pids wrap), so repeat to a fixpoint.
        loop {
            let before = found.len();
            for &(pid, ppid) in &parents {
                if found.contains(&ppid) && found.insert(pid) {
                    order.push(pid);
                }
            }
            if found.len() == before {
                return order;
            }
        }
    }

    /// Raise the nice value of each of `pid`'s threads to `nice` (a thread's nice is its own on
    /// Linux; setpriority on the pid alone would lower only the main thread). A thread already
    /// nicer is left as it is.
    pub fn lower_process(pid: u32, nice: i32) -> std::io::Result<()> {
        for entry in fs::read_dir(format!("/proc/{pid}/task"))? {
            let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if thread_nice(tid).is_some_and(|current| current >= nice) {
                continue;
            }
            // SAFETY: setpriority takes plain integers and touches no memory of ours.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
                let e = std::io::Error::last_os_error();
                // A thread that ended between the listing and now is no failure.
                if e.raw_os_error() != Some(libc::ESRCH) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn processes() -> impl Iterator<Item = u32> {
        fs::read_dir("/proc").into_iter().flatten().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
    }

    /// The fields of /proc/PID/stat after the command name (which may hold spaces and parens).
    fn stat_fields(path: &str) -> Option<Vec<String>> {
        let text = fs::read_to_string(path).ok()?;
        let rest = &text[text.rfind(')')? + 2..];
        Some(rest.split_whitespace().map(str::to_owned).collect())
    }

    fn parent(pid: u32) -> Option<u32> {
        stat_fields(&format!("/proc/{pid}/stat"))?.get(1)?.parse().ok()
    }

    pub fn thread_nice(tid: u32) -> Option<i32> {
        // Field 19 of stat, the 17th after the name and state.
        stat_fields(&format!("/proc/{tid}/stat"))?.get(16)?.parse().ok()
    }

    fn command_name(pid: u32) -> Option<String> {
        Some(fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_owned())
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::process::{Command, Stdio};

        #[test]
        fn a_child_and_its_child_are_found_and_every_thread_of_one_is_lowered() {
            // sh starts sleep as its own child: two generations below this test.
            let mut shell =
                Command::new("sh").args(["-c", "sleep 30 & wait"]).stdout(Stdio::null()).spawn().expect("sh");
            let shell_pid = shell.id();
            // Other tests of this process may have children of their own: find ours by parent.
            let mut grandchild = None;
            for _ in 0..100 {
                let below = descendants(std::process::id());
                grandchild = below.iter().copied().find(|&p| parent(p) == Some(shell_pid));
                if grandchild.is_some() {
                    assert!(below.contains(&shell_pid), "{below:?}");
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let sleep_pid = grandchild.expect("sh's sleep among this process's descendants");

            let shell_nice = thread_nice(shell_pid).unwrap();
            let base = thread_nice(sleep_pid).unwrap();
            let lowered = (base + 5).min(19);
            lower_process(sleep_pid, lowered).unwrap();
            assert_eq!(thread_nice(sleep_pid), Some(lowered));
            // Asking for less than it has leaves it as it is.
            lower_process(sleep_pid, base).unwrap();
            assert_eq!(thread_nice(sleep_pid), Some(lowered));
            assert_eq!(thread_nice(shell_pid), Some(shell_nice), "only the process named is lowered");

            let _ = Command::new("kill").arg(sleep_pid.to_string()).status();
            shell.kill().ok();
            shell.wait().ok();
        }
    }
}
