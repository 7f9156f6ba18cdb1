//! The Specula desktop shell: thin Tauri commands over the engine service (adapted in
//! src-tauri/engine.rs) and the SQLite chat history (crates/store). No decoding logic lives here.

mod access;
mod attachments;
pub mod bindings;
mod commands;
mod connections;
mod engine;
mod error;
mod history;
mod library;
mod notices;
mod paths;
mod priority;
mod private_file;
mod settings;
mod tools;

use engine::Engine;
use error::{ErrorCode, ErrorInfo};
use notices::Notices;
use specula_store::Store;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tauri::Manager;

pub struct AppState {
    store: Arc<Mutex<Store>>,
    engine: Engine,
    pulls: Arc<library::Pulls>,
    /// Remote engines' API keys (src-tauri/connections.rs), apart from the history.
    keys: connections::Keys,
    /// What went wrong and was worked around, for the window to say.
    notices: Arc<Notices>,
    /// The MCP servers whose tools replies may call (src-tauri/tools.rs).
    tools: Arc<tools::Tools>,
    /// The target's tokenizer, for counting attached files (src-tauri/attachments.rs).
    tokenizers: Arc<attachments::Tokenizers>,
}

/// The history lives in the app's data folder, the one `specula chats` reads too;
/// SPECULA_DATA_DIR moves it (tests, portable use).
fn data_dir(app: &tauri::App) -> Result<PathBuf, Box<dyn std::error::Error>> {
    match specula_store::data_dir() {
        Some(dir) => Ok(dir),
        None => Ok(app.path().app_data_dir()?),
    }
}

/// Nothing stored may keep the app from starting, and nothing stored is given up for a fault
/// that passes. A damaged history (corrupt, not a database) is moved aside, and the notice
/// saying where is kept until the user dismisses it. A history that cannot be opened now (a
/// full disk, a lock another program holds) is left as it is: this session's chats live in
/// memory, with a notice, and the file is tried again ([`retry_history`]). True when in memory.
fn open_history(path: &Path, notices: &Notices) -> (Store, bool) {
    match Store::open_or_set_aside(path) {
        Ok((store, None)) => (store, false),
        Ok((store, Some(aside))) => {
            tracing::warn!("chat history moved aside to {}: {}", aside.moved_to.display(), aside.reason);
            let message = format!(
                "The chat history could not be opened ({}). It was moved to {} and kept; a new history was started.",
                aside.reason,
                aside.moved_to.display()
            );
            notices.keep(ErrorInfo::new(ErrorCode::HistorySetAside, message));
            (store, false)
        }
        Err(e) => {
            tracing::error!("chat history: {e}");
            let message = format!(
                "Your chat history ({}) cannot be opened now: {}. It is kept as it is. Until it opens, chats are kept in memory; the app tries again every {} seconds, and writes them into it when it can.",
                path.display(),
                e.plainly(),
                RETRY_HISTORY_EVERY.as_secs()
            );
            notices.add(ErrorInfo::new(ErrorCode::HistoryInMemory, message));
            (Store::open_in_memory().expect("an in-memory database opens"), true)
        }
    }
}

const RETRY_HISTORY_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// While the history could not be opened, try it again now and then. Once it opens, the chats
/// kept in memory are written into it and it takes their place; the window is told
/// (`history-restored`) and reloads its list, since the ids it holds were the memory's. A reply
/// streaming into memory is let finish first.
fn retry_history(app: tauri::AppHandle, path: PathBuf, store: Arc<Mutex<Store>>, engine: Engine) {
    let retry = move || loop {
        std::thread::sleep(RETRY_HISTORY_EVERY);
        if engine.replying() {
            continue;
        }
        let Ok(mut history) = Store::open(&path) else { continue };
        let mut session = store.lock().unwrap_or_else(|e| e.into_inner());
        match history.absorb(&session) {
            Ok(()) => {
                *session = history;
                drop(session);
                tracing::info!("chat history opened again: {}", path.display());
                use tauri::Emitter;
                app.emit("history-restored", ()).ok();
                return;
            }
            Err(e) => tracing::warn!("chat history: writing this session's chats into it: {e}"),
        }
    };
    if let Err(e) = std::thread::Builder::new().name("history-retry".into()).spawn(retry) {
        tracing::error!("chat history: cannot retry: {e}");
    }
}

/// A stored setting that no longer reads (an older or damaged row) gives way to the default;
/// its text is kept under `KEY.unreadable` and the user is told.
fn read_setting<T: serde::de::DeserializeOwned>(store: &Store, key: &str, notices: &Notices) -> Option<T> {
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
            notices.add(ErrorInfo::new(ErrorCode::SettingsReset, message));
            None
        }
    }
}

/// The app's data folder, readable by the user alone: it holds the history and the API keys.
fn private_data_dir(dir: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let made = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
        let narrowed = made.and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)));
        if let Err(e) = narrowed {
            tracing::warn!("{}: cannot make the folder private: {e}", dir.display());
        }
    }
}

fn setup(app: &mut tauri::App) -> Result<(), Box<dyn std::error::Error>> {
    let dir = data_dir(app)?;
    private_data_dir(&dir);
    let path = specula_store::history_file(&dir);
    tracing::info!("chat history: {}", path.display());
    let notices = Arc::new(Notices::new(&dir));
    let (mut store, in_memory) = open_history(&path, &notices);
    // What was deleted with an Undo offered and never undone is deleted for good now.
    if let Err(e) = store.purge_deleted() {
        tracing::warn!("chat history: deleting what was deleted last time: {e}");
    }
    let saved: Option<settings::AppSettings> = read_setting(&store, commands::SETTINGS_KEY, &notices);
    let added = read_setting(&store, commands::ADDED_MODELS_KEY, &notices);
    paths::set_added(added.unwrap_or_default());
    // A chat reopened after a restart resumes from its cache here instead of being read again.
    let engine = Engine::spawn(Some(dir.join("prompt-cache")));
    // The stored chats, for the auto drafter's copies (the engine keeps about 4 MB of text).
    match store.recent_texts(specula_engine::service::REMEMBERED_BYTES) {
        Ok(texts) => engine.remember(texts),
        Err(e) => tracing::warn!("the history's texts could not be read for drafting: {e}"),
    }
    let store = Arc::new(Mutex::new(store));
    if in_memory {
        retry_history(app.handle().clone(), path, store.clone(), engine.clone());
    }
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
    let keys = connections::Keys::new(&dir, notices.clone());
    let tools = tools::Tools::new(&dir);
    let disabled = store.lock().ok().and_then(|s| s.setting(tools::DISABLED_TOOLS_KEY).ok().flatten());
    tools.start(disabled.unwrap_or_default());
    app.manage(AppState { store, engine, pulls: Arc::default(), keys, notices, tools, tokenizers: Arc::default() });
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
    fn the_cli_looks_for_the_history_in_the_apps_own_data_folder() {
        let config: serde_json::Value =
            serde_json::from_str(include_str!("../tauri.conf.json")).expect("tauri.conf.json reads");
        assert_eq!(config["identifier"], specula_store::APP_IDENTIFIER);
    }

    #[test]
    fn a_history_that_cannot_be_opened_is_set_aside_with_a_notice_and_no_folder_means_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("specula.db");
        std::fs::write(&path, "garbage").unwrap();
        let notices = Notices::new(dir.path());
        let (store, in_memory) = open_history(&path, &notices);
        assert!(!in_memory);
        assert!(store.create_conversation().is_ok());
        let said = notices.all();
        assert_eq!(said.len(), 1);
        assert_eq!(said[0].code, "history_set_aside");
        assert!(said[0].message.contains("specula.db.unreadable-"), "{}", said[0].message);
        assert_eq!(Notices::new(dir.path()).all().len(), 1, "said again at the next start until dismissed");

        // A folder that cannot exist (under a file): a history in memory, and the user is told.
        let notices = Notices::new(&dir.path().join("elsewhere"));
        let (store, in_memory) = open_history(&path.join("below-a-file").join("specula.db"), &notices);
        assert!(in_memory);
        assert!(store.create_conversation().is_ok());
        assert_eq!(notices.all()[0].code, "history_in_memory");
    }

    #[test]
    fn a_history_another_program_holds_is_kept_and_this_session_runs_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("specula.db");
        let store = Store::open(&path).unwrap();
        store.set_setting("mine", &1).unwrap();
        drop(store);
        let mut holder = python_holder(&path);
        let notices = Notices::new(dir.path());
        let (store, in_memory) = open_history(&path, &notices);
        assert!(in_memory);
        assert_eq!(store.setting::<i32>("mine").unwrap(), None, "a session in memory");
        let said = notices.all();
        assert_eq!(said[0].code, "history_in_memory");
        assert!(said[0].message.contains("another program holds a lock on it"), "{}", said[0].message);
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert_eq!(Store::open(&path).unwrap().setting::<i32>("mine").unwrap(), Some(1), "the file untouched");
    }

    /// Another program's exclusive hold on the history (rollback journal, a write pending).
    fn python_holder(path: &Path) -> std::process::Child {
        // A second process, as in the field: python3's sqlite3 holds the lock until killed.
        let script = format!(
            "import sqlite3,time\nc=sqlite3.connect({path:?},isolation_level=None)\nc.execute('pragma journal_mode=delete')\nc.execute('begin exclusive')\nc.execute(\"insert into settings values('held','1')\")\nprint('held',flush=True)\ntime.sleep(60)\n"
        );
        let mut child = std::process::Command::new("python3")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "held");
        child
    }

    #[test]
    fn a_setting_that_no_longer_reads_gives_way_to_the_default_and_is_kept() {
        let store = Store::open_in_memory().unwrap();
        store.set_setting("settings", &"not the settings").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let notices = Notices::new(dir.path());
        let read: Option<settings::AppSettings> = read_setting(&store, "settings", &notices);
        assert!(read.is_none());
        assert_eq!(notices.all()[0].code, "settings_reset");
        assert_eq!(store.setting::<String>("settings.unreadable").unwrap().as_deref(), Some("\"not the settings\""));
        assert_eq!(store.setting_text("settings").unwrap(), None, "the next read gets the defaults");
        // A good row reads, with no notice.
        store.set_setting("settings", &settings::AppSettings::default()).unwrap();
        let notices = Notices::new(dir.path());
        assert!(read_setting::<settings::AppSettings>(&store, "settings", &notices).is_some());
        assert!(notices.all().is_empty());
    }
}
