//! This core's limit for the multi-row kernels' inner loop: how many cycles one
//! `vpmaddubsw` + `vpmaddwd` + `vpaddd` (32 weights times one row) takes when nothing else
//! is in the way, against a chain of `vpaddd` (one cycle each) as the clock.
//! `cargo run --release -p specula-engine --example multiply_throughput` (x86-64 with AVX2).

#[cfg(target_arch = "x86_64")]
mod timing {
    use std::arch::asm;
    use std::time::Instant;

    pub const N: u64 = 200_000_000;

    /// Seconds per cycle: N dependent one-cycle additions.
    pub fn cycle() -> f64 {
        let t = Instant::now();
        // SAFETY: register-only AVX2 arithmetic; the caller checked AVX2.
        unsafe {
            asm!("vpxor ymm0, ymm0, ymm0", "2:",
                "vpaddd ymm0, ymm0, ymm1", "vpaddd ymm0, ymm0, ymm1",
                "vpaddd ymm0, ymm0, ymm1", "vpaddd ymm0, ymm0, ymm1",
                "dec {n}", "jnz 2b",
                n = inout(reg) N / 4 => _, out("ymm0") _, out("ymm1") _);
        }
        t.elapsed().as_secs_f64() / N as f64
    }

    /// Seconds per (maddubs, madd, add) triple, four independent streams.
    pub fn triple() -> f64 {
        let t = Instant::now();
        // SAFETY: register-only AVX2 arithmetic; the caller checked AVX2.
        unsafe {
            asm!("2:",
                "vpmaddubsw ymm4, ymm8, ymm9", "vpmaddwd ymm4, ymm4, ymm10", "vpaddd ymm0, ymm0, ymm4",
                "vpmaddubsw ymm5, ymm8, ymm9", "vpmaddwd ymm5, ymm5, ymm10", "vpaddd ymm1, ymm1, ymm5",
                "vpmaddubsw ymm6, ymm8, ymm9", "vpmaddwd ymm6, ymm6, ymm10", "vpaddd ymm2, ymm2, ymm6",
                "vpmaddubsw ymm7, ymm8, ymm9", "vpmaddwd ymm7, ymm7, ymm10", "vpaddd ymm3, ymm3, ymm7",
                "dec {n}", "jnz 2b",
                n = inout(reg) N / 4 => _,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _, out("ymm4") _,
                out("ymm5") _, out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _, out("ymm10") _);
        }
        t.elapsed().as_secs_f64() / N as f64
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        let fastest = |f: fn() -> f64| (0..3).map(|_| f()).fold(f64::MAX, f64::min);
        let cycle = fastest(timing::cycle);
        let triple = fastest(timing::triple);
        println!(
            "clock about {:.2} GHz; maddubs + madd + add (32 weights x one row): {:.2} cycles",
            1e-9 / cycle,
            triple / cycle
        );
        return;
    }
    println!("needs x86-64 with AVX2");
}
