//! A property test over hostile GGUF files, the in-tree equivalent of the `cargo fuzz` target
//! in `fuzz/`: a tiny valid model mutated at random (bytes flipped, fields set to extreme
//! values, cuts, spliced copies) must parse, load and generate or fail with an error, never
//! panic. Seeded, so a failure replays; `SPECULA_FUZZ_SECONDS` runs it longer.

use specula_engine::{gguf, synth, GenerateOptions, LoadedModel, Message, NullSink, SamplingParams};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values that break arithmetic: zero, one, powers of two at type edges, all ones.
const EXTREMES: [u64; 9] = [0, 1, 3, 255, 1 << 31, u32::MAX as u64, 1 << 40, 1 << 63, u64::MAX];

fn mutate(base: &[u8], header_len: usize, rng: &mut Rng) -> Vec<u8> {
    let mut bytes = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        // Mostly the header: that is where the parser reads.
        let at = if rng.below(8) == 0 { rng.below(bytes.len()) } else { rng.below(header_len.min(bytes.len())) };
        match rng.below(5) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes[at] = rng.next() as u8,
            2 => {
                let value = EXTREMES[rng.below(EXTREMES.len())].to_le_bytes();
                let width = [1, 2, 4, 8][rng.below(4)];
                let end = (at + width).min(bytes.len());
                bytes[at..end].copy_from_slice(&value[..end - at]);
            }
            3 => bytes.truncate(at),
            _ => {
                let from = rng.below(bytes.len());
                let len = rng.below(64).min(bytes.len() - from);
                let chunk = bytes[from..from + len].to_vec();
                bytes.splice(at..at, chunk);
            }
        }
        if bytes.is_empty() {
            break;
        }
    }
    bytes
}

/// Everything a user's command does with a file: parse, load, render a chat, decode.
fn exercise(path: &std::path::Path, bytes: &[u8]) -> bool {
    let _ = gguf::parse_header(bytes);
    let Ok(mut model) = LoadedModel::load(path, &candle_core::Device::Cpu, 64) else { return false };
    let Ok(prompt) = model.chat_prompt(&[Message::user("hi")], &[]) else { return false };
    let options =
        GenerateOptions { max_tokens: 2, sampling: SamplingParams::greedy(), stop: vec![], ..Default::default() };
    model.generate(&prompt, &options, &mut NullSink).is_ok()
}

#[test]
fn mutated_model_files_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let base_path = dir.path().join("base.gguf");
    synth::write(&synth::Spec::preset("tiny", 9).unwrap(), &synth::tiny_tokenizer(), &base_path).unwrap();
    let base = std::fs::read(&base_path).unwrap();
    let header_len = gguf::parse_header(&base).unwrap().tensor_data_offset as usize;
    let seconds = std::env::var("SPECULA_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(15);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let path = dir.path().join("mutant.gguf");
    let mut rng = Rng(0x5eed);
    let (mut runs, mut loaded) = (0u64, 0u64);
    // Panics are caught and counted; their messages would flood the log.
    std::panic::set_hook(Box::new(|_| {}));
    let mut panics = Vec::new();
    while Instant::now() < deadline {
        let state = rng.0;
        let bytes = mutate(&base, header_len, &mut rng);
        std::fs::write(&path, &bytes).unwrap();
        match catch_unwind(AssertUnwindSafe(|| exercise(&path, &bytes))) {
            Ok(true) => loaded += 1,
            Ok(false) => {}
            Err(_) => panics.push(state),
        }
        runs += 1;
    }
    let _ = std::panic::take_hook();
    eprintln!(
        "{runs} mutated files in {seconds} s: {loaded} loaded and decoded, the rest refused, {} panics",
        panics.len()
    );
    assert!(runs > 200, "only {runs} runs");
    assert!(panics.is_empty(), "panics at rng states {panics:x?}");
}

/// A model path that names a FIFO (swapped in after the name was checked, say) is refused at
/// once: opening it for reading would wait for a writer for ever. Directories likewise.
#[cfg(unix)]
#[test]
fn a_fifo_or_a_folder_in_a_models_place_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.gguf");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    // On another thread, so that a regression fails the test instead of hanging it.
    let (sent, got) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || sent.send(specula_engine::inspect(&path).map(|_| ()).map_err(|e| e.to_string())));
    let answer = got.recv_timeout(Duration::from_secs(20)).expect("inspect returned for a FIFO");
    assert!(answer.unwrap_err().contains("not a regular file"));
    let folder = dir.path().join("folder.gguf");
    std::fs::create_dir(&folder).unwrap();
    let err = gguf::GgufFile::open(&folder).err().expect("a folder is no model").to_string();
    assert!(err.contains("not a regular file") || err.contains("Is a directory"), "{err}");
}
