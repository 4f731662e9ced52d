//! Two nodes that share nothing but a veth pair (feature `ofi`, root): each node is a network
//! namespace with its own /dev/shm, its ranks started by a node agent (`osrun
//! --node-wrapper`). Collectives cross through the hub's Unix socket, window data and
//! synchronization through libfabric over the veth, whose byte counters must grow by what
//! the job moved. Nothing can leave the machine: the namespaces' subnet is blackholed in the
//! root namespace while the test runs.
#![cfg(feature = "ofi")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use onesided::{Assert, LockType, Window};

const ROLE: &str = "OSRUN_NETNS_ROLE";
/// Bytes each rank puts to its partner on the other node (and gets back).
const MOVED: usize = 4 << 20;
const PREFIX: &str = "10.231.7";
/// Sets the two nodes up and runs commands on them.
const NETNS_PAIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/netns-pair.sh");

fn sh(cmd: &str) -> Output {
    let out = Command::new("sh").args(["-c", cmd]).output().expect("sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Two namespaces joined by a veth pair, and the blackhole route; removed on drop.
struct TwoNodes {
    ns: [String; 2],
    veth: [String; 2],
    wrapper: PathBuf,
}

impl TwoNodes {
    fn new() -> TwoNodes {
        assert!(
            rustix::process::geteuid().is_root(),
            "network namespaces need root (CI runs as root)"
        );
        let id = std::process::id();
        let ns = [format!("os{id}a"), format!("os{id}b")];
        let veth = [format!("vo{id}a"), format!("vo{id}b")];
        let nodes = TwoNodes {
            ns: ns.clone(),
            veth: veth.clone(),
            wrapper: std::env::temp_dir().join(format!("onesided-netns-wrapper-{id}")),
        };
        sh(&format!(
            "bash {NETNS_PAIR} up {} {} {} {} {PREFIX}",
            ns[0], ns[1], veth[0], veth[1]
        ));
        // Node 0 names its interface; node 1 relies on the default (the first external one).
        let script = format!(
            "#!/bin/sh\nnode=$1; shift\ncase $node in\n  0) ns={}; export ONESIDED_IFACE={} ;;\n  \
             1) ns={} ;;\n  *) exit 97 ;;\nesac\nexec bash {NETNS_PAIR} run \"$ns\" \"$@\"\n",
            ns[0], veth[0], ns[1]
        );
        std::fs::write(&nodes.wrapper, script).unwrap();
        sh(&format!("chmod 700 {}", nodes.wrapper.display()));
        nodes
    }

    /// (tx, rx) bytes of node `k`'s end of the veth.
    fn counters(&self, k: usize) -> (u64, u64) {
        let read = |what: &str| -> u64 {
            let out = sh(&format!(
                "ip netns exec {} cat /sys/class/net/{}/statistics/{what}_bytes",
                self.ns[k], self.veth[k]
            ));
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        (read("tx"), read("rx"))
    }

    fn osrun(&self, ranks: usize, test: &str, role: &str) -> (Output, Duration) {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_osrun"))
            .args(["-n", &ranks.to_string(), "--nodes", "2", "--timeout", "60"])
            .arg("--node-wrapper")
            .arg(&self.wrapper)
            .arg("--prefix")
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env("ONESIDED_PROGRESS", "block")
            .output()
            .expect("run osrun");
        (out, started.elapsed())
    }
}

impl Drop for TwoNodes {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .args([NETNS_PAIR, "down", &self.ns[0], &self.ns[1], PREFIX])
            .output();
        let _ = std::fs::remove_file(&self.wrapper);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn probe_path(job: &str) -> PathBuf {
    Path::new("/dev/shm").join(format!("onesided-netns-probe-{job}"))
}

/// A rank: checks that its node has a /dev/shm of its own, then moves `MOVED` bytes to and
/// from its partner on the other node through a window, and checks every byte.
fn rank_moves_data() -> onesided::Result<()> {
    let u = onesided::init()?;
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    assert_eq!((n, w.node_size()), (4, 2), "two nodes of two ranks");
    let on_node0 = me < 2;
    // Each node sees only its own /dev/shm: a file rank 0 creates is seen by rank 1 only.
    if me == 0 {
        std::fs::write(probe_path(w.job_id()), b"node 0").unwrap();
    }
    w.barrier()?;
    assert_eq!(probe_path(w.job_id()).exists(), on_node0, "rank {me}");
    w.barrier()?;
    if me == 0 {
        std::fs::remove_file(probe_path(w.job_id())).unwrap();
    }
    let words = MOVED / 8;
    let win = Window::<u64>::allocate(w, 2 * words)?;
    let partner = (me + 2) % n;
    let mine: Vec<u64> = (0..words as u64).map(|i| i * 31 + me as u64).collect();
    win.lock(LockType::Shared, partner, Assert::NONE)?;
    win.put(&mine, partner, 0)?;
    win.unlock(partner)?;
    w.barrier()?;
    // What the partner put here is in the first half; fetch what we put there.
    let mut back = vec![0u64; words];
    win.lock(LockType::Shared, partner, Assert::NONE)?;
    win.get(&mut back, partner, 0)?;
    win.fetch_and_op(1, partner, words, onesided::Op::Sum)?;
    win.unlock(partner)?;
    assert!(back == mine, "rank {me}: the data came back different");
    w.barrier()?;
    win.lock(LockType::Shared, me, Assert::NONE)?;
    let mut here = vec![0u64; words + 1];
    win.get(&mut here, me, 0)?;
    win.unlock(me)?;
    let expect: Vec<u64> = (0..words as u64).map(|i| i * 31 + partner as u64).collect();
    assert!(
        here[..words] == expect[..],
        "rank {me}: partner's put wrong"
    );
    assert_eq!(here[words], 1, "rank {me}: partner's fetch_and_op");
    w.barrier()?;
    println!("rank {me} moved {} bytes each way", MOVED);
    win.free().map(drop)
}

/// Two nodes in their own namespaces: the job runs, moves its data over the veth (its
/// counters grew by at least that much each way), and leaves nothing in the host's
/// /dev/shm or $TMPDIR; then a rank of node 1 exiting inside a fence, and one SIGKILLed, each
/// end the job within 5 s, naming it; and a collective deadlock between the nodes (a
/// fence against a barrier) fails at every rank within seconds.
#[test]
fn two_nodes_in_network_namespaces_move_data_over_the_veth() {
    if let Ok(role) = std::env::var(ROLE) {
        match role.as_str() {
            "move" => rank_moves_data().unwrap(),
            "kill" => {
                let u = onesided::init().unwrap();
                let win = Window::<u64>::allocate(u.world(), 1024).unwrap();
                if u.rank() == 3 {
                    std::thread::sleep(Duration::from_millis(100));
                    let me = rustix::process::getpid();
                    rustix::process::kill_process(me, rustix::process::Signal::KILL).unwrap();
                }
                win.fence(Assert::NONE).ok();
                u.world().barrier().ok();
                std::thread::sleep(Duration::from_secs(600));
            }
            "exit" => {
                let u = onesided::init().unwrap();
                let win = Window::<u64>::allocate(u.world(), 1024).unwrap();
                u.world().barrier().unwrap();
                if u.rank() == 3 {
                    std::process::exit(0);
                }
                // Rank 3 never comes: its agent relays its exit to node 0's roster.
                win.fence(Assert::NONE).unwrap();
            }
            "deadlock" => {
                let u = onesided::init().unwrap();
                let w = u.world();
                let win = Window::<u64>::allocate(w, 1024).unwrap();
                w.barrier().unwrap();
                // Node 0's ranks fence, node 1's wait in a barrier: each sees the other's
                // wait through the agents (the hub relays what each publishes).
                let r = if u.rank() < 2 {
                    win.fence(Assert::NONE)
                } else {
                    w.barrier()
                };
                println!("rank {}: {r:?}", u.rank());
                std::mem::forget(win);
                std::process::exit(if r.is_err() { 0 } else { 1 });
            }
            _ => unreachable!(),
        }
        return;
    }
    let nodes = TwoNodes::new();
    let before = [nodes.counters(0), nodes.counters(1)];
    let (out, elapsed) = nodes.osrun(
        4,
        "two_nodes_in_network_namespaces_move_data_over_the_veth",
        "move",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for r in 0..4 {
        assert!(
            stdout.contains(&format!("rank {r} moved")),
            "{stdout}\n{stderr}"
        );
    }
    let after = [nodes.counters(0), nodes.counters(1)];
    let sent0 = after[0].0 - before[0].0;
    let got0 = after[0].1 - before[0].1;
    let sent1 = after[1].0 - before[1].0;
    println!("veth: node 0 sent {sent0} B, received {got0} B; node 1 sent {sent1} B ({elapsed:?})");
    // Each node's two ranks put MOVED bytes and got MOVED bytes back across the pair.
    let each_way = 2 * 2 * MOVED as u64;
    assert!(
        sent0 >= each_way && sent1 >= each_way,
        "{sent0} / {sent1} < {each_way}"
    );
    // The same traffic seen from both ends (the kernel's own packets, e.g. IPv6 neighbour
    // discovery, can be in flight while the counters are read).
    assert!(
        sent1.abs_diff(got0) < 64 << 10,
        "node 1 sent {sent1}, node 0 got {got0}"
    );
    let leftovers: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .chain(std::fs::read_dir(std::env::temp_dir()).unwrap())
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("onesided-hub-") || n.starts_with("onesided-netns-probe"))
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");

    // A rank that exits cleanly while its peers wait for it in a fence: every node learns
    // it (node 1's agent relays the exit to node 0's roster), the waits fail, the job ends.
    let (out, elapsed) = nodes.osrun(
        4,
        "two_nodes_in_network_namespaces_move_data_over_the_veth",
        "exit",
    );
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert!(
        elapsed < Duration::from_secs(5),
        "took {elapsed:?}: {stderr}"
    );
    assert!(!out.status.success(), "{stderr}");
    assert!(
        (stdout + &stderr).contains(r#"PeerExited { call: "fence", rank: 3 }"#),
        "{stderr}"
    );

    let (out, elapsed) = nodes.osrun(
        4,
        "two_nodes_in_network_namespaces_move_data_over_the_veth",
        "kill",
    );
    let stderr = text(&out.stderr);
    assert!(
        elapsed < Duration::from_secs(5),
        "took {elapsed:?}: {stderr}"
    );
    assert_eq!(out.status.code(), Some(128 + 9), "{stderr}");
    assert!(
        stderr.contains("rank 3") && stderr.contains("SIGKILL"),
        "{stderr}"
    );

    // A collective deadlock between the nodes (a fence against a barrier) is an error at
    // every rank within a few seconds, as on one node.
    let (out, elapsed) = nodes.osrun(
        4,
        "two_nodes_in_network_namespaces_move_data_over_the_veth",
        "deadlock",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        elapsed < Duration::from_secs(8),
        "took {elapsed:?}: {stdout}\n{stderr}"
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("CollectiveDeadlock"), "{stdout}\n{stderr}");
}
