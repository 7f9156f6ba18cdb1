//! `specula chats` on a real history file, found the way the app finds it (SPECULA_DATA_DIR):
//! other apps' exports in, Specula's archive out and back in to the same bytes, and a bad file
//! refused whole.

use std::path::Path;
use std::process::{Command, Output};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../store/tests/fixtures");

fn chats(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specula"))
        .arg("chats")
        .args(args)
        .env("SPECULA_DATA_DIR", data)
        .output()
        .expect("specula runs")
}

fn ok(output: Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn exports_of_other_apps_import_and_an_archive_round_trips_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for file in ["chatgpt-conversations.json", "openwebui-export.json", "llamacpp-export.jsonl"] {
        let said = ok(chats(&a, &["import", &format!("{FIXTURES}/{file}")]));
        assert!(said.starts_with("imported ") && !said.starts_with("imported 0"), "{said}");
    }
    let again = ok(chats(&a, &["import", "--format", "chatgpt", &format!("{FIXTURES}/chatgpt-conversations.json")]));
    assert!(again.starts_with("imported 0 chat(s)") && again.contains("3 already here"), "{again}");
    let listed = ok(chats(&a, &["list"]));
    assert_eq!(listed.lines().count(), 7, "{listed}");
    assert!(listed.contains("Capital of Australia"));

    let (one, two) = (dir.path().join("one.json"), dir.path().join("two.json"));
    ok(chats(&a, &["export", "-o", one.to_str().unwrap()]));
    ok(chats(&b, &["import", one.to_str().unwrap()]));
    ok(chats(&b, &["export", "--format", "json", "-o", two.to_str().unwrap()]));
    assert!(std::fs::read(&one).unwrap() == std::fs::read(&two).unwrap(), "the archive changed on its way");

    let markdown = ok(chats(&b, &["export", "--id", "1", "--format", "md"]));
    assert!(markdown.starts_with("# "), "{markdown}");
}

#[test]
fn a_bad_file_imports_nothing_and_says_where_it_went_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    ok(chats(&data, &["import", &format!("{FIXTURES}/openwebui-export.json")]));
    let before = ok(chats(&data, &["list"]));
    // The second conversation's parent link loops: the first, good one is not written either.
    let archive = ok(chats(&data, &["export"]));
    let mut value: serde_json::Value = serde_json::from_str(&archive).unwrap();
    value["conversations"][1]["messages"][0]["parent"] = 5.into();
    value["conversations"][0]["source_id"] = "another".into();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, value.to_string()).unwrap();
    let refused = chats(&data, &["import", bad.to_str().unwrap()]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("nothing imported") && said.contains("conversation 2"), "{said}");
    let truncated = dir.path().join("truncated.json");
    std::fs::write(&truncated, &archive[..archive.len() / 2]).unwrap();
    let refused = chats(&data, &["import", truncated.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("nothing imported"));
    assert_eq!(ok(chats(&data, &["list"])), before);
}

#[test]
fn an_export_makes_a_new_private_file_and_never_touches_one_that_was_there() {
    // The harm (issue 65, item 4): `export -o FILE` with a wrong --id deleted FILE, and an
    // export wrote through a link and over a file, readable by others.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    ok(chats(&data, &["import", &format!("{FIXTURES}/openwebui-export.json")]));
    let precious = dir.path().join("thesis.md");
    std::fs::write(&precious, "years of work").unwrap();
    let wrong_id = chats(&data, &["export", "--id", "999", "-o", precious.to_str().unwrap()]);
    assert!(!wrong_id.status.success());
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "years of work", "a failed export deletes nothing");
    let over = chats(&data, &["export", "-o", precious.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&over.stderr);
    assert!(!over.status.success() && said.contains("exists already"), "{said}");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "years of work", "never written over");
    // A failed export of a new name leaves nothing behind.
    let fresh = dir.path().join("fresh.json");
    assert!(!chats(&data, &["export", "--id", "999", "-o", fresh.to_str().unwrap()]).status.success());
    assert!(!fresh.exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&precious, &link).unwrap();
        assert!(!chats(&data, &["export", "-o", link.to_str().unwrap()]).status.success());
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "years of work", "no link followed");
        ok(chats(&data, &["export", "-o", fresh.to_str().unwrap()]));
        assert_eq!(std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
