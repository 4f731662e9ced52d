//! The PMIx client of the `pmi` bootstrap: a job started by a PMIx server — Slurm's
//! `srun --mpi=pmix`, Open MPI's `mpirun` (4.x) and `prterun` (5.x) — joined through the
//! system's `libpmix.so.2`, loaded at run time.
//!
//! PMIx has no public wire protocol (unlike PMI-1, which `pmi` speaks itself), so the
//! library is the only way in; it is `dlopen`ed when a process finds itself started by a
//! PMIx server (`PMIX_RANK` and `PMIX_NAMESPACE` set, no `PMI_FD`), never linked: a
//! default build does not need `libpmix-dev`, and a program that is never started by a PMIx
//! server never loads it. `ONESIDED_PMIX_LIB` names another file.
//!
//! Only eight calls are used — `PMIx_Init`, `PMIx_Get`, `PMIx_Put`, `PMIx_Commit`,
//! `PMIx_Fence`, `PMIx_Finalize`, `PMIx_Abort` and `PMIx_Error_string` — and four structures, whose
//! layouts have been part of `libpmix.so.2`'s ABI since PMIx 2 (checked against the
//! installed header in this module's tests): `pmix_proc_t` (a 256-byte namespace and a
//! 32-bit rank), `pmix_value_t` (a 16-bit type and a 24-byte union), `pmix_info_t` (a
//! 512-byte key, 32-bit flags, a value) and the union's string and 32-bit members. The
//! key-value space is the job's: a rank's `put`s are committed and published by the next
//! `barrier` (a fence that collects the data), then read with `get` from the rank that put
//! them.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;

use crate::bootstrap::launcher::{renumber_nodes, Launcher};
use crate::error::{Error, Result};

/// Environment variable with this process's rank, set by every PMIx server.
pub const ENV_PMIX_RANK: &str = "PMIX_RANK";
/// Environment variable with the job's namespace, set by every PMIx server.
pub const ENV_PMIX_NAMESPACE: &str = "PMIX_NAMESPACE";
/// Environment variable naming the PMIx client library to load (default `libpmix.so.2`,
/// found as the dynamic loader finds libraries).
pub const ENV_PMIX_LIB: &str = "ONESIDED_PMIX_LIB";

const DEFAULT_LIB: &str = "libpmix.so.2";

// The few constants of `pmix_common.h` used here.
const PMIX_SUCCESS: c_int = 0;
const PMIX_MAX_NSLEN: usize = 255;
const PMIX_MAX_KEYLEN: usize = 511;
const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;
const PMIX_UINT32: u16 = 14;
/// `PMIX_GLOBAL`: the value reaches processes on every node.
const PMIX_GLOBAL: u8 = 3;
const KEY_JOB_SIZE: &CStr = c"pmix.job.size";
const KEY_NODEID: &CStr = c"pmix.nodeid";
const KEY_HOSTNAME: &CStr = c"pmix.hname";
const KEY_COLLECT_DATA: &CStr = c"pmix.collect";
/// Look only in the client's own store (job data the server gave at init).
const KEY_OPTIONAL: &CStr = c"pmix.optional";
/// Ask the local server, but never wait for data that is not there.
const KEY_IMMEDIATE: &CStr = c"pmix.immediate";

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct PmixProc {
    nspace: [c_char; PMIX_MAX_NSLEN + 1],
    rank: u32,
}

/// `pmix_value_t`: the type, then a union whose largest member (`pmix_envar_t`: two
/// pointers and a char) takes 24 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct PmixValue {
    kind: u16,
    data: [u64; 3],
}

/// `pmix_info_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct PmixInfo {
    key: [c_char; PMIX_MAX_KEYLEN + 1],
    flags: u32,
    value: PmixValue,
}

impl PmixInfo {
    /// A boolean directive `key` = true.
    fn flag(key: &CStr) -> PmixInfo {
        let mut info = PmixInfo {
            key: [0; PMIX_MAX_KEYLEN + 1],
            flags: 0,
            value: PmixValue {
                kind: PMIX_BOOL,
                data: [0; 3],
            },
        };
        for (d, s) in info.key.iter_mut().zip(key.to_bytes()) {
            *d = *s as c_char;
        }
        // `bool flag` is the union's first byte.
        info.value.data[0] = 1;
        info
    }
}

type InitFn = unsafe extern "C" fn(*mut PmixProc, *mut PmixInfo, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const PmixInfo, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut PmixValue) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const PmixProc, usize, *const PmixInfo, usize) -> c_int;
type GetFn = unsafe extern "C" fn(
    *const PmixProc,
    *const c_char,
    *const PmixInfo,
    usize,
    *mut *mut PmixValue,
) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type AbortFn = unsafe extern "C" fn(c_int, *const c_char, *mut PmixProc, usize) -> c_int;

/// The library's entry points.
struct Api {
    init: InitFn,
    finalize: FinalizeFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    error_string: ErrorStringFn,
    abort: AbortFn,
}

fn pmix_error(what: impl fmt::Display) -> Error {
    Error::Bootstrap(format!("PMIx: {what}"))
}

impl Api {
    /// Loads the client library (`ONESIDED_PMIX_LIB`, else `libpmix.so.2`).
    fn load() -> Result<Api> {
        let file = std::env::var(ENV_PMIX_LIB).unwrap_or_else(|_| DEFAULT_LIB.to_owned());
        Self::open(&file)
    }

    /// Loads the client library `file`.
    fn open(file: &str) -> Result<Api> {
        let name = CString::new(file)
            .map_err(|_| pmix_error(format!("{ENV_PMIX_LIB}={file:?} is not a file name")))?;
        // SAFETY: dlopen of a NUL-terminated name. RTLD_GLOBAL: the library loads plugins
        // of its own that resolve its symbols through the global scope.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            // SAFETY: dlerror returns NULL or a NUL-terminated message of the loader.
            let why = unsafe {
                let e = libc::dlerror();
                if e.is_null() {
                    "unknown error".to_owned()
                } else {
                    CStr::from_ptr(e).to_string_lossy().into_owned()
                }
            };
            return Err(pmix_error(format!(
                "this process was started by a PMIx server, and its client library {file} \
                 cannot be loaded ({why}): install it (Debian: libpmix2), name it in \
                 {ENV_PMIX_LIB}, or start the job with `srun --mpi=pmi2` or MPICH's \
                 `mpiexec.hydra`"
            )));
        }
        let symbol = |s: &CStr| -> Result<*mut c_void> {
            // SAFETY: dlsym on a handle dlopen returned, with a NUL-terminated name.
            let p = unsafe { libc::dlsym(handle, s.as_ptr()) };
            if p.is_null() {
                Err(pmix_error(format!(
                    "{file} has no {} (not a PMIx client library?)",
                    s.to_string_lossy()
                )))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is the PMIx standard's function of that name, whose C
        // signature the function pointer type spells (pmix.h, PMIx 2 to 5).
        unsafe {
            Ok(Api {
                init: std::mem::transmute::<*mut c_void, InitFn>(symbol(c"PMIx_Init")?),
                finalize: std::mem::transmute::<*mut c_void, FinalizeFn>(symbol(c"PMIx_Finalize")?),
                put: std::mem::transmute::<*mut c_void, PutFn>(symbol(c"PMIx_Put")?),
                commit: std::mem::transmute::<*mut c_void, CommitFn>(symbol(c"PMIx_Commit")?),
                fence: std::mem::transmute::<*mut c_void, FenceFn>(symbol(c"PMIx_Fence")?),
                get: std::mem::transmute::<*mut c_void, GetFn>(symbol(c"PMIx_Get")?),
                error_string: std::mem::transmute::<*mut c_void, ErrorStringFn>(symbol(
                    c"PMIx_Error_string",
                )?),
                abort: std::mem::transmute::<*mut c_void, AbortFn>(symbol(c"PMIx_Abort")?),
            })
        }
    }

    /// The library's words for `status`.
    fn describe(&self, status: c_int) -> String {
        // SAFETY: PMIx_Error_string returns a static NUL-terminated string for any status.
        unsafe {
            let s = (self.error_string)(status);
            if s.is_null() {
                format!("status {status}")
            } else {
                format!("{} ({status})", CStr::from_ptr(s).to_string_lossy())
            }
        }
    }

    fn check(&self, status: c_int, what: &str) -> Result<()> {
        if status == PMIX_SUCCESS {
            Ok(())
        } else {
            Err(pmix_error(format!(
                "{what} failed: {}",
                self.describe(status)
            )))
        }
    }
}

/// One connection to the job's PMIx server.
pub(crate) struct Pmix {
    api: Api,
    me: PmixProc,
    size: usize,
}

impl fmt::Debug for Pmix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pmix")
            .field("rank", &self.me.rank)
            .field("size", &self.size)
            .finish()
    }
}

/// What a `get` found.
enum Found {
    Text(String),
    Number(u32),
    /// Another type (not one onesided puts or reads).
    Other(u16),
}

/// True when this process was started by a PMIx server (one that also offers PMI-1 passes
/// `PMI_FD`, which `universe::init` looks for first).
pub(crate) fn launched() -> bool {
    std::env::var_os(ENV_PMIX_RANK).is_some() && std::env::var_os(ENV_PMIX_NAMESPACE).is_some()
}

impl Pmix {
    /// Loads the client library and connects to the server that started this process.
    pub(crate) fn connect() -> Result<Pmix> {
        let api = Api::load()?;
        let mut me = PmixProc {
            nspace: [0; PMIX_MAX_NSLEN + 1],
            rank: 0,
        };
        // SAFETY: `me` is a writable pmix_proc_t; no directives.
        let rc = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
        api.check(rc, "PMIx_Init")?;
        let mut pmix = Pmix { api, me, size: 0 };
        let job = pmix.proc_of(PMIX_RANK_WILDCARD);
        pmix.size = match pmix.fetch(&job, KEY_JOB_SIZE, KEY_OPTIONAL)? {
            Some(Found::Number(n)) if n > 0 => n as usize,
            _ => {
                return Err(pmix_error(
                    "the server does not say the job's size (pmix.job.size)",
                ))
            }
        };
        if pmix.me.rank as usize >= pmix.size {
            return Err(pmix_error(format!(
                "rank {} of a job of {}",
                pmix.me.rank, pmix.size
            )));
        }
        Ok(pmix)
    }

    fn proc_of(&self, rank: u32) -> PmixProc {
        PmixProc {
            nspace: self.me.nspace,
            rank,
        }
    }

    /// `PMIx_Get` of `key` at `proc` with one boolean directive; `None` when the server
    /// has no such value.
    fn fetch(&self, proc: &PmixProc, key: &CStr, directive: &CStr) -> Result<Option<Found>> {
        let info = PmixInfo::flag(directive);
        let mut value: *mut PmixValue = std::ptr::null_mut();
        // SAFETY: valid proc, NUL-terminated key, one info; the library allocates `value`.
        let rc = unsafe { (self.api.get)(proc, key.as_ptr(), &info, 1, &mut value) };
        if rc != PMIX_SUCCESS || value.is_null() {
            return Ok(None);
        }
        // SAFETY: a pmix_value_t the library allocated with malloc; its string (when the
        // type says so) too. Both are read, then freed here (PMIX_VALUE_RELEASE).
        let found = unsafe {
            let v = *value;
            let found = match v.kind {
                PMIX_STRING => {
                    let s = v.data[0] as *mut c_char;
                    let text = if s.is_null() {
                        String::new()
                    } else {
                        let t = CStr::from_ptr(s).to_string_lossy().into_owned();
                        libc::free(s.cast());
                        t
                    };
                    Found::Text(text)
                }
                // The union's first four bytes (little-endian or not: the same bytes).
                PMIX_UINT32 => Found::Number(u32::from_ne_bytes(
                    v.data[0].to_ne_bytes()[..4].try_into().expect("four bytes"),
                )),
                other => Found::Other(other),
            };
            libc::free(value.cast());
            found
        };
        Ok(Some(found))
    }
}

impl Launcher for Pmix {
    fn name(&self) -> &'static str {
        "PMIx"
    }

    fn rank(&self) -> usize {
        self.me.rank as usize
    }

    fn size(&self) -> usize {
        self.size
    }

    /// The node of each rank as the server names it: its node id (`pmix.nodeid`; Open
    /// MPI's servers give it for every rank), else its host (`pmix.hname`; Slurm's give the
    /// node id for the local ranks only, the host for all), renumbered in the order of the
    /// nodes' lowest ranks; `None` when the server gives neither for every rank.
    fn node_map(&mut self) -> Result<Option<Vec<usize>>> {
        for key in [KEY_NODEID, KEY_HOSTNAME] {
            let mut names = Vec::with_capacity(self.size);
            for r in 0..self.size {
                let proc = self.proc_of(r as u32);
                match self.fetch(&proc, key, KEY_OPTIONAL)? {
                    Some(Found::Number(id)) => names.push(id.to_string()),
                    Some(Found::Text(host)) => names.push(host),
                    _ => break,
                }
            }
            if names.len() == self.size {
                return Ok(Some(renumber_nodes(&names)));
            }
        }
        Ok(None)
    }

    fn put(&mut self, key: &str, value: &str) -> Result<()> {
        let k = CString::new(key).map_err(|_| pmix_error(format!("key {key:?}")))?;
        let v = CString::new(value).map_err(|_| pmix_error(format!("value {value:?}")))?;
        let mut val = PmixValue {
            kind: PMIX_STRING,
            data: [v.as_ptr() as u64, 0, 0],
        };
        // SAFETY: a string value pointing at `v`, which the library copies before it
        // returns.
        let rc = unsafe { (self.api.put)(PMIX_GLOBAL, k.as_ptr(), &mut val) };
        self.api.check(rc, &format!("PMIx_Put of {key}"))
    }

    fn get(&mut self, owner: usize, key: &str) -> Result<Option<String>> {
        let k = CString::new(key).map_err(|_| pmix_error(format!("key {key:?}")))?;
        let proc = self.proc_of(owner as u32);
        match self.fetch(&proc, &k, KEY_IMMEDIATE)? {
            Some(Found::Text(t)) => Ok(Some(t)),
            Some(Found::Number(n)) => Ok(Some(n.to_string())),
            Some(Found::Other(t)) => Err(pmix_error(format!(
                "{key} of rank {owner} has PMIx type {t}, not a string"
            ))),
            None => Ok(None),
        }
    }

    /// Publishes this rank's puts (`PMIx_Commit`) and waits for every rank of the job in
    /// a fence that collects them all.
    fn barrier(&mut self) -> Result<()> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.api.commit)() };
        self.api.check(rc, "PMIx_Commit")?;
        let all = self.proc_of(PMIX_RANK_WILDCARD);
        let collect = PmixInfo::flag(KEY_COLLECT_DATA);
        // SAFETY: one proc (the whole namespace), one info.
        let rc = unsafe { (self.api.fence)(&all, 1, &collect, 1) };
        self.api.check(rc, "PMIx_Fence")
    }

    /// `PMIx_Abort` of the whole namespace (a null array of processes).
    fn abort(&mut self, status: i32, why: &str) {
        let msg = CString::new(why).unwrap_or_default();
        // SAFETY: a NUL-terminated message; no process array (the caller's namespace).
        let _ = unsafe { (self.api.abort)(status, msg.as_ptr(), std::ptr::null_mut(), 0) };
    }

    fn finalize(&mut self) -> Result<()> {
        // SAFETY: no directives; the library was initialized in `connect` (called once, at
        // a clean exit).
        let rc = unsafe { (self.api.finalize)(std::ptr::null(), 0) };
        self.api.check(rc, "PMIx_Finalize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// The installed header's include directory, if `libpmix-dev` is there.
    fn header_dir() -> Option<String> {
        let out = Command::new("pkg-config")
            .args(["--cflags-only-I", "pmix"])
            .output()
            .ok()?;
        let dirs = String::from_utf8_lossy(&out.stdout);
        let mut candidates: Vec<String> = dirs
            .split_whitespace()
            .filter_map(|d| d.strip_prefix("-I").map(str::to_owned))
            .collect();
        candidates.push("/usr/lib/x86_64-linux-gnu/pmix2/include".into());
        candidates.push("/usr/include".into());
        candidates
            .into_iter()
            .find(|d| std::path::Path::new(d).join("pmix_common.h").exists())
    }

    /// The layouts above against `pmix_common.h`, compiled by the system's C compiler.
    /// CI installs `libpmix-dev` (scripts/slurm.sh); elsewhere without it the test says so.
    #[test]
    fn layouts_match_the_installed_header() {
        let Some(dir) = header_dir() else {
            eprintln!("pmix_common.h not installed (apt-get install libpmix-dev): not checked");
            return;
        };
        let scratch = std::env::temp_dir().join(format!("pmix-layout-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        let src = scratch.join("layout.c");
        std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <stddef.h>
#include <pmix_common.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %zu %zu %d %d %d %d %d %u\n",
        sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank),
        sizeof(pmix_value_t), offsetof(pmix_value_t, data),
        sizeof(pmix_info_t), offsetof(pmix_info_t, flags), offsetof(pmix_info_t, value),
        (size_t)PMIX_MAX_KEYLEN, PMIX_BOOL, PMIX_STRING, PMIX_UINT32, PMIX_GLOBAL,
        PMIX_SUCCESS, (unsigned)PMIX_RANK_WILDCARD);
    return 0;
}
"#,
        )
        .unwrap();
        let exe = scratch.join("layout");
        let cc = Command::new("cc")
            .arg(format!("-I{dir}"))
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("a C compiler (cc)");
        assert!(cc.status.success(), "{cc:?}");
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&scratch);
        let got = String::from_utf8_lossy(&out.stdout);
        let want = format!(
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            std::mem::size_of::<PmixProc>(),
            std::mem::offset_of!(PmixProc, rank),
            std::mem::size_of::<PmixValue>(),
            std::mem::offset_of!(PmixValue, data),
            std::mem::size_of::<PmixInfo>(),
            std::mem::offset_of!(PmixInfo, flags),
            std::mem::offset_of!(PmixInfo, value),
            PMIX_MAX_KEYLEN,
            PMIX_BOOL,
            PMIX_STRING,
            PMIX_UINT32,
            PMIX_GLOBAL,
            PMIX_SUCCESS,
            PMIX_RANK_WILDCARD,
        );
        assert_eq!(got.trim(), want);
    }

    #[test]
    fn a_flag_directive_names_its_key_and_is_true() {
        let info = PmixInfo::flag(KEY_COLLECT_DATA);
        let key: Vec<u8> = info
            .key
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        assert_eq!(key, b"pmix.collect");
        assert_eq!(info.value.kind, PMIX_BOOL);
        assert_eq!(info.value.data[0] & 0xff, 1);
    }

    #[test]
    fn a_missing_library_is_an_error_that_says_what_to_do() {
        let err = Api::open("/nonexistent/libpmix.so.2")
            .err()
            .expect("no such library");
        let msg = err.to_string();
        assert!(
            msg.contains("cannot be loaded") && msg.contains("--mpi=pmi2"),
            "{msg}"
        );
    }
}
