//! The compatibility doctor on real pairs: one family pairs, two families do not, and the
//! diagnosis says which ids differ and which draft would pair.

#[path = "common/models.rs"]
mod models;

use models::*;
use specula_hub::doctor::diagnose;

#[test]
fn qwen_1_5b_and_0_5b_pair() {
    let diagnosis = diagnose(model(TARGET), model(DRAFT)).unwrap();
    println!("{diagnosis}");
    assert!(diagnosis.compatible);
    assert_eq!((diagnosis.target_vocab, diagnosis.draft_vocab, diagnosis.differing_ids), (151936, 151936, 0));
    let im_end = diagnosis.special_tokens.iter().find(|s| s.text == "<|im_end|>").expect("<|im_end|> is checked");
    assert_eq!((im_end.target_id, im_end.draft_id), (Some(151645), Some(151645)));
    assert!(diagnosis.to_string().contains("they can pair"));
}

#[test]
fn smollm2_cannot_draft_for_qwen_and_the_doctor_says_why() {
    let diagnosis = diagnose(model(TARGET), model(SMOLLM)).unwrap();
    let text = diagnosis.to_string();
    println!("{text}");
    assert!(!diagnosis.compatible);
    assert_eq!((diagnosis.target_vocab, diagnosis.draft_vocab), (151936, 49152));
    assert!(diagnosis.differing_ids > 40_000, "{} ids differ", diagnosis.differing_ids);
    assert!(text.contains("vocabulary size: 151936 in the target, 49152 in the draft"), "{text}");
    let first = &diagnosis.examples[0];
    assert_ne!(first.target, first.draft);
    // The chat template's turn markers: Qwen's <|im_start|> is another id in SmolLM2.
    let im_start = diagnosis.special_tokens.iter().find(|s| s.text == "<|im_start|>").unwrap();
    assert_eq!(im_start.target_id, Some(151644));
    assert_ne!(im_start.draft_id, im_start.target_id);
    assert!(text.contains("DIFFERS"), "{text}");
    // The catalogue knows the target's family and offers its draft.
    assert!(text.contains("suggestion: Qwen2.5-Coder-0.5B-Instruct"), "{text}");
}

#[test]
fn a_broken_file_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("specula-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.gguf");
    std::fs::write(&broken, "not a model").unwrap();
    let error = diagnose(model(TARGET), &broken).unwrap_err();
    assert_eq!(error.code(), "not_gguf", "{error}");
    std::fs::remove_dir_all(dir).ok();
}
