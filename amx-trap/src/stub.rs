//! The per-site stubs and their common entry (see [`super::patch`] for the design).
//!
//! A site's stub, one page mapped within ±2 GiB of the site so that `jmp rel32` reaches it:
//!
//! ```text
//!  0: 48 8D 64 24 80      lea rsp, [rsp-128]     ; the interrupted code's red zone stays intact
//!  5: FF 15 02 00 00 00   call [rip+2]           ; the common entry, wherever it is mapped
//! 11: 0F 0B               ud2                    ; the fault exit (the pushed return address)
//! 13: <entry address>
//! 24: <site number>       (u32)
//! ```
//!
//! The common entry saves the registers, calls [`super::patch::fast`] with the site number the
//! stub holds, and resumes where it says with `ret 128`: the slot that held the return address
//! holds the resume address, and the 128 bytes skipped for the red zone are given back in the
//! same instruction. Entering by `call` keeps the processor's return-address predictions in
//! step: only this `ret` mispredicts, not every `ret` of the interrupted code after it.
//!
//! Two entries, chosen once: where the OS enables AVX-512 state the emulator's AVX-512 paths
//! may change any vector or mask register, so [`entry_xsave`] saves the x87, SSE, AVX and
//! AVX-512 state with `XSAVE`. Otherwise the compiled code can change only ymm0-15 and MXCSR
//! (it never uses x87 or MMX registers), and [`entry_ymm`] saves just those with plain moves:
//! a full `XSAVE`/`XRSTOR` pair costs more than the emulator's whole tile load.
//! `AMX_TRAP_STUB_XSAVE=1` forces the `XSAVE` entry (for testing it on any host).

use std::sync::atomic::{AtomicU64, Ordering};

use super::patch;
use super::regs::Regs;

/// The common entry the stubs jump to (0: not chosen yet).
static ENTRY: AtomicU64 = AtomicU64::new(0);

/// Offset in a stub of its fault exit (`ud2`), the return address its `call` pushes.
pub(crate) const FAULT_EXIT: u64 = 11;

/// Offset in a stub of its site's number.
const SITE_NUMBER: usize = 24;

/// Bytes reserved below the saved registers for `XSAVE` (aligned down to 64 within them).
const AREA: usize = 3072;

/// State components saved around the fast path: x87, SSE, AVX, and the AVX-512 opmask,
/// ZMM_Hi256 and Hi16_ZMM (`XSAVE` saves those XCR0 enables).
const MASK: u32 = 0xE7;

const PAGE: usize = 4096;

/// Chooses the common entry; false when neither can preserve this host's state.
pub(crate) fn prepare() -> bool {
    let Some(xcr0) = xsave_state() else {
        return false;
    };
    let forced = std::env::var_os("AMX_TRAP_STUB_XSAVE").is_some_and(|v| v == "1");
    let entry = if xcr0 & 0xE4 == 0x04 && !forced {
        entry_ymm as *const () as u64
    } else {
        entry_xsave as *const () as u64
    };
    ENTRY.store(entry, Ordering::Release);
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
    (used & 3 == 3 && fits).then_some(xcr0_lo)
}

/// Maps, fills and write-protects the stub of site `index` at `site`; its page address.
pub(crate) fn build(site: u64, index: u32) -> Option<u64> {
    let entry = ENTRY.load(Ordering::Acquire);
    if entry == 0 {
        return None;
    }
    let page = map_near(site)?;
    let mut code = [0xCCu8; 32];
    code[..5].copy_from_slice(&[0x48, 0x8D, 0x64, 0x24, 0x80]);
    code[5..11].copy_from_slice(&[0xFF, 0x15, 2, 0, 0, 0]);
    code[FAULT_EXIT as usize..FAULT_EXIT as usize + 2].copy_from_slice(&[0x0F, 0x0B]);
    code[13..21].copy_from_slice(&entry.to_le_bytes());
    code[SITE_NUMBER..SITE_NUMBER + 4].copy_from_slice(&index.to_le_bytes());
    // SAFETY: `page` is a fresh, private, writable mapping of PAGE bytes, no one else's.
    let ok = unsafe {
        std::ptr::copy_nonoverlapping(code.as_ptr(), page as *mut u8, code.len());
        libc::mprotect(
            page as *mut libc::c_void,
            PAGE,
            libc::PROT_READ | libc::PROT_EXEC,
        ) == 0
    };
    if ok {
        Some(page)
    } else {
        // SAFETY: the mapping is ours and unused.
        unsafe { libc::munmap(page as *mut libc::c_void, PAGE) };
        None
    }
}

/// A fresh writable page whose every byte a `jmp rel32` at `site` reaches.
fn map_near(site: u64) -> Option<u64> {
    let base = (site & !(PAGE as u64 - 1)) as i64;
    let reach = |p: i64| (p + PAGE as i64 - (site as i64 + 5)).abs() < (1i64 << 31) - 1;
    // Steps of 16 MiB up to 1 GiB either side: below the code first (usually free).
    for step in 1..=64i64 {
        for dir in [-1i64, 1] {
            let hint = base + dir * step * (16 << 20);
            if !(1 << 20..1 << 47).contains(&hint) {
                continue;
            }
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; anonymous
            // memory with no file.
            let p = unsafe {
                libc::mmap(
                    hint as *mut libc::c_void,
                    PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                continue;
            }
            if reach(p as i64) && reach(p as i64 - PAGE as i64 + 1) {
                return Some(p as u64);
            }
            // SAFETY: the mapping was just made and is unused (an old kernel treated the
            // address as a hint only).
            unsafe { libc::munmap(p, PAGE) };
        }
    }
    None
}

/// The registers the common entry pushed, lowest address first.
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

/// Called by the common entry with its frame.
extern "C" fn fast_path(frame: *mut Frame) {
    // SAFETY: the entry passes the frame it pushed, exclusively ours until we return.
    let f = unsafe { &mut *frame };
    // The stack pointer the instruction saw: above the frame and the skipped red zone.
    let rsp = frame as u64 + std::mem::size_of::<Frame>() as u64 + 128;
    // One 8-byte load per pushed register: a wider load spanning two pushes would wait for
    // both stores to retire instead of being forwarded from them.
    // SAFETY: each pointer is a field of the live frame.
    let r = |p: &u64| unsafe { std::ptr::read_volatile(p) };
    let mut regs = Regs {
        gpr: [
            r(&f.rax),
            r(&f.rcx),
            r(&f.rdx),
            r(&f.rbx),
            rsp,
            r(&f.rbp),
            r(&f.rsi),
            r(&f.rdi),
            r(&f.r8),
            r(&f.r9),
            r(&f.r10),
            r(&f.r11),
            r(&f.r12),
            r(&f.r13),
            r(&f.r14),
            r(&f.r15),
        ],
        rip: 0,
    };
    let stub = r(&f.slot) - FAULT_EXIT;
    // SAFETY: the stub's own page (read+execute), which holds its site's number.
    let index = unsafe { ((stub as usize + SITE_NUMBER) as *const u32).read_unaligned() };
    f.slot = patch::fast(index, &mut regs);
}

/// The common entry of every stub (entered by `call`, below the skipped red zone) where
/// AVX-512 state may be live. Preserves every register, RFLAGS and the x87, SSE, AVX and
/// AVX-512 state.
#[unsafe(naked)]
extern "C" fn entry_xsave() {
    core::arch::naked_asm!(
        "pushfq",
        "push rax",
        "push rcx",
        "push rdx",
        "push rbx",
        "push rbp",
        "push rsi",
        "push rdi",
        "push r8",
        "push r9",
        "push r10",
        "push r11",
        "push r12",
        "push r13",
        "push r14",
        "push r15",
        "mov rbp, rsp",
        // The C ABI's direction flag.
        "cld",
        "sub rsp, {area}",
        "and rsp, -64",
        // XSAVE writes only XSTATE_BV of the header; XRSTOR wants the rest zero.
        "xor eax, eax",
        "mov [rsp + 512], rax",
        "mov [rsp + 520], rax",
        "mov [rsp + 528], rax",
        "mov [rsp + 536], rax",
        "mov [rsp + 544], rax",
        "mov [rsp + 552], rax",
        "mov [rsp + 560], rax",
        "mov [rsp + 568], rax",
        "mov eax, {mask}",
        "xor edx, edx",
        "xsave64 [rsp]",
        // As in `entry_ymm`.
        "vzeroupper",
        // The MXCSR a signal handler starts with, as on the slow path.
        "sub rsp, 64",
        "mov dword ptr [rsp], 0x1F80",
        "ldmxcsr [rsp]",
        "mov rdi, rbp",
        "call {fast}",
        "add rsp, 64",
        "mov eax, {mask}",
        "xor edx, edx",
        "xrstor64 [rsp]",
        "mov rsp, rbp",
        "pop r15",
        "pop r14",
        "pop r13",
        "pop r12",
        "pop r11",
        "pop r10",
        "pop r9",
        "pop r8",
        "pop rdi",
        "pop rsi",
        "pop rbp",
        "pop rbx",
        "pop rdx",
        "pop rcx",
        "pop rax",
        "popfq",
        "ret 128",
        area = const AREA,
        mask = const MASK,
        fast = sym fast_path,
    )
}

/// The common entry where the OS enables no AVX-512 state: preserves every register, RFLAGS,
/// ymm0-15 and MXCSR (all the compiled code can change).
#[unsafe(naked)]
extern "C" fn entry_ymm() {
    core::arch::naked_asm!(
        "pushfq",
        "push rax",
        "push rcx",
        "push rdx",
        "push rbx",
        "push rbp",
        "push rsi",
        "push rdi",
        "push r8",
        "push r9",
        "push r10",
        "push r11",
        "push r12",
        "push r13",
        "push r14",
        "push r15",
        "mov rbp, rsp",
        "cld",
        "sub rsp, 576",
        "and rsp, -32",
        "vmovdqa [rsp], ymm0",
        "vmovdqa [rsp + 32], ymm1",
        "vmovdqa [rsp + 64], ymm2",
        "vmovdqa [rsp + 96], ymm3",
        "vmovdqa [rsp + 128], ymm4",
        "vmovdqa [rsp + 160], ymm5",
        "vmovdqa [rsp + 192], ymm6",
        "vmovdqa [rsp + 224], ymm7",
        "vmovdqa [rsp + 256], ymm8",
        "vmovdqa [rsp + 288], ymm9",
        "vmovdqa [rsp + 320], ymm10",
        "vmovdqa [rsp + 352], ymm11",
        "vmovdqa [rsp + 384], ymm12",
        "vmovdqa [rsp + 416], ymm13",
        "vmovdqa [rsp + 448], ymm14",
        "vmovdqa [rsp + 480], ymm15",
        // Clean upper halves: SSE code with dirty ones pays a state transition each time.
        "vzeroupper",
        // The MXCSR a signal handler starts with, as on the slow path; LDMXCSR is slow, so
        // only when the program's differs.
        "stmxcsr [rsp + 512]",
        "cmp dword ptr [rsp + 512], 0x1F80",
        "je 2f",
        "mov dword ptr [rsp + 516], 0x1F80",
        "ldmxcsr [rsp + 516]",
        "2:",
        "mov rdi, rbp",
        "call {fast}",
        "cmp dword ptr [rsp + 512], 0x1F80",
        "je 3f",
        "ldmxcsr [rsp + 512]",
        "3:",
        "vmovdqa ymm0, [rsp]",
        "vmovdqa ymm1, [rsp + 32]",
        "vmovdqa ymm2, [rsp + 64]",
        "vmovdqa ymm3, [rsp + 96]",
        "vmovdqa ymm4, [rsp + 128]",
        "vmovdqa ymm5, [rsp + 160]",
        "vmovdqa ymm6, [rsp + 192]",
        "vmovdqa ymm7, [rsp + 224]",
        "vmovdqa ymm8, [rsp + 256]",
        "vmovdqa ymm9, [rsp + 288]",
        "vmovdqa ymm10, [rsp + 320]",
        "vmovdqa ymm11, [rsp + 352]",
        "vmovdqa ymm12, [rsp + 384]",
        "vmovdqa ymm13, [rsp + 416]",
        "vmovdqa ymm14, [rsp + 448]",
        "vmovdqa ymm15, [rsp + 480]",
        "mov rsp, rbp",
        "pop r15",
        "pop r14",
        "pop r13",
        "pop r12",
        "pop r11",
        "pop r10",
        "pop r9",
        "pop r8",
        "pop rdi",
        "pop rsi",
        "pop rbp",
        "pop rbx",
        "pop rdx",
        "pop rcx",
        "pop rax",
        "popfq",
        "ret 128",
        fast = sym fast_path,
    )
}
