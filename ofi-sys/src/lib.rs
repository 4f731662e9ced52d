//! Raw bindings to the system's libfabric (1.17 or later), generated at build time against
//! its headers: every `fi_*` function (the `static inline` ones through compiled C
//! wrappers), `fid_*`/`fi_*` type and `FI_*` constant. No safety is added here; onesided's
//! `transport::ofi` is the safe layer.
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
