//! Splitting work over candle's thread pool: guided self-scheduling, and running on the
//! caller alone while the pool's workers are kept off their cores.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Threads that share a parallel call: the pool's workers and the caller.
pub(crate) fn pool_threads() -> usize {
    candle_core::utils::barrier_pool().n_workers() + 1
}

/// `f` over `0..n_items`, split over candle's thread pool by guided self-scheduling: each grab
/// takes a share of what is left (at least `min_grab` items), so grabs shrink toward the end
/// and the threads finish together. (candle's `execute_chunked` grabs fixed sixteenths: at
/// every matmul one thread waited for half of one on average, 4% of a decoding step.)
///
/// Where the pool's workers turn up late (another process holds their cores), the work runs
/// on the caller alone for a while: see [`Lateness`]. Items are independent, so how they are
/// split changes no bit.
pub(crate) fn parallel_items(n_items: usize, min_grab: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    let pool = candle_core::utils::barrier_pool();
    let threads = pool_threads();
    if threads == 1 || n_items <= min_grab || LATENESS.in_serial_spell() {
        return f(0..n_items);
    }
    let cursor = AtomicUsize::new(0);
    let started = std::time::Instant::now();
    let (caller_items, caller_done_ns) = (AtomicUsize::new(0), AtomicU64::new(0));
    pool.execute(|thread| {
        let caller = thread == threads - 1; // the caller is the pool's last thread
        loop {
            let start = cursor.load(Relaxed);
            if start >= n_items {
                break;
            }
            let end = (start + ((n_items - start) / (2 * threads)).max(min_grab)).min(n_items);
            if cursor.compare_exchange_weak(start, end, Relaxed, Relaxed).is_ok() {
                f(start..end);
                if caller {
                    caller_items.fetch_add(end - start, Relaxed);
                }
            }
        }
        if caller {
            caller_done_ns.store(started.elapsed().as_nanos() as u64, Relaxed);
        }
    });
    // A call whose caller took no item tells nothing of the caller's pace.
    if let Some(alone_ns) =
        (caller_done_ns.load(Relaxed) * n_items as u64).checked_div(caller_items.load(Relaxed) as u64)
    {
        LATENESS.record(started.elapsed().as_nanos() as u64, alone_ns);
    }
}

/// Whether the pool's workers help. Every parallel call waits for all its threads, so a
/// worker that is not running (another process holds its core: a compile beside the app)
/// holds each matmul until the scheduler runs it again: with one core busy, two threads
/// decoded the target at 7 tokens a second where one thread alone ran at 17. Each call
/// compares its time with what the caller alone would have taken at its own pace in it; when
/// over a window the caller alone would have been clearly faster, the next calls run on the
/// caller alone, and then the pool is tried again.
///
/// The window is long in time, not only in calls: a light neighbour that wakes in bursts (the
/// app's own webview painting, 5 ms at a time) stalls the few calls a burst lands on, and a
/// window of 32 calls (a few milliseconds) that held one burst read as a lasting load. Spells
/// followed one another and the app decoded on one thread, at about half speed, while the
/// pool over any tenth of a second was still well ahead of one thread.
struct Lateness {
    calls: AtomicU32,
    parallel_ns: AtomicU64,
    alone_ns: AtomicU64,
    serial_left: AtomicU32,
    /// The length of the next serial spell: doubled while windows keep finding the workers
    /// late (a lasting load), reset by a window that does not.
    spell: AtomicU32,
}

/// Parallel calls judged together: at least this many, over at least this much time (many
/// frames of a 60 Hz neighbour; a few tokens of the 1.5B model).
const LATE_WINDOW: u32 = 32;
const LATE_WINDOW_NS: u64 = 200_000_000;
/// Late means the caller alone would have taken under this share of the parallel time. On
/// this 2-core host with one core busy the share was 0.2-0.8; unloaded, a window at times
/// came to 0.9-0.99 (the host's other tenants), where a serial spell would only lose.
const LATE_SHARE: f64 = 0.85;
/// Serial spells, in calls: the first is about a decoded token and a half, so a false alarm
/// costs little; a lasting load doubles them up to about two dozen tokens, so that trying the
/// pool again (a window at the slow pace) costs a few percent.
const FIRST_SPELL: u32 = 256;
const LONGEST_SPELL: u32 = 4096;

static LATENESS: Lateness = Lateness::new();

impl Lateness {
    const fn new() -> Self {
        Self {
            calls: AtomicU32::new(0),
            parallel_ns: AtomicU64::new(0),
            alone_ns: AtomicU64::new(0),
            serial_left: AtomicU32::new(0),
            spell: AtomicU32::new(FIRST_SPELL),
        }
    }

    /// Whether this call runs on the caller alone (and counts it against the spell).
    fn in_serial_spell(&self) -> bool {
        self.serial_left.fetch_update(Relaxed, Relaxed, |left| left.checked_sub(1)).is_ok()
    }

    /// A parallel call took `parallel_ns`; the caller alone would have taken `alone_ns`.
    fn record(&self, parallel_ns: u64, alone_ns: u64) {
        let parallel = self.parallel_ns.fetch_add(parallel_ns, Relaxed) + parallel_ns;
        let alone = self.alone_ns.fetch_add(alone_ns, Relaxed) + alone_ns;
        if self.calls.fetch_add(1, Relaxed) + 1 < LATE_WINDOW || parallel < LATE_WINDOW_NS {
            return;
        }
        if (alone as f64) < LATE_SHARE * parallel as f64 {
            let spell = self.spell.load(Relaxed);
            tracing::debug!(parallel, alone, spell, "pool workers late: the next calls run on one thread");
            self.serial_left.store(spell, Relaxed);
            self.spell.store((2 * spell).min(LONGEST_SPELL), Relaxed);
        } else {
            self.spell.store(FIRST_SPELL, Relaxed);
        }
        self.calls.store(0, Relaxed);
        self.parallel_ns.store(0, Relaxed);
        self.alone_ns.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls that run serially before the pool is tried again.
    fn spell_length(lateness: &Lateness) -> u32 {
        let mut n = 0;
        while lateness.in_serial_spell() {
            n += 1;
        }
        n
    }

    /// Calls of 1 ms that make a window.
    const WINDOW_CALLS: u64 = LATE_WINDOW_NS / 1_000_000;

    /// A window of parallel calls of 1 ms each, in which the caller alone would have taken
    /// `alone_share` of the time.
    fn window(lateness: &Lateness, alone_share: f64) {
        for _ in 0..WINDOW_CALLS {
            lateness.record(1_000_000, (alone_share * 1e6) as u64);
        }
    }

    #[test]
    fn late_workers_start_serial_spells_that_grow_while_the_load_lasts() {
        let lateness = Lateness::new();
        window(&lateness, 0.95);
        assert_eq!(spell_length(&lateness), 0, "within the host's noise: keep the pool");
        window(&lateness, 0.5);
        assert_eq!(spell_length(&lateness), FIRST_SPELL);
        window(&lateness, 0.5);
        assert_eq!(spell_length(&lateness), 2 * FIRST_SPELL, "a lasting load: longer spells");
        window(&lateness, 1.9);
        assert_eq!(spell_length(&lateness), 0, "the pool pays again");
        window(&lateness, 0.5);
        assert_eq!(spell_length(&lateness), FIRST_SPELL, "and a new load starts short");
    }

    #[test]
    fn a_burst_that_stalls_a_few_calls_is_not_a_load() {
        let lateness = Lateness::new();
        // A neighbour's 5 ms burst holds 32 calls of 0.1 ms up, about 0.25 ms each...
        for _ in 0..LATE_WINDOW {
            lateness.record(250_000, 150_000);
        }
        assert_eq!(spell_length(&lateness), 0, "one burst is no window");
        // ...amid calls at the pool's pace: over the window the pool is well ahead.
        for _ in 0..2000 {
            lateness.record(100_000, 190_000);
        }
        assert_eq!(spell_length(&lateness), 0);
    }
}
