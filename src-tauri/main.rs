// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    // A model's chat template and an attached PDF are read in a child of this binary, under a
    // memory and a time limit.
    specula_isolate::start(&[&specula_engine::chat::TEMPLATE_RENDER, &specula_attach::PDF_READ]);
    specula_app::run();
}
