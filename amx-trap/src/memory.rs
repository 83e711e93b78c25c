//! Fault-safe access to the process's own memory: `process_vm_readv`/`process_vm_writev` on the
//! own pid. The kernel checks every page as a user access would (no `FOLL_FORCE`), so an
//! unreadable or unwritable operand is an `EFAULT` and a count of the bytes copied, never a
//! signal inside the engine; from the count and `mincore` the engine rebuilds the page fault
//! the real access would have raised (address, and whether the page is mapped at all).
//!
//! Both calls are plain system calls: async-signal-safe, no allocation, no lock.

/// A page fault the real access would raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageFault {
    /// The first byte that could not be accessed.
    pub addr: u64,
    /// The access was a write.
    pub write: bool,
    /// The page is mapped (a protection fault, SEGV_ACCERR) rather than absent (SEGV_MAPERR).
    pub present: bool,
}

/// A run of bytes in the process's memory: one tile row, or a configuration image.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) addr: u64,
    pub(crate) len: usize,
}

/// Rows per transfer: a tile has at most 16.
const MAX_SPANS: usize = 16;

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory arguments; it reads a value fixed for the process.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

/// Whether the page holding `addr` is mapped (`mincore` fails with ENOMEM on a hole).
fn mapped(addr: u64) -> bool {
    let page = addr & !(page_size() - 1);
    let mut vec = 0u8;
    // SAFETY: mincore reads no user memory at `page` (it asks the kernel about the mapping) and
    // writes one byte, for the one page asked about, to `vec`, a live local.
    let rc = unsafe { libc::mincore(page as *mut libc::c_void, 1, &mut vec) };
    rc == 0
}

/// Copies between `local` buffers and `spans` of this process's memory, in order. Returns the
/// bytes copied: all of them, or fewer when the kernel stopped at an inaccessible page.
fn transfer(local: &mut [libc::iovec], remote: &[libc::iovec], write: bool) -> Option<usize> {
    // SAFETY: getpid has no arguments and cannot fail.
    let pid = unsafe { libc::getpid() };
    // SAFETY: every local iovec describes a buffer of the caller's that is live and exclusively
    // borrowed for the call (writable for a read); the remote iovecs are addresses the kernel
    // checks itself, failing with EFAULT or a short count instead of faulting.
    let n = unsafe {
        if write {
            libc::process_vm_writev(
                pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        } else {
            libc::process_vm_readv(
                pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        }
    };
    match n {
        n if n >= 0 => Some(n as usize),
        // SAFETY: __errno_location returns this thread's errno slot.
        _ if unsafe { *libc::__errno_location() } == libc::EFAULT => Some(0),
        _ => None,
    }
}

/// Which span stopped a transfer of `copied` bytes and the fault it stands for.
fn fault_at(spans: &[Span], copied: usize, write: bool) -> (usize, PageFault) {
    let mut left = copied;
    for (i, s) in spans.iter().enumerate() {
        if left < s.len {
            let addr = s.addr.wrapping_add(left as u64);
            let present = mapped(addr);
            return (
                i,
                PageFault {
                    addr,
                    write,
                    present,
                },
            );
        }
        left -= s.len;
    }
    let last = spans.len().saturating_sub(1);
    let addr = spans.get(last).map_or(0, |s| s.addr);
    (
        last,
        PageFault {
            addr,
            write,
            present: mapped(addr),
        },
    )
}

/// Reads `spans` of memory into `out`, span `i` into `out[i]` (its first `spans[i].len`
/// bytes). On a fault, the spans before the faulting one are complete; returns its index and
/// the page fault.
pub(crate) fn read_spans(spans: &[Span], out: &mut [&mut [u8]]) -> Result<(), (usize, PageFault)> {
    // A patched site's fast path copies directly; a fault there is redone here.
    if super::fastcopy::try_read(spans, out) {
        return Ok(());
    }
    let n = spans.len().min(MAX_SPANS).min(out.len());
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut local = [empty; MAX_SPANS];
    let mut remote = [empty; MAX_SPANS];
    let mut total = 0;
    for i in 0..n {
        let len = spans[i].len.min(out[i].len());
        local[i] = libc::iovec {
            iov_base: out[i].as_mut_ptr().cast(),
            iov_len: len,
        };
        remote[i] = libc::iovec {
            iov_base: spans[i].addr as *mut libc::c_void,
            iov_len: len,
        };
        total += len;
    }
    match transfer(&mut local[..n], &remote[..n], false) {
        Some(copied) if copied >= total => Ok(()),
        Some(copied) => Err(fault_at(&spans[..n], copied, false)),
        None => {
            // The system call itself is refused (a seccomp filter): copy directly, as the
            // instruction would have.
            for i in 0..n {
                let len = spans[i].len.min(out[i].len());
                // SAFETY: none can be proved; this is the access the program's instruction
                // makes, and an inaccessible operand faults here as it would there.
                unsafe {
                    std::ptr::copy(spans[i].addr as *const u8, out[i].as_mut_ptr(), len);
                }
            }
            Ok(())
        }
    }
}

/// Writes `data[i]` to `spans[i]`, in order; on a fault, as [`read_spans`].
pub(crate) fn write_spans(spans: &[Span], data: &[&[u8]]) -> Result<(), (usize, PageFault)> {
    // As in `read_spans`.
    if super::fastcopy::try_write(spans, data) {
        return Ok(());
    }
    let n = spans.len().min(MAX_SPANS).min(data.len());
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut local = [empty; MAX_SPANS];
    let mut remote = [empty; MAX_SPANS];
    let mut total = 0;
    for i in 0..n {
        let len = spans[i].len.min(data[i].len());
        local[i] = libc::iovec {
            // The kernel only reads local buffers of a write.
            iov_base: data[i].as_ptr() as *mut libc::c_void,
            iov_len: len,
        };
        remote[i] = libc::iovec {
            iov_base: spans[i].addr as *mut libc::c_void,
            iov_len: len,
        };
        total += len;
    }
    match transfer(&mut local[..n], &remote[..n], true) {
        Some(copied) if copied >= total => Ok(()),
        Some(copied) => Err(fault_at(&spans[..n], copied, true)),
        None => {
            for i in 0..n {
                let len = spans[i].len.min(data[i].len());
                // SAFETY: as in `read_spans`: the store the program's instruction makes.
                unsafe {
                    std::ptr::copy(data[i].as_ptr(), spans[i].addr as *mut u8, len);
                }
            }
            Ok(())
        }
    }
}

/// Reads up to `out.len()` bytes at `addr`, stopping at the first inaccessible page; returns
/// how many were read (for the instruction bytes at a faulting RIP).
pub(crate) fn read_prefix(addr: u64, out: &mut [u8]) -> usize {
    let mut local = [libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    }];
    let remote = [libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: out.len(),
    }];
    transfer(&mut local, &remote, false).unwrap_or(0)
}
