//! Known-good target/draft pairs on Hugging Face Hub: one family shares one vocabulary, so
//! its small model drafts for its large ones. Sizes are those of the listed files (rounded),
//! and the expected memory adds the KV cache at the default context.

use serde::Serialize;

/// One GGUF file of the catalogue, with what it costs to run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CatalogueModel {
    pub name: &'static str,
    pub repo: &'static str,
    pub file: &'static str,
    /// Size of the file, about.
    pub file_mb: u32,
    /// KV cache bytes per position: 2 (k, v) x layers x kv heads x head size x 4 (f32).
    pub kv_bytes_per_token: u32,
}

impl CatalogueModel {
    /// Weights plus the KV cache for `context` positions, in MB.
    pub fn expected_memory_mb(&self, context: usize) -> u64 {
        self.file_mb as u64 + (self.kv_bytes_per_token as u64 * context as u64).div_ceil(1 << 20)
    }
}

/// Models that draft for each other: every `drafts` entry pairs with every `targets` entry.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Family {
    pub name: &'static str,
    pub architecture: &'static str,
    pub vocab_size: usize,
    pub targets: &'static [CatalogueModel],
    pub drafts: &'static [CatalogueModel],
}

const fn kv(layers: u32, kv_heads: u32, head_dim: u32) -> u32 {
    2 * layers * kv_heads * head_dim * 4
}

const fn model(name: &'static str, repo: &'static str, file: &'static str, file_mb: u32, kv: u32) -> CatalogueModel {
    CatalogueModel { name, repo, file, file_mb, kv_bytes_per_token: kv }
}

pub const CATALOGUE: &[Family] = &[
    Family {
        name: "Qwen2.5-Coder",
        architecture: "qwen2",
        vocab_size: 151936,
        targets: &[
            model(
                "Qwen2.5-Coder-7B-Instruct",
                "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF",
                "Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf",
                4680,
                kv(28, 4, 128),
            ),
            model(
                "Qwen2.5-Coder-3B-Instruct",
                "Qwen/Qwen2.5-Coder-3B-Instruct-GGUF",
                "qwen2.5-coder-3b-instruct-q4_k_m.gguf",
                2100,
                kv(36, 2, 128),
            ),
            model(
                "Qwen2.5-Coder-1.5B-Instruct",
                "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
                "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                1066,
                kv(28, 2, 128),
            ),
        ],
        drafts: &[model(
            "Qwen2.5-Coder-0.5B-Instruct",
            "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            469,
            kv(24, 2, 64),
        )],
    },
    Family {
        name: "Qwen2.5",
        architecture: "qwen2",
        vocab_size: 151936,
        targets: &[
            model(
                "Qwen2.5-7B-Instruct",
                "bartowski/Qwen2.5-7B-Instruct-GGUF",
                "Qwen2.5-7B-Instruct-Q4_K_M.gguf",
                4680,
                kv(28, 4, 128),
            ),
            model(
                "Qwen2.5-3B-Instruct",
                "Qwen/Qwen2.5-3B-Instruct-GGUF",
                "qwen2.5-3b-instruct-q4_k_m.gguf",
                2100,
                kv(36, 2, 128),
            ),
            model(
                "Qwen2.5-1.5B-Instruct",
                "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
                "qwen2.5-1.5b-instruct-q4_k_m.gguf",
                1120,
                kv(28, 2, 128),
            ),
        ],
        drafts: &[model(
            "Qwen2.5-0.5B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
            "qwen2.5-0.5b-instruct-q4_k_m.gguf",
            491,
            kv(24, 2, 64),
        )],
    },
    Family {
        name: "Llama 3",
        architecture: "llama",
        vocab_size: 128256,
        targets: &[
            model(
                "Llama-3.1-8B-Instruct",
                "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
                "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
                4920,
                kv(32, 8, 128),
            ),
            model(
                "Llama-3.2-3B-Instruct",
                "bartowski/Llama-3.2-3B-Instruct-GGUF",
                "Llama-3.2-3B-Instruct-Q4_K_M.gguf",
                2020,
                kv(28, 8, 128),
            ),
        ],
        drafts: &[model(
            "Llama-3.2-1B-Instruct",
            "bartowski/Llama-3.2-1B-Instruct-GGUF",
            "Llama-3.2-1B-Instruct-Q4_K_M.gguf",
            808,
            kv(16, 8, 64),
        )],
    },
    Family {
        name: "SmolLM2",
        architecture: "llama",
        vocab_size: 49152,
        targets: &[model(
            "SmolLM2-1.7B-Instruct",
            "bartowski/SmolLM2-1.7B-Instruct-GGUF",
            "SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
            1060,
            kv(24, 32, 64),
        )],
        drafts: &[
            model(
                "SmolLM2-360M-Instruct",
                "bartowski/SmolLM2-360M-Instruct-GGUF",
                "SmolLM2-360M-Instruct-Q8_0.gguf",
                386,
                kv(32, 5, 64),
            ),
            model(
                "SmolLM2-135M-Instruct",
                "bartowski/SmolLM2-135M-Instruct-GGUF",
                "SmolLM2-135M-Instruct-Q8_0.gguf",
                145,
                kv(30, 3, 64),
            ),
        ],
    },
    Family {
        name: "Gemma 3",
        architecture: "gemma3",
        vocab_size: 262144,
        targets: &[
            model("gemma-3-4b-it", "ggml-org/gemma-3-4b-it-GGUF", "gemma-3-4b-it-Q4_K_M.gguf", 2490, kv(34, 4, 256)),
            model("gemma-3-1b-it", "ggml-org/gemma-3-1b-it-GGUF", "gemma-3-1b-it-Q4_K_M.gguf", 806, kv(26, 1, 256)),
        ],
        drafts: &[model(
            "gemma-3-270m-it",
            "unsloth/gemma-3-270m-it-GGUF",
            "gemma-3-270m-it-Q4_K_M.gguf",
            253,
            kv(18, 1, 256),
        )],
    },
    Family {
        name: "Qwen3",
        architecture: "qwen3",
        vocab_size: 151936,
        targets: &[
            model("Qwen3-8B", "Qwen/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf", 5030, kv(36, 8, 128)),
            model("Qwen3-4B", "Qwen/Qwen3-4B-GGUF", "Qwen3-4B-Q4_K_M.gguf", 2500, kv(36, 8, 128)),
        ],
        drafts: &[model("Qwen3-0.6B", "Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf", 639, kv(28, 8, 128))],
    },
];

/// The catalogue's family of a model, by its file name (case does not matter).
pub fn family_of(file_name: &str) -> Option<&'static Family> {
    let name = file_name.to_lowercase();
    CATALOGUE.iter().find(|f| f.targets.iter().chain(f.drafts).any(|m| m.file.to_lowercase() == name))
}

/// The family a model belongs to by architecture and vocabulary size, when its file is not
/// one of ours (another quantization, another uploader).
pub fn family_like(architecture: &str, vocab_size: usize) -> Option<&'static Family> {
    CATALOGUE.iter().find(|f| f.architecture == architecture && f.vocab_size == vocab_size)
}

/// A target and its draft to download first.
#[derive(Debug, Clone, Copy)]
pub struct Recommendation {
    pub family: &'static Family,
    pub target: &'static CatalogueModel,
    pub draft: &'static CatalogueModel,
}

/// Weight megabytes per core the recommended target may have. Decoding reads every weight once
/// per token, so a CPU's decode rate falls with the file's size over its cores; this bound
/// gives the 1.5B pair to 2 cores, the 3B to 4 and the 7B to 8, each at a usable rate (the
/// measured rates are in BENCHMARKS.md).
const TARGET_MB_PER_CORE: u64 = 600;

/// The pair a new user should download: the first family (the catalogue's order is the order
/// of preference), its largest target that the CPU decodes at a usable speed and that fits,
/// with its draft and their KV caches at `context`, in half the free memory (the rest is for
/// the desktop). Falls back to the smallest target that fits; None when none does.
pub fn recommended(available_mb: u64, cores: usize, context: usize) -> Option<Recommendation> {
    let family = &CATALOGUE[0];
    let draft = &family.drafts[0];
    let fits =
        |m: &CatalogueModel| m.expected_memory_mb(context) + draft.expected_memory_mb(context) <= available_mb / 2;
    let fast_enough = |m: &CatalogueModel| u64::from(m.file_mb) <= TARGET_MB_PER_CORE * cores.max(1) as u64;
    let by_size_descending = || family.targets.iter();
    let target = by_size_descending()
        .find(|m| fits(m) && fast_enough(m))
        .or_else(|| by_size_descending().rev().find(|m| fits(m)))?;
    Some(Recommendation { family, target, draft })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_targets_and_drafts_and_drafts_are_smaller() {
        for family in CATALOGUE {
            assert!(!family.targets.is_empty() && !family.drafts.is_empty(), "{}", family.name);
            let smallest_target = family.targets.iter().map(|m| m.file_mb).min().unwrap();
            for draft in family.drafts {
                assert!(draft.file_mb < smallest_target, "{}: {} is not smaller", family.name, draft.name);
                assert!(draft.file.ends_with(".gguf") && draft.repo.contains('/'));
            }
        }
    }

    #[test]
    fn expected_memory_adds_the_kv_cache() {
        let draft = family_of("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf").unwrap().drafts[0];
        // 24 layers x 2 kv heads x 64 x 2 x 4 bytes = 24 KiB per position: 96 MiB at 4096.
        assert_eq!(draft.expected_memory_mb(4096), 469 + 96);
    }

    #[test]
    fn the_recommendation_follows_cores_and_free_memory() {
        let target = |available_mb, cores| recommended(available_mb, cores, 4096).map(|r| r.target.name);
        assert_eq!(target(24_000, 2), Some("Qwen2.5-Coder-1.5B-Instruct"));
        assert_eq!(target(24_000, 4), Some("Qwen2.5-Coder-3B-Instruct"));
        assert_eq!(target(64_000, 16), Some("Qwen2.5-Coder-7B-Instruct"));
        // Many cores, little memory: the largest that fits.
        assert_eq!(target(7_000, 16), Some("Qwen2.5-Coder-3B-Instruct"));
        // One core still gets the smallest pair rather than nothing.
        assert_eq!(target(24_000, 1), Some("Qwen2.5-Coder-1.5B-Instruct"));
        assert_eq!(target(2_000, 8), None);
        let pair = recommended(24_000, 2, 4096).unwrap();
        assert_eq!(pair.draft.name, "Qwen2.5-Coder-0.5B-Instruct");
        assert_eq!(pair.family.name, "Qwen2.5-Coder");
    }

    #[test]
    fn targets_are_listed_largest_first() {
        for family in CATALOGUE {
            assert!(family.targets.windows(2).all(|w| w[0].file_mb >= w[1].file_mb), "{}", family.name);
        }
    }
}
