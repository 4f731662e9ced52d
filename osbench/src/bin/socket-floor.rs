//! `socket-floor`: the floor an exchange across two nodes of this machine cannot go below —
//! two processes send each other a block of the same size over one loopback TCP connection
//! and receive the other's, both spinning on non-blocking sockets (no library, no protocol,
//! no copies but the kernel's). Seed 001's alltoallv across virtual nodes is measured
//! against it (`bench.sh --net`, `scripts/net_seeds.py`).
//!
//! ```text
//! socket-floor --sizes 32K,256K --json results/net-floor.json
//! ```
//!
//! The first process listens on 127.0.0.1, starts the second (this binary again, with
//! `--peer PORT`), and times every exchange alone; it prints and records the median
//! (`bench` = `socket-floor`, `impl` = `socket`, `metric` = `exchange-p50`, µs, `bytes` per
//! direction, `ranks` = 2). Every received block is checked word by word.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// Exchanges timed per size (after as many untimed ones, which warm up the connection).
const EXCHANGES: usize = 2000;

/// The longest a run may take before it gives up (a peer that died leaves a spin).
const PATIENCE: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("socket-floor: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Args {
    sizes: Vec<usize>,
    json: Option<String>,
    peer: Option<u16>,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    let n: usize = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    if n == 0 || n % 8 != 0 {
        return Err(format!(
            "sizes are positive multiples of 8 bytes, not {s:?}"
        ));
    }
    Ok(n * mul)
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        sizes: vec![32 << 10, 256 << 10],
        json: None,
        peer: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--sizes" => {
                a.sizes = value()?
                    .split(',')
                    .map(parse_size)
                    .collect::<Result<_, _>>()?
            }
            "--json" => a.json = Some(value()?),
            "--peer" => a.peer = Some(value()?.parse().map_err(|e| format!("--peer: {e}"))?),
            "-h" | "--help" => {
                println!("usage: socket-floor [--sizes 32K,256K] [--json FILE]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// An I/O error of `what`, as this program reports it.
fn io(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{what}: {e}")
}

fn run() -> Result<(), String> {
    let a = args()?;
    if let Some(port) = a.peer {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(io("connect"))?;
        let mut link = Link::new(stream, 1)?;
        for &size in &a.sizes {
            link.prepare(size);
            for _ in 0..2 * EXCHANGES {
                link.exchange()?;
                link.verify()?;
            }
        }
        return Ok(());
    }
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(io("bind"))?;
    let port = listener.local_addr().map_err(io("local_addr"))?.port();
    let exe = std::env::current_exe().map_err(io("current_exe"))?;
    let mut sizes = String::new();
    for (i, s) in a.sizes.iter().enumerate() {
        sizes += &format!("{}{s}", if i > 0 { "," } else { "" });
    }
    let mut child = Command::new(exe)
        .args(["--peer", &port.to_string(), "--sizes", &sizes])
        .spawn()
        .map_err(io("spawn the peer"))?;
    let (stream, _) = listener.accept().map_err(io("accept"))?;
    let mut link = Link::new(stream, 0)?;
    let mut records = Vec::new();
    println!("socket-floor: one exchange = each of 2 processes sends a block and receives the other's over loopback TCP, both spinning");
    println!("{:>9}  {:>12}", "bytes", "p50 [us]");
    for &size in &a.sizes {
        link.prepare(size);
        for _ in 0..EXCHANGES {
            link.exchange()?;
            link.verify()?;
        }
        let mut times = Vec::with_capacity(EXCHANGES);
        for _ in 0..EXCHANGES {
            let t = Instant::now();
            link.exchange()?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
            link.verify()?;
        }
        times.sort_by(f64::total_cmp);
        let p50 = times[times.len() / 2];
        println!("{size:>9}  {p50:>12.2}");
        records.push(format!(
            "{{\"bench\":\"socket-floor\",\"impl\":\"socket\",\"window\":\"none\",\"sync\":\"none\",\"bytes\":{size},\"ranks\":2,\"metric\":\"exchange-p50\",\"value\":{p50},\"unit\":\"us\",\"stat\":\"median\"}}"
        ));
    }
    let status = child.wait().map_err(io("wait for the peer"))?;
    if !status.success() {
        return Err(format!("the peer failed: {status}"));
    }
    if let Some(path) = a.json {
        std::fs::write(&path, format!("[{}]\n", records.join(",\n"))).map_err(io("write json"))?;
    }
    Ok(())
}

/// One end of the connection: what it sends, what it received, and how many exchanges it
/// made.
struct Link {
    stream: TcpStream,
    me: u64,
    out: Vec<u8>,
    into: Vec<u8>,
    exchanges: u64,
}

impl Link {
    fn new(stream: TcpStream, me: u64) -> Result<Link, String> {
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_nonblocking(true))
            .map_err(|e| format!("socket options: {e}"))?;
        Ok(Link {
            stream,
            me,
            out: Vec::new(),
            into: Vec::new(),
            exchanges: 0,
        })
    }

    /// Word `w` of the block `sender` sends in exchange `n`: the first and last words carry
    /// the exchange, the others whose block it is and where (the block is written once per
    /// size, outside the timed exchanges, and only those two words per exchange).
    fn word(sender: u64, n: u64, w: usize, words: usize) -> u64 {
        let stamp = if w == 0 || w + 1 == words { n << 32 } else { 0 };
        (sender << 63) | stamp | w as u64
    }

    /// Prepares the block of `size` bytes this end sends.
    fn prepare(&mut self, size: usize) {
        let words = size / 8;
        self.out.clear();
        for w in 0..words {
            self.out
                .extend_from_slice(&Self::word(self.me, 0, w, words).to_le_bytes());
        }
        self.into.resize(size, 0);
    }

    /// Sends the prepared block and receives the peer's, both at once, spinning on the
    /// socket.
    fn exchange(&mut self) -> Result<(), String> {
        let size = self.out.len();
        let words = size / 8;
        let n = self.exchanges;
        self.exchanges += 1;
        for w in [0, words - 1] {
            let v = Self::word(self.me, n, w, words).to_le_bytes();
            self.out[w * 8..w * 8 + 8].copy_from_slice(&v);
        }
        let (mut sent, mut got) = (0, 0);
        let give_up = Instant::now() + PATIENCE;
        while sent < size || got < size {
            if sent < size {
                match self.stream.write(&self.out[sent..]) {
                    Ok(k) => sent += k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("send: {e}")),
                }
            }
            if got < size {
                match self.stream.read(&mut self.into[got..]) {
                    Ok(0) => return Err("the peer closed the connection".into()),
                    Ok(k) => got += k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("receive: {e}")),
                }
            }
            if Instant::now() > give_up {
                return Err(format!("an exchange took more than {PATIENCE:?}"));
            }
        }
        Ok(())
    }

    /// Checks every word of the block received in the last exchange.
    fn verify(&self) -> Result<(), String> {
        let words = self.into.len() / 8;
        let n = self.exchanges - 1;
        for (w, chunk) in self.into.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            let want = Self::word(1 - self.me, n, w, words);
            if v != want {
                return Err(format!(
                    "exchange {n}: word {w} is {v:#x}, the peer sent {want:#x}"
                ));
            }
        }
        Ok(())
    }
}
