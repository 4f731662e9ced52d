//! Which processes share a machine's cores and which can share its memory, as this process
//! sees them itself.
//!
//! The MPI bootstrap does not ask the host MPI (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`):
//! its answer is a setting of the host's own transport, not a fact. MPICH under
//! `MPIR_CVAR_NOLOCAL=1` (how a job forces MPICH onto its network path) answers that no two
//! processes share memory; taken as onesided's nodes, every process would be a node of its
//! own — same-machine peers reached over the network, waits tuned for a core per process on
//! a machine where four processes share two (the 4-rank notified alltoallv under MPICH
//! 5.0.2's `mpiexec` took 324 µs a cycle that way instead of 56–68 µs, a fence 3.9 ms
//! instead of 0.4 ms).
//! Processes compare two keys instead:
//! - the **machine**: the kernel's boot id (one per boot of one kernel; a container or a
//!   namespace on it shares the cores), else the host name;
//! - the **memory**: the machine, the file system of `/dev/shm` (where segments are named:
//!   a tmpfs of its own is a separate "host") and the PID namespace (cross-memory attach
//!   reaches only the processes it can name).

use std::os::unix::fs::MetadataExt;

/// This process's place: two processes with equal `machine` share cores, two with equal
/// `memory` can map each other's segments and reach each other's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Locality {
    /// Equal for the processes of one kernel.
    pub machine: u64,
    /// Equal for the processes that share `/dev/shm` and a PID namespace on one kernel.
    pub memory: u64,
}

impl Locality {
    /// Where this process runs (reads a few files of `/proc` and `/dev/shm`'s metadata).
    pub(crate) fn of_this_process() -> Locality {
        let boot = std::fs::read("/proc/sys/kernel/random/boot_id").ok();
        let machine = match boot.filter(|b| !b.is_empty()) {
            Some(id) => fnv1a(FNV_OFFSET, &id),
            None => fnv1a(
                FNV_OFFSET ^ 1,
                rustix::system::uname().nodename().to_bytes(),
            ),
        };
        let identity = |path: &str| {
            std::fs::metadata(path)
                .map(|m| [m.dev(), m.ino()])
                .unwrap_or_default()
        };
        let [shm_dev, shm_ino] = identity("/dev/shm");
        let [_, pid_namespace] = identity("/proc/self/ns/pid");
        let memory = [shm_dev, shm_ino, pid_namespace]
            .iter()
            .fold(machine, |h, word| fnv1a(h, &word.to_le_bytes()));
        Locality { machine, memory }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// 64-bit FNV-1a of `bytes` continued from `hash`: the same in every process and build
/// (std's hasher promises neither).
fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_and_its_threads_agree() {
        let here = Locality::of_this_process();
        let there = std::thread::spawn(Locality::of_this_process)
            .join()
            .unwrap();
        assert_eq!(here, there);
    }

    #[test]
    fn fnv1a_matches_the_reference_values() {
        // From the FNV reference (draft-eastlake-fnv): "" and "a".
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
