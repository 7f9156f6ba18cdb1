//! The machine: where tensors live (`auto` picks CUDA, then Metal, then the CPU) and how much
//! memory a load may take.

use crate::error::{Error, Result};
use candle_core::Device;
use std::path::Path;

/// Parse `auto`, `cpu`, `cuda`, `cuda:N` or `metal` and open that device.
pub fn select(spec: &str) -> Result<Device> {
    let unavailable =
        |what: &str, e: candle_core::Error| Error::InvalidSetting(format!("device `{what}` is not available: {e}"));
    match spec {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(auto()),
        "metal" => Device::new_metal(0).map_err(|e| unavailable(spec, e)),
        "cuda" => Device::new_cuda(0).map_err(|e| unavailable(spec, e)),
        _ => match spec.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(ordinal)) => Device::new_cuda(ordinal).map_err(|e| unavailable(spec, e)),
            _ => Err(Error::InvalidSetting(format!("device `{spec}`: expected auto, cpu, cuda, cuda:N or metal"))),
        },
    }
}

fn auto() -> Device {
    if candle_core::utils::cuda_is_available() {
        if let Ok(device) = Device::new_cuda(0) {
            return device;
        }
    }
    if candle_core::utils::metal_is_available() {
        if let Ok(device) = Device::new_metal(0) {
            return device;
        }
    }
    Device::Cpu
}

pub fn describe(device: &Device) -> &'static str {
    match device {
        Device::Cpu => "cpu",
        Device::Cuda(_) => "cuda",
        Device::Metal(_) => "metal",
    }
}

/// Refuse a load that would not fit in the memory the system has free, rather than let the
/// operating system kill the process halfway through. Weights are read into memory whole;
/// `extra_bytes` is what else the load allocates (the KV cache).
pub fn check_fits_in_memory(path: &Path, file_bytes: u64, extra_bytes: u64) -> Result<()> {
    let Some(available) = available_memory() else { return Ok(()) };
    let needed = file_bytes + extra_bytes;
    if needed > available {
        return Err(Error::ModelTooLarge { path: path.to_path_buf(), needed, available });
    }
    Ok(())
}

/// MemAvailable from /proc/meminfo, in bytes; None where the system does not say.
/// `SPECULA_MEMORY_LIMIT` (bytes) overrides it, for tests and for users who want a cap.
pub fn available_memory() -> Option<u64> {
    if let Some(limit) = std::env::var("SPECULA_MEMORY_LIMIT").ok().and_then(|v| v.parse().ok()) {
        return Some(limit);
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&meminfo)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_names() {
        assert!(select("cpu").unwrap().is_cpu());
        assert!(select("auto").is_ok());
        assert!(select("tpu").is_err());
        assert!(select("cuda:x").is_err());
    }

    #[test]
    fn reads_mem_available_in_bytes() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }
}
