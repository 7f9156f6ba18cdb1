//! Prompts byte for byte as the reference renders them: every case of
//! tests/data/chat-templates/cases.json (requests as OpenAI clients send them), read by the
//! server's own request types and rendered by each catalogue template, against what
//! transformers' `apply_chat_template` rendered (golden.json, made by scripts/chat-golden.py).

use specula_engine::chat::{ChatTemplate, RenderOptions};
use specula_server::api::ChatMessage;
use std::path::PathBuf;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/chat-templates")
}

fn read_json(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(data().join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The case's request rendered by `template` as the server renders it.
fn render(template: &ChatTemplate, case: &serde_json::Value, now: chrono::NaiveDateTime) -> Result<String, String> {
    let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
    let messages: Vec<_> = messages.into_iter().enumerate().map(|(i, m)| m.into_message(i).unwrap()).collect();
    let tools: Vec<serde_json::Value> = case["tools"].as_array().cloned().unwrap_or_default();
    let options = RenderOptions {
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap_or(true),
        kwargs: case["chat_template_kwargs"].as_object().cloned().unwrap_or_default(),
        now: Some(now),
    };
    let text = template.render_text(&messages, &tools, &options).map_err(|e| e.to_string())?;
    // The prompt the engine tokenizes, special texts in messages set apart, reads the same.
    let parts = template.render_parts(&messages, &tools, &options, SPECIALS).map_err(|e| e.to_string())?;
    let joined: String = parts.iter().map(|p| p.text()).collect();
    assert_eq!(joined, text, "the prompt in parts reads as the text ({})", case["name"]);
    Ok(text)
}

/// The catalogue families' special texts, set apart where a message spells them.
const SPECIALS: &[&str] = &[
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<bos>",
];

fn load(name: &str, specials: &serde_json::Value) -> ChatTemplate {
    let source = std::fs::read_to_string(data().join("templates").join(format!("{name}.jinja"))).unwrap();
    let (bos, eos) = (specials["bos_token"].as_str(), specials["eos_token"].as_str());
    ChatTemplate::new(source, bos, eos, true).unwrap()
}

#[test]
fn every_template_renders_every_case_as_transformers_does() {
    let golden = read_json("golden.json");
    let cases = read_json("cases.json");
    let now = chrono::NaiveDateTime::parse_from_str(golden["today"].as_str().unwrap(), "%Y-%m-%dT%H:%M:%S").unwrap();
    let mut differences = Vec::new();
    let renderings = golden["renderings"].as_array().unwrap();
    for entry in renderings {
        let (name, case_name) = (entry["template"].as_str().unwrap(), entry["case"].as_str().unwrap());
        let template = load(name, &golden["templates"][name]);
        let case = cases.as_array().unwrap().iter().find(|c| c["name"] == case_name).unwrap();
        let ours = render(&template, case, now);
        let agrees = match (&ours, entry["prompt"].as_str()) {
            (Ok(text), Some(reference)) => text == reference,
            (Err(_), None) => true,
            _ => false,
        };
        if !agrees {
            let reference =
                entry["prompt"].as_str().map_or_else(|| format!("error {}", entry["error"]), str::to_string);
            differences.push(format!("{name} / {case_name}\n--- transformers\n{reference}\n--- specula\n{ours:?}\n"));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} renderings differ:\n{}",
        differences.len(),
        renderings.len(),
        differences.join("\n")
    );
}

/// The corpus's Qwen2.5-Coder (0.5B and 1.5B) and SmolLM2 templates are the model files' own.
#[test]
fn the_stored_templates_are_the_model_files_own() {
    let models = match std::env::var_os("SPECULA_MODELS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/specula/models"),
    };
    for (name, file) in [
        ("qwen2.5-coder", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        ("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
        ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ] {
        let path = models.join(file);
        assert!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
        let gguf = specula_engine::gguf::GgufFile::open(&path).unwrap();
        let stored = std::fs::read_to_string(data().join("templates").join(format!("{name}.jinja"))).unwrap();
        assert_eq!(gguf.string("tokenizer.chat_template").unwrap(), stored, "{name}");
    }
}
