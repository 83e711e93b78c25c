//! A program that installed the engine itself gets its signal handlers called by the kernel
//! directly, also in the middle of a patched site's instruction (the fast path runs in the
//! program's own context). Such a handler may run patched AMX sites of its own and send
//! signals; the interrupted instruction must still look like one instruction:
//!
//! - a signal the engine takes meets the program at an instruction boundary, never inside
//!   the engine, also after a nested handler ran a patched site of its own;
//! - none is lost, and the nested handler's products and the interrupted ones are right.
//!
//! The test's loop runs one patched TDPBSSD site; another thread sends it SIGALRM, whose
//! handler (sa_mask: SIGBUS) runs patched tile sites (which must take the slow path while the
//! loop's instruction is under way), meets a `ud2` of its own (the program's SIGILL handler
//! skips it), and then sends its thread a SIGBUS, which the kernel delivers when the handler
//! returns: into the interrupted instruction. The engine takes SIGBUS (its own signal) and
//! must hold it back to the boundary past the instruction; the program's SIGBUS handler
//! checks where it landed. A second run has the handler leave the code it interrupted inside
//! the engine, as `siglongjmp` would: the engine must forget that instruction.
//!
//! Where the CPU has AMX the engine does not install and the test says so and passes.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use amx_runtime::intrinsics::*;
use amx_runtime::{Emulator, TileUnit};
use amx_trap as trap;

mod trap_support;
use trap_support::*;

/// SIGALRM round trips (alarm, then its SIGBUS handled) the test makes.
const ROUNDS: usize = 1500;
/// How long one round trip may take before the SIGBUS counts as lost.
const ROUND_LIMIT: Duration = Duration::from_secs(5);

/// The loop's code, `[start, end)`: where every SIGBUS must land.
static LOOP_START: AtomicU64 = AtomicU64::new(0);
static LOOP_END: AtomicU64 = AtomicU64::new(0);
/// Set by the sender when it is done: the loop stops.
static STOP: AtomicU64 = AtomicU64::new(0);
/// Products the loop ran.
static DOTS: AtomicU64 = AtomicU64::new(0);

static ALARMS: AtomicUsize = AtomicUsize::new(0);
static BUSES: AtomicUsize = AtomicUsize::new(0);
/// SIGBUS deliveries outside the loop, and the last such RIP.
static OUTSIDE: AtomicUsize = AtomicUsize::new(0);
static OUTSIDE_RIP: AtomicU64 = AtomicU64::new(0);
/// SIGILLs of the handler's own `ud2`.
static ILLS: AtomicUsize = AtomicUsize::new(0);
/// Handler products with a wrong result, or a `ud2` its SIGILL handler did not see.
static HANDLER_WRONG: AtomicUsize = AtomicUsize::new(0);
/// Whether the loop has started (the sender waits for it).
static RUNNING: AtomicBool = AtomicBool::new(false);
static LOOP_TID: AtomicI32 = AtomicI32::new(0);

/// Operands of the handler's product and its expected C (set before the first alarm).
static mut HANDLER_A: [u8; 1024] = [0; 1024];
static mut HANDLER_B: [u8; 1024] = [0; 1024];
static mut HANDLER_C: [u8; 1024] = [0; 1024];

use trap::sys::{getpid, gettid};

/// Sends `sig` to thread `tid` of this process (the engine's raw, async-signal-safe call).
fn tgkill(tid: i32, sig: i32) {
    let _ = trap::sys::tgkill(getpid(), tid, sig);
}

/// Callee-saved registers and RSP at the loop's start (rbx, rbp, r12-r15, rsp): where a
/// handler that leaves the interrupted code resumes the loop, as `siglongjmp` would.
static SNAPSHOT: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
/// Whether the alarm handler leaves the code it interrupted when that is inside the engine.
static LEAVE: AtomicBool = AtomicBool::new(false);
/// How often it did.
static LEFT: AtomicUsize = AtomicUsize::new(0);
/// The loop's signal mask, which a handler that leaves installs.
static LOOP_MASK: AtomicU64 = AtomicU64::new(0);

/// TDPBSSD tmm0, tmm1, tmm2 (one site) until [`STOP`] is set, counting into [`DOTS`]; the
/// loop's code range goes to [`LOOP_START`] and [`LOOP_END`] first. The loop keeps nothing in
/// registers, so that a handler can resume it at its start with [`SNAPSHOT`].
#[inline(never)]
fn dot_loop() {
    // SAFETY: the caller configured tiles 0, 1, 2 as 16 x 64 (TDPBSSD's operands match); the
    // loop only reads and writes statics.
    unsafe {
        core::arch::asm!(
            "lea rax, [rip + 2f]",
            "mov qword ptr [rip + {loop_start}], rax",
            "lea rax, [rip + 3f]",
            "mov qword ptr [rip + {loop_end}], rax",
            "mov qword ptr [rip + {snap}], rbx",
            "mov qword ptr [rip + {snap} + 8], rbp",
            "mov qword ptr [rip + {snap} + 16], r12",
            "mov qword ptr [rip + {snap} + 24], r13",
            "mov qword ptr [rip + {snap} + 32], r14",
            "mov qword ptr [rip + {snap} + 40], r15",
            "mov qword ptr [rip + {snap} + 48], rsp",
            "mov byte ptr [rip + {running}], 1",
            "2:",
            // tdpbssd tmm0, tmm1, tmm2
            ".byte 0xc4, 0xe2, 0x6b, 0x5e, 0xc1",
            "lock inc qword ptr [rip + {dots}]",
            "cmp qword ptr [rip + {stop}], 0",
            "je 2b",
            "3:",
            loop_start = sym LOOP_START,
            loop_end = sym LOOP_END,
            snap = sym SNAPSHOT,
            running = sym RUNNING,
            dots = sym DOTS,
            stop = sym STOP,
            clobber_abi("C"),
        );
    }
}

/// Resumes the loop at its start from the handler's context `uc`, as `siglongjmp` to a
/// `sigsetjmp` there would.
///
/// # Safety
/// `uc` is the handler's context; the loop is running on this thread.
unsafe fn leave_to_loop(uc: *mut libc::ucontext_t) {
    // SAFETY: the caller's contract.
    let uc = unsafe { &mut *uc };
    let g = &mut uc.uc_mcontext.gregs;
    let regs = [
        libc::REG_RBX,
        libc::REG_RBP,
        libc::REG_R12,
        libc::REG_R13,
        libc::REG_R14,
        libc::REG_R15,
        libc::REG_RSP,
    ];
    for (r, saved) in regs.iter().zip(&SNAPSHOT) {
        g[*r as usize] = saved.load(Ordering::SeqCst) as i64;
    }
    g[libc::REG_RIP as usize] = LOOP_START.load(Ordering::SeqCst) as i64;
    let mask = LOOP_MASK.load(Ordering::SeqCst);
    // SAFETY: sigset_t begins with the 64 bits of signals 1 to 64.
    unsafe { std::ptr::write_unaligned(std::ptr::addr_of_mut!(uc.uc_sigmask).cast::<u64>(), mask) };
}

extern "C" fn on_alarm(_sig: libc::c_int, _info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    if gettid() == LOOP_TID.load(Ordering::Acquire) {
        ALARMS.fetch_add(1, Ordering::SeqCst);
        let _scope = trap::handler_scope();
        let mut c = [0u8; 1024];
        // SAFETY: the handler's own unit (the scope): a valid configuration, then 16 x 64-byte
        // rows read from and written to 1 KiB statics (only this handler uses them, and it
        // does not nest: SIGALRM is blocked while it runs).
        unsafe {
            _tile_loadconfig(CONFIG_16X64.as_ptr());
            _tile_zero::<0>();
            _tile_loadd::<1>(std::ptr::addr_of!(HANDLER_A).cast(), 64);
            _tile_loadd::<2>(std::ptr::addr_of!(HANDLER_B).cast(), 64);
            _tile_dpbssd::<0, 1, 2>();
            _tile_stored::<0>(c.as_mut_ptr(), 64);
            _tile_release();
            if c != *std::ptr::addr_of!(HANDLER_C) {
                HANDLER_WRONG.fetch_add(1, Ordering::SeqCst);
            }
        }
        drop(_scope);
        // A fault of the handler's own, which the program's SIGILL handler skips (as a JIT's
        // trap would be): the program's, not the engine's, though it comes in the middle of
        // the engine's instruction.
        let ills = ILLS.load(Ordering::SeqCst);
        // SAFETY: `ud2` raises SIGILL, whose handler (`on_ill`) moves RIP past it.
        unsafe { core::arch::asm!("ud2") };
        if ILLS.load(Ordering::SeqCst) != ills + 1 {
            HANDLER_WRONG.fetch_add(1, Ordering::SeqCst);
        }
        // Blocked by the handler's sa_mask: delivered as it returns, into the interrupted
        // code.
        tgkill(gettid(), libc::SIGBUS);
        // SAFETY: the context of an SA_SIGINFO handler.
        let rip =
            unsafe { (*uc.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize] }
                as u64;
        let range = LOOP_START.load(Ordering::SeqCst)..LOOP_END.load(Ordering::SeqCst);
        if LEAVE.load(Ordering::SeqCst) && !range.contains(&rip) {
            LEFT.fetch_add(1, Ordering::SeqCst);
            // SAFETY: this handler's context, on the loop's thread, which runs the loop.
            unsafe { leave_to_loop(uc.cast()) };
        }
    }
    // SAFETY: as above; the interrupted code sees its own errno again.
    unsafe { *libc::__errno_location() = errno };
}

extern "C" fn on_ill(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the context of an SA_SIGINFO handler; the faulting instruction is a 2-byte ud2.
    unsafe { (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize] += 2 };
    ILLS.fetch_add(1, Ordering::SeqCst);
}

extern "C" fn on_bus(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the context of an SA_SIGINFO handler.
    let rip = unsafe { (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize] }
        as u64;
    let range = LOOP_START.load(Ordering::SeqCst)..LOOP_END.load(Ordering::SeqCst);
    if !range.contains(&rip) {
        OUTSIDE.fetch_add(1, Ordering::SeqCst);
        OUTSIDE_RIP.store(rip, Ordering::SeqCst);
    }
    BUSES.fetch_add(1, Ordering::SeqCst);
}

fn install_handlers() {
    // SAFETY: all-zero sigactions are valid; the handlers use atomics, tgkill and the trap
    // engine's handler scope (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_bus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        // SIGALRM waits for the SIGBUS handler (and the engine's return from it): an alarm
        // handler that left that one would abandon the tile state the engine saved for the
        // loop in its frame, as a handler leaving a handler does on the silicon.
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaddset(&mut sa.sa_mask, libc::SIGALRM);
        assert_eq!(libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()), 0);
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_sigaction = on_ill as *const () as usize;
        assert_eq!(libc::sigaction(libc::SIGILL, &sa, std::ptr::null_mut()), 0);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaddset(&mut sa.sa_mask, libc::SIGBUS);
        assert_eq!(libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()), 0);
    }
}

/// TDPBSSD of `a` and `b` into a zero C on the emulator, `n` times.
fn reference(a: &[u8], b: &[u8], n: u64) -> Vec<u8> {
    let mut emu = Emulator::new();
    emu.ldtilecfg(&CONFIG_16X64).unwrap();
    emu.tilezero(0).unwrap();
    emu.tileloadd(1, a, 64).unwrap();
    emu.tileloadd(2, b, 64).unwrap();
    emu.tdpbssd(0, 1, 2).unwrap();
    let mut once = vec![0u8; 1024];
    emu.tilestored(0, &mut once, 64).unwrap();
    // Every product adds the same i32s to C: n times them, wrapping as the instruction does.
    once.chunks_exact(4)
        .flat_map(|w| {
            let v = i32::from_le_bytes(w.try_into().unwrap());
            v.wrapping_mul(n as i32).to_le_bytes()
        })
        .collect()
}

/// The loop under alarms; `leave`: the handler leaves the code it interrupted inside the
/// engine.
fn nested_handlers(leave: bool) {
    LEAVE.store(leave, Ordering::SeqCst);
    install_handlers();
    trap::install().unwrap();
    amx_runtime::permit::request_permission().unwrap();
    let (a, b) = (bytes(21, 1024), bytes(22, 1024));
    let (ha, hb) = (bytes(23, 1024), bytes(24, 1024));
    // SAFETY: no alarm is sent yet; the handler reads these only after.
    unsafe {
        let put = |to: *mut [u8; 1024], from: &[u8]| (*to).copy_from_slice(from);
        put(std::ptr::addr_of_mut!(HANDLER_A), &ha);
        put(std::ptr::addr_of_mut!(HANDLER_B), &hb);
        put(std::ptr::addr_of_mut!(HANDLER_C), &reference(&ha, &hb, 1));
    }
    LOOP_TID.store(gettid(), Ordering::Release);
    let sender = std::thread::spawn(|| {
        while !RUNNING.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let tid = LOOP_TID.load(Ordering::Acquire);
        let mut lost = 0;
        for round in 0..ROUNDS {
            if lost > 0 {
                break;
            }
            tgkill(tid, libc::SIGALRM);
            let start = Instant::now();
            while BUSES.load(Ordering::SeqCst) <= round {
                if start.elapsed() > ROUND_LIMIT {
                    lost += 1;
                    break;
                }
                std::hint::spin_loop();
            }
            // A varying pause, so that alarms land at every point of the loop's instruction.
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_nanos((round as u64 * 7919) % 40_000) {
                std::hint::spin_loop();
            }
        }
        STOP.store(1, Ordering::SeqCst);
        lost
    });
    // SAFETY: reads this thread's mask into a sigset_t, whose first 64 bits are signals 1-64.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask);
        LOOP_MASK.store(
            std::ptr::read_unaligned(std::ptr::addr_of!(mask).cast::<u64>()),
            Ordering::SeqCst,
        );
    }
    let mut c = vec![0u8; 1024];
    // SAFETY: a valid configuration; 16 x 64-byte operand rows from 1 KiB buffers.
    unsafe {
        _tile_loadconfig(CONFIG_16X64.as_ptr());
        _tile_zero::<0>();
        _tile_loadd::<1>(a.as_ptr(), 64);
        _tile_loadd::<2>(b.as_ptr(), 64);
    }
    dot_loop();
    // SAFETY: tile 0 is configured 16 x 64; `c` holds 1 KiB.
    unsafe {
        _tile_stored::<0>(c.as_mut_ptr(), 64);
        _tile_release();
    }
    let lost = sender.join().unwrap();
    let dots = DOTS.load(Ordering::SeqCst);
    println!(
        "alarms {} buses {} lost {lost} outside {} (last at {:#x}) handler-wrong {} dots {dots} \
         patched {} left {}",
        ALARMS.load(Ordering::SeqCst),
        BUSES.load(Ordering::SeqCst),
        OUTSIDE.load(Ordering::SeqCst),
        OUTSIDE_RIP.load(Ordering::SeqCst),
        HANDLER_WRONG.load(Ordering::SeqCst),
        trap::patched_sites(),
        LEFT.load(Ordering::SeqCst),
    );
    assert_eq!(lost, 0, "SIGBUS lost");
    assert_eq!(ALARMS.load(Ordering::SeqCst), ROUNDS);
    assert_eq!(BUSES.load(Ordering::SeqCst), ROUNDS);
    assert_eq!(
        OUTSIDE.load(Ordering::SeqCst),
        0,
        "SIGBUS delivered inside the engine, last at {:#x}",
        OUTSIDE_RIP.load(Ordering::SeqCst)
    );
    assert_eq!(
        HANDLER_WRONG.load(Ordering::SeqCst),
        0,
        "handler products and faults"
    );
    if leave {
        // The products the handler left are the engine's limit (on the silicon they were
        // complete before the handler ran): C is not checked.
        assert!(
            LEFT.load(Ordering::SeqCst) > 0,
            "no handler left the engine"
        );
    } else {
        assert_eq!(
            c,
            reference(&a, &b, dots),
            "the loop's C after {dots} products"
        );
    }
}

#[test]
#[ignore = "run by signals_meet_nested_handlers_at_boundaries in a child process"]
fn child_nested_handlers() {
    if in_child() {
        nested_handlers(false);
    }
}

#[test]
#[ignore = "run by handlers_may_leave_a_patched_sites_instruction in a child process"]
fn child_nested_handlers_that_leave() {
    if in_child() {
        nested_handlers(true);
    }
}

fn run_child(test: &str) {
    let out = Child::new(test).timeout(Duration::from_secs(120)).run();
    print!("{}", out.stdout);
    out.assert_passed();
}

#[test]
fn signals_meet_nested_handlers_at_boundaries() {
    if trap_engine() {
        run_child("child_nested_handlers");
    }
}

/// A handler that leaves the interrupted code as `siglongjmp` does (here by resuming the loop
/// from its context) abandons the engine's instruction: the engine must forget it, or every
/// later site would take the slow path and every signal it takes would wait for an
/// instruction that never ends.
#[test]
fn handlers_may_leave_a_patched_sites_instruction() {
    if trap_engine() {
        run_child("child_nested_handlers_that_leave");
    }
}
