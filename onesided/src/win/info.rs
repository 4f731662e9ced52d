//! Window info keys ("Window Creation" in [MPI-4.1]) and the hints they set.
//!
//! [`WinInfo`] is the MPI-style string map (what a C binding passes through); [`WinHints`] is
//! its validated, typed form. Unknown keys are kept in the `WinInfo` and ignored, as MPI
//! requires; a known key with an invalid value is an error.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::{Error, Result};
use crate::progress::Reorder;

/// Key names of the predefined hints.
pub mod keys {
    /// `no_locks` (boolean): passive-target synchronization is not used.
    pub const NO_LOCKS: &str = "no_locks";
    /// `accumulate_ordering`: `none` or a comma list of `rar`, `raw`, `war`, `waw`.
    pub const ACCUMULATE_ORDERING: &str = "accumulate_ordering";
    /// `accumulate_ops`: `same_op` or `same_op_no_op`.
    pub const ACCUMULATE_OPS: &str = "accumulate_ops";
    /// `mpi_accumulate_granularity` (non-negative integer, bytes).
    pub const ACCUMULATE_GRANULARITY: &str = "mpi_accumulate_granularity";
    /// `same_size` (boolean): every process passes the same size.
    pub const SAME_SIZE: &str = "same_size";
    /// `same_disp_unit` (boolean): every process passes the same displacement unit.
    pub const SAME_DISP_UNIT: &str = "same_disp_unit";
    /// `mpi_assert_memory_alloc_kinds`: memory kinds the process will use.
    pub const MEMORY_ALLOC_KINDS: &str = "mpi_assert_memory_alloc_kinds";
    /// `alloc_shared_noncontig` (boolean, allocate_shared): ranks' memory need not be
    /// contiguous.
    pub const ALLOC_SHARED_NONCONTIG: &str = "alloc_shared_noncontig";
    /// `onesided_max_attached_regions` (positive integer, dynamic windows): capacity of each
    /// process's table of attached regions (default 1024, or `ONESIDED_MAX_ATTACHED_REGIONS`).
    pub const MAX_ATTACHED_REGIONS: &str = "onesided_max_attached_regions";
    /// `onesided_target_service` (boolean, `create` windows, default true): origins may
    /// hand small operations on memory reached by cross-memory attach to a target that
    /// waits inside the library (request rings), and a waiting process with a core of its
    /// own keeps polling for them. `false`: every such operation is the origin's own system
    /// call, and waits may sleep. Every process must pass the same value.
    pub const TARGET_SERVICE: &str = "onesided_target_service";
    /// `onesided_share_in_place` (`create` windows on one node and the regions
    /// [`crate::RawWindow::attach`] attaches to dynamic ones; `false`, `whole_pages` or
    /// `true`; default `false`): the pages holding this process's window memory move into
    /// shared memory for the window's life (same addresses, contents kept; private again
    /// after the free), so that peers reach them with loads, stores and CPU atomics instead
    /// of cross-memory attach. `whole_pages`: only when the memory is whole pages.
    /// `true`: also the pages it shares with other data, which requires that no other
    /// thread of the process writes those pages during the window's creation and free (so
    /// it applies only to [`crate::RawWindow::create`], whose caller promises it; the MPI C
    /// ABI sets it under `MPI_THREAD_SINGLE`). Memory other than private anonymous, heap or
    /// private file mappings, and the calling thread's stack, stay reached as before.
    /// Each process decides for its own memory.
    pub const SHARE_IN_PLACE: &str = "onesided_share_in_place";
    /// `MPI_WIN_ACCESS_AFTER_ACCESS_REORDER` ("1"/"0", \[Zounmevo14\] §VI-B): see
    /// [`crate::Reorder`].
    pub const ACCESS_AFTER_ACCESS_REORDER: &str = "MPI_WIN_ACCESS_AFTER_ACCESS_REORDER";
    /// `MPI_WIN_ACCESS_AFTER_EXPOSURE_REORDER` ("1"/"0").
    pub const ACCESS_AFTER_EXPOSURE_REORDER: &str = "MPI_WIN_ACCESS_AFTER_EXPOSURE_REORDER";
    /// `MPI_WIN_EXPOSURE_AFTER_EXPOSURE_REORDER` ("1"/"0").
    pub const EXPOSURE_AFTER_EXPOSURE_REORDER: &str = "MPI_WIN_EXPOSURE_AFTER_EXPOSURE_REORDER";
    /// `MPI_WIN_EXPOSURE_AFTER_ACCESS_REORDER` ("1"/"0").
    pub const EXPOSURE_AFTER_ACCESS_REORDER: &str = "MPI_WIN_EXPOSURE_AFTER_ACCESS_REORDER";
    /// `mpi_win_scope` (`process` or `thread`, seed 000 §2.1): which operations a flush
    /// completes; see [`crate::WinScope`].
    pub const SCOPE: &str = "mpi_win_scope";
    /// `mpi_win_order` (boolean, seed 000 §2.2): operations to one target complete at the
    /// target in issue order.
    pub const ORDER: &str = "mpi_win_order";
    /// `mpi_assert_accumulate_intrinsic` (boolean, seed 000 §2.3): only accumulates done by
    /// the origin's CPU atomics will be issued (see [`crate::Window::op_intrinsic`]).
    pub const ASSERT_ACCUMULATE_INTRINSIC: &str = "mpi_assert_accumulate_intrinsic";
}

/// Which operations a flush completes (`mpi_win_scope`, seed 000 §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WinScope {
    /// Every operation the process issued (MPI's flush; the default).
    #[default]
    Process,
    /// Only the operations the calling thread issued: a flush never waits for (or writes)
    /// another thread's operations. Synchronizations that end epochs (unlock, fence,
    /// complete) still complete every operation of the process.
    Thread,
}

impl fmt::Display for WinScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WinScope::Process => "process",
            WinScope::Thread => "thread",
        })
    }
}

/// Default capacity of a process's dynamic-region table (unless
/// [`MAX_ATTACHED_REGIONS_ENV`] says otherwise).
// 1024: the MPI-3 linked-list example attaches one region per element (MPICH's
// `linked_list_bench_*` 500 a process at 2 ranks, `window_attach` 1000), and 256 refused them.
// 56 KiB of control block a process; blocks stay in the control heap up to 17 processes a node.
pub const DEFAULT_MAX_ATTACHED_REGIONS: usize = 1024;

/// Environment variable: the capacity of the dynamic-region table of every window that does
/// not set `onesided_max_attached_regions` (a positive integer) — for programs that attach
/// more regions than the default and cannot pass the info key, such as an unchanged MPI
/// program under the C ABI.
pub const MAX_ATTACHED_REGIONS_ENV: &str = "ONESIDED_MAX_ATTACHED_REGIONS";

/// The table capacity [`MAX_ATTACHED_REGIONS_ENV`] asks for: `None` when unset or empty,
/// an error when it is not a positive integer.
fn max_attached_regions_from_env() -> Result<Option<usize>> {
    let Some(value) = std::env::var_os(MAX_ATTACHED_REGIONS_ENV) else {
        return Ok(None);
    };
    let value = value.to_string_lossy();
    if value.trim().is_empty() {
        return Ok(None);
    }
    match value.trim().parse::<usize>() {
        Ok(v) if v > 0 => Ok(Some(v)),
        _ => Err(Error::InvalidArgument(format!(
            "{MAX_ATTACHED_REGIONS_ENV}={value}: a positive integer (the capacity of each \
             process's table of attached regions)"
        ))),
    }
}

/// Info object of a window: MPI string key/value pairs, plus typed setters for the keys
/// onesided understands.
///
/// ```
/// use onesided::{WinInfo, AccumulateOps};
/// let info = WinInfo::new()
///     .same_size(true)
///     .accumulate_ops(AccumulateOps::SameOp)
///     .with("vendor_specific_key", "kept but ignored");
/// assert_eq!(info.get("same_size"), Some("true"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WinInfo {
    entries: BTreeMap<String, String>,
}

impl WinInfo {
    /// An empty info object (MPI_INFO_NULL).
    pub fn new() -> Self {
        WinInfo::default()
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.entries.insert(key.into(), value.into());
        self
    }

    /// Builder form of [`WinInfo::set`].
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.set(key, value);
        self
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.entries.remove(key)
    }

    /// All pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets `no_locks`.
    pub fn no_locks(self, on: bool) -> Self {
        self.with(keys::NO_LOCKS, bool_str(on))
    }

    /// Sets `accumulate_ordering`.
    pub fn accumulate_ordering(self, ordering: AccumulateOrdering) -> Self {
        self.with(keys::ACCUMULATE_ORDERING, ordering.to_string())
    }

    /// Sets `accumulate_ops`.
    pub fn accumulate_ops(self, ops: AccumulateOps) -> Self {
        self.with(keys::ACCUMULATE_OPS, ops.to_string())
    }

    /// Sets `mpi_accumulate_granularity` (bytes; 0 lets the implementation choose).
    pub fn accumulate_granularity(self, bytes: usize) -> Self {
        self.with(keys::ACCUMULATE_GRANULARITY, bytes.to_string())
    }

    /// Sets `same_size`.
    pub fn same_size(self, on: bool) -> Self {
        self.with(keys::SAME_SIZE, bool_str(on))
    }

    /// Sets `same_disp_unit`.
    pub fn same_disp_unit(self, on: bool) -> Self {
        self.with(keys::SAME_DISP_UNIT, bool_str(on))
    }

    /// Sets `mpi_assert_memory_alloc_kinds` (e.g. `"system,mpi:alloc_mem"`).
    pub fn memory_alloc_kinds(self, kinds: &str) -> Self {
        self.with(keys::MEMORY_ALLOC_KINDS, kinds)
    }

    /// Sets `mpi_win_scope`.
    pub fn scope(self, scope: WinScope) -> Self {
        self.with(keys::SCOPE, scope.to_string())
    }

    /// Sets `mpi_win_order`.
    pub fn order(self, on: bool) -> Self {
        self.with(keys::ORDER, bool_str(on))
    }

    /// Sets `mpi_assert_accumulate_intrinsic`.
    pub fn accumulate_intrinsic(self, on: bool) -> Self {
        self.with(keys::ASSERT_ACCUMULATE_INTRINSIC, bool_str(on))
    }

    /// Sets `onesided_target_service`.
    pub fn target_service(self, on: bool) -> Self {
        self.with(keys::TARGET_SERVICE, bool_str(on))
    }

    /// Sets the four reorder keys (`MPI_WIN_*_REORDER`, "1" or "0") from `flags`.
    pub fn reorder(self, flags: Reorder) -> Self {
        let bit = |on: bool| if on { "1" } else { "0" };
        self.with(
            keys::ACCESS_AFTER_ACCESS_REORDER,
            bit(flags.access_after_access),
        )
        .with(
            keys::ACCESS_AFTER_EXPOSURE_REORDER,
            bit(flags.access_after_exposure),
        )
        .with(
            keys::EXPOSURE_AFTER_EXPOSURE_REORDER,
            bit(flags.exposure_after_exposure),
        )
        .with(
            keys::EXPOSURE_AFTER_ACCESS_REORDER,
            bit(flags.exposure_after_access),
        )
    }
}

fn bool_str(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// Which orderings of accumulate operations to the same target location are guaranteed
/// (`accumulate_ordering`): read-after-read, read-after-write, write-after-read,
/// write-after-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AccumulateOrdering(u8);

impl AccumulateOrdering {
    /// No ordering (`none`).
    pub const NONE: Self = AccumulateOrdering(0);
    /// Read after read.
    pub const RAR: Self = AccumulateOrdering(1);
    /// Read after write.
    pub const RAW: Self = AccumulateOrdering(2);
    /// Write after read.
    pub const WAR: Self = AccumulateOrdering(4);
    /// Write after write.
    pub const WAW: Self = AccumulateOrdering(8);
    /// The MPI default: all four.
    pub const ALL: Self = AccumulateOrdering(15);

    /// True when every ordering in `other` is guaranteed.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    fn parse(value: &str) -> std::result::Result<Self, String> {
        let v = value.trim();
        if v.eq_ignore_ascii_case("none") {
            return Ok(Self::NONE);
        }
        let mut bits = 0;
        for part in v.split(',') {
            bits |= match part.trim().to_ascii_lowercase().as_str() {
                "rar" => Self::RAR.0,
                "raw" => Self::RAW.0,
                "war" => Self::WAR.0,
                "waw" => Self::WAW.0,
                other => {
                    return Err(format!(
                        "{other:?} is not one of rar, raw, war, waw (or the single word none)"
                    ))
                }
            };
        }
        Ok(AccumulateOrdering(bits))
    }
}

impl std::ops::BitOr for AccumulateOrdering {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        AccumulateOrdering(self.0 | rhs.0)
    }
}

impl fmt::Display for AccumulateOrdering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        let names = [
            (Self::RAR, "rar"),
            (Self::RAW, "raw"),
            (Self::WAR, "war"),
            (Self::WAW, "waw"),
        ];
        let parts: Vec<&str> = names
            .iter()
            .filter(|(b, _)| self.contains(*b))
            .map(|(_, n)| *n)
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Which operations concurrent accumulates to one location use (`accumulate_ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccumulateOps {
    /// All use the same operation.
    SameOp,
    /// All use the same operation or `no_op` (the MPI default).
    SameOpNoOp,
}

impl fmt::Display for AccumulateOps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccumulateOps::SameOp => "same_op",
            AccumulateOps::SameOpNoOp => "same_op_no_op",
        })
    }
}

/// One entry of `mpi_assert_memory_alloc_kinds`: a kind and its restrictors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemoryAllocKind {
    /// Kind name (`system`, `mpi`, or an implementation-defined kind).
    pub kind: String,
    /// Restrictors (`alloc_mem`, `win_allocate`, `win_allocate_shared` for `mpi`).
    pub restrictors: Vec<String>,
}

fn parse_alloc_kinds(value: &str) -> std::result::Result<Vec<MemoryAllocKind>, String> {
    let ident =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let mut kinds = Vec::new();
    for entry in value.split(',') {
        let mut parts = entry.trim().split(':');
        let kind = parts.next().unwrap_or_default().to_ascii_lowercase();
        if !ident(&kind) {
            return Err(format!("{entry:?} is not of the form kind[:restrictor...]"));
        }
        let restrictors: Vec<String> = parts.map(|r| r.trim().to_ascii_lowercase()).collect();
        if let Some(r) = restrictors.iter().find(|r| !ident(r)) {
            return Err(format!("restrictor {r:?} of kind {kind} is not a name"));
        }
        match kind.as_str() {
            "system" if !restrictors.is_empty() => {
                return Err("kind system takes no restrictors".into())
            }
            "mpi" => {
                if let Some(r) = restrictors.iter().find(|r| {
                    !matches!(
                        r.as_str(),
                        "alloc_mem" | "win_allocate" | "win_allocate_shared"
                    )
                }) {
                    return Err(format!(
                        "kind mpi: restrictor {r:?} is not alloc_mem, win_allocate or win_allocate_shared"
                    ));
                }
            }
            _ => {}
        }
        kinds.push(MemoryAllocKind { kind, restrictors });
    }
    Ok(kinds)
}

/// The hints in effect for a window: the typed, validated form of its info keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WinHints {
    /// `no_locks`: lock/lock_all are not allowed.
    pub no_locks: bool,
    /// `accumulate_ordering`.
    pub accumulate_ordering: AccumulateOrdering,
    /// `accumulate_ops`.
    pub accumulate_ops: AccumulateOps,
    /// `mpi_accumulate_granularity` in bytes (0 = implementation's choice).
    pub accumulate_granularity: usize,
    /// `same_size`.
    pub same_size: bool,
    /// `same_disp_unit`.
    pub same_disp_unit: bool,
    /// `mpi_assert_memory_alloc_kinds`, if set.
    pub memory_alloc_kinds: Option<Vec<MemoryAllocKind>>,
    /// `alloc_shared_noncontig`.
    pub alloc_shared_noncontig: bool,
    /// `onesided_max_attached_regions`.
    pub max_attached_regions: usize,
    /// The four `MPI_WIN_*_REORDER` keys.
    pub reorder: Reorder,
    /// `mpi_win_scope` (per window handle: duplicates may differ).
    pub scope: WinScope,
    /// `mpi_win_order` (per window handle).
    pub order: bool,
    /// `mpi_assert_accumulate_intrinsic` (per window handle).
    pub accumulate_intrinsic: bool,
    /// `onesided_target_service` (`create` windows).
    pub target_service: bool,
    /// `onesided_share_in_place` (`create` windows).
    pub share_in_place: ShareInPlace,
}

/// The values of `onesided_share_in_place` (see [`keys::SHARE_IN_PLACE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareInPlace {
    /// `false`: the memory stays where it is; peers reach it by cross-memory attach.
    Off,
    /// `whole_pages`: shared when it is made of whole pages.
    WholePages,
    /// `true`: the pages holding it are shared, other data on them included.
    Pages,
}

impl ShareInPlace {
    fn as_str(self) -> &'static str {
        match self {
            ShareInPlace::Off => "false",
            ShareInPlace::WholePages => "whole_pages",
            ShareInPlace::Pages => "true",
        }
    }
}

impl Default for WinHints {
    fn default() -> Self {
        WinHints {
            no_locks: false,
            accumulate_ordering: AccumulateOrdering::ALL,
            accumulate_ops: AccumulateOps::SameOpNoOp,
            accumulate_granularity: 0,
            same_size: false,
            same_disp_unit: false,
            memory_alloc_kinds: None,
            alloc_shared_noncontig: false,
            max_attached_regions: DEFAULT_MAX_ATTACHED_REGIONS,
            reorder: Reorder::NONE,
            scope: WinScope::Process,
            order: false,
            accumulate_intrinsic: false,
            target_service: true,
            share_in_place: ShareInPlace::Off,
        }
    }
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> Error {
    Error::InvalidInfo {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, value, "expected true or false")),
    }
}

/// The reorder keys take "1"/"0" ([Zounmevo14]); "true"/"false" are accepted too.
fn parse_flag(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(invalid(key, value, "expected 1 or 0")),
    }
}

fn parse_count(key: &str, value: &str) -> Result<usize> {
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| invalid(key, value, "expected a non-negative integer"))
}

impl WinHints {
    /// Validated hints from `info`; unknown keys are ignored.
    pub(crate) fn parse(info: &WinInfo) -> Result<WinHints> {
        let mut h = WinHints::default();
        if let Some(cap) = max_attached_regions_from_env()? {
            h.max_attached_regions = cap;
        }
        h.update(info, true)?;
        Ok(h)
    }

    /// Applies the keys of `info`. Keys that only make sense at creation time are applied
    /// only when `at_creation` (MPI lets `set_info` ignore hints it cannot change).
    pub(crate) fn update(&mut self, info: &WinInfo, at_creation: bool) -> Result<()> {
        let mut next = self.clone();
        for (key, value) in info.iter() {
            match key {
                keys::NO_LOCKS => next.no_locks = parse_bool(key, value)?,
                keys::ACCUMULATE_ORDERING => {
                    next.accumulate_ordering =
                        AccumulateOrdering::parse(value).map_err(|r| invalid(key, value, r))?
                }
                keys::ACCUMULATE_OPS => {
                    next.accumulate_ops = match value.trim().to_ascii_lowercase().as_str() {
                        "same_op" => AccumulateOps::SameOp,
                        "same_op_no_op" => AccumulateOps::SameOpNoOp,
                        _ => return Err(invalid(key, value, "expected same_op or same_op_no_op")),
                    }
                }
                keys::ACCUMULATE_GRANULARITY => {
                    next.accumulate_granularity = parse_count(key, value)?
                }
                keys::SAME_SIZE => {
                    let v = parse_bool(key, value)?;
                    if at_creation {
                        next.same_size = v;
                    }
                }
                keys::SAME_DISP_UNIT => {
                    let v = parse_bool(key, value)?;
                    if at_creation {
                        next.same_disp_unit = v;
                    }
                }
                keys::MEMORY_ALLOC_KINDS => {
                    let v = parse_alloc_kinds(value).map_err(|r| invalid(key, value, r))?;
                    if at_creation {
                        next.memory_alloc_kinds = Some(v);
                    }
                }
                keys::ALLOC_SHARED_NONCONTIG => {
                    let v = parse_bool(key, value)?;
                    if at_creation {
                        next.alloc_shared_noncontig = v;
                    }
                }
                keys::MAX_ATTACHED_REGIONS => {
                    let v = parse_count(key, value)?;
                    if v == 0 {
                        return Err(invalid(key, value, "must be at least 1"));
                    }
                    if at_creation {
                        next.max_attached_regions = v;
                    }
                }
                keys::TARGET_SERVICE => {
                    let v = parse_bool(key, value)?;
                    if at_creation {
                        next.target_service = v;
                    }
                }
                keys::SHARE_IN_PLACE => {
                    let v = match value.trim().to_ascii_lowercase().as_str() {
                        "false" => ShareInPlace::Off,
                        "whole_pages" => ShareInPlace::WholePages,
                        "true" => ShareInPlace::Pages,
                        _ => {
                            return Err(invalid(key, value, "expected false, whole_pages or true"))
                        }
                    };
                    if at_creation {
                        next.share_in_place = v;
                    }
                }
                keys::ACCESS_AFTER_ACCESS_REORDER => {
                    next.reorder.access_after_access = parse_flag(key, value)?
                }
                keys::ACCESS_AFTER_EXPOSURE_REORDER => {
                    next.reorder.access_after_exposure = parse_flag(key, value)?
                }
                keys::EXPOSURE_AFTER_EXPOSURE_REORDER => {
                    next.reorder.exposure_after_exposure = parse_flag(key, value)?
                }
                keys::EXPOSURE_AFTER_ACCESS_REORDER => {
                    next.reorder.exposure_after_access = parse_flag(key, value)?
                }
                keys::SCOPE => {
                    next.scope = match value.trim().to_ascii_lowercase().as_str() {
                        "process" => WinScope::Process,
                        "thread" => WinScope::Thread,
                        _ => return Err(invalid(key, value, "expected process or thread")),
                    }
                }
                keys::ORDER => next.order = parse_bool(key, value)?,
                keys::ASSERT_ACCUMULATE_INTRINSIC => {
                    next.accumulate_intrinsic = parse_bool(key, value)?
                }
                // Unknown keys are ignored (MPI-4.1 §10): they may belong to another library.
                _ => {}
            }
        }
        *self = next;
        Ok(())
    }

    /// The hints in effect as an info object (what `get_info` returns).
    pub(crate) fn to_info(&self, flavor: super::Flavor) -> WinInfo {
        let mut info = WinInfo::new()
            .no_locks(self.no_locks)
            .accumulate_ordering(self.accumulate_ordering)
            .accumulate_ops(self.accumulate_ops)
            .accumulate_granularity(self.accumulate_granularity)
            .same_size(self.same_size)
            .same_disp_unit(self.same_disp_unit)
            .reorder(self.reorder)
            .scope(self.scope)
            .order(self.order)
            .accumulate_intrinsic(self.accumulate_intrinsic);
        if let Some(kinds) = &self.memory_alloc_kinds {
            let s: Vec<String> = kinds
                .iter()
                .map(|k| {
                    std::iter::once(k.kind.as_str())
                        .chain(k.restrictors.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(":")
                })
                .collect();
            info.set(keys::MEMORY_ALLOC_KINDS, s.join(","));
        }
        match flavor {
            super::Flavor::Shared => {
                info.set(
                    keys::ALLOC_SHARED_NONCONTIG,
                    bool_str(self.alloc_shared_noncontig),
                );
            }
            super::Flavor::Dynamic => {
                info.set(
                    keys::MAX_ATTACHED_REGIONS,
                    self.max_attached_regions.to_string(),
                );
                info.set(keys::SHARE_IN_PLACE, self.share_in_place.as_str());
            }
            super::Flavor::Create => {
                info.set(keys::TARGET_SERVICE, bool_str(self.target_service));
                info.set(keys::SHARE_IN_PLACE, self.share_in_place.as_str());
            }
            _ => {}
        }
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::win::Flavor;

    #[test]
    fn defaults_match_the_standard() {
        let h = WinHints::parse(&WinInfo::new()).unwrap();
        assert_eq!(h, WinHints::default());
        let info = h.to_info(Flavor::Allocate);
        assert_eq!(info.get("no_locks"), Some("false"));
        assert_eq!(info.get("accumulate_ordering"), Some("rar,raw,war,waw"));
        assert_eq!(info.get("accumulate_ops"), Some("same_op_no_op"));
        assert_eq!(info.get("mpi_accumulate_granularity"), Some("0"));
        assert_eq!(info.get("same_size"), Some("false"));
        assert_eq!(info.get("same_disp_unit"), Some("false"));
        assert_eq!(info.get("mpi_assert_memory_alloc_kinds"), None);
    }

    #[test]
    fn every_key_parses_and_round_trips() {
        let info = WinInfo::new()
            .with("no_locks", " TRUE ")
            .with("accumulate_ordering", "waw,rar")
            .with("accumulate_ops", "same_op")
            .with("mpi_accumulate_granularity", "24")
            .with("same_size", "true")
            .with("same_disp_unit", "false")
            .with(
                "mpi_assert_memory_alloc_kinds",
                "system,mpi:alloc_mem:win_allocate",
            )
            .with("some_other_library_key", "whatever");
        let h = WinHints::parse(&info).unwrap();
        assert!(h.no_locks && h.same_size && !h.same_disp_unit);
        assert_eq!(
            h.accumulate_ordering,
            AccumulateOrdering::RAR | AccumulateOrdering::WAW
        );
        assert_eq!(h.accumulate_ops, AccumulateOps::SameOp);
        assert_eq!(h.accumulate_granularity, 24);
        let back = h.to_info(Flavor::Create);
        assert_eq!(back.get("accumulate_ordering"), Some("rar,waw"));
        assert_eq!(
            back.get("mpi_assert_memory_alloc_kinds"),
            Some("system,mpi:alloc_mem:win_allocate")
        );
        assert_eq!(
            back.get("some_other_library_key"),
            None,
            "ignored keys are not in effect"
        );
        assert_eq!(WinHints::parse(&back).unwrap(), h);
    }

    #[test]
    fn none_ordering() {
        let h = WinHints::parse(&WinInfo::new().with("accumulate_ordering", "none")).unwrap();
        assert_eq!(h.accumulate_ordering, AccumulateOrdering::NONE);
        assert_eq!(h.accumulate_ordering.to_string(), "none");
    }

    #[test]
    fn bad_values_are_errors() {
        for (k, v) in [
            ("no_locks", "yes"),
            ("same_size", "1"),
            ("same_disp_unit", ""),
            ("accumulate_ordering", "rar,xyz"),
            ("accumulate_ordering", ""),
            ("accumulate_ops", "any_op"),
            ("mpi_accumulate_granularity", "-8"),
            ("mpi_accumulate_granularity", "eight"),
            ("mpi_assert_memory_alloc_kinds", "system:alloc_mem"),
            ("mpi_assert_memory_alloc_kinds", "mpi:gpu"),
            ("mpi_assert_memory_alloc_kinds", "sys tem"),
            ("mpi_assert_memory_alloc_kinds", ""),
            ("alloc_shared_noncontig", "maybe"),
            ("onesided_max_attached_regions", "0"),
        ] {
            match WinHints::parse(&WinInfo::new().with(k, v)) {
                Err(Error::InvalidInfo { key, .. }) => assert_eq!(key, k),
                other => panic!("{k}={v:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn implementation_defined_kinds_are_accepted() {
        let h =
            WinHints::parse(&WinInfo::new().with("mpi_assert_memory_alloc_kinds", "cuda:device"))
                .unwrap();
        assert_eq!(h.memory_alloc_kinds.unwrap()[0].kind, "cuda");
    }

    #[test]
    fn reorder_keys_take_the_papers_names_and_values() {
        let h = WinHints::parse(
            &WinInfo::new()
                .with("MPI_WIN_ACCESS_AFTER_ACCESS_REORDER", "1")
                .with("MPI_WIN_EXPOSURE_AFTER_ACCESS_REORDER", " true "),
        )
        .unwrap();
        assert_eq!(
            h.reorder,
            Reorder {
                access_after_access: true,
                exposure_after_access: true,
                ..Reorder::NONE
            }
        );
        let info = h.to_info(Flavor::Allocate);
        assert_eq!(info.get("MPI_WIN_ACCESS_AFTER_ACCESS_REORDER"), Some("1"));
        assert_eq!(info.get("MPI_WIN_ACCESS_AFTER_EXPOSURE_REORDER"), Some("0"));
        assert_eq!(
            info.get("MPI_WIN_EXPOSURE_AFTER_EXPOSURE_REORDER"),
            Some("0")
        );
        assert_eq!(info.get("MPI_WIN_EXPOSURE_AFTER_ACCESS_REORDER"), Some("1"));
        let defaults = WinHints::parse(&WinInfo::new()).unwrap();
        assert!(defaults.reorder.is_none());
        assert_eq!(
            WinHints::parse(&WinInfo::new().reorder(Reorder::ALL))
                .unwrap()
                .reorder,
            Reorder::ALL
        );
        assert!(matches!(
            WinHints::parse(&WinInfo::new().with("MPI_WIN_ACCESS_AFTER_ACCESS_REORDER", "2")),
            Err(Error::InvalidInfo { .. })
        ));
        // set_info may change them (they apply to the epochs queued from then on).
        let mut h = defaults;
        h.update(&WinInfo::new().reorder(Reorder::ALL), false)
            .unwrap();
        assert_eq!(h.reorder, Reorder::ALL);
    }

    #[test]
    fn set_info_ignores_creation_only_keys() {
        let mut h = WinHints::parse(&WinInfo::new().same_size(true)).unwrap();
        h.update(&WinInfo::new().same_size(false).no_locks(true), false)
            .unwrap();
        assert!(h.same_size, "same_size cannot change after creation");
        assert!(h.no_locks);
        let before = h.clone();
        assert!(h
            .update(
                &WinInfo::new()
                    .no_locks(false)
                    .with("no_locks_typo", "x")
                    .with("accumulate_ops", "bad"),
                false
            )
            .is_err());
        assert_eq!(h, before, "a failed update changes nothing");
    }
}
