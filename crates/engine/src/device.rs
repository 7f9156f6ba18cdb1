//! Choosing where tensors live: `auto` picks CUDA, then Metal, then the CPU.

use crate::error::{Error, Result};
use candle_core::Device;

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
}
