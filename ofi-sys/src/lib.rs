//! Raw bindings to the system's libfabric (1.17 or later), generated at build time against
//! its headers: every `fi_*` function (the `static inline` ones through compiled C
//! wrappers), `fid_*`/`fi_*` type and `FI_*` constant. No safety is added here; onesided's
//! `transport::ofi` is the safe layer.
//!
//! **libfabric is not linked**: the first call of `fi_getinfo`, `fi_fabric`, `fi_freeinfo`,
//! `fi_dupinfo`, `fi_strerror` or `fi_version` opens the libfabric the process already has
//! (one an MPI library brought) or else the system's `libfabric.so.1`, and checks that its
//! API is 1.17 or later ([`onesided_fi_load_failure`] says why not; the calls then fail
//! with `-FI_ENOSYS`). A process never holds two libfabrics because of this crate.
//!
//! Two macros of `fabric.h` that bindgen cannot translate are defined by hand:
//! [`FI_ADDR_UNSPEC`] and [`FI_VERSION`]. Flag macros come out as `u32` where the fields
//! that take them are `u64`: widen them at the use.

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    missing_docs,
    clippy::all
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// `FI_ADDR_UNSPEC` of `fabric.h`: no address (`((uint64_t) -1)`).
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;

/// `FI_VERSION(major, minor)` of `fabric.h`: the API version `fi_getinfo` is asked for.
pub const fn FI_VERSION(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

extern "C" {
    /// Why libfabric cannot be used (a NUL-terminated text), or null when it can. Loads it on
    /// the first call (of this or of any `fi_*` function).
    pub fn onesided_fi_load_failure() -> *const std::os::raw::c_char;
    /// The API version of the loaded libfabric (`FI_VERSION(major, minor)`), 0 when none.
    pub fn onesided_fi_loaded_version() -> u32;
    /// 1 when the libfabric in use was already in the process (an MPI library's), 2 when it
    /// was opened for this crate, 0 when none could be used.
    pub fn onesided_fi_origin() -> std::os::raw::c_int;
}
