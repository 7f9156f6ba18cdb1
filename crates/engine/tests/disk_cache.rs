//! Prompts' caches kept on disk, on the real pair (the draft with its cut output layer): a chat
//! reopened by a freshly loaded engine resumes from the files, and its reply is token for
//! token the reply of a cold engine that read the whole prompt; a damaged file is ignored
//! (and removed), never trusted.

mod common;

use common::*;
use specula_engine::{
    Decoding, DrafterKind, GenerateOptions, Generation, KSetting, Message, Mode, NullSink, SamplingParams, Session,
};
use std::path::{Path, PathBuf};

fn pair(disk: Option<&Path>) -> Session {
    let mut session = Session::load(model(TARGET), &device(), 1024).unwrap();
    session.load_draft(model(DRAFT), &device()).unwrap();
    session.set_draft_vocab(specula_engine::DEFAULT_DRAFT_VOCAB).unwrap();
    session.set_disk_cache(disk.map(|d| (d.to_path_buf(), 1 << 30)));
    session
}

fn note() -> String {
    let facts = "The lighthouse keeper logs the weather at dawn, noon and dusk, and the ships that pass. ";
    format!("Notes for this chat: {}", facts.repeat(20))
}

fn first_turn() -> Vec<Message> {
    vec![Message::system(note()), Message::user("What does the keeper log? One sentence.")]
}

fn reply(session: &mut Session, messages: &[Message]) -> Generation {
    let prompt = session.chat_prompt(messages, &[]).unwrap();
    let sampling = SamplingParams { mode: Mode::Greedy, temperature: 0.0, ..Default::default() };
    let options = GenerateOptions { max_tokens: 12, sampling, ..Default::default() };
    let decoding = Decoding { drafter: DrafterKind::Model, k: KSetting::Fixed(4) };
    session.generate(&prompt, &options, decoding, &mut NullSink).unwrap()
}

fn ids(g: &Generation) -> Vec<u32> {
    g.tokens.iter().map(|t| t.id).collect()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_type().unwrap().is_dir()) // the sealing key sits beside the folders
        .flat_map(|model| std::fs::read_dir(model.path()).unwrap().flatten().map(|f| f.path()))
        .collect();
    files.sort();
    files
}

#[test]
fn a_chat_reopened_after_a_restart_resumes_from_disk_exactly_and_a_damaged_file_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut before = pair(Some(dir.path()));
    let first = reply(&mut before, &first_turn());
    before.persist().unwrap();
    drop(before);
    let saved = files(dir.path());
    assert_eq!(saved.len(), 2, "the target's and the draft's: {saved:?}");

    let mut second_turn = first_turn();
    second_turn.push(Message::assistant(first.text.clone()));
    second_turn.push(Message::user("And at what times?"));
    let cold = reply(&mut pair(None), &second_turn);

    let restored = reply(&mut pair(Some(dir.path())), &second_turn);
    assert!(
        restored.stats.cached_prompt_tokens >= first.stats.prompt_tokens,
        "resumed from disk: {} of {} prompt tokens cached",
        restored.stats.cached_prompt_tokens,
        restored.stats.prompt_tokens
    );
    assert_eq!(cold.stats.cached_prompt_tokens, 0);
    assert_eq!(ids(&restored), ids(&cold), "a restored reply is the cold reply");

    // One flipped bit in the middle of the target's keys: the file goes, the prompt is read.
    let target_file = saved.iter().max_by_key(|f| std::fs::metadata(f).unwrap().len()).unwrap();
    let mut bytes = std::fs::read(target_file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(target_file, bytes).unwrap();
    let damaged = reply(&mut pair(Some(dir.path())), &second_turn);
    assert_eq!(damaged.stats.cached_prompt_tokens, 0, "the damaged file was not used");
    assert_eq!(ids(&damaged), ids(&cold));
    assert!(!target_file.exists(), "and it was removed");
}

/// The chat of the forgery: a long note whose last line tells a password, and the question.
fn password_chat(password: &str) -> Vec<Message> {
    let note = format!("{}\nThe password is {password}.", note());
    vec![Message::system(note), Message::user("What is the password? Answer with the word alone.")]
}

/// The target's file (the larger of the two) given `ids` in its header and renamed as a file
/// of `ids` is named: a forgery that needs no key. `ids` must be as many as the file lists.
fn forge_target_file(dir: &Path, ids: &[u32]) -> PathBuf {
    use sha2::Digest;
    let target_file = files(dir).into_iter().max_by_key(|f| std::fs::metadata(f).unwrap().len()).unwrap();
    let mut bytes = std::fs::read(&target_file).unwrap();
    let listed = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    assert!(listed >= ids.len(), "the file lists {listed} ids");
    for (i, id) in ids.iter().enumerate() {
        bytes[16 + 4 * i..20 + 4 * i].copy_from_slice(&id.to_le_bytes());
    }
    let all: Vec<u32> =
        bytes[16..16 + 4 * listed].chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect();
    let digest = sha2::Sha256::digest(all.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>());
    let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    let forged = target_file.with_file_name(format!("{name}.kv"));
    std::fs::remove_file(&target_file).unwrap();
    std::fs::write(&forged, bytes).unwrap();
    forged
}

#[test]
fn a_snapshot_given_another_prompts_ids_is_refused_and_the_answer_is_the_cold_one() {
    // The harm (issue 65, item 1): a state resumed under ids it was not made from changes
    // what the model was told; here, which password it answers with.
    let (blue, red) = (password_chat("BLUE"), password_chat("RED"));
    let dir = tempfile::tempdir().unwrap();
    let mut before = pair(Some(dir.path()));
    reply(&mut before, &blue);
    before.persist().unwrap();
    let blue_ids = before.chat_prompt(&blue, &[]).unwrap();
    let red_ids = before.chat_prompt(&red, &[]).unwrap();
    drop(before);
    assert_eq!(blue_ids.len(), red_ids.len(), "the two prompts differ in one token");
    assert_ne!(blue_ids, red_ids);

    let forged = forge_target_file(dir.path(), &red_ids);
    let cold = reply(&mut pair(None), &red);
    let resumed = reply(&mut pair(Some(dir.path())), &red);
    assert_eq!(resumed.stats.cached_prompt_tokens, 0, "the forged snapshot was not used");
    assert_eq!(ids(&resumed), ids(&cold), "the answer is the cold one: {:?}", resumed.text);
    assert!(!forged.exists(), "and the forged file was removed");
}
