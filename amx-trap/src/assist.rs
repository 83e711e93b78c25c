//! Assisting AMX silicon: on a CPU whose tile unit lacks instruction sets the modelled CPU has
//! (a Sapphire or Emerald Rapids core running code written for Granite or Diamond Rapids), the
//! silicon executes every instruction it has, and the engine executes the others against the
//! thread's own tile registers.
//!
//! Such an instruction is #UD on the silicon. When Linux delivers that SIGILL it has saved the
//! thread's registers, the tiles among them, in the signal frame's XSAVE state (standard
//! format: component 17, TILECFG, and component 18, TILEDATA, at the offsets CPUID leaf 0xD
//! gives), and `rt_sigreturn` loads them back. So the engine loads that state into the thread's
//! emulated unit, executes the instruction there with the checks and exceptions of the
//! emulated path (`crate::exec`), and writes the unit's state back into the frame: the thread
//! resumes with the instruction's results in its real tile (or zmm) registers.
//!
//! A thread that has not used tile data yet runs with XFD armed, and the kernel then saves no
//! room for TILEDATA in its frames. Where the process holds the XTILEDATA permission, the
//! engine executes one tile-data instruction in its handler (the kernel's XFD #NM handling
//! then gives the thread its full state, as on the thread's own first use), returns without
//! executing the instruction, and meets it again in a frame with room. Without the permission
//! the instruction raises XFD's #NM, as the silicon that has it would.
//!
//! The engine never patches an assisted site: a patched site executes outside a signal frame,
//! where the tiles are in the registers. Each assisted instruction costs a signal.
//!
//! Nothing here allocates, locks or panics: it runs in the engine's signal handler.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};

use amx_runtime::{Emulator, TileUnit, TILE_BYTES};
use amx_tilecfg::decode::Extension;

use crate::kframe;
use crate::Model;

/// The XSAVE components of the tile state.
const TILECFG: u64 = 1 << 17;
const TILEDATA: u64 = 1 << 18;

/// `ARCH_GET_XCOMP_PERM`.
const ARCH_GET_XCOMP_PERM: u64 = 0x1022;

/// The extensions the host's own tile unit executes, one bit per [`bit`].
static HOST: AtomicU8 = AtomicU8::new(0);
/// Offsets of components 17 and 18 in the host's standard-format XSAVE state (0: unknown).
static TILECFG_AT: AtomicU32 = AtomicU32::new(0);
static TILEDATA_AT: AtomicU32 = AtomicU32::new(0);
/// Whether the kernel has granted the XTILEDATA permission (once granted, it stays).
static PERMITTED: AtomicBool = AtomicBool::new(false);

/// An extension's bit in [`HOST`].
fn bit(ext: Extension) -> u8 {
    match ext {
        Extension::Base => 1,
        Extension::Fp16 => 2,
        Extension::Fp8 => 4,
        Extension::Complex => 8,
        Extension::Movrs => 16,
        Extension::Avx512 => 32,
    }
}

/// Every extension, for [`needed`].
const ALL: [Extension; 6] = [
    Extension::Base,
    Extension::Fp16,
    Extension::Fp8,
    Extension::Complex,
    Extension::Movrs,
    Extension::Avx512,
];

/// The host's tile extensions, from its own CPUID (leaf 7 subleaf 1 and leaf 0x1E subleaf 1).
fn host_extensions() -> u8 {
    use raw_cpuid::native_cpuid::cpuid_count;
    let max = cpuid_count(0, 0).eax;
    let leaf7 = cpuid_count(7, 0);
    let mut set = 0;
    if leaf7.edx & (1 << 24) != 0 {
        set |= bit(Extension::Base);
    }
    if leaf7.eax >= 1 {
        let sub1 = cpuid_count(7, 1);
        if sub1.eax & (1 << 21) != 0 {
            set |= bit(Extension::Fp16);
        }
        if sub1.edx & (1 << 8) != 0 {
            set |= bit(Extension::Complex);
        }
    }
    if max >= 0x1E && cpuid_count(0x1E, 0).eax >= 1 {
        let eax = cpuid_count(0x1E, 1).eax;
        for (b, ext) in [
            (4, Extension::Fp8),
            (7, Extension::Avx512),
            (8, Extension::Movrs),
        ] {
            if eax & (1 << b) != 0 {
                set |= bit(ext);
            }
        }
    }
    set
}

/// Reads the host's tile extensions and XSAVE layout; called at installation, before CPUID
/// may fault.
pub(crate) fn prepare() {
    use raw_cpuid::native_cpuid::cpuid_count;
    HOST.store(host_extensions(), Ordering::Relaxed);
    // The engine's C tests reach the kernel's out-of-memory refusal this way (the Rust ones
    // through `simulate_tile_state_refusal`).
    if std::env::var_os("AMX_TRAP_TEST_REFUSE_TILE_STATE").is_some_and(|v| v == "1") {
        simulate_refusal(true);
    }
    if cpuid_count(0, 0).eax >= 0xD {
        let cfg = cpuid_count(0xD, 17);
        let data = cpuid_count(0xD, 18);
        // The standard format puts every user component past the XSAVE header.
        if cfg.eax == 64 && data.eax == TILE_BYTES as u32 * 8 && cfg.ebx >= 576 && data.ebx >= 576 {
            TILECFG_AT.store(cfg.ebx, Ordering::Relaxed);
            TILEDATA_AT.store(data.ebx, Ordering::Relaxed);
        }
    }
}

/// Whether `model` has an instruction set the host's tile unit lacks (which only the engine
/// can then execute), on a host with AVX-512 state or not (`host_zmm`).
pub(crate) fn needed(model: Model, host_zmm: bool) -> bool {
    needed_on(model, host_zmm, HOST.load(Ordering::Relaxed))
}

/// [`needed`], callable before the engine is installed (it reads the host's CPUID then).
pub(crate) fn needed_now(model: Model) -> bool {
    if crate::is_active() {
        // CPUID may fault now: the answers read at installation.
        return needed(model, crate::zmm::available());
    }
    needed_on(
        model,
        crate::zmm::host_layout().is_some(),
        host_extensions(),
    )
}

/// [`needed`] on a host whose tile extensions are `host` (bits of [`bit`]).
fn needed_on(model: Model, host_zmm: bool, host: u8) -> bool {
    ALL.into_iter()
        .any(|ext| model.has(ext, host_zmm) && host & bit(ext) == 0)
}

fn host_has(ext: Extension) -> bool {
    HOST.load(Ordering::Relaxed) & bit(ext) != 0
}

/// Whether the engine executes instructions of `ext`: the modelled CPU has them, the host's
/// tile unit does not.
pub(crate) fn assisted(ext: Extension) -> bool {
    crate::model().has(ext, crate::zmm::available()) && !host_has(ext)
}

/// Whether the kernel lets this process use tile data (`ARCH_GET_XCOMP_PERM`, bit 18).
pub(crate) fn permitted() -> bool {
    if PERMITTED.load(Ordering::Relaxed) {
        return true;
    }
    let mut mask: u64 = 0;
    // SAFETY: ARCH_GET_XCOMP_PERM writes one u64 at the given address, a live local.
    let rc = unsafe {
        crate::sys::call(
            libc::SYS_arch_prctl,
            &[ARCH_GET_XCOMP_PERM, &mut mask as *mut u64 as u64],
        )
    };
    let granted = rc == 0 && mask & TILEDATA != 0;
    if granted {
        PERMITTED.store(true, Ordering::Relaxed);
    }
    granted
}

/// Where the tile state lies in the frame's XSAVE state `fp`: the offsets of TILECFG and
/// TILEDATA, when the state is standard-format XSAVE whose software bytes name both
/// components and whose size covers them (the kernel saved room for the thread's tiles).
pub(crate) fn frame_tiles(fp: &[u8]) -> Option<(usize, usize)> {
    frame_tiles_at(
        fp,
        TILECFG_AT.load(Ordering::Relaxed) as usize,
        TILEDATA_AT.load(Ordering::Relaxed) as usize,
    )
}

/// The offset of TILECFG in the host's XSAVE state, where known.
pub(crate) fn tilecfg_offset() -> Option<usize> {
    let at = TILECFG_AT.load(Ordering::Relaxed) as usize;
    (at != 0).then_some(at)
}

fn frame_tiles_at(fp: &[u8], cfg_at: usize, data_at: usize) -> Option<(usize, usize)> {
    if cfg_at == 0 || kframe::u32_at(fp, kframe::sw::AT) != Some(kframe::sw::MAGIC1) {
        return None;
    }
    let xfeatures = kframe::u64_at(fp, kframe::sw::XFEATURES)?;
    let size = kframe::u32_at(fp, kframe::sw::XSTATE_SIZE)? as usize;
    let xcomp_bv = kframe::u64_at(fp, kframe::XSTATE_BV + 8)?;
    let end = fp.len().min(size);
    let fits = cfg_at.checked_add(64)? <= end && data_at.checked_add(8 * TILE_BYTES)? <= end;
    (xfeatures & (TILECFG | TILEDATA) == TILECFG | TILEDATA && xcomp_bv & (1 << 63) == 0 && fits)
        .then_some((cfg_at, data_at))
}

/// Loads the tile state of the frame's XSAVE state `fp` into `unit`: components in their
/// initial state (their XSTATE_BV bit clear) are the INIT state. `false` where the saved
/// configuration is one the emulator refuses (which the silicon never saves).
pub(crate) fn load(unit: &mut Emulator, fp: &[u8], (cfg_at, data_at): (usize, usize)) -> bool {
    let bv = kframe::u64_at(fp, kframe::XSTATE_BV).unwrap_or(0);
    let mut cfg = [0u8; 64];
    if bv & TILECFG != 0 {
        if let Some(saved) = fp.get(cfg_at..cfg_at + 64) {
            cfg.copy_from_slice(saved);
        }
    }
    if unit.ldtilecfg(&cfg).is_err() {
        unit.tilerelease();
        return false;
    }
    if bv & TILEDATA != 0 {
        for t in 0..8u8 {
            let at = data_at + usize::from(t) * TILE_BYTES;
            if let Some(Ok(tile)) = fp
                .get(at..at + TILE_BYTES)
                .map(<&[u8; TILE_BYTES]>::try_from)
            {
                unit.set_tile_bytes(t, tile);
            }
        }
    }
    true
}

/// Writes `unit`'s tile state into the frame's XSAVE state `fp`, for `rt_sigreturn` to load:
/// the INIT state as both components' XSTATE_BV bits clear, a configured unit as its
/// configuration and all eight tiles.
pub(crate) fn store(unit: &Emulator, fp: &mut [u8], (cfg_at, data_at): (usize, usize)) {
    let Some(mut bv) = kframe::u64_at(fp, kframe::XSTATE_BV) else {
        return;
    };
    let cfg = unit.loaded_config();
    if cfg[0] == 0 {
        bv &= !(TILECFG | TILEDATA);
    } else {
        if let Some(dst) = fp.get_mut(cfg_at..cfg_at + 64) {
            dst.copy_from_slice(&cfg);
        }
        for t in 0..8u8 {
            let at = data_at + usize::from(t) * TILE_BYTES;
            if let (Some(dst), Some(src)) = (fp.get_mut(at..at + TILE_BYTES), unit.tile_bytes(t)) {
                dst.copy_from_slice(src);
            }
        }
        bv |= TILECFG | TILEDATA;
    }
    if let Some(dst) = fp.get_mut(kframe::XSTATE_BV..kframe::XSTATE_BV + 8) {
        dst.copy_from_slice(&bv.to_le_bytes());
    }
}

// The priming routine. `amx_trap_prime(image, simulate, pid, tid, info)` loads the 64-byte
// configuration `image` and runs one TILEZERO, whose XFD #NM makes the kernel give the thread
// its full tile state, then TILERELEASE; it returns 0. Where the kernel cannot allocate that
// state, its #NM handler raises SIGSEGV (`SI_KERNEL`) at the TILEZERO instead: the engine's
// entry resumes the routine at `amx_trap_prime_refused`, which returns 1. With `simulate`
// non-zero the routine queues that SIGSEGV to the thread itself (`rt_tgsigqueueinfo(pid, tid,
// SIGSEGV, info)`) in place of the TILEZERO, so the engine's tests can reach the refusal; the
// `ud2` after it is reached only if the entry did not resume the routine, a bug the engine
// then reports.
core::arch::global_asm!(
    ".pushsection .text.amx_trap_prime,\"ax\",@progbits",
    ".p2align 4",
    ".hidden amx_trap_prime",
    ".globl amx_trap_prime",
    ".type amx_trap_prime, @function",
    "amx_trap_prime:",
    "    ldtilecfg [rdi]",
    "    test rsi, rsi",
    "    jnz 2f",
    "    tilezero tmm0",
    "    tilerelease",
    "    xor eax, eax",
    "    ret",
    "2:",
    "    mov rdi, rdx",
    "    mov rsi, rcx",
    "    mov edx, 11",
    "    mov r10, r8",
    "    mov eax, 297",
    "    syscall",
    "    ud2",
    ".hidden amx_trap_prime_refused",
    ".globl amx_trap_prime_refused",
    "amx_trap_prime_refused:",
    "    tilerelease",
    "    mov eax, 1",
    "    ret",
    ".hidden amx_trap_prime_end",
    ".globl amx_trap_prime_end",
    "amx_trap_prime_end:",
    ".size amx_trap_prime, amx_trap_prime_end - amx_trap_prime",
    ".popsection",
);

extern "C" {
    fn amx_trap_prime(image: *const u8, simulate: u64, pid: u64, tid: u64, info: *const u8) -> u64;
    fn amx_trap_prime_refused();
    fn amx_trap_prime_end();
}

/// Whether the priming routine simulates the kernel's refusal (the engine's tests).
static SIMULATE_REFUSAL: AtomicBool = AtomicBool::new(false);

/// Makes [`enable_tile_data`] meet the kernel's out-of-memory refusal, as when it cannot
/// allocate a thread's tile state, instead of asking for the state (`false`: asks again).
pub(crate) fn simulate_refusal(on: bool) {
    SIMULATE_REFUSAL.store(on, Ordering::Relaxed);
}

/// Whether `rip` lies in the priming routine (a SIGSEGV there with `SI_KERNEL` is the kernel
/// refusing the thread's tile state).
pub(crate) fn in_prime(rip: u64) -> bool {
    let start = amx_trap_prime as *const () as u64;
    let end = amx_trap_prime_end as *const () as u64;
    (start..end).contains(&rip)
}

/// Where a refused priming resumes.
pub(crate) fn prime_refused_at() -> u64 {
    amx_trap_prime_refused as *const () as u64
}

/// Gives this thread its full tile state, as its first tile-data instruction does (one
/// TILEZERO under a one-tile configuration, then TILERELEASE), or reports that Linux could not
/// allocate it (`false`: out of memory). The handler's own tile state is the INIT state the
/// kernel gives every handler, and `rt_sigreturn` replaces it with the frame's; the caller has
/// checked that the process holds the XTILEDATA permission, so XFD's #NM is the kernel's to
/// handle (it enlarges the thread's state and resumes, or raises SIGSEGV).
pub(crate) fn enable_tile_data() -> bool {
    #[repr(C, align(64))]
    struct Image([u8; 64]);
    // Palette 1, tile 0 one row of 4 bytes, every other tile unused.
    let mut image = Image([0; 64]);
    image.0[0] = 1;
    image.0[16] = 4;
    image.0[48] = 1;
    let simulate = SIMULATE_REFUSAL.load(Ordering::Relaxed);
    let info = crate::deliver::siginfo(libc::SIGSEGV, crate::deliver::SI_KERNEL, 0);
    let (pid, tid) = if simulate {
        (crate::sys::getpid() as u64, crate::sys::gettid() as u64)
    } else {
        (0, 0)
    };
    // SAFETY: AMX-TILE is present (the engine assists only where the host's tile unit runs
    // AMX). The routine reads the 64-byte image (a valid palette-1 configuration) and, when
    // simulating, the 128-byte siginfo, both live locals; TILEZERO tmm0 is valid under the
    // image; TILERELEASE returns to the INIT state the handler started in. It touches no other
    // memory and uses no stack; a refusal resumes it at its recovery label (the entry).
    unsafe {
        amx_trap_prime(
            image.0.as_ptr(),
            u64::from(simulate),
            pid,
            tid,
            info.as_ptr(),
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG_AT: usize = 2752;
    const DATA_AT: usize = 2816;
    const SIZE: usize = DATA_AT + 8192;

    /// An XSAVE frame image with software bytes for `xfeatures`, XSTATE_BV `bv`, every byte past
    /// the header 0xEE.
    fn frame(xfeatures: u64, bv: u64, size: usize) -> Vec<u8> {
        let mut fp = vec![0xEE; size + 4];
        fp[464..468].copy_from_slice(&kframe::sw::MAGIC1.to_le_bytes());
        fp[468..472].copy_from_slice(&((size + 4) as u32).to_le_bytes());
        fp[472..480].copy_from_slice(&xfeatures.to_le_bytes());
        fp[480..484].copy_from_slice(&(size as u32).to_le_bytes());
        fp[512..576].fill(0);
        fp[512..520].copy_from_slice(&bv.to_le_bytes());
        fp
    }

    fn config() -> [u8; 64] {
        let mut cfg = [0u8; 64];
        cfg[0] = 1;
        for t in 0..8 {
            cfg[16 + 2 * t] = 64;
            cfg[48 + t] = 16;
        }
        cfg
    }

    #[test]
    fn a_frame_without_room_for_tile_data_is_refused() {
        let both = TILECFG | TILEDATA | 3;
        assert!(frame_tiles_at(&frame(both, 0, SIZE), CFG_AT, DATA_AT).is_some());
        // XFD armed: the kernel saved TILECFG only, and no room past it.
        assert!(frame_tiles_at(&frame(TILECFG | 3, 0, DATA_AT), CFG_AT, DATA_AT).is_none());
        // Named, but cut short.
        assert!(frame_tiles_at(&frame(both, 0, SIZE - 1), CFG_AT, DATA_AT).is_none());
        // No XSAVE software bytes.
        let mut fp = frame(both, 0, SIZE);
        fp[464] ^= 1;
        assert!(frame_tiles_at(&fp, CFG_AT, DATA_AT).is_none());
        // The compacted format.
        let mut fp = frame(both, 0, SIZE);
        fp[520 + 7] = 0x80;
        assert!(frame_tiles_at(&fp, CFG_AT, DATA_AT).is_none());
        // No layout found at installation.
        assert!(frame_tiles_at(&frame(both, 0, SIZE), 0, 0).is_none());
    }

    #[test]
    fn init_components_load_as_the_init_state() {
        let fp = frame(TILECFG | TILEDATA, 0, SIZE);
        let mut unit = Emulator::new();
        unit.ldtilecfg(&config()).unwrap();
        assert!(load(&mut unit, &fp, (CFG_AT, DATA_AT)));
        assert!(!unit.is_configured());
        assert_eq!(unit.tile_bytes(3), Some(&[0u8; TILE_BYTES]));
    }

    #[test]
    fn state_round_trips_through_the_frame() {
        let mut fp = frame(TILECFG | TILEDATA, TILECFG | TILEDATA, SIZE);
        fp[CFG_AT..CFG_AT + 64].copy_from_slice(&config());
        for (i, b) in fp[DATA_AT..DATA_AT + 8192].iter_mut().enumerate() {
            *b = (i * 7 + 1) as u8;
        }
        let mut unit = Emulator::new();
        assert!(load(&mut unit, &fp, (CFG_AT, DATA_AT)));
        assert_eq!(unit.loaded_config(), config());
        assert_eq!(unit.tile_bytes(2).unwrap()[5], ((2048 + 5) * 7 + 1) as u8);
        // A changed tile goes back; so does the INIT state.
        let mut tile = [0u8; TILE_BYTES];
        tile[0] = 0x5A;
        unit.set_tile_bytes(6, &tile);
        let mut out = frame(TILECFG | TILEDATA, 0, SIZE);
        store(&unit, &mut out, (CFG_AT, DATA_AT));
        assert_eq!(
            kframe::u64_at(&out, kframe::XSTATE_BV),
            Some(TILECFG | TILEDATA)
        );
        assert_eq!(&out[CFG_AT..CFG_AT + 64], &config());
        assert_eq!(out[DATA_AT + 6 * TILE_BYTES], 0x5A);
        assert_eq!(&out[DATA_AT..DATA_AT + 1024], &fp[DATA_AT..DATA_AT + 1024]);
        unit.tilerelease();
        store(&unit, &mut out, (CFG_AT, DATA_AT));
        assert_eq!(kframe::u64_at(&out, kframe::XSTATE_BV), Some(0));
    }

    #[test]
    fn a_model_needs_the_engine_only_for_what_the_host_lacks() {
        let spr = bit(Extension::Base);
        assert!(!needed_on(Model::SapphireRapids, true, spr));
        assert!(needed_on(Model::GraniteRapids, true, spr));
        assert!(needed_on(Model::DiamondRapids, false, spr));
        let gnr = spr | bit(Extension::Fp16);
        assert!(!needed_on(Model::GraniteRapids, true, gnr));
        assert!(needed_on(Model::GraniteRapidsD, true, gnr));
        let dmr = ALL.into_iter().fold(0, |set, ext| set | bit(ext));
        assert!(!needed_on(Model::DiamondRapids, true, dmr));
    }
}
