//! The Specula desktop shell: thin Tauri commands over the engine service (adapted in
//! src-tauri/engine.rs) and the SQLite chat history (crates/store). No decoding logic lives here.

pub mod bindings;
mod commands;
mod connections;
mod engine;
mod error;
mod library;
mod paths;
mod priority;
mod settings;

use engine::Engine;
use error::{ErrorCode, ErrorInfo};
use specula_store::Store;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tauri::Manager;

pub struct AppState {
    store: Arc<Mutex<Store>>,
    engine: Engine,
    pulls: Arc<library::Pulls>,
    /// Remote engines' API keys (src-tauri/connections.rs), apart from the history.
    keys: connections::Keys,
    /// What went wrong at start-up and was worked around, for the window to say once it opens.
    notices: Vec<ErrorInfo>,
}

/// The history lives in the app's data folder; SPECULA_DATA_DIR moves it (tests, portable use).
fn data_dir(app: &tauri::App) -> Result<PathBuf, Box<dyn std::error::Error>> {
    match std::env::var_os("SPECULA_DATA_DIR") {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => Ok(app.path().app_data_dir()?),
    }
}

/// Nothing stored may keep the app from starting: a history that cannot be opened is moved
/// aside (the notice says where), and a folder where none can be written leaves a history
/// kept in memory for this session, with a notice saying so.
fn open_history(path: &std::path::Path, notices: &mut Vec<ErrorInfo>) -> Store {
    match Store::open_or_set_aside(path) {
        Ok((store, None)) => store,
        Ok((store, Some(aside))) => {
            tracing::warn!("chat history moved aside to {}: {}", aside.moved_to.display(), aside.reason);
            let message = format!(
                "The chat history could not be opened ({}). It was moved to {} and kept; a new history was started.",
                aside.reason,
                aside.moved_to.display()
            );
            notices.push(ErrorInfo::new(ErrorCode::HistorySetAside, message));
            store
        }
        Err(e) => {
            tracing::error!("chat history: {e}");
            let message = format!("The chat history cannot be kept: {e}. Chats are kept until the app closes.");
            notices.push(ErrorInfo::new(ErrorCode::HistoryInMemory, message));
            Store::open_in_memory().expect("an in-memory database opens")
        }
    }
}

/// A stored setting that no longer reads (an older or damaged row) gives way to the default;
/// its text is kept under `KEY.unreadable` and the user is told.
fn read_setting<T: serde::de::DeserializeOwned>(store: &Store, key: &str, notices: &mut Vec<ErrorInfo>) -> Option<T> {
    match store.setting::<T>(key) {
        Ok(value) => value,
        Err(e) => {
            tracing::warn!("setting {key}: {e}");
            let kept = store.setting_text(key).ok().flatten().unwrap_or_default();
            let saved = store.set_setting(&format!("{key}.unreadable"), &kept).and_then(|()| store.delete_setting(key));
            if let Err(e) = saved {
                tracing::error!("setting {key}: could not set the unreadable value aside: {e}");
            }
            let message = format!("The saved {key} could not be read ({e}); the defaults are used. The old value is kept as {key}.unreadable.");
            notices.push(ErrorInfo::new(ErrorCode::SettingsReset, message));
            None
        }
    }
}

fn setup(app: &mut tauri::App) -> Result<(), Box<dyn std::error::Error>> {
    let dir = data_dir(app)?;
    let path = dir.join("specula.db");
    tracing::info!("chat history: {}", path.display());
    let mut notices = Vec::new();
    let store = open_history(&path, &mut notices);
    let saved: Option<settings::AppSettings> = read_setting(&store, commands::SETTINGS_KEY, &mut notices);
    let added = read_setting(&store, commands::ADDED_MODELS_KEY, &mut notices);
    paths::set_added(added.unwrap_or_default());
    let engine = Engine::spawn();
    // The stored chats, for the auto drafter's copies (the engine keeps about 4 MB of text).
    match store.recent_texts(specula_engine::service::REMEMBERED_BYTES) {
        Ok(texts) => engine.remember(texts),
        Err(e) => tracing::warn!("the history's texts could not be read for drafting: {e}"),
    }
    let store = Arc::new(Mutex::new(store));
    // Load the chosen models in the background; replies queue behind the load. A model that
    // cannot load leaves the app usable, with the reason in the status line. A first run
    // whose default models are not there yet loads nothing: the window offers to download them.
    let first_run = saved.is_none() && !std::path::Path::new(&settings::AppSettings::default().target).exists();
    // A remote target needs nothing loaded here.
    let remote = saved.as_ref().is_some_and(|s| s.remote.is_some());
    if !first_run && !remote {
        if let Err(e) = engine.apply(&saved.unwrap_or_default()) {
            tracing::warn!("the saved settings name no usable models: {}", e.message);
        }
    }
    app.manage(AppState { store, engine, pulls: Arc::default(), keys: connections::Keys::new(&dir), notices });
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

/// The window shows the app and nothing else: model output that slipped a link past the
/// sanitiser, or a script that set `location`, must not turn it into a browser holding the
/// app's IPC. Links open outside through the opener (`open_link`).
fn navigation_guard<R: tauri::Runtime>() -> tauri::plugin::TauriPlugin<R> {
    tauri::plugin::Builder::new("navigation-guard")
        .on_navigation(|_, url| {
            let own = is_the_apps_own(url);
            if !own {
                tracing::warn!("refused to navigate the window to {url}");
            }
            own
        })
        .build()
}

/// The app's pages: `tauri://localhost` (Linux, macOS) or `http(s)://tauri.localhost`
/// (Windows). The app has no dev server URL: its pages are always built in.
fn is_the_apps_own(url: &tauri::Url) -> bool {
    match url.scheme() {
        "tauri" => url.host_str() == Some("localhost"),
        "http" | "https" => url.host_str() == Some("tauri.localhost"),
        _ => false,
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
        .plugin(navigation_guard())
        .setup(setup)
        .on_page_load(|_, page| {
            if page.event() == tauri::webview::PageLoadEvent::Finished {
                priority::webview_gives_way();
            }
        })
        .invoke_handler(bindings::builder().invoke_handler())
        .run(tauri::generate_context!());
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_may_show_the_apps_pages_only() {
        let own = |u: &str| is_the_apps_own(&tauri::Url::parse(u).unwrap());
        assert!(own("tauri://localhost/"));
        assert!(own("tauri://localhost/index.html#chat"));
        assert!(own("https://tauri.localhost/"));
        for foreign in [
            "https://example.com/",
            "http://localhost:8080/",
            "tauri://example.com/",
            "https://tauri.localhost.evil.example/",
            "file:///etc/passwd",
            "data:text/html,hi",
            "javascript:alert(1)",
            "about:blank",
        ] {
            assert!(!own(foreign), "{foreign}");
        }
    }

    #[test]
    fn a_history_that_cannot_be_opened_is_set_aside_with_a_notice_and_no_folder_means_memory() {
        let dir = std::env::temp_dir().join(format!("specula-open-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("specula.db");
        std::fs::write(&path, "garbage").unwrap();
        let mut notices = Vec::new();
        let store = open_history(&path, &mut notices);
        assert!(store.create_conversation().is_ok());
        assert_eq!(notices.len(), 1);
        assert_eq!(notices[0].code, "history_set_aside");
        assert!(notices[0].message.contains("specula.db.unreadable-"), "{}", notices[0].message);

        // A folder that cannot exist (under a file): a history in memory, and the user is told.
        let mut notices = Vec::new();
        let store = open_history(&path.join("below-a-file").join("specula.db"), &mut notices);
        assert!(store.create_conversation().is_ok());
        assert_eq!(notices[0].code, "history_in_memory");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_setting_that_no_longer_reads_gives_way_to_the_default_and_is_kept() {
        let store = Store::open_in_memory().unwrap();
        store.set_setting("settings", &"not the settings").unwrap();
        let mut notices = Vec::new();
        let read: Option<settings::AppSettings> = read_setting(&store, "settings", &mut notices);
        assert!(read.is_none());
        assert_eq!(notices[0].code, "settings_reset");
        assert_eq!(store.setting::<String>("settings.unreadable").unwrap().as_deref(), Some("\"not the settings\""));
        assert_eq!(store.setting_text("settings").unwrap(), None, "the next read gets the defaults");
        // A good row reads, with no notice.
        store.set_setting("settings", &settings::AppSettings::default()).unwrap();
        let mut notices = Vec::new();
        assert!(read_setting::<settings::AppSettings>(&store, "settings", &mut notices).is_some());
        assert!(notices.is_empty());
    }
}
