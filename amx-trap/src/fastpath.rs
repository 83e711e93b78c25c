//! The fast path of patched sites: a stub per site, one common entry, and the rules that keep
//! a signal arriving meanwhile at an instruction boundary.
//!
//! A site's stub (64 bytes; stubs share pages mapped within ±2 GiB of their sites):
//!
//! ```text
//!  0: 48 8D 64 24 80      lea rsp, [rsp-128]     ; the interrupted code's red zone stays intact
//!  5: FF 15 0D 00 00 00   call [rip+13]          ; the common entry, at offset 24
//! 11: 0F 0B               ud2                    ; the fault exit (the call's return address)
//! 13: 0F 0B               ud2                    ; the exit that raises held-back signals
//! 24: <entry address>
//! 32: <site number>       (u32)
//! 40: <site address>      (for the entry's unwind information)
//! ```
//!
//! The common entry pushes RFLAGS and the 15 general-purpose registers (the *frame*), marks
//! the thread's slot (`fast_frame`), saves the vector state the compiled code can change
//! (ymm0-15 and MXCSR; with `XSAVE` x87 to AVX-512 where the OS enables AVX-512 state), loads
//! the MXCSR a signal handler gets (so results are the slow path's bit for bit), and calls
//! [`fast`], which runs the instruction on the thread's unit, on the program's stack (a switch
//! to another stack would let a nested `SA_ONSTACK` signal land on an alternate stack the
//! program is using). The entry restores everything, clears the mark and returns with
//! `ret 128` to the address `fast` chose: past the instruction, or the fault exit (the slow
//! path then raises the exception at the site, with the registers the instruction saw), or
//! the held-back exit.
//!
//! **Signals meanwhile.** The program must meet a signal between instructions, as on the
//! silicon. The signal entry ([`crate::entry`]) asks [`settle`] and [`holds_back`]:
//!
//! - in the stub, or in the entry before the mark: the instruction has not started; the
//!   context is rolled back to the site (registers from the frame, RSP as at the site) and the
//!   signal delivered there;
//! - marked, the instruction under way: the signal is held back (blocked, its siginfo kept);
//!   the entry then leaves through the held-back exit, whose SIGILL makes the engine deliver
//!   it at the boundary past the instruction; but where the signal finds the instruction's
//!   load or store copying (perhaps waiting for a page that `userfaultfd` keeps missing), the
//!   copy stops as at a fault (start_row at the row) and the signal is delivered at the site,
//!   which resumes the instruction from start_row afterwards, as the silicon's interrupted
//!   load does ([`restart_or_past`]);
//! - marked, the instruction done (`fast_commit`, which the entry sets when [`fast`]
//!   returns), or in the entry's last instructions after the mark: the context is rolled
//!   forward to past the instruction (registers from the frame, vector state from its save
//!   area) and the signal delivered there.
//!
//! **Handlers in the middle.** A program that installed the engine itself has its own
//! handlers called by the kernel directly, also while [`fast`] runs. The marks stay the
//! interrupted instruction's: a site such a handler reaches meanwhile takes the slow path
//! (the entry leaves through the fault exit without marking), a fault of the handler's is
//! its own (not the engine's), a signal the engine takes in the handler waits for the
//! instruction's boundary, and the held-back exit finds where to resume from the site, not
//! from marks a handler at that exit could have changed. A handler that leaves by
//! `siglongjmp` leaves marks whose context is gone: the engine forgets them when it next
//! meets the thread above their frame ([`forget_if_left`]).
//!
//! The program's stack holds the frame, the vector save area and [`fast`]'s own frames, with
//! the emulator's kernels under them: about 7.5 KiB (with `XSAVE`; 11 KiB on the portable
//! kernels) below the function that ran the instruction, as `tests/c/stack.c` measures it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use amx_tilecfg::decode::{Operation, MAX_LEN};

use crate::entry::Ctx;
use crate::exec::{self, Outcome};
use crate::kframe::{self, reg};
use crate::regs::Regs;
use crate::slot::{self, offsets, Slot};
use crate::{access, patch};

/// Bytes per stub.
const STUB: u64 = 64;
/// Offset in a stub of its fault exit (`ud2`), the return address its `call` pushes.
pub(crate) const FAULT_EXIT: u64 = 11;
/// Offset in a stub of the exit that raises held-back signals.
pub(crate) const DEFER_EXIT: u64 = 13;
const ENTRY_AT: usize = 24;
const INDEX_AT: usize = 32;
/// Offset in a stub of its site's address, which the entry's unwind information reads.
const SITE_AT: usize = 40;

const PAGE: u64 = 4096;

/// Bytes below the frame for the `XSAVE` area (aligned down to 64 within them).
const AREA: usize = 3072;

/// State components the `XSAVE` entry saves: x87, SSE, AVX, and the AVX-512 opmask, ZMM_Hi256
/// and Hi16_ZMM (`XSAVE` saves those XCR0 enables).
const MASK: u32 = 0xE7;

/// The pushed registers, lowest address first: the frame.
#[repr(C)]
struct Frame {
    r15: u64,
    r14: u64,
    r13: u64,
    r12: u64,
    r11: u64,
    r10: u64,
    r9: u64,
    r8: u64,
    rdi: u64,
    rsi: u64,
    rbp: u64,
    rbx: u64,
    rdx: u64,
    rcx: u64,
    rax: u64,
    rflags: u64,
    /// The stub's return address (its fault exit) on entry, the resume address on return.
    slot: u64,
}

/// Bytes from the frame to the RSP of the site: the frame, then the 128 bytes the stub skipped.
const FRAME_TO_RSP: u64 = std::mem::size_of::<Frame>() as u64 + 128;

macro_rules! entry_asm {
    ($name:literal, save = [$($save:literal),* $(,)?], restore = [$($restore:literal),* $(,)?] $(,)?) => {
        core::arch::global_asm!(
            ".pushsection .text.amx_trap_fast,\"ax\",@progbits",
            ".p2align 4",
            concat!(".hidden ", $name),
            concat!(".globl ", $name),
            concat!(".type ", $name, ", @function"),
            concat!($name, ":"),
            // Unwind information, for debuggers, profilers and crash reporters that walk the
            // stack from the engine's code. The CFA is the site's RSP (the frame, then the 128
            // bytes the stub skipped), and the frame holds the site's registers. The return
            // address is the site itself, and the walk goes on into the site's function as from
            // a signal frame (whose PC is the interrupted instruction, not a return address
            // past a call). Until `fast` runs it is read from the stub (`SITE_AT`), through the
            // stub's return address at CFA - 136: *(*(CFA - 136) + SITE_AT - FAULT_EXIT)
            // (DW_CFA_val_expression, rip, the CFA pushed first: DW_OP_const1u 136,
            // DW_OP_minus, DW_OP_deref, DW_OP_plus_uconst, DW_OP_deref). While `fast` runs it
            // is a copy on the stack, which unwinders that copy the stack and not the stub's
            // page (perf) read too. After, the frame's return address is where the thread
            // goes: past the instruction, in the site's function, or an exit of the stub (no
            // unwind information there: the walk stops).
            ".cfi_startproc",
            ".cfi_signal_frame",
            ".cfi_def_cfa_offset 136",
            ".cfi_escape 0x16, 0x10, 0x07, 0x08, 0x88, 0x1c, 0x06, 0x23, {site_at}, 0x06",
            "    pushfq",
            ".cfi_adjust_cfa_offset 8",
            "    push rax",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset rax, -152",
            "    push rcx",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset rcx, -160",
            "    push rdx",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset rdx, -168",
            "    push rbx",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset rbx, -176",
            "    push rbp",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset rbp, -184",
            "    push rsi",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset rsi, -192",
            "    push rdi",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset rdi, -200",
            "    push r8",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset r8, -208",
            "    push r9",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset r9, -216",
            "    push r10",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset r10, -224",
            "    push r11",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset r11, -232",
            "    push r12",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset r12, -240",
            "    push r13",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset r13, -248",
            "    push r14",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset r14, -256",
            "    push r15",
            ".cfi_adjust_cfa_offset 8",
            ".cfi_offset r15, -264",
            concat!(".hidden ", $name, "_pushed"),
            concat!(".globl ", $name, "_pushed"),
            concat!($name, "_pushed:"),
            "    mov rax, qword ptr [rip + amx_trap_thread@GOTTPOFF]",
            "    mov rax, qword ptr fs:[rax]",
            "    test rax, rax",
            // No slot yet: leave through the fault exit; the slow path makes one.
            concat!("    jz ", $name, "_pops"),
            // Another site's instruction under way: this is a site of a handler the kernel
            // called in its middle (the engine installed in-process). The slow path runs it,
            // and the marks stay those of the instruction the handler interrupted.
            "    cmp qword ptr [rax + {frame}], 0",
            concat!("    jne ", $name, "_pops"),
            "    mov qword ptr [rax + {commit}], 0",
            "    mov qword ptr [rax + {frame}], rsp",
            concat!(".hidden ", $name, "_marked"),
            concat!(".globl ", $name, "_marked"),
            concat!($name, "_marked:"),
            "    mov rbp, rsp",
            ".cfi_def_cfa_register rbp",
            "    mov rbx, rax",
            // The C ABI's direction flag, and AC off for the engine's own unaligned accesses
            // (the frame's saved flags give the program its own back).
            "    cld",
            "    pushfq",
            "    and dword ptr [rsp], {no_ac}",
            "    popfq",
            $($save,)*
            "    mov qword ptr [rbx + {area}], rsp",
            // The site, twice (RSP stays 16-byte aligned), for the unwind information: the
            // return address at RSP (DW_CFA_expression, rip: DW_OP_breg7 0).
            "    mov rax, qword ptr [rbp + {ret}]",
            "    mov rax, qword ptr [rax + {site_at}]",
            "    push rax",
            "    push rax",
            ".cfi_escape 0x10, 0x10, 0x02, 0x77, 0x00",
            "    mov rdi, rbp",
            "    call {fast}",
            // The rule above holds at the call's return address too: unwinders that take a
            // signal frame's PC as it is (gdb) look the caller up there, not one byte before.
            "    add rsp, 16",
            ".cfi_offset rip, -136",
            // 0: not done, the frame's return address stays the fault exit.
            "    test rax, rax",
            "    jz 9f",
            "    mov qword ptr [rbx + {commit}], rax",
            concat!(".hidden ", $name, "_committed"),
            concat!(".globl ", $name, "_committed"),
            concat!($name, "_committed:"),
            // Done: signals held back meanwhile are raised past it, and unblocked there,
            // through the held-back exit.
            "    mov rcx, qword ptr [rbx + {deferred}]",
            "    or rcx, qword ptr [rbx + {held_back}]",
            "    jz 8f",
            "    add qword ptr [rbp + {ret}], {to_defer}",
            "    jmp 9f",
            "8:",
            "    mov qword ptr [rbp + {ret}], rax",
            "9:",
            $($restore,)*
            "    mov qword ptr [rbx + {frame}], 0",
            concat!(".hidden ", $name, "_tail"),
            concat!(".globl ", $name, "_tail"),
            concat!($name, "_tail:"),
            "    mov rsp, rbp",
            ".cfi_def_cfa_register rsp",
            concat!(".hidden ", $name, "_pops"),
            concat!(".globl ", $name, "_pops"),
            concat!($name, "_pops:"),
            "    pop r15",
            ".cfi_adjust_cfa_offset -8",
            "    pop r14",
            ".cfi_adjust_cfa_offset -8",
            "    pop r13",
            ".cfi_adjust_cfa_offset -8",
            "    pop r12",
            ".cfi_adjust_cfa_offset -8",
            "    pop r11",
            ".cfi_adjust_cfa_offset -8",
            "    pop r10",
            ".cfi_adjust_cfa_offset -8",
            "    pop r9",
            ".cfi_adjust_cfa_offset -8",
            "    pop r8",
            ".cfi_adjust_cfa_offset -8",
            "    pop rdi",
            ".cfi_adjust_cfa_offset -8",
            "    pop rsi",
            ".cfi_adjust_cfa_offset -8",
            "    pop rbp",
            ".cfi_adjust_cfa_offset -8",
            "    pop rbx",
            ".cfi_adjust_cfa_offset -8",
            "    pop rdx",
            ".cfi_adjust_cfa_offset -8",
            "    pop rcx",
            ".cfi_adjust_cfa_offset -8",
            "    pop rax",
            ".cfi_adjust_cfa_offset -8",
            "    popfq",
            ".cfi_adjust_cfa_offset -8",
            "    ret 128",
            ".cfi_endproc",
            concat!(".hidden ", $name, "_end"),
            concat!(".globl ", $name, "_end"),
            concat!($name, "_end:"),
            concat!(".size ", $name, ", ", $name, "_end - ", $name),
            ".popsection",
            fast = sym fast,
            commit = const offsets::FAST_COMMIT,
            frame = const offsets::FAST_FRAME,
            area = const offsets::FAST_AREA,
            deferred = const offsets::DEFERRED,
            held_back = const offsets::HELD_BACK,
            ret = const std::mem::offset_of!(Frame, slot),
            to_defer = const DEFER_EXIT - FAULT_EXIT,
            no_ac = const crate::entry::NO_AC,
            site_at = const SITE_AT - FAULT_EXIT as usize,
        );
    };
}

// Where the OS enables no AVX-512 state: ymm0-15 and MXCSR, saved with plain moves (a full
// XSAVE/XRSTOR pair costs more than the emulator's whole tile load). The MXCSR of a handler is
// loaded only when the program's differs (LDMXCSR is slow).
entry_asm!(
    "amx_trap_fast_ymm",
    save = [
        "    sub rsp, 576",
        "    and rsp, -32",
        "    vmovdqa ymmword ptr [rsp], ymm0",
        "    vmovdqa ymmword ptr [rsp + 32], ymm1",
        "    vmovdqa ymmword ptr [rsp + 64], ymm2",
        "    vmovdqa ymmword ptr [rsp + 96], ymm3",
        "    vmovdqa ymmword ptr [rsp + 128], ymm4",
        "    vmovdqa ymmword ptr [rsp + 160], ymm5",
        "    vmovdqa ymmword ptr [rsp + 192], ymm6",
        "    vmovdqa ymmword ptr [rsp + 224], ymm7",
        "    vmovdqa ymmword ptr [rsp + 256], ymm8",
        "    vmovdqa ymmword ptr [rsp + 288], ymm9",
        "    vmovdqa ymmword ptr [rsp + 320], ymm10",
        "    vmovdqa ymmword ptr [rsp + 352], ymm11",
        "    vmovdqa ymmword ptr [rsp + 384], ymm12",
        "    vmovdqa ymmword ptr [rsp + 416], ymm13",
        "    vmovdqa ymmword ptr [rsp + 448], ymm14",
        "    vmovdqa ymmword ptr [rsp + 480], ymm15",
        "    stmxcsr dword ptr [rsp + 512]",
        // Clean upper halves: SSE code with dirty ones pays a state transition each time.
        "    vzeroupper",
        "    cmp dword ptr [rsp + 512], 0x1F80",
        "    je 2f",
        "    mov dword ptr [rsp + 516], 0x1F80",
        "    ldmxcsr dword ptr [rsp + 516]",
        "2:",
    ],
    restore = [
        "    cmp dword ptr [rsp + 512], 0x1F80",
        "    je 3f",
        "    ldmxcsr dword ptr [rsp + 512]",
        "3:",
        "    vmovdqa ymm0, ymmword ptr [rsp]",
        "    vmovdqa ymm1, ymmword ptr [rsp + 32]",
        "    vmovdqa ymm2, ymmword ptr [rsp + 64]",
        "    vmovdqa ymm3, ymmword ptr [rsp + 96]",
        "    vmovdqa ymm4, ymmword ptr [rsp + 128]",
        "    vmovdqa ymm5, ymmword ptr [rsp + 160]",
        "    vmovdqa ymm6, ymmword ptr [rsp + 192]",
        "    vmovdqa ymm7, ymmword ptr [rsp + 224]",
        "    vmovdqa ymm8, ymmword ptr [rsp + 256]",
        "    vmovdqa ymm9, ymmword ptr [rsp + 288]",
        "    vmovdqa ymm10, ymmword ptr [rsp + 320]",
        "    vmovdqa ymm11, ymmword ptr [rsp + 352]",
        "    vmovdqa ymm12, ymmword ptr [rsp + 384]",
        "    vmovdqa ymm13, ymmword ptr [rsp + 416]",
        "    vmovdqa ymm14, ymmword ptr [rsp + 448]",
        "    vmovdqa ymm15, ymmword ptr [rsp + 480]",
    ],
);

// Where AVX-512 state may be live (the emulator's AVX-512 paths change any vector or mask
// register): x87 to AVX-512 saved with XSAVE.
entry_asm!(
    "amx_trap_fast_xsave",
    save = [
        "    sub rsp, 3072",
        "    and rsp, -64",
        // XSAVE writes only XSTATE_BV of the header; XRSTOR wants the rest zero.
        "    xor eax, eax",
        "    mov qword ptr [rsp + 512], rax",
        "    mov qword ptr [rsp + 520], rax",
        "    mov qword ptr [rsp + 528], rax",
        "    mov qword ptr [rsp + 536], rax",
        "    mov qword ptr [rsp + 544], rax",
        "    mov qword ptr [rsp + 552], rax",
        "    mov qword ptr [rsp + 560], rax",
        "    mov qword ptr [rsp + 568], rax",
        "    mov eax, 0xE7",
        "    xor edx, edx",
        "    xsave64 [rsp]",
        "    vzeroupper",
        "    sub rsp, 64",
        "    mov dword ptr [rsp], 0x1F80",
        "    ldmxcsr dword ptr [rsp]",
        "    add rsp, 64",
    ],
    restore = [
        "    mov eax, 0xE7",
        "    xor edx, edx",
        "    xrstor64 [rsp]",
    ],
);

const _: () = assert!(AREA == 3072 && MASK == 0xE7);

extern "C" {
    fn amx_trap_fast_ymm();
    fn amx_trap_fast_ymm_pushed();
    fn amx_trap_fast_ymm_marked();
    fn amx_trap_fast_ymm_committed();
    fn amx_trap_fast_ymm_tail();
    fn amx_trap_fast_ymm_pops();
    fn amx_trap_fast_ymm_end();
    fn amx_trap_fast_xsave();
    fn amx_trap_fast_xsave_pushed();
    fn amx_trap_fast_xsave_marked();
    fn amx_trap_fast_xsave_committed();
    fn amx_trap_fast_xsave_tail();
    fn amx_trap_fast_xsave_pops();
    fn amx_trap_fast_xsave_end();
}

/// One common entry's landmarks.
#[derive(Clone, Copy)]
struct Landmarks {
    start: u64,
    pushed: u64,
    marked: u64,
    committed: u64,
    tail: u64,
    pops: u64,
    end: u64,
    /// The vector state is saved with XSAVE.
    xsave: bool,
}

fn landmarks(xsave: bool) -> Landmarks {
    let a = |f: unsafe extern "C" fn()| f as *const () as u64;
    if xsave {
        Landmarks {
            start: a(amx_trap_fast_xsave),
            pushed: a(amx_trap_fast_xsave_pushed),
            marked: a(amx_trap_fast_xsave_marked),
            committed: a(amx_trap_fast_xsave_committed),
            tail: a(amx_trap_fast_xsave_tail),
            pops: a(amx_trap_fast_xsave_pops),
            end: a(amx_trap_fast_xsave_end),
            xsave,
        }
    } else {
        Landmarks {
            start: a(amx_trap_fast_ymm),
            pushed: a(amx_trap_fast_ymm_pushed),
            marked: a(amx_trap_fast_ymm_marked),
            committed: a(amx_trap_fast_ymm_committed),
            tail: a(amx_trap_fast_ymm_tail),
            pops: a(amx_trap_fast_ymm_pops),
            end: a(amx_trap_fast_ymm_end),
            xsave,
        }
    }
}

/// The chosen entry: 0 none, 1 ymm, 2 XSAVE.
static CHOSEN: AtomicU32 = AtomicU32::new(0);
/// XSAVE offsets of the AVX (ymm upper halves) component in the standard format.
static AVX_OFFSET: AtomicU32 = AtomicU32::new(576);
/// The standard-format offset (high half) and size (low half) of each component 2..8 the
/// `XSAVE` entry saves (0 for the others): read at installation, as `cpuid` may fault later.
static COMPONENTS: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

fn chosen() -> Option<Landmarks> {
    match CHOSEN.load(Ordering::Acquire) {
        1 => Some(landmarks(false)),
        2 => Some(landmarks(true)),
        _ => None,
    }
}

/// Chooses the common entry; false when neither can preserve this host's state.
/// `AMX_TRAP_STUB_XSAVE=1` forces the `XSAVE` entry (for testing it on any host).
pub(crate) fn prepare() -> bool {
    let Some(xcr0) = xsave_state() else {
        return false;
    };
    let avx = raw_cpuid::native_cpuid::cpuid_count(0xD, 2);
    AVX_OFFSET.store(avx.ebx, Ordering::Relaxed);
    for (i, component) in (2..8u32).zip(&COMPONENTS) {
        if xcr0 & MASK & (1 << i) != 0 {
            let c = raw_cpuid::native_cpuid::cpuid_count(0xD, i);
            component.store(u64::from(c.ebx) << 32 | u64::from(c.eax), Ordering::Relaxed);
        }
    }
    let forced = std::env::var_os("AMX_TRAP_STUB_XSAVE").is_some_and(|v| v == "1");
    let xsave = xcr0 & 0xE4 != 0x04 || forced;
    if !decodes_as_pushes_and_pops(landmarks(xsave)) {
        return false;
    }
    CHOSEN.store(if xsave { 2 } else { 1 }, Ordering::Release);
    true
}

/// XCR0's low half, when `XSAVE` is usable and the components [`MASK`] selects lie inside
/// [`AREA`] in the standard format (CPUID leaf 0xD gives each component's offset and size).
fn xsave_state() -> Option<u32> {
    let leaf1 = raw_cpuid::native_cpuid::cpuid_count(1, 0);
    let osxsave = leaf1.ecx & (1 << 27) != 0;
    if !osxsave {
        return None;
    }
    let xcr0_lo: u32;
    // SAFETY: XGETBV with ECX = 0 is available when OSXSAVE is set (checked above).
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") 0, out("eax") xcr0_lo, out("edx") _,
            options(nomem, nostack, preserves_flags));
    }
    let used = xcr0_lo & MASK;
    // Both entries use AVX instructions.
    if used & 7 != 7 {
        return None;
    }
    let fits = (2..8).filter(|i| used & (1 << i) != 0).all(|i| {
        let c = raw_cpuid::native_cpuid::cpuid_count(0xD, i);
        (c.ebx as usize + c.eax as usize) <= AREA - 64
    });
    fits.then_some(xcr0_lo)
}

/// Length of a push or pop of the entry at `code` (`9C`, `50+r`, `41 50+r`; `9D`, `58+r`,
/// `41 58+r`), or `None`.
fn push_pop_len(code: &[u8], pop: bool) -> Option<usize> {
    let (flags, base) = if pop { (0x9D, 0x58) } else { (0x9C, 0x50) };
    match code {
        [b, ..] if *b == flags => Some(1),
        [b, ..] if (base..base + 8).contains(b) => Some(1),
        [0x41, b, ..] if (base..base + 8).contains(b) => Some(2),
        _ => None,
    }
}

/// How many pushes (or pops) of the entry's run starting at `from` come before `rip`.
fn count_before(from: u64, rip: u64, pop: bool) -> usize {
    let mut at = from;
    let mut n = 0;
    while at < rip && n < 16 {
        // SAFETY: the entry's own code bytes (read-only text), within its landmarks.
        let code = unsafe { std::slice::from_raw_parts(at as *const u8, 2) };
        let Some(len) = push_pop_len(code, pop) else {
            break;
        };
        at += len as u64;
        n += 1;
    }
    n
}

/// Whether the entry's landmarks enclose 16 pushes and 16 pops, as the rules of [`settle`]
/// read them.
fn decodes_as_pushes_and_pops(l: Landmarks) -> bool {
    count_before(l.start, l.pushed, false) == 16 && count_before(l.pops, l.end, true) == 16
}

/// The pages holding stubs, and how many stubs each holds.
static PAGES: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
static USED: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];

/// Makes the stub of site `index` at `site`; its address. Called under the patch lock.
pub(crate) fn build_stub(site: u64, index: u32) -> Option<u64> {
    let entry = match CHOSEN.load(Ordering::Acquire) {
        1 => amx_trap_fast_ymm as *const () as u64,
        2 => amx_trap_fast_xsave as *const () as u64,
        _ => return None,
    };
    let mut code = [0xCCu8; STUB as usize];
    put(&mut code, 0, &[0x48, 0x8D, 0x64, 0x24, 0x80]);
    put(&mut code, 5, &[0xFF, 0x15, 0x0D, 0, 0, 0]);
    put(&mut code, FAULT_EXIT as usize, &[0x0F, 0x0B]);
    put(&mut code, DEFER_EXIT as usize, &[0x0F, 0x0B]);
    put(&mut code, ENTRY_AT, &entry.to_le_bytes());
    put(&mut code, INDEX_AT, &index.to_le_bytes());
    put(&mut code, SITE_AT, &site.to_le_bytes());
    // A page of stubs within reach with room left.
    for (page, used) in PAGES.iter().zip(&USED) {
        let at = page.load(Ordering::Acquire);
        if at == 0 {
            break;
        }
        let n = used.load(Ordering::Relaxed);
        let stub = at + u64::from(n) * STUB;
        if u64::from(n) < PAGE / STUB && reaches(site, stub) {
            if !patch::poke_code(stub, &code) {
                return None;
            }
            used.store(n + 1, Ordering::Release);
            return Some(stub);
        }
    }
    let free = PAGES.iter().position(|p| p.load(Ordering::Acquire) == 0)?;
    let page = map_near(site)?;
    // SAFETY: `page` is a fresh, private, writable mapping of PAGE bytes, no one else's.
    let ok = unsafe {
        std::ptr::copy_nonoverlapping(code.as_ptr(), page as *mut u8, code.len());
        crate::sys::mprotect(page, PAGE as usize, libc::PROT_READ | libc::PROT_EXEC).is_ok()
    };
    if !ok {
        // SAFETY: the mapping is ours and unused.
        let _ = unsafe { crate::sys::munmap(page, PAGE as usize) };
        return None;
    }
    if let (Some(used), Some(slot)) = (USED.get(free), PAGES.get(free)) {
        used.store(1, Ordering::Relaxed);
        slot.store(page, Ordering::Release);
    }
    Some(page)
}

/// Copies `bytes` into `buf` at `at`; nothing where they would not fit.
fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(to) = buf.get_mut(at..at.saturating_add(bytes.len())) {
        to.copy_from_slice(bytes);
    }
}

/// The `N` bytes of `buf` at `at` (zeros where `buf` is too short).
fn take<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    buf.get(at..at.saturating_add(N))
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .unwrap_or([0; N])
}

/// Whether `jmp rel32` at `site` reaches every byte of the stub at `stub`.
fn reaches(site: u64, stub: u64) -> bool {
    let from = (site as i64).wrapping_add(5);
    let ok = |to: i64| to.wrapping_sub(from).unsigned_abs() < (1u64 << 31) - 1;
    ok(stub as i64) && ok((stub as i64).wrapping_add(STUB as i64))
}

/// A fresh writable page within reach of a `jmp rel32` at `site`, never in the range the
/// program break may grow into (the heap `brk` extends).
fn map_near(site: u64) -> Option<u64> {
    // SAFETY: brk(0) only reports the current break.
    let brk = unsafe { crate::sys::call(libc::SYS_brk, &[0]) } as u64;
    let heap = brk..brk.saturating_add(1 << 32);
    let base = (site & !(PAGE - 1)) as i64;
    // Steps of 16 MiB up to 1 GiB either side: below the code first (usually free).
    for step in 1..=64i64 {
        for dir in [-1i64, 1] {
            let hint = base + dir * step * (16 << 20);
            if !(1 << 20..1 << 47).contains(&hint) || heap.contains(&(hint as u64)) {
                continue;
            }
            if let Some(p) = map_at(hint as u64) {
                if reaches(site, p) && !heap.contains(&p) {
                    return Some(p);
                }
                // SAFETY: the mapping was just made and is unused.
                let _ = unsafe { crate::sys::munmap(p, PAGE as usize) };
            }
        }
    }
    // The last chances below the code: a program loaded low (a non-PIE executable at 4 MiB)
    // has room only there.
    let mut hint = base - PAGE as i64;
    while hint >= 1 << 16 && base - hint < 1 << 30 {
        if let Some(p) = map_at(hint as u64) {
            if reaches(site, p) && !heap.contains(&p) {
                return Some(p);
            }
            // SAFETY: as above.
            let _ = unsafe { crate::sys::munmap(p, PAGE as usize) };
        }
        hint -= 64 * PAGE as i64;
    }
    None
}

fn map_at(hint: u64) -> Option<u64> {
    // MAP_FIXED_NOREPLACE never replaces an existing mapping.
    crate::sys::mmap_anon(
        hint,
        PAGE as usize,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_FIXED_NOREPLACE,
    )
    .ok()
}

/// The stub holding `rip` and the offset of `rip` in it, if `rip` is in one.
fn stub_of(rip: u64) -> Option<(u64, u64)> {
    for (page, used) in PAGES.iter().zip(&USED) {
        let at = page.load(Ordering::Acquire);
        if at == 0 {
            return None;
        }
        let n = u64::from(used.load(Ordering::Acquire));
        if (at..at.wrapping_add(n * STUB)).contains(&rip) {
            let off = (rip - at) % STUB;
            return Some((rip - off, off));
        }
    }
    None
}

/// The site a stub serves.
fn site_of_stub(stub: u64) -> Option<&'static patch::Site> {
    let mut index = [0u8; 4];
    // SAFETY: the stub's own bytes, in a page of the engine's (read+execute), 64 bytes long.
    unsafe {
        std::ptr::copy_nonoverlapping((stub + INDEX_AT as u64) as *const u8, index.as_mut_ptr(), 4)
    };
    patch::by_stub(stub, u32::from_le_bytes(index))
}

/// Where a SIGILL at a stub's exit leads.
pub(crate) enum Exit {
    /// The fast path faulted: the site's instruction runs again on the slow path.
    Fault(&'static patch::Site),
    /// Signals were held back during the instruction: the thread resumes at this address.
    Deferred(u64),
}

/// The exit of a stub at `rip`, if `rip` is one; `slot`: the thread's (a thread without one
/// never ran a patched site's instruction, so never had it interrupted).
pub(crate) fn exit(slot: Option<&Slot>, rip: u64) -> Option<Exit> {
    let (stub, off) = stub_of(rip)?;
    match off {
        FAULT_EXIT => site_of_stub(stub).map(Exit::Fault),
        DEFER_EXIT => site_of_stub(stub)
            .and_then(|site| restart_or_past(slot, site))
            .map(Exit::Deferred),
        _ => None,
    }
}

/// Where the program resumes once the held-back signals of `site`'s instruction are
/// delivered: past the instruction, or at the site itself where a signal stopped the
/// instruction's copy (`Slot::restart`, taken here).
fn restart_or_past(slot: Option<&Slot>, site: &patch::Site) -> Option<u64> {
    if slot.is_some_and(|s| s.restart.swap(false, Ordering::AcqRel)) {
        return Some(site.addr());
    }
    past(site)
}

/// The fast path: called by the common entry with its frame; runs the site's instruction.
/// Returns the address past it, or 0 where it did not complete (the entry then leaves through
/// the fault exit, and the slow path runs what is at the site or raises its exception there).
extern "C" fn fast(frame: *mut Frame) -> u64 {
    // SAFETY: the entry passes the frame it pushed, exclusively ours until we return.
    let f = unsafe { &*frame };
    run(f, frame as u64).unwrap_or(0)
}

fn run(f: &Frame, frame: u64) -> Option<u64> {
    let stub = f.slot.wrapping_sub(FAULT_EXIT);
    let slot = slot::current()?;
    let site = site_of_stub(stub)?;
    slot.prepare_unit();
    slot.restart.store(false, Ordering::Release);
    let (insn, bytes) = site.published()?;
    let addr = site.addr();
    // The program may have rewritten the instruction's other bytes in place: then the slow
    // path runs what it wrote.
    let tail = bytes.get(5..usize::from(insn.len))?;
    let mut now = [0u8; MAX_LEN];
    let now = now.get_mut(..tail.len())?;
    // Every protection key enabled: the code may be execute-only (a key that denies reads).
    let read = access::with_pkru(0, || {
        // SAFETY: `now` is ours; the code bytes are the program's (a fault is recovered).
        unsafe {
            access::copy(
                now.as_mut_ptr(),
                addr.wrapping_add(5) as *const u8,
                now.len(),
            )
        }
    });
    if read.is_err() || now != tail {
        // Interrupted waiting for the code's page: the instruction has not started.
        return interrupted(slot, site);
    }
    let mut regs = Regs {
        gpr: [
            f.rax,
            f.rcx,
            f.rdx,
            f.rbx,
            frame.wrapping_add(FRAME_TO_RSP),
            f.rbp,
            f.rsi,
            f.rdi,
            f.r8,
            f.r9,
            f.r10,
            f.r11,
            f.r12,
            f.r13,
            f.r14,
            f.r15,
        ],
        rip: addr,
        zmm: None,
    };
    // A zmm destination lies in the program's own registers here, not in a signal frame: such
    // instructions are never patched (patch.rs), and take the slow path if one shows up.
    if matches!(insn.op, Operation::RowMove { .. }) {
        return None;
    }
    // The entry marks the instruction done (`fast_commit`) once this returns: from there a
    // signal is delivered past it (see `settle`), and the ones held back meanwhile are raised
    // there through the held-back exit.
    match exec::execute(&insn, &mut regs, slot.unit(), None) {
        Outcome::Completed => Some(regs.rip),
        // The slow path raises the exception at the site (the fault exit).
        Outcome::Fault(_) => interrupted(slot, site),
    }
}

/// After a copy that did not complete: the site itself where a signal stopped the copy
/// (the held-back signal is delivered there, the instruction stopped at
/// its start_row, as the silicon's load or store stops for an interrupt, and it resumes from
/// there when the program comes back to it); else `None` (a fault: the slow path raises it).
fn interrupted(slot: &Slot, site: &patch::Site) -> Option<u64> {
    slot.restart.load(Ordering::Acquire).then(|| site.addr())
}

/// Where the program resumes after the instruction of `site`, once it completed: the next
/// instruction (the engine's tile instructions never branch). Read from the site rather than
/// from the slot's marks, which a handler interrupting the exit may have changed since.
fn past(site: &patch::Site) -> Option<u64> {
    site.published()
        .map(|(insn, _)| site.addr().wrapping_add(u64::from(insn.len)))
}

/// Whether a signal arriving now must be held back: the thread is in a patched site's
/// instruction, not done yet.
pub(crate) fn holds_back(slot: &Slot) -> bool {
    slot.fast_frame.load(Ordering::Acquire) != 0 && slot.fast_commit.load(Ordering::Acquire) == 0
}

/// Forgets the marks of a patched site's instruction whose context is gone, seen from `uc`, a
/// program context the signal entry interrupted: a handler the kernel called in the middle of
/// the instruction left by `siglongjmp` (as it may: on the silicon the instruction was
/// complete). The instruction's context runs below its frame, and a handler nested in it
/// runs below that on the same stack, or on the alternate stack; a context above the frame on
/// the frame's stack, or off the alternate stack the frame is on, has left them. The signals
/// held back in the lost contexts stay deferred (the work raises them); their blocks went with
/// those contexts.
pub(crate) fn forget_if_left(slot: &Slot, uc: &kframe::Ucontext) {
    let frame = slot.fast_frame.load(Ordering::Acquire);
    if frame == 0 {
        return;
    }
    let alt = &uc.stack;
    let on_alt = alt.flags & kframe::SS_ONSTACK != 0;
    let frame_on_alt = alt.flags & kframe::SS_DISABLE == 0
        && (alt.sp..alt.sp.saturating_add(alt.size)).contains(&frame);
    let left = match (frame_on_alt, on_alt) {
        (false, true) => false,
        (true, false) => true,
        _ => uc.rsp() > frame,
    };
    if left {
        slot.fast_frame.store(0, Ordering::Release);
        slot.held_back.store(0, Ordering::Relaxed);
        slot.restart.store(false, Ordering::Release);
    }
}

/// Reads a word of the program's stack (a fault gives `None`).
fn word(at: u64) -> Option<u64> {
    let mut v = [0u8; 8];
    // SAFETY: `v` is ours; the frame is the program's memory (a fault is recovered).
    unsafe { access::copy(v.as_mut_ptr(), at as *const u8, 8) }.ok()?;
    Some(u64::from_le_bytes(v))
}

/// The registers of a frame, into `uc`.
fn frame_into(frame: u64, uc: &mut kframe::Ucontext) -> Option<()> {
    // The frame's order (lowest first) as `gregs` indices.
    const ORDER: [usize; 16] = [
        reg::R8 + 7,
        reg::R8 + 6,
        reg::R8 + 5,
        reg::R8 + 4,
        reg::R8 + 3,
        reg::R8 + 2,
        reg::R8 + 1,
        reg::R8,
        reg::RDI,
        reg::RSI,
        reg::RBP,
        reg::RBX,
        reg::RDX,
        reg::RCX,
        reg::RAX,
        reg::EFL,
    ];
    let mut words = [0u64; 16];
    for (i, w) in words.iter_mut().enumerate() {
        *w = word(frame.wrapping_add(8 * i as u64))?;
    }
    for (w, r) in words.iter().zip(ORDER) {
        if let Some(g) = uc.gregs.get_mut(r) {
            *g = *w;
        }
    }
    Some(())
}

/// The vector registers of a save area into the context's FP state.
fn area_into(area: u64, xsave: bool, ctx: &mut Ctx) -> Option<()> {
    if ctx.frame.uc.fpregs == 0 {
        return Some(());
    }
    let fp = ctx.fp_mut();
    if xsave {
        let mut image = [0u8; AREA - 64];
        // SAFETY: `image` is ours; the area is the program's stack (a fault is recovered).
        unsafe { access::copy(image.as_mut_ptr(), area as *const u8, image.len()) }.ok()?;
        // The legacy area but its software bytes, then the components XSAVE wrote.
        if let Some(legacy) = image.get(..kframe::sw::AT) {
            put(fp, 0, legacy);
        }
        let bv_at = kframe::XSTATE_BV;
        let saved = u64::from_le_bytes(take(&image, bv_at));
        let now = u64::from_le_bytes(take(fp, bv_at));
        let merged = (now & !u64::from(MASK)) | (saved & u64::from(MASK));
        put(fp, bv_at, &merged.to_le_bytes());
        for (off, size) in COMPONENTS.iter().map(|c| {
            let c = c.load(Ordering::Relaxed);
            ((c >> 32) as usize, (c & 0xFFFF_FFFF) as usize)
        }) {
            if let Some(from) = image.get(off..off.saturating_add(size)) {
                put(fp, off, from);
            }
        }
    } else {
        let mut image = [0u8; 516];
        // SAFETY: as above.
        unsafe { access::copy(image.as_mut_ptr(), area as *const u8, image.len()) }.ok()?;
        let avx = AVX_OFFSET.load(Ordering::Relaxed) as usize;
        for (r, ymm) in image.chunks_exact(32).take(16).enumerate() {
            let (low, high) = ymm.split_at(16);
            put(fp, kframe::XMM0 + 16 * r, low);
            put(fp, avx + 16 * r, high);
        }
        put(fp, kframe::MXCSR, &take::<4>(&image, 512));
        // SSE and AVX state present.
        let bv_at = kframe::XSTATE_BV;
        let bv = u64::from_le_bytes(take(fp, bv_at)) | 0b110;
        put(fp, bv_at, &bv.to_le_bytes());
    }
    Some(())
}

/// Moves a context the signal entry interrupted in one of the engine's program-side paths to
/// the instruction boundary it stands for (see the module's description): in a stub or the
/// common entry (back to the site, or forward past the instruction), or in the restorer of a
/// handler (forward: the handler's return completed). Elsewhere it changes nothing.
pub(crate) fn settle(slot: &Slot, ctx: &mut Ctx) {
    let rip = ctx.frame.uc.rip();
    if crate::deliver::in_restorer(rip) == Some(true) {
        // Before it blocked the signals: the handler has returned, its frame is at RSP.
        if crate::deliver::finish_restorer(ctx).is_err() {
            crate::fatal::engine_fault(libc::SIGSEGV, rip);
        }
        return;
    }
    if let Some(l) = chosen().filter(|l| (l.committed..l.tail).contains(&rip)) {
        // Marked and done (held back when not done, so never here): past the instruction,
        // the vector state from the save area (not in the registers yet). The marks are this
        // entry's: a handler's site that interrupts another's instruction never marks (it
        // takes the slow path).
        let marked = slot.fast_frame.load(Ordering::Acquire);
        let resume = slot.fast_commit.load(Ordering::Acquire);
        if marked != 0 && resume != 0 {
            let area = slot.fast_area.load(Ordering::Acquire);
            if forward(&mut ctx.frame.uc, marked, resume).is_some() {
                let _ = area_into(area, l.xsave, ctx);
            }
            slot.fast_frame.store(0, Ordering::Release);
        }
        return;
    }
    settle_unmarked(Some(slot), &mut ctx.frame.uc);
}

/// [`settle`] for a thread without a slot (the signal entry found none and can map none): it
/// never marks an instruction under way (the entry leaves through the fault exit first), so
/// only the rules that need no marks apply.
pub(crate) fn settle_without_slot(uc: &mut kframe::Ucontext) {
    settle_unmarked(None, uc);
}

/// The rules of [`settle`] that read only the context, the frame and the stub: in a stub,
/// pushing, pushed, and restoring (the vector state the program's again).
fn settle_unmarked(slot: Option<&Slot>, uc: &mut kframe::Ucontext) {
    let rip = uc.rip();
    if stub_of(rip).is_some() {
        return at_stub(slot, uc);
    }
    let Some(l) = chosen() else {
        return;
    };
    if (l.start..l.pushed).contains(&rip) {
        // Pushing: the registers are still the program's; the return address lies above the
        // pushes made.
        let ret = uc
            .rsp()
            .wrapping_add(8 * count_before(l.start, rip, false) as u64);
        back(uc, ret);
    } else if (l.pushed..l.marked).contains(&rip) {
        // All pushed, some registers changed: the frame has them.
        let frame = uc.rsp();
        if frame_into(frame, uc).is_some() {
            back(uc, frame.wrapping_add(FRAME_TO_RSP - 128 - 8));
        }
    } else if (l.tail..l.end).contains(&rip) {
        // Restoring: the vector state is the program's again; the frame has every register.
        let frame = if rip == l.tail {
            uc.gregs[reg::RBP]
        } else {
            uc.rsp()
                .wrapping_sub(8 * count_before(l.pops, rip, true) as u64)
        };
        let resume = word(frame.wrapping_add(FRAME_TO_RSP - 128 - 8)).unwrap_or(0);
        // The return address may be an exit of the stub (the instruction did not complete,
        // or signals were held back meanwhile): where that exit leads.
        if forward(uc, frame, resume).is_some() && stub_of(uc.rip()).is_some() {
            at_stub(slot, uc);
        }
    }
}

/// A context in a stub at its boundary for the program: before the call, the site; at the
/// fault exit, the site (the slow path runs the instruction there); at the held-back exit,
/// where the instruction resumes (its site, or past it).
fn at_stub(slot: Option<&Slot>, uc: &mut kframe::Ucontext) {
    let Some((stub, off)) = stub_of(uc.rip()) else {
        return;
    };
    let Some(site) = site_of_stub(stub) else {
        return;
    };
    match off {
        0 | 5 => {
            // Before the call: the site, with the red zone given back after the `lea`.
            uc.gregs[reg::RIP] = site.addr();
            if off == 5 {
                uc.gregs[reg::RSP] = uc.rsp().wrapping_add(128);
            }
        }
        FAULT_EXIT => uc.gregs[reg::RIP] = site.addr(),
        DEFER_EXIT => {
            if let Some(resume) = restart_or_past(slot, site) {
                uc.gregs[reg::RIP] = resume;
            }
        }
        _ => {}
    }
}

/// Rolls back to the site: the return address at `ret` names the stub; RSP as at the site.
fn back(uc: &mut kframe::Ucontext, ret: u64) {
    let Some(site) = word(ret).and_then(|r| site_of_stub(r.wrapping_sub(FAULT_EXIT))) else {
        return;
    };
    uc.gregs[reg::RIP] = site.addr();
    uc.gregs[reg::RSP] = ret.wrapping_add(8 + 128);
}

/// Rolls forward past the instruction: registers from the frame, RIP `resume`, RSP as after
/// the stub's return.
/// `None` (nothing changed) where the frame cannot be read.
fn forward(uc: &mut kframe::Ucontext, frame: u64, resume: u64) -> Option<()> {
    frame_into(frame, uc)?;
    uc.gregs[reg::RIP] = resume;
    uc.gregs[reg::RSP] = frame.wrapping_add(FRAME_TO_RSP);
    Some(())
}
