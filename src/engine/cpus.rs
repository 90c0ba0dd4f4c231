//! How many CPUs this process may use, computed once for the whole program: the default
//! size of every worker team ([`default_threads`]) and of the other thread pools.
//!
//! A container with a CPU limit sees the host's cores in `/proc/cpuinfo`, so counting them
//! oversubscribes it. What the process may really use is:
//! - its affinity mask (`sched_getaffinity`: `taskset`, `docker --cpuset-cpus`, Kubernetes'
//!   static CPU manager), counted in physical cores: hyper-threads of one core share the
//!   vector units the kernels saturate, so a second thread per core adds contention;
//! - its cgroup CPU quota (`cpu.max` in cgroup v2, `cpu.cfs_quota_us` in v1: Kubernetes CPU
//!   limits), which `std::thread::available_parallelism` reads along with the mask.

use std::sync::OnceLock;

/// The CPUs this process may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuBudget {
    /// Logical CPUs in the affinity mask, capped by the cgroup quota.
    pub logical: usize,
    /// Physical cores among those CPUs, capped by the quota: the compute threads to run.
    pub cores: usize,
}

/// The budget, computed on first use.
pub fn budget() -> CpuBudget {
    static BUDGET: OnceLock<CpuBudget> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let mask = affinity_mask();
        let cores = mask
            .as_deref()
            .and_then(physical_cores_in)
            .or_else(|| mask.as_ref().map(Vec::len));
        // Affinity and the cgroup quota (std reads both); 1 when neither can be read.
        let logical = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        CpuBudget {
            logical,
            cores: cores.unwrap_or(logical).clamp(1, logical),
        }
    })
}

/// Threads per worker team when the configuration says 0: the usable physical cores divided
/// among `workers`, at least 1.
pub fn default_threads(workers: usize) -> usize {
    (budget().cores / workers.max(1)).max(1)
}

/// The logical CPUs of this process's affinity mask, in increasing order (None where it
/// cannot be read).
pub fn affinity_mask() -> Option<Vec<usize>> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `cpu_set_t` is plain old data; all zeroes is an empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is this thread; the size passed is the size of `set`, which the call
        // writes within.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        if rc != 0 {
            return None;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu < CPU_SETSIZE`, the set's capacity.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect();
        (!cpus.is_empty()).then_some(cpus)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Distinct physical cores among `cpus`, from sysfs topology, else `/proc/cpuinfo`.
fn physical_cores_in(cpus: &[usize]) -> Option<usize> {
    let sysfs = |cpu: usize| {
        let read = |f: &str| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{f}"))
                .ok()?
                .trim()
                .parse::<u32>()
                .ok()
        };
        Some((read("physical_package_id")?, read("core_id")?))
    };
    let from_sysfs: Option<Vec<(u32, u32)>> = cpus.iter().map(|&c| sysfs(c)).collect();
    let pairs = match from_sysfs {
        Some(p) => p,
        None => {
            let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
            let topo = cpuinfo_topology(&text);
            cpus.iter()
                .map(|c| topo.iter().find(|t| t.0 == *c).map(|t| (t.1, t.2)))
                .collect::<Option<Vec<_>>>()?
        }
    };
    Some(count_distinct(pairs))
}

fn count_distinct(mut pairs: Vec<(u32, u32)>) -> usize {
    pairs.sort_unstable();
    pairs.dedup();
    pairs.len()
}

/// `(processor, physical id, core id)` of every processor block in cpuinfo text that has all
/// three fields.
fn cpuinfo_topology(cpuinfo: &str) -> Vec<(usize, u32, u32)> {
    let mut out = Vec::new();
    for block in cpuinfo.split("\n\n") {
        let (mut proc, mut phys, mut core) = (None, None, None);
        for line in block.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "processor" => proc = value.parse::<usize>().ok(),
                "physical id" => phys = value.parse::<u32>().ok(),
                "core id" => core = value.parse::<u32>().ok(),
                _ => {}
            }
        }
        if let (Some(p), Some(ph), Some(c)) = (proc, phys, core) {
            out.push((p, ph, c));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_counts_cores_of_the_mask_only() {
        // Two sockets; CPUs 0 and 1 are hyper-threads of one core.
        let text = "processor : 0\nphysical id : 0\ncore id : 0\n\n\
                    processor : 1\nphysical id : 0\ncore id : 0\n\n\
                    processor : 2\nphysical id : 0\ncore id : 1\n\n\
                    processor : 3\nphysical id : 1\ncore id : 0\n";
        let topo = cpuinfo_topology(text);
        assert_eq!(topo.len(), 4);
        let cores = |mask: &[usize]| {
            count_distinct(
                mask.iter()
                    .map(|c| {
                        let t = topo.iter().find(|t| t.0 == *c).unwrap();
                        (t.1, t.2)
                    })
                    .collect(),
            )
        };
        assert_eq!(cores(&[0, 1, 2, 3]), 3);
        // A mask of two sibling hyper-threads is one core, not two.
        assert_eq!(cores(&[0, 1]), 1);
        assert_eq!(cores(&[1, 3]), 2);
        assert!(cpuinfo_topology("processor : 0\n").is_empty());
    }

    #[test]
    fn the_budget_fits_the_mask() {
        let b = budget();
        assert!(b.cores >= 1 && b.cores <= b.logical, "{b:?}");
        if let Some(mask) = affinity_mask() {
            assert!(b.logical <= mask.len(), "{b:?} {mask:?}");
        }
        assert_eq!(default_threads(b.cores * 4), 1);
        assert_eq!(default_threads(1), b.cores);
    }
}
