//! The contract with the web UI, typed on both sides: every command the webview may call and
//! every type they carry, exported to TypeScript (ui/src/api/bindings.ts) from the Rust
//! definitions. A renamed command or a changed field changes that file; the UI then fails to
//! compile until it follows, and `the_typescript_bindings_are_current` fails until the file is
//! written again (`scripts/bindings.sh`).

use crate::{attachments, commands, connections, history, library, tools};
use specta_typescript::{BigIntExportBehavior, Typescript};
use specula_engine::protocol::{self, ErrorCode};
use tauri_specta::{collect_commands, collect_events, Builder, ErrorHandlingMode};

/// Where the generated TypeScript lives, from the app crate's folder.
pub const BINDINGS_PATH: &str = "ui/src/api/bindings.ts";

/// The commands (each also listed in src-tauri/capabilities) and the contract's constants.
pub fn builder() -> Builder<tauri::Wry> {
    Builder::<tauri::Wry>::new()
        .commands(collect_commands![
            commands::engine_status,
            commands::startup_notices,
            commands::dismiss_notices,
            commands::list_models,
            commands::add_model,
            commands::apply_models,
            commands::get_settings,
            commands::save_settings,
            commands::list_conversations,
            commands::get_conversation,
            commands::create_conversation,
            commands::rename_conversation,
            commands::set_system_prompt,
            commands::set_thinking,
            commands::set_overflow,
            commands::delete_conversation,
            commands::add_message,
            history::branch_before,
            history::show_branch,
            history::delete_message,
            history::restore_message,
            history::restore_conversation,
            history::purge_deleted,
            history::fork_conversation,
            history::export_conversations,
            history::import_conversations,
            commands::reply,
            commands::cancel_reply,
            commands::open_link,
            library::catalogue,
            library::recommended_pair,
            library::pull_model,
            library::cancel_pull,
            library::diagnose,
            connections::list_connections,
            connections::add_connection,
            connections::check_connection,
            connections::remove_connection,
            tools::mcp_status,
            tools::import_mcp_servers,
            tools::remove_mcp_server,
            tools::set_tool_enabled,
            tools::decide_tool_call,
            attachments::read_attachment,
        ])
        // No events (replies stream over channels); registering none also drops the channel's
        // placeholder type, which would clash with the Channel the bindings import.
        .events(collect_events![])
        // The browser transport's types that no command carries.
        .typ::<protocol::Generation>()
        // A failed command rejects its promise with the ErrorInfo, as `invoke` does.
        .error_handling(ErrorHandlingMode::Throw)
}

/// A unit variant's name as serde writes it.
fn wire_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The contract's constants, in a fixed order (the builder's own constants come out in hash
/// order, which would make the file differ from run to run).
fn constants() -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    vec![
        ("MAX_K", json!(protocol::MAX_K)),
        ("DEFAULT_AUTO_K_MAX", json!(protocol::DEFAULT_AUTO_K_MAX)),
        ("AUTO_CONTEXT", json!(protocol::AUTO_CONTEXT)),
        ("OVERFLOW_POLICIES", json!(protocol::Overflow::ALL)),
        ("DEFAULT_MAX_TOKENS", json!(protocol::DEFAULT_MAX_TOKENS)),
        ("ERROR_CODES", json!(ErrorCode::ALL)),
        // How each way a reply ends is named in the history and shown (`FinishReason::shown`).
        (
            "FINISH_REASON_NAMES",
            json!(protocol::FinishReason::ALL
                .iter()
                .map(|r| (wire_name(r), json!(r.shown())))
                .collect::<serde_json::Map<String, serde_json::Value>>()),
        ),
        // The settings a window starts from before the shell says its own: the engine's
        // defaults, one definition (the model paths are this machine's, filled in by the shell).
        (
            "DEFAULT_SETTINGS",
            shortest_floats(json!(protocol::AppSettings {
                target: String::new(),
                draft: String::new(),
                ..Default::default()
            })),
        ),
        // Settings with the label the shell stores for each: the browser's label is tested on them.
        ("LABEL_CASES", json!(protocol::app::label_cases())),
    ]
}

/// `value` with each f32 written as its shortest decimal (0.8, not 0.800000011920929, which
/// a settings form would show).
fn shortest_floats(mut value: serde_json::Value) -> serde_json::Value {
    if let Some(fields) = value.as_object_mut() {
        for field in fields.values_mut() {
            if let Some(x) = field.as_f64().filter(|x| x.fract() != 0.0 && f64::from(*x as f32) == *x) {
                *field = serde_json::json!((x as f32).to_string().parse::<f64>().unwrap_or(x));
            }
        }
    }
    value
}

/// The TypeScript for [`builder`]: numbers for 64-bit integers (ids, sizes and counts stay far
/// below 2^53; JSON.parse reads them as numbers anyway).
pub fn typescript() -> String {
    let language = Typescript::default().bigint(BigIntExportBehavior::Number).header(
        "// @ts-nocheck: generated code, checked where it is used\n\
         // Generated from the Rust types by src-tauri/bindings.rs (scripts/bindings.sh): do not edit.",
    );
    let mut out = builder().export_str(language).expect("the contract's types export to TypeScript");
    out.push_str("\n/** the contract's constants **/\n\n");
    for (name, value) in constants() {
        out.push_str(&format!("export const {name} = {value} as const;\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file in ui/ is what the Rust types say. SPECULA_WRITE_BINDINGS=1 writes it.
    #[test]
    fn the_typescript_bindings_are_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(BINDINGS_PATH);
        let generated = typescript();
        if std::env::var_os("SPECULA_WRITE_BINDINGS").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(on_disk == generated, "{} is stale: run scripts/bindings.sh and commit it", path.display());
    }
}
