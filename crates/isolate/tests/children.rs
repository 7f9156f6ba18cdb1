//! Each way a job in a child can end, with this test's own binary as the child (hence no test
//! harness: `main` must serve the jobs first, as the CLI's and the app's do).

use specula_isolate::{run, start, Failure, Worker};
use std::time::{Duration, Instant};

const fn worker(name: &'static str, work: fn(&[u8]) -> Result<Vec<u8>, String>) -> Worker {
    Worker { name, memory: 256 << 20, time: Duration::from_secs(2), max_output: 1 << 20, work }
}

static ECHO: Worker = worker("echo", |input| Ok(input.iter().rev().copied().collect()));
static REFUSE: Worker = worker("refuse", |input| Err(format!("no thanks to {} bytes", input.len())));
/// Asks for 8 GiB, a little at a time, as an inflating stream does.
static HOG: Worker = worker("hog", |_| {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    for _ in 0..8192 {
        kept.push(vec![1u8; 1 << 20]);
    }
    Ok(vec![kept.len() as u8])
});
static SPIN: Worker = worker("spin", |_| loop {
    std::hint::spin_loop();
});
static FLOOD: Worker = worker("flood", |_| Ok(vec![b'x'; 4 << 20]));
static PANIC: Worker = worker("panic", |_| panic!("the reader lost its place"));
/// Says 1 MiB on stderr (as a long panic message caught by the work would), then refuses: the
/// pipe must not fill and hold it, and its refusal is read apart from what it said.
static LOUD: Worker = worker("loud", |_| {
    let _ = std::panic::catch_unwind(|| panic!("{}", "a long debug dump ".repeat(60_000)));
    Err("damaged".into())
});

fn main() {
    start(&[&ECHO, &REFUSE, &HOG, &SPIN, &FLOOD, &PANIC, &LOUD]);
    if !cfg!(target_os = "linux") {
        // Opted in without children: fails closed, never runs the job unisolated.
        assert!(matches!(run(&ECHO, Vec::new), Some(Err(Failure::Unavailable(_)))));
        println!("children are Linux only: a job is refused as unavailable");
        return;
    }
    if std::env::args().any(|a| a == "--vanish") {
        // The binary replaced under a running program (an upgrade): no child can start, and the
        // job fails closed with the reason.
        std::fs::remove_file(std::env::current_exe().unwrap()).unwrap();
        match run(&ECHO, || vec![1]) {
            Some(Err(Failure::Unavailable(why))) => assert!(why.contains("could not start"), "{why}"),
            other => panic!("a job with no child to run it: {other:?}"),
        }
        return;
    }
    assert!(specula_isolate::isolated());

    // A large input and output cross both pipes at once.
    let input: Vec<u8> = (0..3 << 18).map(|i| i as u8).collect();
    let reversed: Vec<u8> = input.iter().rev().copied().collect();
    assert_eq!(run(&ECHO, || input.clone()), Some(Ok(reversed)));

    assert_eq!(run(&REFUSE, || vec![0; 10]), Some(Err(Failure::Failed("no thanks to 10 bytes".into()))));

    // 8 GiB asked for, 256 MiB allowed: the child ends, this process does not notice.
    assert_eq!(run(&HOG, Vec::new), Some(Err(Failure::OutOfMemory)));

    let started = Instant::now();
    assert_eq!(run(&SPIN, Vec::new), Some(Err(Failure::TimedOut)));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "the spinning child was stopped after {took:?}");

    assert_eq!(run(&FLOOD, Vec::new), Some(Err(Failure::TooLarge)));

    match run(&PANIC, Vec::new) {
        Some(Err(Failure::Crashed { said, .. })) => assert!(said.contains("the reader lost its place"), "{said}"),
        other => panic!("a panicking child: {other:?}"),
    }
    let started = Instant::now();
    assert_eq!(run(&LOUD, Vec::new), Some(Err(Failure::Failed("damaged".into()))));
    assert!(started.elapsed() < Duration::from_secs(2), "a loud child took {:?}", started.elapsed());
    // The harm (issue 65, item 3): a job whose child could not start ran in process, where
    // an inflation bomb aborts the program. A copy of this binary deletes itself, then asks.
    let copy = std::env::temp_dir().join(format!("specula-isolate-vanish-{}", std::process::id()));
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    let status = std::process::Command::new(&copy).arg("--vanish").status().unwrap();
    let _ = std::fs::remove_file(&copy);
    assert!(status.success(), "the vanished binary's job: {status}");
    println!("children: 8 ways a job ends, each as expected");
}
