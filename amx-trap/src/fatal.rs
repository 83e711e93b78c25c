//! The engine's fatal paths: a message on standard error that names the cause, then the signal
//! Linux itself would end the thread with. Async-signal-safe (`write` and raw system calls).

/// Writes `parts` to standard error, one `write` each (no buffer, no allocation).
pub(crate) fn say(parts: &[&[u8]]) {
    for part in parts {
        let mut left = *part;
        while !left.is_empty() {
            match crate::sys::write(2, left) {
                Ok(n) if n > 0 => left = left.get(n as usize..).unwrap_or_default(),
                _ => break,
            }
        }
    }
}

/// `n` in decimal, into `buf`; the digits written.
pub(crate) fn decimal(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    // u64::MAX has 20 digits: the buffer always holds them.
    let mut at = buf.len();
    let mut n = n;
    for digit in buf.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
        at -= 1;
        if n == 0 {
            break;
        }
    }
    buf.get(at..).unwrap_or_default()
}

/// `n` in hexadecimal with `0x`, into `buf`.
pub(crate) fn hex(n: u64, buf: &mut [u8; 18]) -> &[u8] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let (prefix, digits) = buf.split_at_mut(2);
    prefix.copy_from_slice(b"0x");
    for (i, d) in digits.iter_mut().enumerate() {
        *d = DIGITS
            .get(((n >> (60 - 4 * i)) & 0xF) as usize)
            .copied()
            .unwrap_or(b'?');
    }
    buf
}

/// Ends the process with `sig` as its default action does (a core dump where that is the
/// default), whatever the program installed or blocked. Where the default action cannot be
/// put in the kernel's table (a sandbox refusing `rt_sigaction`), a fault of the signal's
/// kind, raised with the signal blocked, makes the kernel take its default action itself, as
/// it does for any fault it cannot deliver; failing that, the process exits with `128 + sig`.
pub(crate) fn die_of(sig: i32) -> ! {
    let bit = crate::signals::bit(sig);
    if crate::signals::kernel_default(sig) {
        crate::signals::unblock(bit);
        let _ = crate::sys::tgkill(crate::sys::getpid(), crate::sys::gettid(), sig);
    } else {
        crate::signals::block(bit);
        // SAFETY: each raises its exception and never completes: a load from address 0
        // (unmapped in every Linux process), an undefined opcode, a breakpoint. The kernel
        // ends the process at it.
        unsafe {
            match sig {
                libc::SIGSEGV => core::arch::asm!(
                    "mov {v}, qword ptr [{at}]",
                    at = in(reg) 0usize,
                    v = out(reg) _,
                    options(nostack, readonly)
                ),
                libc::SIGILL => core::arch::asm!("ud2", options(nostack, nomem)),
                libc::SIGTRAP => core::arch::asm!("int3", options(nostack, nomem)),
                _ => {}
            }
        }
    }
    // SAFETY: ends the process; no memory argument.
    unsafe { crate::sys::call(libc::SYS_exit_group, &[128 + sig as u64]) };
    loop {
        std::hint::spin_loop();
    }
}

/// No memory for the thread's engine state: Linux ends a thread whose AMX state it cannot
/// allocate with SIGSEGV; so does the engine, after saying why.
pub(crate) fn no_memory(errno: i32) -> ! {
    let mut buf = [0u8; 20];
    say(&[
        b"amx-trap: no memory for this thread's AMX state (mmap failed, errno ",
        decimal(u64::from(errno.unsigned_abs()), &mut buf),
        b"); the thread gets SIGSEGV, as on Linux when it cannot allocate a thread's AMX state\n",
    ]);
    die_of(libc::SIGSEGV)
}

/// A fault inside the engine's own code: a bug of the engine.
pub(crate) fn engine_fault(sig: i32, rip: u64) -> ! {
    inside_engine(sig, rip, b": a bug of amx-trap, please report it\n")
}

/// A fault inside the engine's own code on a thread that reached another thread's engine
/// state through a shared thread pointer (see [`crate::slot::Slot::is_callers`]): what the
/// engine does not support, said as such rather than as a bug of its own.
pub(crate) fn shared_state(sig: i32, rip: u64) -> ! {
    inside_engine(
        sig,
        rip,
        b" on a thread that shares another thread's thread pointer (a clone without \
          CLONE_SETTLS, or a vfork made by the system call, running AMX instructions): not \
          supported\n",
    )
}

/// A single-step trap inside the engine: the program set EFLAGS.TF itself (not a debugger,
/// whose ptrace sees the trap first) and stepped into a patched site, what the engine does not
/// support, said as such rather than as a bug of its own.
pub(crate) fn single_step(rip: u64) -> ! {
    inside_engine(
        libc::SIGTRAP,
        rip,
        b": the program single-steps (EFLAGS.TF) into a patched AMX instruction: not \
          supported (AMX_TRAP_PATCH=0 runs it, one step short)\n",
    )
}

/// Says that signal `sig` came inside the engine at `rip`, then `why`, and dies of it.
fn inside_engine(sig: i32, rip: u64, why: &[u8]) -> ! {
    let (mut a, mut b) = ([0u8; 20], [0u8; 18]);
    say(&[
        b"amx-trap: signal ",
        decimal(u64::from(sig.unsigned_abs()), &mut a),
        b" inside the engine at ",
        hex(rip, &mut b),
        why,
    ]);
    die_of(sig)
}

/// An FP state larger than the engine's buffer (a CPU with more state than any known today).
pub(crate) fn fp_too_large(bytes: usize) -> ! {
    let mut buf = [0u8; 20];
    say(&[
        b"amx-trap: the signal frame's FP state has ",
        decimal(bytes as u64, &mut buf),
        b" bytes, more than the engine can hold\n",
    ]);
    die_of(libc::SIGSEGV)
}
