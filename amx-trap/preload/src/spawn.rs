//! New processes get the mask the program set: `posix_spawn` (which gives a child its
//! parent's kernel mask unless told otherwise) is told the program's; before an `exec` the
//! kernel gets the program's whole mask, the engine's signals included, as the new program
//! must inherit it (its own preload then takes them over again).

use crate::{active, sig};

/// `vfork(2)`: the engine's own (`amx-trap`'s vfork.rs), which gives the child, running in the
/// parent's memory, a slot of its own and gives the parent its thread-local words back. A jump,
/// so that the wrapper meets the caller's stack as the C library's `vfork` would.
///
/// # Safety
/// As the C library's `vfork`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    core::arch::naked_asm!("jmp amx_trap_vfork")
}

/// `__vfork`, the C library's other name for [`vfork`].
///
/// # Safety
/// As the C library's `vfork`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __vfork() -> libc::pid_t {
    core::arch::naked_asm!("jmp amx_trap_vfork")
}

/// Runs `spawn` with attributes that give the child the program's mask.
fn with_mask_attr(
    attr: *const libc::posix_spawnattr_t,
    spawn: impl FnOnce(*const libc::posix_spawnattr_t) -> libc::c_int,
) -> libc::c_int {
    if !active() {
        return spawn(attr);
    }
    // SAFETY: an all-zero posix_spawnattr_t is what posix_spawnattr_init writes (glibc's is
    // plain data); a caller's attributes are copied by value.
    let mut local: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
    if attr.is_null() {
        // SAFETY: initializes the live local.
        unsafe { libc::posix_spawnattr_init(&mut local) };
    } else {
        // SAFETY: the caller passes valid attributes.
        local = unsafe { std::ptr::read(attr) };
    }
    let mut flags: libc::c_short = 0;
    // SAFETY: reads and writes the live local.
    unsafe {
        libc::posix_spawnattr_getflags(&local, &mut flags);
        if flags & libc::POSIX_SPAWN_SETSIGMASK as libc::c_short == 0 {
            let mask = sig::set_of(sig::program_mask());
            libc::posix_spawnattr_setsigmask(&mut local, &mask);
            libc::posix_spawnattr_setflags(
                &mut local,
                flags | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short,
            );
        }
    }
    spawn(&local)
}

/// `posix_spawn(3)`.
///
/// # Safety
/// As the C library's `posix_spawn`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut libc::c_char,
    envp: *const *mut libc::c_char,
) -> libc::c_int {
    let Some(real) = crate::real::posix_spawn() else {
        return libc::ENOSYS;
    };
    // SAFETY: forwarded, with valid attributes.
    with_mask_attr(attr, |attr| unsafe {
        real(pid, path, actions, attr, argv, envp)
    })
}

/// `posix_spawnp(3)`.
///
/// # Safety
/// As the C library's `posix_spawnp`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut libc::c_char,
    envp: *const *mut libc::c_char,
) -> libc::c_int {
    let Some(real) = crate::real::posix_spawnp() else {
        return libc::ENOSYS;
    };
    // SAFETY: as in `posix_spawn`.
    with_mask_attr(attr, |attr| unsafe {
        real(pid, file, actions, attr, argv, envp)
    })
}

/// Gives the kernel the program's whole mask for an `exec` (kept in case it fails).
pub(crate) extern "C" fn before_exec() {
    if active() {
        engine::sys::sigprocmask(libc::SIG_SETMASK, Some(sig::program_mask()));
    }
}

/// After a failed `exec`: the engine's signals unblocked in the kernel again.
pub(crate) extern "C" fn after_exec() {
    if active() {
        // SAFETY: __errno_location returns this thread's errno slot.
        let errno = unsafe { *libc::__errno_location() };
        sig::set_program_mask(sig::program_mask());
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }
}

fn exec(call: impl FnOnce() -> libc::c_int) -> libc::c_int {
    before_exec();
    let rc = call();
    after_exec();
    rc
}

/// `execve(2)`.
///
/// # Safety
/// As the C library's `execve`.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> libc::c_int {
    let Some(real) = crate::real::execve() else {
        crate::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded.
    exec(|| unsafe { real(path, argv, envp) })
}

/// `execv(3)`.
///
/// # Safety
/// As the C library's `execv`.
#[no_mangle]
pub unsafe extern "C" fn execv(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
) -> libc::c_int {
    let Some(real) = crate::real::execv() else {
        crate::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded.
    exec(|| unsafe { real(path, argv) })
}

/// `execvp(3)`.
///
/// # Safety
/// As the C library's `execvp`.
#[no_mangle]
pub unsafe extern "C" fn execvp(
    file: *const libc::c_char,
    argv: *const *const libc::c_char,
) -> libc::c_int {
    let Some(real) = crate::real::execvp() else {
        crate::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded.
    exec(|| unsafe { real(file, argv) })
}

/// `execvpe(3)`.
///
/// # Safety
/// As the C library's `execvpe`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> libc::c_int {
    let Some(real) = crate::real::execvpe() else {
        crate::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded.
    exec(|| unsafe { real(file, argv, envp) })
}

/// `fexecve(3)`.
///
/// # Safety
/// As the C library's `fexecve`.
#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: libc::c_int,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> libc::c_int {
    let Some(real) = crate::real::fexecve() else {
        crate::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded.
    exec(|| unsafe { real(fd, argv, envp) })
}

// The variadic `execl`, `execlp` and `execle`: their arguments, in registers and on the stack,
// go to the C library's untouched. `before_exec` runs first (the argument registers saved
// around it); the caller's return address is kept in a thread-local word while the C
// library's function runs with the caller's stack arguments where it expects them; if it
// returns (the exec failed), `after_exec` runs and the wrapper returns to the caller.
macro_rules! variadic_exec {
    ($name:literal, $real:literal) => {
        core::arch::global_asm!(
            ".pushsection .text.amx_trap_exec,\"ax\",@progbits",
            ".p2align 4",
            concat!(".globl ", $name),
            concat!(".type ", $name, ", @function"),
            concat!($name, ":"),
            "    push rdi",
            "    push rsi",
            "    push rdx",
            "    push rcx",
            "    push r8",
            "    push r9",
            "    push rax",
            "    call {before}",
            "    pop rax",
            "    pop r9",
            "    pop r8",
            "    pop rcx",
            "    pop rdx",
            "    pop rsi",
            "    pop rdi",
            "    pop r11",
            "    mov r10, qword ptr [rip + amx_trap_exec_return@GOTTPOFF]",
            "    mov qword ptr fs:[r10], r11",
            concat!("    call qword ptr [rip + ", $real, "]"),
            "    push rax",
            "    sub rsp, 8",
            "    call {after}",
            "    add rsp, 8",
            "    pop rax",
            "    mov r10, qword ptr [rip + amx_trap_exec_return@GOTTPOFF]",
            "    jmp qword ptr fs:[r10]",
            concat!(".size ", $name, ", . - ", $name),
            ".popsection",
            before = sym before_exec,
            after = sym after_exec,
        );
    };
}

// The return address of a variadic exec under way, and the C library's functions.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".hidden amx_trap_exec_return",
    "amx_trap_exec_return:",
    ".zero 8",
    ".popsection",
    ".pushsection .data.amx_trap_exec,\"aw\",@progbits",
    ".p2align 3",
    ".hidden amx_trap_real_execl",
    "amx_trap_real_execl: .quad 0",
    ".hidden amx_trap_real_execlp",
    "amx_trap_real_execlp: .quad 0",
    ".hidden amx_trap_real_execle",
    "amx_trap_real_execle: .quad 0",
    ".popsection",
);

variadic_exec!("execl", "amx_trap_real_execl");
variadic_exec!("execlp", "amx_trap_real_execlp");
variadic_exec!("execle", "amx_trap_real_execle");

extern "C" {
    static mut amx_trap_real_execl: usize;
    static mut amx_trap_real_execlp: usize;
    static mut amx_trap_real_execle: usize;
}

/// Finds the C library's variadic execs (from the constructor, before any thread can call
/// them through this library).
pub(crate) fn resolve() {
    // SAFETY: written once, by the constructor, while the process has one thread; read only
    // by the wrappers afterwards.
    unsafe {
        amx_trap_real_execl = crate::real::execl().unwrap_or(0);
        amx_trap_real_execlp = crate::real::execlp().unwrap_or(0);
        amx_trap_real_execle = crate::real::execle().unwrap_or(0);
    }
}
