//! A whole model load (header, hyper-parameters, shapes, tokenizer, template, weights) on
//! arbitrary files: it may refuse them, never panic.
#![no_main]

use std::io::Write;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut file = tempfile_in_shm();
    file.write_all(data).unwrap();
    let path = file_path();
    if let Ok(model) = specula_engine::LoadedModel::load(&path, &candle_core_device(), 32) {
        let _ = model.chat_prompt(&[specula_engine::Message::user("hi")]);
    }
});

fn file_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("specula-fuzz-{}.gguf", std::process::id()))
}

fn tempfile_in_shm() -> std::fs::File {
    std::fs::File::create(file_path()).unwrap()
}

fn candle_core_device() -> specula_engine::candle_core::Device {
    specula_engine::candle_core::Device::Cpu
}
