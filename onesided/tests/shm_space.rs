//! /dev/shm space is reserved when a segment is created: a window or `alloc_mem` block that
//! does not fit is a typed error naming /dev/shm, never a SIGBUS at first touch.
//!
//! The test never fills the machine's /dev/shm: it re-executes itself with `unshare -m` in
//! a private mount namespace where /dev/shm is a fresh 16 MiB tmpfs, and runs the ranks
//! there (they inherit the namespace). It needs root, as CI has.

use std::process::Command;
use std::time::Duration;

use onesided::{alloc_mem, testing, Assert, Error, Window};

const ROLE: &str = "ONESIDED_TEST_SMALL_SHM";

/// The small /dev/shm, in MiB: 16, or room for libfabric's shm provider where it carries
/// the network's operations (it declines to open an endpoint unless /dev/shm has room
/// for a region per core: 32 MiB on 2 cores), with the windows scaled alike.
fn shm_mib() -> usize {
    if std::env::var("ONESIDED_PROVIDER").is_ok_and(|p| p == "shm") {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        16 * (cores + 2)
    } else {
        16
    }
}

#[test]
fn windows_larger_than_dev_shm_are_typed_errors() {
    if std::env::var_os(ROLE).is_none() {
        let exe = std::env::current_exe().unwrap();
        let script = format!(
            "mount -t tmpfs -o size={}m,mode=1777 tmpfs /dev/shm && exec \"$0\" \
             --exact windows_larger_than_dev_shm_are_typed_errors --nocapture --test-threads=1",
            shm_mib()
        );
        let out = Command::new("timeout")
            .args(["120", "unshare", "--mount", "--propagation", "private"])
            .args(["sh", "-c", &script])
            .arg(exe)
            .env(ROLE, "1")
            .output()
            .expect("run unshare (util-linux) as root");
        assert!(
            out.status.success(),
            "inner run failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
        return;
    }
    // Inside the namespace: /dev/shm is the small tmpfs.
    let shm_mib = shm_mib();
    let stat = rustix::fs::statvfs("/dev/shm").unwrap();
    assert!(
        stat.f_blocks * stat.f_frsize <= (shm_mib as u64) << 20,
        "not the small tmpfs"
    );
    testing::job(2)
        .timeout(Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            // Twice /dev/shm per rank of the node in its segment (a node's segment holds
            // its own ranks' memory: both on one node, one each across two).
            let per_rank = 2 * (shm_mib << 20);
            match Window::<u8>::allocate(w, per_rank) {
                Err(Error::SharedMemoryFull {
                    requested,
                    available,
                }) => {
                    assert_eq!(w.node_rank(), 0, "a node's lowest rank creates its segment");
                    let node_memory = w.node_size() * per_rank;
                    assert!(requested >= node_memory && available < (shm_mib as u64) << 20);
                    let text = Error::SharedMemoryFull {
                        requested,
                        available,
                    }
                    .to_string();
                    assert!(text.contains("/dev/shm"), "{text}");
                }
                Err(Error::PeerFailed { .. }) => assert_ne!(w.node_rank(), 0),
                other => panic!("expected an error at every rank, got {other:?}"),
            }
            // A terabyte per rank fails at once instead of being "created" sparsely.
            assert!(Window::<u8>::allocate(w, 1 << 40).is_err());
            assert!(matches!(
                alloc_mem::<u8>(shm_mib << 20),
                Err(Error::SharedMemoryFull { .. })
            ));
            // What fits still works, and its memory is really there.
            let win = Window::<u64>::allocate(w, 1 << 17)?; // 1 MiB per rank
            win.fence(Assert::NONE)?;
            let peer = 1 - w.rank();
            win.put(&vec![7u64; 1 << 17], peer, 0)?;
            win.fence(Assert::NONE)?;
            let mut back = vec![0u64; 1 << 17];
            win.local_read(0, &mut back)?;
            assert!(back.iter().all(|&x| x == 7));
            win.free()?;
            Ok(())
        })
        .assert_success();
}
