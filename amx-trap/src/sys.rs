//! System calls made directly, with the `syscall` instruction: not through the C library,
//! whose functions a preloaded library may replace (the engine's own preload replaces
//! `syscall`) and which set `errno`. The engine's calls never change the program's `errno`.
//!
//! Each returns the kernel's value: a result, or `-errno`.

// The engine's own system calls, out of line so that the address after their `syscall`
// instruction is known: a seccomp filter that answers one of them with SECCOMP_RET_TRAP raises
// SIGSYS there, which the signal entry then takes as a refusal (`-EPERM`) instead of giving it
// to the program, whose code made no such call (on the silicon an AMX instruction makes none).
// System V arguments: rdi = n, rsi, rdx, rcx, r8, r9 = a1..a5, [rsp + 8] = a6.
core::arch::global_asm!(
    ".pushsection .text.amx_trap_syscall,\"ax\",@progbits",
    ".p2align 4",
    ".hidden amx_trap_syscall",
    ".globl amx_trap_syscall",
    ".type amx_trap_syscall, @function",
    "amx_trap_syscall:",
    "    mov rax, rdi",
    "    mov rdi, rsi",
    "    mov rsi, rdx",
    "    mov rdx, rcx",
    "    mov r10, r8",
    "    mov r8, r9",
    "    mov r9, qword ptr [rsp + 8]",
    "    syscall",
    ".hidden amx_trap_syscall_return",
    ".globl amx_trap_syscall_return",
    "amx_trap_syscall_return:",
    "    ret",
    ".size amx_trap_syscall, . - amx_trap_syscall",
    ".popsection",
);

extern "C" {
    fn amx_trap_syscall(n: i64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64, a6: u64) -> i64;
    fn amx_trap_syscall_return();
}

/// Whether `rip` is where the engine's own system calls return: a SIGSYS of seccomp's there
/// refused one of them.
pub(crate) fn issued_by_engine(rip: u64) -> bool {
    rip == amx_trap_syscall_return as *const () as u64
}

/// `syscall(n, a1, .., a6)`, as one of the engine's own calls (see `issued_by_engine`).
///
/// # Safety
/// The system call's own contract: every pointer argument valid for what the call does.
#[inline]
pub unsafe fn call6(n: i64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64, a6: u64) -> i64 {
    // SAFETY: the caller's contract; the routine follows the C calling convention (the
    // instruction clobbers rcx and r11, which are the caller's to save anyway).
    unsafe { amx_trap_syscall(n, a1, a2, a3, a4, a5, a6) }
}

/// `syscall(n, a1, .., a6)` made for the program (the preload's `sigaction` and
/// `sigprocmask`): where a seccomp filter traps it, the SIGSYS is the program's, as that of
/// the C library's call it stands for.
///
/// # Safety
/// As [`call6`].
#[inline]
pub unsafe fn program_call6(n: i64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64, a6: u64) -> i64 {
    let ret: i64;
    // SAFETY: the caller's contract; the instruction clobbers rcx and r11 only.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a1,
            in("rsi") a2,
            in("rdx") a3,
            in("r10") a4,
            in("r8") a5,
            in("r9") a6,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// A system call of up to six arguments.
///
/// # Safety
/// As [`call6`].
#[inline]
pub unsafe fn call(n: i64, args: &[u64]) -> i64 {
    let a = |i: usize| args.get(i).copied().unwrap_or(0);
    // SAFETY: forwarded.
    unsafe { call6(n, a(0), a(1), a(2), a(3), a(4), a(5)) }
}

/// [`call`] made for the program (see [`program_call6`]).
///
/// # Safety
/// As [`call6`].
#[inline]
pub unsafe fn program_call(n: i64, args: &[u64]) -> i64 {
    let a = |i: usize| args.get(i).copied().unwrap_or(0);
    // SAFETY: forwarded.
    unsafe { program_call6(n, a(0), a(1), a(2), a(3), a(4), a(5)) }
}

/// A result as `Result`: the value, or the errno.
pub fn check(ret: i64) -> Result<u64, i32> {
    if (-4095..0).contains(&ret) {
        Err(-ret as i32)
    } else {
        Ok(ret as u64)
    }
}

/// `getpid()`.
pub fn getpid() -> i32 {
    // SAFETY: no arguments.
    unsafe { call(libc::SYS_getpid, &[]) as i32 }
}

/// `getuid()`.
pub fn getuid() -> u32 {
    // SAFETY: no arguments.
    unsafe { call(libc::SYS_getuid, &[]) as u32 }
}

/// `gettid()`.
pub fn gettid() -> i32 {
    // SAFETY: no arguments.
    unsafe { call(libc::SYS_gettid, &[]) as i32 }
}

/// `tgkill(pid, tid, sig)`.
pub fn tgkill(pid: i32, tid: i32, sig: i32) -> Result<u64, i32> {
    // SAFETY: no memory arguments.
    check(unsafe { call(libc::SYS_tgkill, &[pid as u64, tid as u64, sig as u64]) })
}

/// An anonymous private mapping of `len` bytes (at `hint` with `extra` flags).
pub fn mmap_anon(hint: u64, len: usize, prot: i32, extra: i32) -> Result<u64, i32> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra;
    // SAFETY: an anonymous mapping touches no existing memory unless `extra` says MAP_FIXED,
    // which no caller passes.
    check(unsafe {
        call(
            libc::SYS_mmap,
            &[hint, len as u64, prot as u64, flags as u64, u64::MAX, 0],
        )
    })
}

/// `munmap(addr, len)`.
///
/// # Safety
/// Nothing uses the range any more.
pub unsafe fn munmap(addr: u64, len: usize) -> Result<u64, i32> {
    // SAFETY: the caller's contract.
    check(unsafe { call(libc::SYS_munmap, &[addr, len as u64]) })
}

/// `mprotect(addr, len, prot)`.
///
/// # Safety
/// Nothing relies on the range's current protection.
pub unsafe fn mprotect(addr: u64, len: usize, prot: i32) -> Result<u64, i32> {
    // SAFETY: the caller's contract.
    check(unsafe { call(libc::SYS_mprotect, &[addr, len as u64, prot as u64]) })
}

/// `rt_sigprocmask(how, &set, &old, 8)`: the mask before (0 where the call was refused).
pub fn sigprocmask(how: i32, set: Option<u64>) -> u64 {
    rt_sigprocmask(how, set, call).unwrap_or(0)
}

/// [`sigprocmask`] that reports a refusal (a seccomp filter's errno) rather than a mask of 0.
pub fn try_sigprocmask(how: i32, set: u64) -> Result<u64, i32> {
    rt_sigprocmask(how, Some(set), call)
}

/// [`sigprocmask`] made for the program (see [`program_call6`]).
pub fn program_sigprocmask(how: i32, set: Option<u64>) -> u64 {
    rt_sigprocmask(how, set, program_call).unwrap_or(0)
}

/// `rt_sigprocmask` through `issue` ([`call`] or [`program_call`]): the mask before, or the
/// errno.
fn rt_sigprocmask(
    how: i32,
    set: Option<u64>,
    issue: unsafe fn(i64, &[u64]) -> i64,
) -> Result<u64, i32> {
    let mut old = 0u64;
    let set_ptr = set.as_ref().map_or(0, |s| s as *const u64 as u64);
    // SAFETY: the kernel reads 8 bytes at `set_ptr` (a live local, or none) and writes 8 to
    // `old`, a live local.
    let rc = unsafe {
        issue(
            libc::SYS_rt_sigprocmask,
            &[how as u64, set_ptr, &mut old as *mut u64 as u64, 8],
        )
    };
    check(rc).map(|_| old)
}

/// `write(fd, buf)`: bytes written, or the errno.
pub fn write(fd: i32, buf: &[u8]) -> Result<u64, i32> {
    // SAFETY: the kernel reads `buf.len()` bytes of a live buffer.
    check(unsafe {
        call(
            libc::SYS_write,
            &[fd as u64, buf.as_ptr() as u64, buf.len() as u64],
        )
    })
}

/// `open(path, flags)`.
pub fn open(path: &std::ffi::CStr, flags: i32) -> Result<i32, i32> {
    // openat, as the C library opens files: a sandbox's list of allowed calls, written for
    // the program, holds it where it may lack `open`.
    // SAFETY: a NUL-terminated path.
    check(unsafe {
        call(
            libc::SYS_openat,
            &[libc::AT_FDCWD as u64, path.as_ptr() as u64, flags as u64, 0],
        )
    })
    .map(|fd| fd as i32)
}

/// `pread64(fd, buf, offset)`.
pub fn pread(fd: i32, buf: &mut [u8], offset: u64) -> Result<u64, i32> {
    // SAFETY: the kernel writes at most `buf.len()` bytes of a live buffer.
    check(unsafe {
        call(
            libc::SYS_pread64,
            &[fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, offset],
        )
    })
}

/// `pwrite64(fd, buf, offset)`.
pub fn pwrite(fd: i32, buf: &[u8], offset: u64) -> Result<u64, i32> {
    // SAFETY: the kernel reads `buf.len()` bytes of a live buffer.
    check(unsafe {
        call(
            libc::SYS_pwrite64,
            &[fd as u64, buf.as_ptr() as u64, buf.len() as u64, offset],
        )
    })
}

/// `close(fd)`.
pub fn close(fd: i32) {
    // SAFETY: the caller's descriptor.
    unsafe { call(libc::SYS_close, &[fd as u64]) };
}

/// A file the engine keeps open for itself (`/proc/self/maps`, `/proc/self/mem`), at a
/// descriptor number away from the ones the program uses.
///
/// `open` takes the lowest free number, which the program may be about to `dup2` onto, or
/// have just closed to do so (on the silicon nothing else opens files in the process): the
/// engine's reads would then consume the program's file, its writes of code go into it, and
/// its `close` close the program's. So the file is opened once per process, moved at once to a
/// high number (from half the descriptor limit, or 1024), and kept there; each use checks that the number still
/// holds it (the same device and inode as the path's: a program may close every descriptor,
/// as daemons and shells do before `exec`), and opens it again where it does not. A `fork`
/// child opens its own (the parent's `/proc/self` files are the parent's). Where a sandbox
/// refuses the calls that move or check it, it is opened for each use and closed after, as
/// before.
pub struct OwnFile {
    path: &'static std::ffi::CStr,
    flags: i32,
    /// The kept descriptor (-1: none), the process it was opened in, and its device and inode.
    fd: std::sync::atomic::AtomicI32,
    pid: std::sync::atomic::AtomicI32,
    dev: std::sync::atomic::AtomicU64,
    ino: std::sync::atomic::AtomicU64,
    /// The one it replaced, kept for [`OwnFile::vfork_child_left`]: a `vfork` child, in its
    /// parent's memory, replaces the parent's with its own.
    prev: [std::sync::atomic::AtomicU64; 3],
}

/// A descriptor of an [`OwnFile`] in use: closed on drop where it is not the kept one.
pub struct FileUse {
    fd: i32,
    close: bool,
}

impl FileUse {
    /// The descriptor.
    pub fn fd(&self) -> i32 {
        self.fd
    }
}

impl Drop for FileUse {
    fn drop(&mut self) {
        if self.close {
            close(self.fd);
        }
    }
}

impl OwnFile {
    /// `path`, to be opened with `flags` (`O_CLOEXEC` among them).
    pub const fn new(path: &'static std::ffi::CStr, flags: i32) -> OwnFile {
        use std::sync::atomic::{AtomicI32, AtomicU64};
        OwnFile {
            path,
            flags,
            fd: AtomicI32::new(-1),
            pid: AtomicI32::new(0),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            prev: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// After a `vfork` child `child` left the address space (`exec` or `_exit`): the file it
    /// kept here is its own, gone with it, and the one it replaced, the parent's, is kept again.
    pub fn vfork_child_left(&self, child: i32) {
        use std::sync::atomic::Ordering::{Relaxed, Release};
        if self.pid.load(Relaxed) != child {
            return;
        }
        let [fd_pid, dev, ino] = self.prev.each_ref().map(|w| w.load(Relaxed));
        self.pid.store((fd_pid >> 32) as i32, Relaxed);
        self.dev.store(dev, Relaxed);
        self.ino.store(ino, Relaxed);
        self.fd.store(fd_pid as u32 as i32, Release);
    }

    /// The file, open: the kept descriptor where it still holds the file, else a new one.
    pub fn get(&self) -> Option<FileUse> {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
        let pid = getpid();
        let kept = self.fd.load(Acquire);
        let want = stat_path(self.path);
        if kept >= 0 && self.pid.load(Relaxed) == pid && want.is_some() && stat_fd(kept) == want {
            return Some(FileUse {
                fd: kept,
                close: false,
            });
        }
        let low = open(self.path, self.flags).ok()?;
        let (Some(want), Some(high)) = (want, dup_high(low)) else {
            // Nothing to move it with or check it against: this use only.
            return Some(FileUse {
                fd: low,
                close: true,
            });
        };
        let high_ok = stat_fd(high) == Some(want);
        if stat_fd(low) == Some(want) {
            close(low);
        }
        if !high_ok {
            // The program put its own file at `low` before the move.
            close(high);
            return None;
        }
        // The kept one is stale: this process's other file, inherited from the parent, or a
        // number the program closed or reused. Replaced only if no other thread replaced it.
        if self
            .fd
            .compare_exchange(kept, high, AcqRel, Acquire)
            .is_err()
        {
            return Some(FileUse {
                fd: high,
                close: true,
            });
        }
        let stale = (kept >= 0).then(|| (kept, self.dev.load(Relaxed), self.ino.load(Relaxed)));
        let old_pid = self.pid.load(Relaxed);
        self.prev[0].store(
            u64::from(old_pid as u32) << 32 | u64::from(kept as u32),
            Relaxed,
        );
        self.prev[1].store(self.dev.load(Relaxed), Relaxed);
        self.prev[2].store(self.ino.load(Relaxed), Relaxed);
        self.pid.store(pid, Relaxed);
        self.dev.store(want.0, Relaxed);
        self.ino.store(want.1, Release);
        if let Some((fd, dev, ino)) = stale {
            // Still the file it was (the parent's, in a fork child): this process's to close.
            if fd != high && stat_fd(fd) == Some((dev, ino)) {
                close(fd);
            }
        }
        Some(FileUse {
            fd: high,
            close: false,
        })
    }
}

/// A duplicate of `fd`, close-on-exec, at the lowest free number from half the soft descriptor
/// limit, or from 1024 under a larger limit; `None` where that fails.
fn dup_high(fd: i32) -> Option<i32> {
    let mut limit = [0u64; 2];
    // SAFETY: getrlimit writes the 16-byte rlimit.
    let got = check(unsafe {
        call(
            libc::SYS_getrlimit,
            &[libc::RLIMIT_NOFILE as u64, limit.as_mut_ptr() as u64],
        )
    });
    // High enough to stay clear of the numbers a program takes in turn, low enough that the
    // table the kernel copies at every `fork` stays small (it spans the highest number open).
    let base = match got {
        Ok(_) => (limit[0] / 2).clamp(3, 1024),
        Err(_) => 64,
    };
    // SAFETY: no memory arguments.
    check(unsafe {
        call(
            libc::SYS_fcntl,
            &[fd as u64, libc::F_DUPFD_CLOEXEC as u64, base],
        )
    })
    .ok()
    .map(|h| h as i32)
}

/// The device and inode of an open file.
fn stat_fd(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat.
    check(unsafe { call(libc::SYS_fstat, &[fd as u64, (&raw mut st) as u64]) })
        .ok()
        .map(|_| (st.st_dev, st.st_ino))
}

/// The device and inode of the file at `path`.
fn stat_path(path: &std::ffi::CStr) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path; newfstatat writes one stat.
    check(unsafe {
        call(
            libc::SYS_newfstatat,
            &[
                libc::AT_FDCWD as u64,
                path.as_ptr() as u64,
                (&raw mut st) as u64,
                0,
            ],
        )
    })
    .ok()
    .map(|_| (st.st_dev, st.st_ino))
}
