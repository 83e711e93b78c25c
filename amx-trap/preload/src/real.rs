//! The C library's own functions behind the interposed ones, found with
//! `dlsym(RTLD_NEXT, ..)`: all of them by the constructor (a signal handler may call an
//! interposed function later, and `dlsym` may take the loader's lock), and on first use by a
//! function another library's constructor calls before this library's ran.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Finds `name` behind this library, once.
pub(crate) fn lookup(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let known = slot.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only reads the loader's tables.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    slot.store(found, Ordering::Release);
    found
}

/// Says on standard error, once, when another library that interposes `sigaction` comes after
/// this one in the lookup order (a sanitizer's runtime linked into the program, the JVM's
/// `libjsig` preloaded after this library): the engine takes the program's handlers first, so
/// that library never sees them, and it works only when preloaded before this one (the
/// README's order).
pub(crate) fn warn_if_interposed_after() {
    let Some(next) = sigaction() else {
        return;
    };
    // SAFETY: dlsym and dladdr read the loader's tables; the names are NUL-terminated and the
    // Dl_info is written by dladdr.
    let (libc_file, next_file) = unsafe {
        let version = libc::dlsym(libc::RTLD_DEFAULT, c"gnu_get_libc_version".as_ptr());
        let mut libc_info: libc::Dl_info = std::mem::zeroed();
        let mut next_info: libc::Dl_info = std::mem::zeroed();
        if version.is_null()
            || libc::dladdr(version, &mut libc_info) == 0
            || libc::dladdr(next as *const libc::c_void, &mut next_info) == 0
            || libc_info.dli_fname.is_null()
            || next_info.dli_fname.is_null()
        {
            return;
        }
        (
            std::ffi::CStr::from_ptr(libc_info.dli_fname),
            std::ffi::CStr::from_ptr(next_info.dli_fname),
        )
    };
    if libc_file == next_file {
        return;
    }
    let mut message = Vec::with_capacity(400);
    message.extend_from_slice(b"amx-trap: ");
    message.extend_from_slice(next_file.to_bytes());
    message.extend_from_slice(
        b" also interposes sigaction and comes after libamx_trap_preload.so: the program's \
          signal handlers do not reach it; preload it before libamx_trap_preload.so\n",
    );
    // SAFETY: writes the buffer's bytes to standard error.
    let _ = unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
}

/// Declares `name() -> Option<type>`: the C library's function of that name.
macro_rules! real {
    ($($name:ident: $ty:ty;)*) => {
        $(
            // The variadic functions are declared as bare addresses (`usize`): assembly jumps
            // to them, which makes their transmute an identity.
            #[allow(clippy::useless_transmute)]
            pub(crate) fn $name() -> Option<$ty> {
                static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                let name = concat!(stringify!($name), "\0");
                let name = std::ffi::CStr::from_bytes_with_nul(name.as_bytes()).ok()?;
                let f = $crate::real::lookup(&SLOT, name);
                // SAFETY: a non-null address dlsym returned for this name is the C library's
                // function of that name, whose C type is `$ty`.
                (f != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(f) })
            }
        )*

        /// Finds every function now.
        pub(crate) fn resolve() {
            $(let _ = $name();)*
        }
    };
}

type SigSet = libc::sigset_t;

real! {
    sigaction: unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;
    sigprocmask: unsafe extern "C" fn(libc::c_int, *const SigSet, *mut SigSet) -> libc::c_int;
    pthread_sigmask: unsafe extern "C" fn(libc::c_int, *const SigSet, *mut SigSet) -> libc::c_int;
    sigpending: unsafe extern "C" fn(*mut SigSet) -> libc::c_int;
    sigsuspend: unsafe extern "C" fn(*const SigSet) -> libc::c_int;
    ppoll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const SigSet) -> libc::c_int;
    pselect: unsafe extern "C" fn(libc::c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *const libc::timespec, *const SigSet) -> libc::c_int;
    epoll_pwait: unsafe extern "C" fn(libc::c_int, *mut libc::epoll_event, libc::c_int, libc::c_int, *const SigSet) -> libc::c_int;
    syscall: unsafe extern "C" fn(libc::c_long, libc::c_long, libc::c_long, libc::c_long, libc::c_long, libc::c_long, libc::c_long) -> libc::c_long;
    arch_prctl: unsafe extern "C" fn(libc::c_int, libc::c_ulong) -> libc::c_int;
    pthread_create: unsafe extern "C" fn(*mut libc::pthread_t, *const libc::pthread_attr_t, extern "C-unwind" fn(*mut libc::c_void) -> *mut libc::c_void, *mut libc::c_void) -> libc::c_int;
    pthread_exit: unsafe extern "C-unwind" fn(*mut libc::c_void) -> !;
    // glibc 2.32: 0 and the mask, or 1 (PTHREAD_ATTR_NO_SIGMASK_NP) when the attributes set
    // none.
    pthread_attr_getsigmask_np: unsafe extern "C" fn(*const libc::pthread_attr_t, *mut SigSet) -> libc::c_int;
    posix_spawn: unsafe extern "C" fn(*mut libc::pid_t, *const libc::c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut libc::c_char, *const *mut libc::c_char) -> libc::c_int;
    posix_spawnp: unsafe extern "C" fn(*mut libc::pid_t, *const libc::c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut libc::c_char, *const *mut libc::c_char) -> libc::c_int;
    execve: unsafe extern "C" fn(*const libc::c_char, *const *const libc::c_char, *const *const libc::c_char) -> libc::c_int;
    execv: unsafe extern "C" fn(*const libc::c_char, *const *const libc::c_char) -> libc::c_int;
    execvp: unsafe extern "C" fn(*const libc::c_char, *const *const libc::c_char) -> libc::c_int;
    execvpe: unsafe extern "C" fn(*const libc::c_char, *const *const libc::c_char, *const *const libc::c_char) -> libc::c_int;
    fexecve: unsafe extern "C" fn(libc::c_int, *const *const libc::c_char, *const *const libc::c_char) -> libc::c_int;
    execl: usize;
    execlp: usize;
    execle: usize;
    __sigsetjmp: usize;
    getcontext: usize;
    swapcontext: usize;
    setcontext: usize;
    makecontext: unsafe extern "C" fn(*mut libc::ucontext_t, extern "C" fn(), libc::c_int, ...);
    siglongjmp: unsafe extern "C" fn(*mut libc::c_void, libc::c_int) -> !;
    longjmp: unsafe extern "C" fn(*mut libc::c_void, libc::c_int) -> !;
    _longjmp: unsafe extern "C" fn(*mut libc::c_void, libc::c_int) -> !;
    __longjmp_chk: unsafe extern "C" fn(*mut libc::c_void, libc::c_int) -> !;
    mprotect: unsafe extern "C" fn(*mut libc::c_void, libc::size_t, libc::c_int) -> libc::c_int;
    pkey_mprotect: unsafe extern "C" fn(*mut libc::c_void, libc::size_t, libc::c_int, libc::c_int) -> libc::c_int;
    munmap: unsafe extern "C" fn(*mut libc::c_void, libc::size_t) -> libc::c_int;
    madvise: unsafe extern "C" fn(*mut libc::c_void, libc::size_t, libc::c_int) -> libc::c_int;
    mmap: unsafe extern "C" fn(*mut libc::c_void, libc::size_t, libc::c_int, libc::c_int, libc::c_int, libc::off_t) -> *mut libc::c_void;
    getauxval: unsafe extern "C" fn(libc::c_ulong) -> libc::c_ulong;
    sigblock: unsafe extern "C" fn(libc::c_int) -> libc::c_int;
    sigsetmask: unsafe extern "C" fn(libc::c_int) -> libc::c_int;
    siggetmask: unsafe extern "C" fn() -> libc::c_int;
    sysconf: unsafe extern "C" fn(libc::c_int) -> libc::c_long;
    sigaltstack: unsafe extern "C" fn(*const libc::stack_t, *mut libc::stack_t) -> libc::c_int;
    mremap: unsafe extern "C" fn(*mut libc::c_void, libc::size_t, libc::size_t, libc::c_int, *mut libc::c_void) -> *mut libc::c_void;
}
