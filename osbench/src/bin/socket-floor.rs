//! `socket-floor`: the floor an exchange across two nodes of this machine cannot go below —
//! two processes send each other a block of the same size over one loopback TCP connection
//! and receive the other's, both spinning on non-blocking sockets (no library, no protocol,
//! no copies but the kernel's). Seed 001's alltoallv across virtual nodes is measured
//! against it (`bench.sh --net`, `scripts/net_seeds.py`).
//!
//! With `--stream SIZES` it also measures the floor under a put bandwidth across the two
//! nodes: the first process sends [`STREAM_BLOCKS`] blocks of each size in a row (as
//! `osbench put-bw` puts 64 before a flush), the second reads them and answers with one
//! byte after the last (the flush's answer); a round's bandwidth is its bytes over its time
//! at the sender, the median of [`STREAM_ROUNDS`] rounds is recorded (`metric` =
//! `stream-bandwidth`, MB/s).
//!
//! ```text
//! socket-floor --sizes 32K,256K --stream 1M --json results/net-floor.json
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

/// Blocks per round of a stream (`osbench put-bw`'s puts per flush).
const STREAM_BLOCKS: usize = 64;

/// Timed rounds per stream size (after [`STREAM_WARMUP`] untimed ones).
const STREAM_ROUNDS: usize = 40;

/// Untimed rounds before a stream's timed ones; their blocks are checked word by word.
const STREAM_WARMUP: usize = 4;

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
    stream: Vec<usize>,
    json: Option<String>,
    peer: Option<u16>,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    let n: usize = num
        .parse::<usize>()
        .map_err(|_| format!("not a size: {s:?}"))?
        * mul;
    if n == 0 || n % 8 != 0 {
        return Err(format!(
            "sizes are positive multiples of 8 bytes, not {s:?}"
        ));
    }
    Ok(n)
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        sizes: vec![32 << 10, 256 << 10],
        stream: Vec::new(),
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
            "--stream" => {
                a.stream = value()?
                    .split(',')
                    .map(parse_size)
                    .collect::<Result<_, _>>()?
            }
            "--json" => a.json = Some(value()?),
            "--peer" => a.peer = Some(value()?.parse().map_err(|e| format!("--peer: {e}"))?),
            "-h" | "--help" => {
                println!("usage: socket-floor [--sizes 32K,256K] [--stream 1M,...] [--json FILE]");
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
        for &size in &a.stream {
            link.prepare(size);
            for round in 0..STREAM_WARMUP + STREAM_ROUNDS {
                link.receive_stream(round < STREAM_WARMUP)?;
            }
        }
        return Ok(());
    }
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(io("bind"))?;
    let port = listener.local_addr().map_err(io("local_addr"))?.port();
    let exe = std::env::current_exe().map_err(io("current_exe"))?;
    let list = |sizes: &[usize]| {
        sizes
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut peer_args = vec![
        "--peer".to_string(),
        port.to_string(),
        "--sizes".into(),
        list(&a.sizes),
    ];
    if !a.stream.is_empty() {
        peer_args.extend(["--stream".into(), list(&a.stream)]);
    }
    let mut child = Command::new(exe)
        .args(&peer_args)
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
    if !a.stream.is_empty() {
        println!(
            "socket-floor stream: {STREAM_BLOCKS} blocks one way, then a 1-byte answer; median of {STREAM_ROUNDS} rounds"
        );
        println!("{:>9}  {:>12}", "bytes", "MB/s");
    }
    for &size in &a.stream {
        link.prepare(size);
        let mut rates = Vec::with_capacity(STREAM_ROUNDS);
        for round in 0..STREAM_WARMUP + STREAM_ROUNDS {
            let t = Instant::now();
            link.send_stream()?;
            let secs = t.elapsed().as_secs_f64();
            if round >= STREAM_WARMUP {
                rates.push((size * STREAM_BLOCKS) as f64 / secs / 1e6);
            }
        }
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        println!("{size:>9}  {median:>12.0}");
        records.push(format!(
            "{{\"bench\":\"socket-floor\",\"impl\":\"socket\",\"window\":\"none\",\"sync\":\"none\",\"bytes\":{size},\"ranks\":2,\"metric\":\"stream-bandwidth\",\"value\":{median},\"unit\":\"MB/s\",\"stat\":\"median\"}}"
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

    /// Stamps the prepared block with the next number (its first and last words).
    fn stamp_next(&mut self) {
        let words = self.out.len() / 8;
        let n = self.exchanges;
        self.exchanges += 1;
        for w in [0, words - 1] {
            let v = Self::word(self.me, n, w, words).to_le_bytes();
            self.out[w * 8..w * 8 + 8].copy_from_slice(&v);
        }
    }

    /// Writes what the kernel takes of `out[from..to]`: the bytes written (0: none now).
    fn write_some(&mut self, from: usize, to: usize) -> Result<usize, String> {
        match self.stream.write(&self.out[from..to]) {
            Ok(k) => Ok(k),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(0),
            Err(e) => Err(format!("send: {e}")),
        }
    }

    /// Reads what the socket has into `into[from..to]`: the bytes read (0: none now).
    fn read_some(&mut self, from: usize, to: usize) -> Result<usize, String> {
        match self.stream.read(&mut self.into[from..to]) {
            Ok(0) => Err("the peer closed the connection".into()),
            Ok(k) => Ok(k),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(0),
            Err(e) => Err(format!("receive: {e}")),
        }
    }

    /// Sends the prepared block and receives the peer's, both at once, spinning on the
    /// socket.
    fn exchange(&mut self) -> Result<(), String> {
        let size = self.out.len();
        self.stamp_next();
        let (mut sent, mut got) = (0, 0);
        let give_up = Instant::now() + PATIENCE;
        while sent < size || got < size {
            if sent < size {
                sent += self.write_some(sent, size)?;
            }
            if got < size {
                got += self.read_some(got, size)?;
            }
            if Instant::now() > give_up {
                return Err(format!("an exchange took more than {PATIENCE:?}"));
            }
        }
        Ok(())
    }

    /// Writes `out[..len]`, spinning on the socket.
    fn send_all(&mut self, len: usize) -> Result<(), String> {
        let mut sent = 0;
        let give_up = Instant::now() + PATIENCE;
        while sent < len {
            sent += self.write_some(sent, len)?;
            if Instant::now() > give_up {
                return Err(format!("a send took more than {PATIENCE:?}"));
            }
        }
        Ok(())
    }

    /// Fills `into[..len]` from the socket, spinning.
    fn receive_exactly(&mut self, len: usize) -> Result<(), String> {
        let mut got = 0;
        let give_up = Instant::now() + PATIENCE;
        while got < len {
            got += self.read_some(got, len)?;
            if Instant::now() > give_up {
                return Err(format!("a receive took more than {PATIENCE:?}"));
            }
        }
        Ok(())
    }

    /// One round of a stream at the sender: [`STREAM_BLOCKS`] prepared blocks, each
    /// stamped with its number, then the receiver's 1-byte answer.
    fn send_stream(&mut self) -> Result<(), String> {
        let size = self.out.len();
        for _ in 0..STREAM_BLOCKS {
            self.stamp_next();
            self.send_all(size)?;
        }
        self.receive_exactly(1)?;
        if self.into[0] != 0xa5 {
            return Err(format!("the stream's answer is {:#x}", self.into[0]));
        }
        Ok(())
    }

    /// One round of a stream at the receiver: every block's stamps checked (every word
    /// with `whole`, the untimed rounds), then the answer.
    fn receive_stream(&mut self, whole: bool) -> Result<(), String> {
        let size = self.into.len();
        let words = size / 8;
        for _ in 0..STREAM_BLOCKS {
            self.receive_exactly(size)?;
            self.exchanges += 1;
            if whole {
                self.verify()?;
            } else {
                for w in [0, words - 1] {
                    self.check_word(w, words)?;
                }
            }
        }
        let answer = self.out[0];
        self.out[0] = 0xa5;
        let sent = self.send_all(1);
        self.out[0] = answer;
        sent
    }

    /// Checks word `w` (of `words`) of the block received last.
    fn check_word(&self, w: usize, words: usize) -> Result<(), String> {
        let n = self.exchanges - 1;
        let v = u64::from_le_bytes(self.into[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
        let want = Self::word(1 - self.me, n, w, words);
        if v != want {
            return Err(format!(
                "block {n}: word {w} is {v:#x}, the peer sent {want:#x}"
            ));
        }
        Ok(())
    }

    /// Checks every word of the block received last.
    fn verify(&self) -> Result<(), String> {
        let words = self.into.len() / 8;
        (0..words).try_for_each(|w| self.check_word(w, words))
    }
}
