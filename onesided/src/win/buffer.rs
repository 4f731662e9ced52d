//! Memory a window holds for the user ([`WinBuffer`]): handed in by `create` or `attach`,
//! handed back by `free` or `detach`.

use std::ptr::NonNull;

use bytemuck::Pod;

use crate::memory::AllocMem;

/// Memory handed to [`Window::create`](crate::Window::create) or [`Window::attach`](crate::Window::attach). The window owns it until
/// [`Window::free`](crate::Window::free) / [`Window::detach`](crate::Window::detach) give it back, so no remote access can outlive it.
#[derive(Debug)]
pub enum WinBuffer<T: Pod> {
    /// Ordinary heap memory: peers reach it with cross-memory attach.
    Vec(Vec<T>),
    /// Shared-heap memory from [`crate::alloc_mem`]: peers use load/store.
    AllocMem(AllocMem<T>),
    /// Memory the caller manages (see [`WinBuffer::from_raw_parts`]).
    Raw {
        /// First element.
        ptr: NonNull<T>,
        /// Number of elements.
        len: usize,
    },
}

impl<T: Pod> WinBuffer<T> {
    /// Memory the caller manages.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` elements (and non-null) until the
    /// buffer is returned by `free`/`detach` (or, if the window is dropped without `free`,
    /// for as long as any process of the window may access it), must not be accessed
    /// through Rust references in the meantime, and must not be thread-local (the buffer
    /// may move to another thread with its window).
    pub unsafe fn from_raw_parts(ptr: *mut T, len: usize) -> Self {
        WinBuffer::Raw {
            ptr: NonNull::new(ptr).expect("WinBuffer::from_raw_parts: null pointer"),
            len,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            WinBuffer::Vec(v) => v.len(),
            WinBuffer::AllocMem(m) => m.len(),
            WinBuffer::Raw { len, .. } => *len,
        }
    }

    /// True when the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Base pointer and length in bytes.
    pub(crate) fn raw_bytes(&mut self) -> (*mut u8, usize) {
        let ptr: *mut T = match self {
            WinBuffer::Vec(v) => v.as_mut_ptr(),
            WinBuffer::AllocMem(m) => m.as_mut_ptr(),
            WinBuffer::Raw { ptr, .. } => ptr.as_ptr(),
        };
        (ptr.cast(), self.len() * std::mem::size_of::<T>())
    }

    /// The elements: the memory a window gave back ([`Window::free`](crate::Window::free),
    /// [`Window::detach`](crate::Window::detach),
    /// [`Window::memhandle_release`](crate::Window::memhandle_release)). For a buffer made by
    /// [`WinBuffer::from_raw_parts`], its contract must still hold.
    ///
    /// ```
    /// let buffer = onesided::WinBuffer::from(vec![1u32, 2, 3]);
    /// assert_eq!(buffer.as_slice(), &[1, 2, 3]);
    /// ```
    pub fn as_slice(&self) -> &[T] {
        match self {
            WinBuffer::Vec(v) => v,
            WinBuffer::AllocMem(m) => m,
            // SAFETY: the from_raw_parts contract: valid for `len` elements while this
            // buffer exists, and not reached through other references meanwhile.
            WinBuffer::Raw { ptr, len } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }

    /// The elements, mutably (see [`WinBuffer::as_slice`]).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            WinBuffer::Vec(v) => v,
            WinBuffer::AllocMem(m) => m,
            // SAFETY: as in `as_slice`; `&mut self` makes this the only reference.
            WinBuffer::Raw { ptr, len } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
        }
    }

    /// The `Vec` inside, if this buffer is one.
    pub fn into_vec(self) -> Option<Vec<T>> {
        match self {
            WinBuffer::Vec(v) => Some(v),
            _ => None,
        }
    }

    /// Gives up memory that peers might still access: never freed, never reused.
    pub(crate) fn leak(self) {
        match self {
            WinBuffer::Vec(v) => std::mem::forget(v),
            // Our mapping goes away but the peers' mappings keep the memory alive.
            WinBuffer::AllocMem(m) => drop(m),
            WinBuffer::Raw { .. } => {}
        }
    }
}

// SAFETY: a WinBuffer owns its memory like a Vec (for `Raw`, by the contract of
// `from_raw_parts`, which excludes thread-local memory); moving it moves that ownership.
unsafe impl<T: Pod + Send> Send for WinBuffer<T> {}
// SAFETY: shared references to a WinBuffer only read its length and pointer (and `Vec`
// and `AllocMem` are Sync for Sync elements); `Raw` memory is owned as in Send.
unsafe impl<T: Pod + Sync> Sync for WinBuffer<T> {}

impl<T: Pod> From<Vec<T>> for WinBuffer<T> {
    fn from(v: Vec<T>) -> Self {
        WinBuffer::Vec(v)
    }
}

impl<T: Pod> From<AllocMem<T>> for WinBuffer<T> {
    fn from(m: AllocMem<T>) -> Self {
        WinBuffer::AllocMem(m)
    }
}
