//! Memory calls: the engine removes its patches from code before the program protects,
//! unmaps, moves, replaces or discards it, so that the program always sees and changes its own
//! code bytes and never runs a stale patch.

use engine::preload as trap;

fn before(addr: *mut libc::c_void, len: libc::size_t) {
    if engine::is_active() {
        trap::unpatch_range(addr as u64, len as u64);
    }
}

/// `mprotect(2)`.
///
/// # Safety
/// As the C library's `mprotect`.
#[no_mangle]
pub unsafe extern "C" fn mprotect(
    addr: *mut libc::c_void,
    len: libc::size_t,
    prot: libc::c_int,
) -> libc::c_int {
    before(addr, len);
    match crate::real::mprotect() {
        // SAFETY: forwarded.
        Some(real) => unsafe { real(addr, len, prot) },
        None => {
            crate::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// `pkey_mprotect(2)`.
///
/// # Safety
/// As the C library's `pkey_mprotect`.
#[no_mangle]
pub unsafe extern "C" fn pkey_mprotect(
    addr: *mut libc::c_void,
    len: libc::size_t,
    prot: libc::c_int,
    pkey: libc::c_int,
) -> libc::c_int {
    before(addr, len);
    match crate::real::pkey_mprotect() {
        // SAFETY: forwarded.
        Some(real) => unsafe { real(addr, len, prot, pkey) },
        None => {
            crate::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// `munmap(2)`.
///
/// # Safety
/// As the C library's `munmap`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut libc::c_void, len: libc::size_t) -> libc::c_int {
    before(addr, len);
    match crate::real::munmap() {
        // SAFETY: forwarded.
        Some(real) => unsafe { real(addr, len) },
        None => {
            crate::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// `madvise(2)`.
///
/// # Safety
/// As the C library's `madvise`.
#[no_mangle]
pub unsafe extern "C" fn madvise(
    addr: *mut libc::c_void,
    len: libc::size_t,
    advice: libc::c_int,
) -> libc::c_int {
    before(addr, len);
    match crate::real::madvise() {
        // SAFETY: forwarded.
        Some(real) => unsafe { real(addr, len, advice) },
        None => {
            crate::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// `mmap(2)`: a fixed mapping replaces what was there.
///
/// # Safety
/// As the C library's `mmap`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut libc::c_void,
    len: libc::size_t,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    offset: libc::off_t,
) -> *mut libc::c_void {
    if flags & libc::MAP_FIXED != 0 {
        before(addr, len);
    }
    match crate::real::mmap() {
        // SAFETY: forwarded.
        Some(real) => unsafe { real(addr, len, prot, flags, fd, offset) },
        None => {
            crate::set_errno(libc::ENOSYS);
            libc::MAP_FAILED
        }
    }
}

/// `mremap(2)` (its fifth argument is read only with `MREMAP_FIXED`, as the kernel reads it).
///
/// # Safety
/// As the C library's `mremap`.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut libc::c_void,
    old_len: libc::size_t,
    new_len: libc::size_t,
    flags: libc::c_int,
    new_addr: *mut libc::c_void,
) -> *mut libc::c_void {
    before(old, old_len);
    if flags & libc::MREMAP_FIXED != 0 {
        before(new_addr, new_len);
    }
    match crate::real::mremap() {
        // SAFETY: forwarded.
        Some(real) => unsafe { real(old, old_len, new_len, flags, new_addr) },
        None => {
            crate::set_errno(libc::ENOSYS);
            libc::MAP_FAILED
        }
    }
}
