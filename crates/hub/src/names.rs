//! Names that become paths in the cache, checked where they enter: repository ids, revisions
//! and file names from the user, and whatever the Hub (or a mirror posing as it) sends back.
//! A name that could climb out of the cache (`..`, an absolute path, a backslash, a NUL) is
//! refused before any folder is made.

use crate::Error;

fn refuse(what: &str, name: &str, why: &str) -> Error {
    Error::BadName { what: what.into(), name: name.into(), why: why.into() }
}

/// One path component: letters, digits, `-`, `_`, `.`, not `.` or `..`.
fn check_component(what: &str, whole: &str, part: &str) -> Result<(), Error> {
    if part.is_empty() || part == "." || part == ".." {
        return Err(refuse(what, whole, "it has an empty, `.` or `..` part"));
    }
    if !part.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+' | b'@')) {
        return Err(refuse(what, whole, "it holds characters a path may not"));
    }
    Ok(())
}

/// `org/name`.
pub fn check_repo(repo: &str) -> Result<(), Error> {
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() != 2 {
        return Err(refuse("repository", repo, "it is not `owner/name`"));
    }
    parts.iter().try_for_each(|p| check_component("repository", repo, p))
}

/// A branch, tag or commit: one component (`main`, `v1.0`, a hash).
pub fn check_revision(revision: &str) -> Result<(), Error> {
    check_component("revision", revision, revision)
}

/// A file in a repository: relative, possibly in folders, never climbing out.
pub fn check_file(file: &str) -> Result<(), Error> {
    if file.len() > 512 {
        return Err(refuse("file", file, "it is too long"));
    }
    file.split('/').try_for_each(|p| check_component("file", file, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_climb_or_hide_are_refused() {
        assert!(check_repo("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF").is_ok());
        assert!(check_file("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf").is_ok());
        assert!(check_file("sub/model-00001-of-00002.gguf").is_ok());
        for bad in ["../x.gguf", "/etc/passwd", "a/../../b", "a//b", "a\\b", "x\0.gguf", ".", ""] {
            assert!(check_file(bad).is_err(), "{bad:?}");
        }
        for bad in ["a", "a/b/c", "../b", "a/.."] {
            assert!(check_repo(bad).is_err(), "{bad:?}");
        }
        assert!(check_revision("main").is_ok() && check_revision("../../x").is_err());
    }
}
