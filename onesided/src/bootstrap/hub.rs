//! The hub: the out-of-band channel of a job whose ranks do not share one `/dev/shm`.
//!
//! Ranks on different nodes (virtual nodes in their own mount namespaces, or hosts) cannot
//! meet in a boot segment. The launcher runs a hub that every rank reaches over a stream
//! socket (`unix:PATH`, a socket in a directory every node sees, or `tcp:HOST:PORT`), and a
//! collective becomes one request and one reply per process: each member sends its tag and
//! its blocks, the hub waits for every member of the communicator, and sends each member the
//! tags of all and the blocks addressed to it. The tag check stays at the ranks
//! (`CallTag::check`), so a mismatch reads as it does over a boot
//! segment.
//!
//! A process opens one connection per communicator and says which (communicator id, its
//! index, member count). A connection that closes is a member that left the communicator
//! (exited, crashed, or freed it): every collective of that communicator that still waits for
//! it fails at once, at every member that arrived. Node agents (`osrun`'s per-node processes)
//! connect too, and the hub relays between them what one node sees and the others need: a
//! rank's clean exit (the roster mark of every node) and the job's abort.
//!
//! Wire format: frames of little-endian words — kind, a word count and the words, a block
//! count, the block lengths, then the blocks' bytes.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result};

/// Environment variable with the hub's address (`unix:PATH` or `tcp:HOST:PORT`): set, the
/// `local` bootstrap's collectives go through the hub instead of the boot segment.
pub const ENV_HUB: &str = "ONESIDED_HUB";

const HELLO_MEMBER: u64 = 1;
const COLLECTIVE: u64 = 2;
const REPLY: u64 = 3;
const HELLO_AGENT: u64 = 4;
/// Agent → hub → every agent: a rank exited with status 0.
const EXITED: u64 = 5;
/// Agent → hub: a rank failed (rank, pid, signalled, code); hub → agents: abort the job.
const FAILED: u64 = 6;
const ABORT: u64 = 7;
/// Agent → hub → every agent: the collective a rank is blocked in (rank, roster word; 0
/// when it no longer is), so that every node's roster shows every member's wait.
const WAITING: u64 = 8;

/// Reply status: the collective completed.
const DONE: u64 = 0;
/// Reply status: a member left the communicator before it arrived.
const LEFT: u64 = 1;
/// Reply status: the members' requests have different shapes (their tags differ).
const MISMATCH: u64 = 2;

/// Bounds on what a frame may announce (a peer's words are not trusted with allocations).
const MAX_WORDS: u64 = 1 << 20;
const MAX_BLOCKS: u64 = 1 << 20;
const MAX_BYTES: u64 = 1 << 36;

/// A connection to or from the hub.
#[derive(Debug)]
pub(crate) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    /// Connects to `addr` (`unix:PATH` or `tcp:HOST:PORT`).
    pub(crate) fn connect(addr: &str) -> Result<Stream> {
        let failed =
            |e: io::Error| Error::Bootstrap(format!("cannot reach the hub at {addr}: {e}"));
        if let Some(path) = addr.strip_prefix("unix:") {
            UnixStream::connect(path).map(Stream::Unix).map_err(failed)
        } else if let Some(hostport) = addr.strip_prefix("tcp:") {
            let s = TcpStream::connect(hostport).map_err(failed)?;
            // Requests and replies are single frames a peer waits for: no Nagle delay.
            s.set_nodelay(true).map_err(failed)?;
            Ok(Stream::Tcp(s))
        } else {
            Err(Error::Bootstrap(format!(
                "{ENV_HUB}={addr}: expected unix:PATH or tcp:HOST:PORT"
            )))
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
        }
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }

    fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => {
                // std has no peek for Unix streams: MSG_PEEK through rustix.
                use std::os::fd::AsFd;
                rustix::net::recv(s.as_fd(), buf, rustix::net::RecvFlags::PEEK)
                    .map(|(n, _)| n)
                    .map_err(io::Error::from)
            }
            Stream::Tcp(s) => s.peek(buf),
        }
    }

    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}

/// One message: its kind, some words and some byte blocks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) kind: u64,
    pub(crate) words: Vec<u64>,
    pub(crate) blocks: Vec<Vec<u8>>,
}

/// The bytes of a frame with these parts.
fn encode(kind: u64, words: &[u64], blocks: &[&[u8]]) -> Vec<u8> {
    let bytes: usize = blocks.iter().map(|b| b.len()).sum();
    let mut out = Vec::with_capacity(8 * (3 + words.len() + blocks.len()) + bytes);
    let mut put = |w: u64| out.extend_from_slice(&w.to_le_bytes());
    put(kind);
    put(words.len() as u64);
    words.iter().for_each(|&w| put(w));
    put(blocks.len() as u64);
    blocks.iter().for_each(|b| put(b.len() as u64));
    for b in blocks {
        out.extend_from_slice(b);
    }
    out
}

/// Writes `bytes` to `s`; `idle` runs whenever the socket is full (it may end the wait).
fn write_full(
    s: &mut Stream,
    mut bytes: &[u8],
    idle: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    while !bytes.is_empty() {
        match s.write(bytes) {
            Ok(0) => return Err(Error::Bootstrap("the hub connection closed".into())),
            Ok(k) => bytes = &bytes[k..],
            Err(e) => waited(e, idle)?,
        }
    }
    Ok(())
}

/// What an error of a stream read or write means for the wait: nothing there yet (`idle`
/// runs, and may end the wait), a signal (try again), or a broken connection.
fn waited(e: io::Error, idle: &mut dyn FnMut() -> Result<()>) -> Result<()> {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => idle(),
        io::ErrorKind::Interrupted => Ok(()),
        _ => Err(Error::Bootstrap(format!("hub connection: {e}"))),
    }
}

/// Fills `buf` from `s`; `idle` runs whenever nothing is there to read (it may end the
/// wait).
fn read_full(s: &mut Stream, buf: &mut [u8], idle: &mut dyn FnMut() -> Result<()>) -> Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(Error::Bootstrap(
                    "the hub connection closed mid-frame".into(),
                ))
            }
            Ok(k) => got += k,
            Err(e) => waited(e, idle)?,
        }
    }
    Ok(true)
}

/// Reads one frame; `None` when the peer closed the connection between frames.
fn read_frame(s: &mut Stream, idle: &mut dyn FnMut() -> Result<()>) -> Result<Option<Frame>> {
    let mut word = [0u8; 8];
    let mut next = |s: &mut Stream, idle: &mut dyn FnMut() -> Result<()>, first: bool| {
        if !read_full(s, &mut word, idle)? {
            return if first {
                Ok(None)
            } else {
                Err(Error::Bootstrap(
                    "the hub connection closed mid-frame".into(),
                ))
            };
        }
        Ok(Some(u64::from_le_bytes(word)))
    };
    let Some(kind) = next(s, idle, true)? else {
        return Ok(None);
    };
    let bounded = |n: u64, max: u64, what: &str| {
        if n > max {
            Err(Error::Bootstrap(format!("hub frame announces {n} {what}")))
        } else {
            Ok(n as usize)
        }
    };
    let nwords = bounded(next(s, idle, false)?.unwrap_or(0), MAX_WORDS, "words")?;
    let mut words = Vec::with_capacity(nwords);
    for _ in 0..nwords {
        words.push(next(s, idle, false)?.unwrap_or(0));
    }
    let nblocks = bounded(next(s, idle, false)?.unwrap_or(0), MAX_BLOCKS, "blocks")?;
    let mut lens = Vec::with_capacity(nblocks);
    let mut total = 0u64;
    for _ in 0..nblocks {
        let len = next(s, idle, false)?.unwrap_or(0);
        total = total.saturating_add(len);
        lens.push(len);
    }
    bounded(total, MAX_BYTES, "bytes")?;
    let mut blocks = Vec::with_capacity(nblocks);
    for len in lens {
        let mut b = vec![0u8; len as usize];
        if !b.is_empty() && !read_full(s, &mut b, idle)? {
            return Err(Error::Bootstrap(
                "the hub connection closed mid-frame".into(),
            ));
        }
        blocks.push(b);
    }
    Ok(Some(Frame {
        kind,
        words,
        blocks,
    }))
}

fn never_idle() -> Result<()> {
    Ok(())
}

/// How a collective ended at the hub.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Every member arrived: their tags by index, and the blocks addressed to this member by
    /// source (all of them the sources' single block for a gather).
    Done {
        tags: Vec<u64>,
        blocks: Vec<Vec<u8>>,
    },
    /// The members' requests differ in shape; their tags (which differ too).
    Mismatch { tags: Vec<u64> },
    /// This member (by index) left the communicator before it arrived.
    Left(usize),
}

/// The other end of a [`Link`]'s socket, to close it at a process's clean exit (a PMI job
/// has no node agent that tells the hub).
#[derive(Debug)]
pub(crate) struct Leaver(Stream);

impl Leaver {
    /// Shuts the connection down: every collective of its communicator that waits for this
    /// member fails at the others (`Outcome::Left`), as when the process is gone.
    pub(crate) fn leave(&self) {
        let _ = match &self.0 {
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

/// A member's connection to the hub for one communicator.
#[derive(Debug)]
pub(crate) struct Link {
    stream: Mutex<Stream>,
    addr: String,
}

impl Link {
    /// Joins communicator `comm` as member `index` of `n` at the hub `addr`.
    pub(crate) fn connect(addr: &str, comm: u64, index: usize, n: usize) -> Result<Link> {
        let mut stream = Stream::connect(addr)?;
        stream
            .write_all(&encode(HELLO_MEMBER, &[comm, index as u64, n as u64], &[]))
            .map_err(|e| Error::Bootstrap(format!("hub {addr}: {e}")))?;
        // A member never blocks in the socket: while the answer is not there it does what
        // every wait of the library does (serves peers, watches the job; `exchange`'s idle).
        stream
            .set_nonblocking(true)
            .map_err(|e| Error::Bootstrap(format!("hub {addr}: {e}")))?;
        Ok(Link {
            stream: Mutex::new(stream),
            addr: addr.to_owned(),
        })
    }

    /// The hub's address.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// A handle that closes this connection from elsewhere ([`Leaver::leave`]): the hub
    /// then takes the member as gone.
    pub(crate) fn leaver(&self) -> Result<Leaver> {
        self.lock()
            .try_clone()
            .map(Leaver)
            .map_err(|e| Error::Bootstrap(format!("hub {}: {e}", self.addr)))
    }

    fn lock(&self) -> MutexGuard<'_, Stream> {
        self.stream.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One collective: sends (sequence number, tag, blocks) and waits for the hub's answer,
    /// calling `idle` while it waits. `personalised`: `blocks[j]` goes to member `j`;
    /// otherwise `blocks` is one block that goes to every member.
    pub(crate) fn exchange(
        &self,
        seq: u64,
        tag: u64,
        personalised: bool,
        blocks: &[&[u8]],
        idle: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Outcome> {
        let mut s = self.lock();
        let frame = encode(COLLECTIVE, &[seq, tag, u64::from(personalised)], blocks);
        write_full(&mut s, &frame, idle)
            .map_err(|e| Error::Bootstrap(format!("hub {}: {e}", self.addr)))?;
        let reply = read_frame(&mut s, idle)?
            .ok_or_else(|| Error::Bootstrap(format!("the hub {} closed", self.addr)))?;
        let bad = || Error::Bootstrap(format!("malformed reply from the hub {}", self.addr));
        if reply.kind != REPLY || reply.words.len() < 2 {
            return Err(bad());
        }
        let tags = reply.words[2..].to_vec();
        match reply.words[0] {
            DONE => Ok(Outcome::Done {
                tags,
                blocks: reply.blocks,
            }),
            MISMATCH => Ok(Outcome::Mismatch { tags }),
            LEFT => Ok(Outcome::Left(reply.words[1] as usize)),
            _ => Err(bad()),
        }
    }
}

/// What an agent hears from the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentNews {
    /// A rank (job rank) exited with status 0 somewhere.
    Exited(usize),
    /// A rank of another node published the collective it is blocked in (its roster word).
    Waiting {
        /// The job rank.
        rank: usize,
        /// Its roster's waiting word (0: not blocked).
        word: u64,
    },
    /// The job is aborted; `report`: because it ran out of time, and waiting ranks say
    /// what they wait for first (`crate::diag`).
    Abort {
        /// Ask the ranks for their hang reports before they are ended.
        report: bool,
    },
}

/// A rank's failure as an agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankFailure {
    /// Job rank.
    pub rank: usize,
    /// Its process id (on its node).
    pub pid: u32,
    /// Killed by a signal (`code` is the signal) rather than exited (`code` is the status).
    pub signalled: bool,
    /// Exit status or signal number.
    pub code: i32,
}

/// A node agent's connection to the hub.
#[derive(Debug)]
pub(crate) struct AgentLink {
    writer: Mutex<Stream>,
    reader: Mutex<Stream>,
}

impl AgentLink {
    /// Connects node `node`'s agent to the hub at `addr`.
    pub(crate) fn connect(addr: &str, node: usize) -> Result<AgentLink> {
        let mut stream = Stream::connect(addr)?;
        stream
            .write_all(&encode(HELLO_AGENT, &[node as u64], &[]))
            .and_then(|()| stream.set_read_timeout(Some(Duration::from_millis(1))))
            .map_err(|e| Error::Bootstrap(format!("hub {addr}: {e}")))?;
        let reader = stream
            .try_clone()
            .map_err(|e| Error::Bootstrap(format!("hub {addr}: {e}")))?;
        Ok(AgentLink {
            writer: Mutex::new(stream),
            reader: Mutex::new(reader),
        })
    }

    /// How long [`AgentLink::news`] waits for a frame before it returns what it has (1 ms
    /// from `connect`: a supervisor's loop does other things between its looks).
    pub(crate) fn set_patience(&self, patience: Duration) -> Result<()> {
        self.reader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_read_timeout(Some(patience))
            .map_err(|e| Error::Bootstrap(format!("hub: {e}")))
    }

    fn send(&self, kind: u64, words: &[u64]) -> Result<()> {
        self.writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(&encode(kind, words, &[]))
            .map_err(|e| Error::Bootstrap(format!("hub: {e}")))
    }

    /// Tells every node that `rank` exited with status 0.
    pub(crate) fn exited(&self, rank: usize) -> Result<()> {
        self.send(EXITED, &[rank as u64])
    }

    /// Tells every node the collective `rank` (of this node) is blocked in (`word`, its
    /// roster word; 0: none any more).
    pub(crate) fn waiting(&self, rank: usize, word: u64) -> Result<()> {
        self.send(WAITING, &[rank as u64, word])
    }

    /// Tells the head that a rank of this node failed (the job goes down).
    pub(crate) fn failed(&self, f: RankFailure) -> Result<()> {
        self.send(
            FAILED,
            &[
                f.rank as u64,
                u64::from(f.pid),
                u64::from(f.signalled),
                f.code as u32 as u64,
            ],
        )
    }

    /// News that arrived since the last call; `Err` when the hub is gone (the head died).
    pub(crate) fn news(&self) -> Result<Vec<AgentNews>> {
        let mut reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        loop {
            // Is a frame coming? The 1 ms read timeout ends the look; once its first byte is
            // there, the whole frame is read (its rest follows at once).
            match reader.peek(&mut [0u8]) {
                Ok(0) => return Err(Error::Bootstrap("the hub closed".into())),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(out)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::Bootstrap(format!("hub connection: {e}"))),
            }
            match read_frame(&mut reader, &mut never_idle) {
                Ok(Some(f)) if f.kind == EXITED && f.words.len() == 1 => {
                    out.push(AgentNews::Exited(f.words[0] as usize))
                }
                Ok(Some(f)) if f.kind == WAITING && f.words.len() == 2 => {
                    out.push(AgentNews::Waiting {
                        rank: f.words[0] as usize,
                        word: f.words[1],
                    })
                }
                Ok(Some(f)) if f.kind == ABORT => out.push(AgentNews::Abort {
                    report: f.words.first() == Some(&1),
                }),
                Ok(Some(_)) => {
                    return Err(Error::Bootstrap("unexpected frame from the hub".into()))
                }
                Ok(None) => return Err(Error::Bootstrap("the hub closed".into())),
                Err(e) => return Err(e),
            }
        }
    }
}

/// A collective that waits for members.
struct Pending {
    arrived: Vec<Option<Arrival>>,
}

struct Arrival {
    tag: u64,
    personalised: bool,
    blocks: Vec<Vec<u8>>,
}

type Writer = Arc<Mutex<Stream>>;

struct Member {
    writer: Writer,
    n: usize,
    open: bool,
}

#[derive(Default)]
struct State {
    pending: HashMap<(u64, u64), Pending>,
    members: HashMap<(u64, u64), Member>,
    agents: Vec<Writer>,
    failure: Option<RankFailure>,
    /// Ranks that exited with status 0, as agents reported them.
    exited: Vec<usize>,
}

/// Replies to send once the state lock is released (a slow reader must not hold the hub).
type Outgoing = Vec<(Writer, Arc<Vec<u8>>)>;

impl State {
    /// Fails collective `key` because member `who` left: every member that arrived hears it.
    fn fail(&mut self, key: (u64, u64), who: usize, out: &mut Outgoing) {
        let Some(p) = self.pending.remove(&key) else {
            return;
        };
        let frame = Arc::new(encode(REPLY, &[LEFT, who as u64], &[]));
        for (i, a) in p.arrived.iter().enumerate() {
            if a.is_some() {
                if let Some(m) = self.members.get(&(key.0, i as u64)) {
                    out.push((Arc::clone(&m.writer), Arc::clone(&frame)));
                }
            }
        }
    }

    /// Completes collective `key`, whose members have all arrived.
    fn complete(&mut self, key: (u64, u64), out: &mut Outgoing) {
        let Some(p) = self.pending.remove(&key) else {
            return;
        };
        let n = p.arrived.len();
        let arrivals: Vec<Arrival> = p.arrived.into_iter().flatten().collect();
        let tags: Vec<u64> = arrivals.iter().map(|a| a.tag).collect();
        let personalised = arrivals[0].personalised;
        let shaped = arrivals.iter().all(|a| {
            a.personalised == personalised && a.blocks.len() == if personalised { n } else { 1 }
        });
        let writer = |i: usize| {
            self.members
                .get(&(key.0, i as u64))
                .map(|m| Arc::clone(&m.writer))
        };
        let mut words = vec![DONE, 0];
        words.extend_from_slice(&tags);
        if !shaped {
            words[0] = MISMATCH;
            let frame = Arc::new(encode(REPLY, &words, &[]));
            out.extend((0..n).filter_map(|i| Some((writer(i)?, Arc::clone(&frame)))));
        } else if personalised {
            for i in 0..n {
                let column: Vec<&[u8]> = arrivals.iter().map(|a| a.blocks[i].as_slice()).collect();
                if let Some(w) = writer(i) {
                    out.push((w, Arc::new(encode(REPLY, &words, &column))));
                }
            }
        } else {
            let all: Vec<&[u8]> = arrivals.iter().map(|a| a.blocks[0].as_slice()).collect();
            let frame = Arc::new(encode(REPLY, &words, &all));
            out.extend((0..n).filter_map(|i| Some((writer(i)?, Arc::clone(&frame)))));
        }
    }

    /// Fails every collective of `comm` that waits for member `index` (which left).
    fn member_left(&mut self, comm: u64, index: u64, out: &mut Outgoing) {
        if let Some(m) = self.members.get_mut(&(comm, index)) {
            m.open = false;
        }
        let waiting: Vec<(u64, u64)> = self
            .pending
            .iter()
            .filter(|(k, p)| {
                k.0 == comm && p.arrived.get(index as usize).is_some_and(Option::is_none)
            })
            .map(|(k, _)| *k)
            .collect();
        for key in waiting {
            self.fail(key, index as usize, out);
        }
    }

    fn arrive(&mut self, comm: u64, index: u64, f: Frame, out: &mut Outgoing) {
        let Some(n) = self.members.get(&(comm, index)).map(|m| m.n) else {
            return;
        };
        if f.words.len() != 3 || index as usize >= n {
            // Malformed: answer it (a member must never wait for nothing).
            if let Some(m) = self.members.get(&(comm, index)) {
                out.push((
                    Arc::clone(&m.writer),
                    Arc::new(encode(REPLY, &[MISMATCH, 0], &[])),
                ));
            }
            return;
        }
        let key = (comm, f.words[0]);
        let p = self.pending.entry(key).or_insert_with(|| Pending {
            arrived: (0..n).map(|_| None).collect(),
        });
        if p.arrived.len() != n || p.arrived[index as usize].is_some() {
            // Members disagree on the size, or a member sent twice: fail it at once.
            let frame = Arc::new(encode(REPLY, &[MISMATCH, 0], &[]));
            if let Some(m) = self.members.get(&(comm, index)) {
                out.push((Arc::clone(&m.writer), frame));
            }
            return;
        }
        p.arrived[index as usize] = Some(Arrival {
            tag: f.words[1],
            personalised: f.words[2] != 0,
            blocks: f.blocks,
        });
        let gone = (0..n).find(|&i| {
            p.arrived[i].is_none() && self.members.get(&(comm, i as u64)).is_some_and(|m| !m.open)
        });
        let p = &self.pending[&key];
        if let Some(who) = gone {
            self.fail(key, who, out);
        } else if p.arrived.iter().all(Option::is_some) {
            self.complete(key, out);
        }
    }

    fn to_agents(&self, kind: u64, words: &[u64], out: &mut Outgoing) {
        let frame = Arc::new(encode(kind, words, &[]));
        out.extend(
            self.agents
                .iter()
                .map(|w| (Arc::clone(w), Arc::clone(&frame))),
        );
    }
}

fn deliver(out: Outgoing) {
    for (w, bytes) in out {
        // A member that is gone cannot be told; its collectives fail through its close.
        let _ = w
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(&bytes);
    }
}

struct Shared {
    state: Mutex<State>,
    closing: AtomicBool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves one connection until it closes.
    fn serve(&self, mut s: Stream) {
        let Ok(Some(hello)) = read_frame(&mut s, &mut never_idle) else {
            return;
        };
        let Ok(writer) = s.try_clone().map(|w| Arc::new(Mutex::new(w))) else {
            return;
        };
        match (hello.kind, hello.words.as_slice()) {
            (HELLO_MEMBER, &[comm, index, n]) => {
                self.state().members.insert(
                    (comm, index),
                    Member {
                        writer,
                        n: n as usize,
                        open: true,
                    },
                );
                while let Ok(Some(f)) = read_frame(&mut s, &mut never_idle) {
                    if f.kind != COLLECTIVE {
                        break;
                    }
                    let mut out = Outgoing::new();
                    self.state().arrive(comm, index, f, &mut out);
                    deliver(out);
                }
                let mut out = Outgoing::new();
                self.state().member_left(comm, index, &mut out);
                deliver(out);
            }
            (HELLO_AGENT, &[_node]) => {
                self.state().agents.push(writer);
                while let Ok(Some(f)) = read_frame(&mut s, &mut never_idle) {
                    let mut out = Outgoing::new();
                    let mut st = self.state();
                    match (f.kind, f.words.as_slice()) {
                        (EXITED, &[rank]) => {
                            st.exited.push(rank as usize);
                            st.to_agents(EXITED, &[rank], &mut out)
                        }
                        (WAITING, &[rank, word]) => st.to_agents(WAITING, &[rank, word], &mut out),
                        (FAILED, &[rank, pid, signalled, code]) => {
                            st.failure.get_or_insert(RankFailure {
                                rank: rank as usize,
                                pid: pid as u32,
                                signalled: signalled != 0,
                                code: code as u32 as i32,
                            });
                            st.to_agents(ABORT, &[], &mut out);
                        }
                        _ => break,
                    }
                    drop(st);
                    deliver(out);
                }
            }
            _ => {}
        }
    }
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// A running hub (the launcher's side). Dropping it stops accepting and removes its socket.
pub struct Hub {
    addr: String,
    socket_dir: Option<PathBuf>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("addr", &self.addr).finish()
    }
}

impl Hub {
    /// Starts a hub on a Unix socket in a new private directory under `dir` (which every
    /// node of the job must see; `/dev/shm` will not do when nodes have their own).
    pub fn start_unix(dir: &std::path::Path, job: &str) -> Result<Hub> {
        let socket_dir = crate::shm::liveness::hub_dir(dir, job);
        std::fs::create_dir(&socket_dir)
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&socket_dir, std::fs::Permissions::from_mode(0o700))
            })
            .map_err(|e| Error::Launch(format!("hub directory {}: {e}", socket_dir.display())))?;
        let path = socket_dir.join("hub");
        let listener = UnixListener::bind(&path)
            .map_err(|e| Error::Launch(format!("hub socket {}: {e}", path.display())))?;
        let addr = format!("unix:{}", path.display());
        Self::serve(Listener::Unix(listener), addr, Some(socket_dir))
    }

    /// Starts a hub listening on `bind` (`HOST:PORT`; port 0 picks one).
    pub fn start_tcp(bind: &str) -> Result<Hub> {
        let listener =
            TcpListener::bind(bind).map_err(|e| Error::Launch(format!("hub at {bind}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Launch(format!("hub at {bind}: {e}")))?;
        Self::serve(Listener::Tcp(listener), format!("tcp:{local}"), None)
    }

    fn serve(listener: Listener, addr: String, socket_dir: Option<PathBuf>) -> Result<Hub> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            closing: AtomicBool::new(false),
        });
        let nonblocking = match &listener {
            Listener::Unix(l) => l.set_nonblocking(true),
            Listener::Tcp(l) => l.set_nonblocking(true),
        };
        nonblocking.map_err(|e| Error::Launch(format!("hub: {e}")))?;
        let serving = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("onesided-hub".into())
            .spawn(move || loop {
                // Relaxed: a stop flag; nothing is published through it.
                if serving.closing.load(Ordering::Relaxed) {
                    return;
                }
                let accepted = match &listener {
                    Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
                    Listener::Tcp(l) => l.accept().map(|(s, _)| {
                        let _ = s.set_nodelay(true);
                        Stream::Tcp(s)
                    }),
                };
                match accepted {
                    Ok(s) => {
                        let unblocked = match &s {
                            Stream::Unix(u) => u.set_nonblocking(false),
                            Stream::Tcp(t) => t.set_nonblocking(false),
                        };
                        if unblocked.is_err() {
                            continue;
                        }
                        let shared = Arc::clone(&serving);
                        let _ = std::thread::Builder::new()
                            .name("onesided-hub-conn".into())
                            .spawn(move || shared.serve(s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            })
            .map_err(|e| Error::Launch(format!("hub thread: {e}")))?;
        Ok(Hub {
            addr,
            socket_dir,
            shared,
        })
    }

    /// The address ranks and agents connect to (the value of [`ENV_HUB`]).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The first rank failure an agent reported.
    pub fn failure(&self) -> Option<RankFailure> {
        self.shared.state().failure
    }

    /// Ranks that exited with status 0, as agents reported them.
    pub fn exited_ranks(&self) -> Vec<usize> {
        self.shared.state().exited.clone()
    }

    /// Tells every agent to abort the job; with `report`, to ask its ranks for their hang
    /// reports first (the job ran out of time).
    pub fn abort(&self, report: bool) {
        let mut out = Outgoing::new();
        self.shared
            .state()
            .to_agents(ABORT, &[u64::from(report)], &mut out);
        deliver(out);
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // Relaxed: see the accept loop.
        self.shared.closing.store(true, Ordering::Relaxed);
        if let Some(dir) = &self.socket_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The id of the communicator that the members of color `color` of a split form, numbered
/// `seq` on its parent `parent`: the same at every member, different for every split.
pub(crate) fn child_comm(parent: u64, seq: u64, color: u32) -> u64 {
    let mut x = parent ^ seq.rotate_left(20) ^ (u64::from(color) << 40) ^ 0x9e37_79b9_7f4a_7c15;
    // splitmix64's finalizer: nearby inputs give unrelated ids.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_members(hub: &Hub, n: usize, body: impl Fn(usize, Link) + Send + Sync + 'static) {
        let body = Arc::new(body);
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (addr, body) = (hub.addr().to_owned(), Arc::clone(&body));
                std::thread::spawn(move || body(i, Link::connect(&addr, 7, i, n).unwrap()))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn gathers_and_personalised_exchanges_over_unix_and_tcp() {
        let dir = std::env::temp_dir();
        let job = crate::shm::segment::random_job_id();
        let socket_dir = crate::shm::liveness::hub_dir(&dir, &job);
        for hub in [
            Hub::start_unix(&dir, &job).unwrap(),
            Hub::start_tcp("127.0.0.1:0").unwrap(),
        ] {
            run_members(&hub, 3, |i, link| {
                for seq in 0..20u64 {
                    let mine = vec![i as u8; i * 1000 + seq as usize];
                    match link
                        .exchange(seq, 5, false, &[&mine], &mut never_idle)
                        .unwrap()
                    {
                        Outcome::Done { tags, blocks } => {
                            assert_eq!(tags, vec![5; 3]);
                            for (j, b) in blocks.iter().enumerate() {
                                assert_eq!(b, &vec![j as u8; j * 1000 + seq as usize]);
                            }
                        }
                        other => panic!("{other:?}"),
                    }
                    let to: Vec<Vec<u8>> =
                        (0..3).map(|j| vec![(10 * i + j) as u8; j + 1]).collect();
                    let refs: Vec<&[u8]> = to.iter().map(Vec::as_slice).collect();
                    match link
                        .exchange(1000 + seq, 6, true, &refs, &mut never_idle)
                        .unwrap()
                    {
                        Outcome::Done { blocks, .. } => {
                            for (j, b) in blocks.iter().enumerate() {
                                assert_eq!(b, &vec![(10 * j + i) as u8; i + 1]);
                            }
                        }
                        other => panic!("{other:?}"),
                    }
                }
            });
        }
        // The Unix hub removed its socket directory when it was dropped.
        assert!(!socket_dir.exists());
    }

    /// A member that drops its connection fails the collectives that wait for it, at the
    /// members already waiting and at those that come later.
    #[test]
    fn a_member_that_leaves_fails_the_collective() {
        let hub = Hub::start_tcp("127.0.0.1:0").unwrap();
        run_members(&hub, 3, |i, link| {
            if i == 2 {
                std::thread::sleep(Duration::from_millis(50));
                drop(link);
                return;
            }
            if i == 1 {
                std::thread::sleep(Duration::from_millis(150));
            }
            // Member 1 comes after member 0 got its answer and left too: either is named.
            match link.exchange(0, 5, false, &[&[]], &mut never_idle).unwrap() {
                Outcome::Left(2) => {}
                Outcome::Left(0) if i == 1 => {}
                other => panic!("member {i}: {other:?}"),
            }
        });
    }

    #[test]
    fn mismatched_shapes_report_the_tags() {
        let hub = Hub::start_tcp("127.0.0.1:0").unwrap();
        run_members(&hub, 2, |i, link| {
            let out = if i == 0 {
                link.exchange(0, 5, false, &[&[1]], &mut never_idle)
            } else {
                link.exchange(0, 9, true, &[&[1], &[2]], &mut never_idle)
            };
            match out.unwrap() {
                Outcome::Mismatch { tags } => assert_eq!(tags, vec![5, 9]),
                other => panic!("{other:?}"),
            }
        });
    }

    #[test]
    fn agents_hear_exits_and_aborts() {
        let hub = Hub::start_tcp("127.0.0.1:0").unwrap();
        let a = AgentLink::connect(hub.addr(), 0).unwrap();
        let b = AgentLink::connect(hub.addr(), 1).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        a.exited(3).unwrap();
        let failure = RankFailure {
            rank: 1,
            pid: 42,
            signalled: true,
            code: 9,
        };
        b.failed(failure).unwrap();
        let mut heard = Vec::new();
        for _ in 0..500 {
            heard.extend(a.news().unwrap());
            if heard.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // Two connections' messages: the hub may relay them in either order.
        assert_eq!(heard.len(), 2, "{heard:?}");
        assert!(
            heard.contains(&AgentNews::Exited(3))
                && heard.contains(&AgentNews::Abort { report: false })
        );
        assert_eq!(hub.failure(), Some(failure));
    }

    #[test]
    fn child_comm_ids_differ() {
        let ids = [
            child_comm(0, 0, 0),
            child_comm(0, 0, 1),
            child_comm(0, 1, 0),
            child_comm(1, 0, 0),
        ];
        for i in 0..ids.len() {
            for j in 0..i {
                assert_ne!(ids[i], ids[j]);
            }
        }
    }
}
