//! The GGUF header parser on arbitrary bytes: it may refuse them, never panic or allocate
//! beyond what the bytes can justify.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = specula_engine::gguf::parse_header(data);
});
