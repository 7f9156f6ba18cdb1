// The app's own commands are permissions too: only those listed in the capability files
// (src-tauri/capabilities) can be called from the webview.
fn main() {
    let commands = &[
        "engine_status",
        "startup_notices",
        "dismiss_notices",
        "list_models",
        "add_model",
        "apply_models",
        "get_settings",
        "save_settings",
        "list_conversations",
        "get_conversation",
        "create_conversation",
        "rename_conversation",
        "set_system_prompt",
        "set_thinking",
        "set_overflow",
        "delete_conversation",
        "add_message",
        "branch_before",
        "show_branch",
        "delete_message",
        "restore_message",
        "restore_conversation",
        "purge_deleted",
        "fork_conversation",
        "export_conversations",
        "import_conversations",
        "reply",
        "cancel_reply",
        "open_link",
        "catalogue",
        "recommended_pair",
        "pull_model",
        "cancel_pull",
        "diagnose",
        "list_connections",
        "add_connection",
        "check_connection",
        "remove_connection",
        "mcp_status",
        "import_mcp_servers",
        "remove_mcp_server",
        "set_tool_enabled",
        "decide_tool_call",
        "read_attachment",
    ];
    let attributes = tauri_build::Attributes::new()
        .capabilities_path_pattern("./src-tauri/capabilities/**/*")
        .app_manifest(tauri_build::AppManifest::new().commands(commands));
    tauri_build::try_build(attributes).expect("tauri-build");
}
