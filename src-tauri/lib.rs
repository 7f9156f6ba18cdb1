//! The Specula desktop shell: thin Tauri commands over the engine service (adapted in
//! src-tauri/engine.rs) and the SQLite chat history (crates/store). No decoding logic lives here.

mod commands;
mod engine;
mod error;
mod library;
mod paths;
mod settings;

use engine::Engine;
use specula_store::Store;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tauri::Manager;

pub struct AppState {
    store: Arc<Mutex<Store>>,
    engine: Engine,
    pulls: Arc<library::Pulls>,
}

/// The history lives in the app's data folder; SPECULA_DATA_DIR moves it (tests, portable use).
fn data_dir(app: &tauri::App) -> Result<PathBuf, Box<dyn std::error::Error>> {
    match std::env::var_os("SPECULA_DATA_DIR") {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => Ok(app.path().app_data_dir()?),
    }
}

fn setup(app: &mut tauri::App) -> Result<(), Box<dyn std::error::Error>> {
    let path = data_dir(app)?.join("specula.db");
    tracing::info!("chat history: {}", path.display());
    let store = Arc::new(Mutex::new(Store::open(&path)?));
    let (saved, added) = {
        let store = store.lock().map_err(|_| "history lock")?;
        (store.setting::<settings::AppSettings>("settings")?, store.setting(commands::ADDED_MODELS_KEY)?)
    };
    paths::set_added(added.unwrap_or_default());
    let engine = Engine::spawn();
    // Load the chosen models in the background; replies queue behind the load. A model that
    // cannot load leaves the app usable, with the reason in the status line. A first run
    // whose default models are not there yet loads nothing: the window offers to download them.
    let first_run = saved.is_none() && !std::path::Path::new(&settings::AppSettings::default().target).exists();
    if !first_run {
        if let Err(e) = engine.apply(&saved.unwrap_or_default()) {
            tracing::warn!("the saved settings name no usable models: {}", e.message);
        }
    }
    app.manage(AppState { store, engine, pulls: Arc::default() });
    Ok(())
}

/// WebKitGTK composites the page with OpenGL; without a GPU (Mesa's llvmpipe: a virtual
/// display, a VM, many laptops' fallbacks) that is two rasterizer threads waking at every paint
/// on the cores the engine decodes with. A chat view gains nothing from it: measured under
/// Xvfb, turning it off took the webview from 30% of a core to 16% while a reply streamed, and
/// the app's decoding from 0.82x to 0.93x the CLI's (PROFILE.md, "The app as fast as the
/// engine"). Set before any thread starts; a user's own WEBKIT_DISABLE_COMPOSITING_MODE, or
/// SPECULA_WEBVIEW_COMPOSITING=1, keeps WebKit's choice.
fn software_compositing_off() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("WEBKIT_DISABLE_COMPOSITING_MODE").is_none()
        && std::env::var_os("SPECULA_WEBVIEW_COMPOSITING").is_none_or(|v| v != "1")
    {
        std::env::set_var("WEBKIT_DISABLE_COMPOSITING_MODE", "1");
    }
}

pub fn run() {
    software_compositing_off();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,specula_engine=info,specula_app=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = tauri::Builder::default()
        .plugin(tauri_plugin_opener::init())
        .setup(setup)
        .invoke_handler(tauri::generate_handler![
            commands::engine_status,
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
            commands::delete_conversation,
            commands::add_message,
            commands::truncate_messages,
            commands::reply,
            commands::cancel_reply,
            commands::open_link,
            library::catalogue,
            library::recommended_pair,
            library::pull_model,
            library::cancel_pull,
            library::diagnose,
        ])
        .run(tauri::generate_context!());
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
