//! The engine's signal handler: one entry for every signal it takes (its own SIGILL, SIGSEGV,
//! SIGBUS, SIGTRAP and SIGSYS, and, under the preload, every signal the program handles).
//!
//! On entry it decides, with little stack (it may run on a program's small alternate stack):
//!
//! 1. A fault of the copy routine ([`crate::access`]): recorded, the routine resumed at its
//!    recovery label. A seccomp filter's SIGSYS for one of the engine's own system calls
//!    ([`crate::sys::issued_by_engine`]): the call fails with EPERM. Nothing else happens.
//! 2. A signal that arrived while the engine works on this thread (its `nest` count, a patched
//!    site's instruction under way) is *held back*: its siginfo kept in the thread's slot, the
//!    signal blocked in the interrupted context (SIGSEGV, SIGBUS and SIGSYS excepted, which
//!    the engine's own work must still meet), so that the engine's work finishes first and
//!    the program sees the signal at an instruction boundary. The engine delivers it when it
//!    is done, before the instances of it the kernel queued meanwhile. A load or store that
//!    the signal finds copying its rows (at a patched site, or trapped with the program's
//!    handled signals unblocked) is stopped instead at its row, and the signal delivered at
//!    the instruction, as the silicon's interrupted instruction takes it.
//!    (A synchronous fault
//!    there is a bug of the engine: reported, fatal. But one that comes while only a patched
//!    site's instruction is under way is a program handler's that the kernel called directly
//!    in its middle, and is taken as in 3.)
//! 3. Otherwise the work starts: on the thread's work stack (the slot's), [`dispatch`] copies
//!    the kernel's frame, does what the signal asks (emulate an instruction, deliver to the
//!    program's handler, ...), delivers the held-back signals, and leaves through
//!    `rt_sigreturn` from a frame it prepared. It never returns into the kernel's frame: that
//!    frame may lie at the top of an alternate stack where another frame is about to go.
//! 4. A thread that has no slot and cannot map one (no address space left) has no work stack:
//!    [`crate::slotless`] works on the kernel's frame, and either returns into it or leaves
//!    through `rt_sigreturn` into the program's handler.
//!
//! The work stack is the slot's own: a signal handler of the program may run on an alternate
//! stack of a few KiB, and executing an instruction needs more. While the engine works, every
//! signal but SIGSEGV, SIGBUS (the copy routine's faults) and SIGSYS (a seccomp filter trapping
//! the engine's own system calls) is blocked; such a signal sent by a process meanwhile is
//! held back (2).

use std::sync::atomic::Ordering;

use crate::kframe::{self, reg, RtFrame, Ucontext};
use crate::slot::{self, Slot};
use crate::{access, signals};

// The entry the kernel calls: rdi = signal, rsi = siginfo, rdx = ucontext, [rsp] = the
// frame's return address. Counts itself in the slot's `nest` first thing (so an entry it
// interrupts, or that interrupts it, knows), then asks `amx_trap_entry_rust` what to do: 0 is
// "done" (return into the kernel's frame, whose restorer calls rt_sigreturn), else the top of
// the work stack to run `amx_trap_dispatch` on, which never returns.
core::arch::global_asm!(
    ".pushsection .text.amx_trap_entry,\"ax\",@progbits",
    ".p2align 4",
    ".hidden amx_trap_entry",
    ".globl amx_trap_entry",
    ".type amx_trap_entry, @function",
    "amx_trap_entry:",
    // Unwind information, for debuggers, profilers and crash reporters that walk the stack
    // from the engine's code: the return address is the kernel frame's (the restorer, which
    // unwinders recognise as a signal frame by its bytes), and the walk goes on through the
    // kernel's frame into the interrupted code.
    ".cfi_startproc",
    // EFLAGS.AC off: the kernel enters a handler with the interrupted AC (it clears only DF,
    // RF and TF), and with AC set the engine's own unaligned accesses would raise #AC. The
    // frame keeps the program's flags for rt_sigreturn.
    "    pushfq",
    ".cfi_adjust_cfa_offset 8",
    "    and dword ptr [rsp], {no_ac}",
    "    popfq",
    ".cfi_adjust_cfa_offset -8",
    "    mov rax, qword ptr [rip + amx_trap_thread@GOTTPOFF]",
    "    mov rax, qword ptr fs:[rax]",
    "    xor ecx, ecx",
    "    test rax, rax",
    "    jz 2f",
    "    mov ecx, 1",
    "    xadd qword ptr [rax], rcx",
    ".hidden amx_trap_entry_counted",
    ".globl amx_trap_entry_counted",
    "amx_trap_entry_counted:",
    "2:",
    "    push rdi",
    ".cfi_adjust_cfa_offset 8",
    "    push rsi",
    ".cfi_adjust_cfa_offset 8",
    "    push rdx",
    ".cfi_adjust_cfa_offset 8",
    "    call {rust}",
    "    pop rdx",
    ".cfi_adjust_cfa_offset -8",
    "    pop rsi",
    ".cfi_adjust_cfa_offset -8",
    "    pop rdi",
    ".cfi_adjust_cfa_offset -8",
    "    test rax, rax",
    "    jnz 3f",
    "    ret",
    "3:",
    // The work stack: the kernel's frame's address (the entry's RSP) kept at its top, twice
    // (RSP stays 16-byte aligned), for the unwind information: CFA = *RSP + 8
    // (DW_CFA_def_cfa_expression: DW_OP_breg7 0, DW_OP_deref, DW_OP_plus_uconst 8).
    "    mov rcx, rsp",
    ".cfi_def_cfa_register rcx",
    "    mov rsp, rax",
    "    push rcx",
    "    push rcx",
    ".cfi_escape 0x0f, 0x05, 0x77, 0x00, 0x06, 0x23, 0x08",
    "    call {dispatch}",
    "    ud2",
    ".cfi_endproc",
    ".size amx_trap_entry, . - amx_trap_entry",
    ".popsection",
    rust = sym entry_rust,
    dispatch = sym dispatch,
    no_ac = const NO_AC,
);

/// EFLAGS with AC (alignment check, bit 18) cleared, as an `and` mask.
pub(crate) const NO_AC: i32 = !0x4_0000;

extern "C" {
    fn amx_trap_entry();
    fn amx_trap_entry_counted();
}

/// The entry's address, for `sigaction`.
pub(crate) fn handler() -> usize {
    amx_trap_entry as *const () as usize
}

/// Whether `rip` lies in the entry's first instructions, before it counted itself.
fn in_entry_head(rip: u64) -> bool {
    let start = amx_trap_entry as *const () as u64;
    let counted = amx_trap_entry_counted as *const () as u64;
    (start..counted).contains(&rip)
}

/// `si_code` of a siginfo.
pub(crate) fn si_code(info: &[u8; 128]) -> i32 {
    i32::from_le_bytes([info[8], info[9], info[10], info[11]])
}

/// Whether `sig` with `code` is a fault the CPU raised at the interrupted instruction, or a
/// seccomp filter's SIGSYS for the system call it made (not one a process sent): the kernel
/// forces these, blocked or ignored they end the process.
pub(crate) fn synchronous(sig: i32, code: i32) -> bool {
    code > 0
        && matches!(
            sig,
            libc::SIGILL
                | libc::SIGSEGV
                | libc::SIGBUS
                | libc::SIGTRAP
                | libc::SIGFPE
                | libc::SIGSYS
        )
}

/// `si_code` of a single-step trap (EFLAGS.TF).
const TRAP_TRACE: i32 = 2;

/// `si_code` of a seccomp filter's SIGSYS (`SECCOMP_RET_TRAP`).
const SYS_SECCOMP: i32 = 1;

/// What the entry decides, on whatever stack the kernel chose.
extern "C" fn entry_rust(sig: i32, info: *mut u8, uc: *mut Ucontext, nested: u64) -> u64 {
    // SAFETY: the kernel passes a 128-byte siginfo and its ucontext to an SA_SIGINFO handler;
    // both live in the frame until the handler returns.
    let (info, uc) = unsafe { (&mut *info.cast::<[u8; 128]>(), &mut *uc) };
    // Inside the preload's `vfork`, the task's thread-local words first.
    crate::vfork::settle(uc, crate::tls::thread().load(Ordering::Acquire));
    let code = si_code(info);
    let rip = uc.rip();
    let slot = slot::current();
    if (sig == libc::SIGSEGV || sig == libc::SIGBUS) && code > 0 && access::in_copy(rip) {
        if let Some(slot) = slot {
            slot.record_fault(info, uc.gregs[reg::TRAPNO], uc.gregs[reg::ERR]);
            slot.nest.fetch_sub(1, Ordering::Relaxed);
        }
        uc.gregs[reg::RIP] = access::recover_at();
        return 0;
    }
    // A seccomp filter trapping one of the engine's own system calls (SECCOMP_RET_TRAP): the
    // program made no such call, and on the silicon its AMX instruction makes none, so the
    // SIGSYS is not the program's. The call fails as a filter's refusal with an errno would
    // (the kernel left RAX holding the call's number), and the engine goes on without it, as
    // it does where a filter returns EPERM.
    if sig == libc::SIGSYS && code == SYS_SECCOMP && crate::sys::issued_by_engine(rip) {
        if let Some(slot) = slot {
            slot.nest.fetch_sub(1, Ordering::Relaxed);
        }
        uc.gregs[reg::RAX] = (-i64::from(libc::EPERM)) as u64;
        return 0;
    }
    // The kernel refusing a thread's tile state while the engine primes it (out of memory in
    // its XFD handler): the routine resumes at its recovery label, which reports it.
    if sig == libc::SIGSEGV && code == crate::deliver::SI_KERNEL && crate::assist::in_prime(rip) {
        if let Some(slot) = slot {
            slot.nest.fetch_sub(1, Ordering::Relaxed);
        }
        uc.gregs[reg::RIP] = crate::assist::prime_refused_at();
        return 0;
    }
    if let Some(slot) = slot {
        let restoring = crate::deliver::in_restorer(rip) == Some(false);
        // The program's own context, not the engine's.
        let program = nested == 0 && !restoring && !in_entry_head(rip);
        if program {
            crate::fastpath::forget_if_left(slot, uc);
        }
        let in_fast = crate::fastpath::holds_back(slot);
        // A fault of the program's while a patched site's instruction is under way: a handler
        // the kernel called directly (the engine installed in-process takes no signal but its
        // own) interrupted the site, and faulted, or trapped an AMX instruction, or took a
        // site's slow path. It is taken as any, on the work stack, which the site does not use
        // (it runs on the program's stack). The engine's own code there faults only in the
        // copy routine (above); under the preload every handler goes through the engine, so
        // there such a fault is the engine's.
        let handlers = program && in_fast && synchronous(sig, code) && !signals::virtualized();
        if (!program || in_fast) && !handlers {
            if synchronous(sig, code) {
                if !slot.is_callers() {
                    crate::fatal::shared_state(sig, rip);
                }
                if sig == libc::SIGTRAP && code == TRAP_TRACE {
                    crate::fatal::single_step(rip);
                }
                crate::fatal::engine_fault(sig, rip);
            }
            // Blocked in the program's own context (a patched site's), the signal must be
            // unblocked again when the program resumes; blocked in the engine's, it is gone
            // with the engine's context.
            hold_back(slot, sig, info, uc, in_fast);
            // A load or store copying its rows (a patched site's, or a trapped one's with the
            // program's handled signals unblocked: `handler::interruptible`): the silicon may
            // interrupt such an instruction between rows (start_row holds where it resumes),
            // and must where it waits for a page that is not there (one that userfaultfd keeps
            // missing): held back until the page came, the signal could wait forever, its
            // handler being what makes the page come. The copy stops as if it faulted, and the
            // instruction stays at its row; the signal is delivered there. Whether the page is
            // there is not asked (`mincore`): sandboxes kill on calls outside their list, and
            // systemd's `@system-service` lacks that one.
            let stoppable = if program {
                in_fast
            } else {
                slot.stoppable_copy.load(Ordering::Acquire)
            };
            if stoppable && access::in_copy(rip) {
                slot.restart.store(true, Ordering::Release);
                uc.gregs[reg::RIP] = access::recover_at();
            }
            slot.nest.fetch_sub(1, Ordering::Relaxed);
            return 0;
        }
    }
    match slot::get_light() {
        Ok(slot) => {
            if slot.nest.load(Ordering::Relaxed) == 0 {
                // The slot was claimed just now, after the entry's count: count this entry.
                slot.nest.store(1, Ordering::Relaxed);
            }
            slot.work_top()
        }
        // No work stack: what can be done is done on the kernel's frame.
        Err(errno) => {
            crate::slotless::take(sig, info, uc, errno);
            0
        }
    }
}

/// Keeps `sig` for later: its siginfo in the slot, the signal blocked in the interrupted
/// context until the engine delivers it (or raises it again). `program` says the interrupted
/// context is the program's (its mask is the program's to get back). SIGSEGV, SIGBUS and
/// SIGSYS are never blocked: the engine's copy faults and the seccomp refusals of its system
/// calls, which may come later in the same work or patched instruction, must stay deliverable
/// (blocked, the kernel would end the process with them); another instance sent meanwhile
/// merges into the one kept, as a standard signal pending twice does.
fn hold_back(slot: &Slot, sig: i32, info: &[u8; 128], uc: &mut Ucontext, program: bool) {
    let bit = signals::bit(sig);
    if slot.deferred.load(Ordering::Relaxed) & bit == 0 {
        slot.set_deferred_info(sig, info);
        slot.deferred.fetch_or(bit, Ordering::Relaxed);
    }
    if bit & !signals::ENTRY_MASK != 0 {
        return;
    }
    if uc.sigmask & bit == 0 {
        uc.sigmask |= bit;
        if program {
            slot.held_back.fetch_or(bit, Ordering::Relaxed);
        }
    }
}

/// The largest FP state the engine copies (the kernel's is about 11 KiB with AMX state).
pub(crate) const FP_MAX: usize = 16 * 1024;

/// A signal frame the engine returns through: the kernel's layout, its FP state after it.
#[repr(C, align(64))]
pub(crate) struct Ctx {
    /// Puts `fp` at a multiple of 64 bytes, as XSAVE state must be (8 + 440 = 448).
    _pad: [u8; 8],
    pub(crate) frame: RtFrame,
    /// The FP state: its first `fp_len` bytes (not cleared beyond: the engine never reads
    /// there, and clearing 16 KiB per signal would cost more than the rest of the work).
    fp: [std::mem::MaybeUninit<u8>; FP_MAX],
    fp_len: usize,
}

const _: () = assert!(std::mem::offset_of!(Ctx, fp) % 64 == 0);

impl Ctx {
    /// The FP state's size (0: the frame carries none).
    pub(crate) fn fp_size(&self) -> usize {
        self.fp_len
    }

    /// The FP state.
    pub(crate) fn fp(&self) -> &[u8] {
        // SAFETY: the first `fp_len` bytes are initialized (`set_fp`), `fp_len <= FP_MAX`.
        unsafe { std::slice::from_raw_parts(self.fp.as_ptr().cast(), self.fp_len) }
    }

    /// The FP state, writable.
    pub(crate) fn fp_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `fp`.
        unsafe { std::slice::from_raw_parts_mut(self.fp.as_mut_ptr().cast(), self.fp_len) }
    }

    /// Copies the FP state a handler's frame points to, `len` bytes as its software bytes say
    /// (the program's memory: a handler may point `fpregs` anywhere), and points the context's
    /// `fpregs` at the copy. `Err` where it cannot be read, as `rt_sigreturn` fails on a frame
    /// it cannot read. A size past the buffer is cut to it: the kernel then finds the state
    /// inconsistent and restores its legacy part only, as it does for such a frame.
    pub(crate) fn set_fp_from_program(&mut self, src: u64, len: usize) -> Result<(), ()> {
        let len = len.min(FP_MAX);
        // SAFETY: the buffer holds FP_MAX >= len bytes; the source is any address (a fault is
        // recovered).
        unsafe { access::copy(self.fp.as_mut_ptr().cast::<u8>(), src as *const u8, len) }
            .map_err(|_| ())?;
        self.fp_len = len;
        self.frame.uc.fpregs = self.fp.as_ptr() as u64;
        Ok(())
    }

    /// Copies `len` bytes of FP state from `src` (a frame the kernel wrote) and points the
    /// context's `fpregs` at the copy. A state larger than the buffer cannot be kept: fatal.
    ///
    /// # Safety
    /// `src` is valid for reads of `len` bytes.
    pub(crate) unsafe fn set_fp(&mut self, src: *const u8, len: usize) {
        if len > FP_MAX {
            crate::fatal::fp_too_large(len);
        }
        // SAFETY: the caller's contract; the buffer holds FP_MAX bytes.
        unsafe { std::ptr::copy_nonoverlapping(src, self.fp.as_mut_ptr().cast::<u8>(), len) };
        self.fp_len = len;
        self.frame.uc.fpregs = self.fp.as_ptr() as u64;
    }
}

/// Leaves through `rt_sigreturn` from `ctx`: the thread continues in the context it describes
/// (registers, FP state, signal mask, alternate stack).
///
/// # Safety
/// `ctx` is a complete frame: its `fpregs` is 0 or points to its own FP state.
pub(crate) unsafe fn sigreturn(ctx: &Ctx) -> ! {
    // SAFETY: the caller's contract.
    unsafe { sigreturn_from(&ctx.frame.uc) }
}

/// Leaves through `rt_sigreturn` from the frame whose `uc` is at `uc`.
///
/// # Safety
/// `uc` is a complete context, in a frame (`rt_sigreturn` reads only its `uc`); its `fpregs`
/// is 0 or points to FP state that stays valid until the call.
pub(crate) unsafe fn sigreturn_from(uc: *const Ucontext) -> ! {
    // SAFETY: rt_sigreturn reads the frame at RSP - 8 (its `uc` at RSP); the caller vouches for
    // its contents. Nothing runs after it on this stack.
    unsafe {
        core::arch::asm!(
            "mov rsp, {uc}",
            "mov eax, 15",
            "syscall",
            "ud2",
            uc = in(reg) uc,
            options(noreturn),
        )
    }
}

/// The work, on the thread's work stack; ends with `rt_sigreturn`.
extern "C" fn dispatch(sig: i32, info: *mut u8, uc: *mut Ucontext) -> ! {
    let slot = match slot::current() {
        Some(slot) => slot,
        None => crate::fatal::no_memory(libc::ENOMEM),
    };
    // On the work stack now: room to write the unit of a slot the entry just claimed.
    slot.prepare_unit();
    // SAFETY: the kernel's frame, as in `entry_rust`; read before anything can overwrite it.
    let (info, kernel_uc) = unsafe { (&*info.cast::<[u8; 128]>(), &*uc) };
    let mut ctx = std::mem::MaybeUninit::<Ctx>::uninit();
    let ctx = load(&mut ctx, kernel_uc, info);
    // The program's alternate stack is in use below the interrupted context: a nested
    // SA_ONSTACK signal (a copy fault) must not land on it. rt_sigreturn restores it.
    if ctx.frame.uc.stack.flags & kframe::SS_ONSTACK != 0 {
        signals::disable_altstack();
    }
    let resume = crate::handler::handle(slot, sig, ctx);
    finish(slot, resume)
}

/// Copies the kernel's frame into `out`, on the work stack.
fn load<'a>(
    out: &'a mut std::mem::MaybeUninit<Ctx>,
    uc: &Ucontext,
    info: &[u8; 128],
) -> &'a mut Ctx {
    let ctx = out.as_mut_ptr();
    // SAFETY: `ctx` is this frame's own storage, every field but the FP buffer (whose bytes
    // may stay uninitialized) written before a reference to it exists; the kernel's FP state
    // is `fp_size` bytes at `uc.fpregs`, in its frame.
    unsafe {
        std::ptr::addr_of_mut!((*ctx)._pad).write([0; 8]);
        std::ptr::addr_of_mut!((*ctx).frame.pretcode).write(0);
        std::ptr::addr_of_mut!((*ctx).frame.uc).write(*uc);
        std::ptr::addr_of_mut!((*ctx).frame.info).write(*info);
        std::ptr::addr_of_mut!((*ctx).fp_len).write(0);
        let ctx = &mut *ctx;
        if uc.fpregs != 0 {
            let head = &*(uc.fpregs as *const [u8; 512]);
            ctx.set_fp(uc.fpregs as *const u8, kframe::fp_size(head));
        }
        ctx
    }
}

/// What the thread does after the engine's work.
pub(crate) enum Resume<'a> {
    /// Continue in this context (possibly changed: RIP past an emulated instruction).
    Context(&'a mut Ctx),
    /// Continue in this context, which enters a program handler through a frame the engine
    /// built.
    Handler(&'a mut Ctx),
}

/// Ends the engine's work on the thread: no signal may start other work before the thread
/// leaves it (the others are blocked already, by the entry's or the restorer's mask; the copy
/// routine is done with), and the held-back signals are raised again, blocked until the
/// context the thread leaves to unblocks them: the program meets them at the instruction
/// boundary it resumes at. Returns the signals the engine blocked in the program's context,
/// which that context unblocks.
///
/// While a patched site's instruction is still under way (the work is a handler's that the
/// kernel called in its middle), the signals blocked in the site's context stay for the site,
/// whose exit unblocks them there (the fast path's held-back exit): the work returns none.
pub(crate) fn raise_held_back(slot: &Slot) -> u64 {
    let sys = signals::bit(libc::SIGSYS);
    signals::block(signals::bit(libc::SIGSEGV) | signals::bit(libc::SIGBUS));
    let held = if slot.fast_frame.load(Ordering::Acquire) == 0 {
        slot.held_back.swap(0, Ordering::Relaxed)
    } else {
        0
    };
    // SIGSYS stays unblocked while the others are raised, their system calls being the
    // engine's own (a filter may trap them: see `sys::issued_by_engine`); the work is still
    // counted, so a SIGSYS sent meanwhile is held back too, and raised last, once blocked.
    let deferred = slot.deferred.swap(0, Ordering::Relaxed);
    raise(slot, deferred & !sys);
    signals::block(sys);
    let deferred = (deferred | slot.deferred.swap(0, Ordering::Relaxed)) & sys;
    slot.nest.store(0, Ordering::Relaxed);
    raise(slot, deferred);
    held
}

/// Raises again the signals of `deferred`, each with the siginfo kept for it.
fn raise(slot: &Slot, deferred: u64) {
    for sig in 1..=64 {
        if deferred & signals::bit(sig) != 0 {
            let _ = signals::raise_here(sig, &slot.deferred_info(sig));
        }
    }
}

/// Delivers the signals held back while the engine worked to the program, at the boundary the
/// thread resumes at, as the kernel delivers a signal it has dequeued: each with its own
/// siginfo, and before the instances of it that the kernel queued meanwhile (they found it
/// blocked in the interrupted context). Queued again instead, a real-time signal would come
/// after its successors, and a standard signal would merge into a later instance pending, or
/// be refused where the user's queue is full. Each is entered on top of the one before, as the
/// kernel stacks the frames of the signals it finds pending (the lowest number first, so its
/// handler runs last). One that the context then blocks (the handler just entered blocks it)
/// stays held, to be raised again on the way out.
///
/// While a patched site's instruction is still under way (the work is a handler's that the
/// kernel called in its middle) nothing is delivered: the signals wait for the instruction.
fn deliver_held_back<'a>(slot: &Slot, resume: Resume<'a>) -> Resume<'a> {
    if slot.deferred.load(Ordering::Relaxed) == 0
        || slot.fast_frame.load(Ordering::Acquire) != 0
        || slot.ending.swap(false, Ordering::Relaxed)
    {
        return resume;
    }
    let (ctx, mut entered) = match resume {
        Resume::Context(ctx) => (ctx, false),
        Resume::Handler(ctx) => (ctx, true),
    };
    // The program's context no longer blocks them: each handler's frame records its mask
    // without them (a handler's entry computed its own without them already).
    let held = slot.held_back.swap(0, Ordering::Relaxed);
    if !entered {
        ctx.frame.uc.sigmask &= !held;
    }
    for sig in 1..=64 {
        let bit = signals::bit(sig);
        if slot.deferred.load(Ordering::Relaxed) & bit == 0
            || signals::program_mask(ctx.frame.uc.sigmask) & bit != 0
        {
            continue;
        }
        // Copied before the bit clears: an entry writes a signal's siginfo only while its bit
        // is clear.
        let info = slot.deferred_info(sig);
        slot.deferred.fetch_and(!bit, Ordering::Relaxed);
        if let Resume::Handler(_) = crate::deliver::deliver(slot, ctx, sig, &info, false) {
            entered = true;
        }
    }
    if entered {
        Resume::Handler(ctx)
    } else {
        Resume::Context(ctx)
    }
}

/// Delivers the held-back signals, raises again those it could not deliver, and leaves.
fn finish(slot: &Slot, resume: Resume<'_>) -> ! {
    let resume = deliver_held_back(slot, resume);
    let held = raise_held_back(slot);
    let ctx = match resume {
        // The program's own context: the signals the engine blocked in it unblocked again.
        Resume::Context(ctx) => {
            ctx.frame.uc.sigmask &= !held;
            ctx
        }
        // A handler's entry: its mask was computed from the program's, without them.
        Resume::Handler(ctx) => ctx,
    };
    // SAFETY: `ctx` is complete: loaded from the kernel's frame and changed field by field.
    unsafe { sigreturn(ctx) }
}
