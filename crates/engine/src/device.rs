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

/// MemAvailable from /proc/meminfo, in bytes, or less where the process's control group (a
/// container's limit, cgroup v2 or v1) leaves less; None where the system does not say.
/// `SPECULA_MEMORY_LIMIT` (bytes) overrides it, for tests and for users who want a cap.
pub fn available_memory() -> Option<u64> {
    if let Some(limit) = std::env::var("SPECULA_MEMORY_LIMIT").ok().and_then(|v| v.parse().ok()) {
        return Some(limit);
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let host = parse_mem_available(&meminfo)?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    Some(cgroup_headroom(&cgroups, Path::new("/sys/fs/cgroup")).map_or(host, |room| room.min(host)))
}

/// The least memory any control group of this process (its own and those above it) leaves
/// before its limit: the limit less what is charged, page cache that can be dropped aside
/// (a container killed at its limit sees nothing of it in /proc/meminfo). `proc_cgroup` is
/// /proc/self/cgroup; `sys` where the hierarchies are mounted. None: no limit found.
fn cgroup_headroom(proc_cgroup: &str, sys: &Path) -> Option<u64> {
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    let number = |path: &Path| read(path).and_then(|t| t.trim().parse::<u64>().ok());
    let stat = |dir: &Path, key: &str| {
        read(&dir.join("memory.stat"))?
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse::<u64>().ok())
    };
    let mut least: Option<u64> = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        // v2's one hierarchy ("0::/path"), or v1's memory controller.
        let (root, limit, usage, reclaimable) = match controllers {
            "" => (sys.to_path_buf(), "memory.max", "memory.current", "inactive_file"),
            c if c.split(',').any(|c| c == "memory") => {
                (sys.join("memory"), "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            }
            _ => continue,
        };
        let mut dir = root.join(path.trim_start_matches('/'));
        loop {
            // "max" (v2) or a page-rounded 2^63 (v1): no limit here.
            if let (Some(limit), Some(used)) =
                (number(&dir.join(limit)).filter(|&l| l < 1 << 62), number(&dir.join(usage)))
            {
                let used = used.saturating_sub(stat(&dir, reclaimable).unwrap_or(0));
                let room = limit.saturating_sub(used);
                least = Some(least.map_or(room, |l| l.min(room)));
            }
            if dir == root || !dir.pop() || !dir.starts_with(&root) {
                break;
            }
        }
    }
    least
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
    fn a_containers_limit_is_read_from_its_control_groups_v2_and_v1() {
        let sys = tempfile::tempdir().unwrap();
        let put = |path: &str, text: &str| {
            let path = sys.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        // v2: 4 GiB allowed a level up, 3 GiB charged of which 1 GiB is droppable cache.
        put("app/memory.max", "max\n");
        put("app/memory.current", "3221225472\n");
        put("memory.max", "4294967296\n");
        put("memory.current", "3221225472\n");
        put("memory.stat", "anon 1\ninactive_file 1073741824\n");
        assert_eq!(cgroup_headroom("0::/app\n", sys.path()), Some(2 << 30));
        // v1: the memory controller's own hierarchy; 2^63 rounded down is no limit.
        put("memory/box/memory.limit_in_bytes", "1073741824\n");
        put("memory/box/memory.usage_in_bytes", "268435456\n");
        put("memory/memory.limit_in_bytes", "9223372036854771712\n");
        put("memory/memory.usage_in_bytes", "1\n");
        assert_eq!(cgroup_headroom("4:memory:/box\n1:cpu:/\n", sys.path()), Some(768 << 20));
        assert_eq!(cgroup_headroom("4:memory:/\n", sys.path()), None, "no limit");
        assert_eq!(cgroup_headroom("", sys.path()), None);
    }

    #[test]
    fn reads_mem_available_in_bytes() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }
}
