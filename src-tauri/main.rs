// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    // A model's chat template runs in a child of this binary, under a memory limit.
    specula_engine::chat::isolate_template_renders();
    specula_app::run();
}
