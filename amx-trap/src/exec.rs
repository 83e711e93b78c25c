//! The execute step: one decoded AMX instruction on an emulated unit, its memory operand
//! computed from the registers as the silicon computes it and accessed with the CPU's own loads
//! and stores ([`crate::access`]). Allocates nothing and takes no lock.
//!
//! The order of the checks is the silicon's (docs/semantics.md sections 12 and 15): the
//! instruction's CPUID feature (#UD where the modelled CPU does not report it, before any tile
//! state is looked at), the #UD conditions that depend on the tile configuration, then XFD (no
//! permission), then the memory operand (whatever fault the CPU's access raises: #GP for a
//! non-canonical address, #PF, SIGBUS), then LDTILECFG's #GP rules.
//!
//! An AMX-AVX512 row move completes with its zmm result in [`Regs::zmm`]: the caller writes it
//! into the interrupted context (`crate::zmm`).
//!
//! Addresses: the effective address is `base + disp` (the next instruction's address for
//! RIP-relative forms), a tile row `r` adds `r * (index << scale)`; every sum wraps at the
//! address size (2^32 with a `67` prefix, the registers read as their low 32 bits), and only
//! then is the FS or GS base added, wrapping at 2^64.

use amx_runtime::engine as check;
use amx_runtime::{Emulator, TileUnit, ROW_BYTES, TILE_BYTES};
use amx_tilecfg::decode::{
    Address, Extension, Instruction, Operation, ProductKind, RowKind, Segment,
};
use amx_tilecfg::{image, DotKind, TileShape, TmulLimits};

use crate::access::{self, Fault};
use crate::regs::Regs;
use crate::{model, permission_granted};

/// The exception an instruction raised instead of completing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exception {
    /// #UD: SIGILL, `ILL_ILLOPN`, REG_TRAPNO 6.
    InvalidOpcode,
    /// #GP(0) the engine decides (an image LDTILECFG rejects): SIGSEGV, `SI_KERNEL`,
    /// REG_TRAPNO 13.
    GeneralProtection,
    /// XFD #NM (tile data without the XTILEDATA permission): SIGILL, `ILL_ILLOPC`, REG_TRAPNO 0
    /// as Linux reports it.
    DeviceNotAvailable,
    /// The fault the CPU raised for an access of the operand, as the kernel reported it.
    Memory(Fault),
}

/// How an instruction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It completed; `regs.rip` now points past it.
    Completed,
    /// It raised an exception; `regs.rip` still points at it (a load or store that faulted
    /// on a row left start_row at that row, so running it again resumes there).
    Fault(Exception),
}

/// Executes `insn` (at `regs.rip`) on `unit`, reading and writing the process's memory as the
/// instruction would. `pkru`: the program's PKRU, loaded around the operand's accesses (`None`
/// where it is loaded already: a patched site runs in the program's own context).
pub(crate) fn execute(
    insn: &Instruction,
    regs: &mut Regs,
    unit: &mut Emulator,
    pkru: Option<u32>,
) -> Outcome {
    match step(insn, regs, unit, pkru) {
        Ok(zmm) => {
            regs.rip = regs.rip.wrapping_add(u64::from(insn.len));
            regs.zmm = zmm;
            Outcome::Completed
        }
        Err(e) => Outcome::Fault(e),
    }
}

/// Whether the modelled CPU reports the instruction's feature (section 15, N2 and N3).
fn reported(ext: Extension) -> bool {
    model().has(ext, crate::zmm::available())
}

/// A zmm register's new value: its number and 64 bytes.
type ZmmWrite = Option<(u8, [u8; 64])>;

fn step(
    insn: &Instruction,
    regs: &Regs,
    unit: &mut Emulator,
    pkru: Option<u32>,
) -> Result<ZmmWrite, Exception> {
    let shape = refusal(insn, &unit.loaded_config(), unit.tmul_limits())?;
    if insn.op.touches_tile_data() && !permission_granted() {
        return Err(Exception::DeviceNotAvailable);
    }
    if let Operation::RowMove {
        kind,
        zmm,
        tile,
        row,
    } = insn.op
    {
        let row = row.as_r32(|r| regs.gpr.get(usize::from(r & 15)).copied().unwrap_or(0));
        let value = match kind {
            RowKind::Tilemovrow => unit.tilemovrow(tile, row),
            RowKind::Tcvtrowd2ps => unit.tcvtrowd2ps(tile, row),
            RowKind::Tcvtrowps2bf16h => unit.tcvtrowps2bf16h(tile, row),
            RowKind::Tcvtrowps2bf16l => unit.tcvtrowps2bf16l(tile, row),
            RowKind::Tcvtrowps2phh => unit.tcvtrowps2phh(tile, row),
            RowKind::Tcvtrowps2phl => unit.tcvtrowps2phl(tile, row),
        }
        .map_err(ud)?;
        return Ok(Some((zmm, value)));
    }
    step_tiles(insn, regs, unit, pkru, shape).map(|()| None)
}

/// The #UD an instruction raises before XFD, on a unit whose configuration is `cfg`: the
/// instruction's CPUID feature first (N2), then the conditions that depend on the tile
/// configuration (section 12). The shape of the tile the instruction names, where it names one
/// for its memory operand or TILEZERO.
pub(crate) fn refusal(
    insn: &Instruction,
    cfg: &[u8; 64],
    limits: TmulLimits,
) -> Result<Option<TileShape>, Exception> {
    // An instruction the modelled CPU does not have is #UD before anything else (N2).
    if !reported(insn.op.extension()) {
        return Err(Exception::InvalidOpcode);
    }
    // The TILECFG-dependent #UD conditions come before XFD (section 12).
    Ok(match insn.op {
        Operation::Tilezero(t) => Some(check::tilezero_refusal(cfg, t).map_err(ud)?),
        Operation::Tileloadd(t)
        | Operation::Tileloaddt1(t)
        | Operation::Tilestored(t)
        | Operation::Tileloaddrs(t)
        | Operation::Tileloaddrst1(t) => Some(check::tile_memory_refusal(cfg, t).map_err(ud)?),
        Operation::DotProduct { c, a, b, .. } | Operation::Product { c, a, b, .. } => {
            check::dot_refusal(cfg, (c, a, b), limits).map_err(ud)?;
            None
        }
        Operation::RowMove { tile, .. } => {
            check::tile_row_refusal(cfg, tile).map_err(ud)?;
            None
        }
        Operation::Ldtilecfg | Operation::Sttilecfg | Operation::Tilerelease => None,
    })
}

/// The instructions that change only tile state and memory.
fn step_tiles(
    insn: &Instruction,
    regs: &Regs,
    unit: &mut Emulator,
    pkru: Option<u32>,
    shape: Option<TileShape>,
) -> Result<(), Exception> {
    let next = regs.rip.wrapping_add(u64::from(insn.len));
    let program = |f: &mut dyn FnMut() -> Result<(), Exception>| match pkru {
        Some(pkru) => access::with_pkru(pkru, f),
        None => f(),
    };
    match (insn.op, insn.mem, shape) {
        (Operation::Ldtilecfg, Some(m), _) => {
            let operand = Operand::new(&m, regs, next);
            let at = operand.row(0);
            let mut img = [0u8; 64];
            program(&mut || {
                operand.access(at, 64, || {
                    // SAFETY: `img` is ours; the operand is the program's, any address.
                    unsafe { access::copy(img.as_mut_ptr(), at as *const u8, 64) }
                })
            })?;
            // Checked first, without the message an emulator fault would format.
            if !check::ldtilecfg_accepts(&img, unit.palette_table()) {
                return Err(Exception::GeneralProtection);
            }
            unit.ldtilecfg(&img)
                .map_err(|_| Exception::GeneralProtection)
        }
        (Operation::Sttilecfg, Some(m), _) => {
            let operand = Operand::new(&m, regs, next);
            let at = operand.row(0);
            let img = unit.sttilecfg();
            program(&mut || {
                operand.access(at, 64, || {
                    // SAFETY: as above, for a store.
                    unsafe { access::copy(at as *mut u8, img.as_ptr(), 64) }
                })
            })
        }
        (Operation::Tilerelease, _, _) => {
            unit.tilerelease();
            Ok(())
        }
        (Operation::Tilezero(t), _, _) => unit.tilezero(t).map_err(ud),
        (
            Operation::Tileloadd(t)
            | Operation::Tileloaddt1(t)
            | Operation::Tileloaddrs(t)
            | Operation::Tileloaddrst1(t),
            Some(m),
            Some(shape),
        ) => {
            let operand = Operand::new(&m, regs, next);
            let mut result = Ok(());
            program(&mut || {
                result = load(unit, t, shape, &operand);
                Ok(())
            })?;
            result
        }
        (Operation::Tilestored(t), Some(m), Some(shape)) => {
            let operand = Operand::new(&m, regs, next);
            let mut result = Ok(());
            program(&mut || {
                result = store(unit, t, shape, &operand);
                Ok(())
            })?;
            result
        }
        (Operation::DotProduct { kind, c, a, b }, _, _) => match kind {
            DotKind::Tdpbssd => unit.tdpbssd(c, a, b),
            DotKind::Tdpbsud => unit.tdpbsud(c, a, b),
            DotKind::Tdpbusd => unit.tdpbusd(c, a, b),
            DotKind::Tdpbuud => unit.tdpbuud(c, a, b),
            DotKind::Tdpbf16ps => unit.tdpbf16ps(c, a, b),
            DotKind::Tdpfp16ps => unit.tdpfp16ps(c, a, b),
        }
        .map_err(ud),
        (Operation::Product { kind, c, a, b }, _, _) => match kind {
            ProductKind::Tdpbf8ps => unit.tdpbf8ps(c, a, b),
            ProductKind::Tdpbhf8ps => unit.tdpbhf8ps(c, a, b),
            ProductKind::Tdphbf8ps => unit.tdphbf8ps(c, a, b),
            ProductKind::Tdphf8ps => unit.tdphf8ps(c, a, b),
            ProductKind::Tcmmimfp16ps => unit.tcmmimfp16ps(c, a, b),
            ProductKind::Tcmmrlfp16ps => unit.tcmmrlfp16ps(c, a, b),
        }
        .map_err(ud),
        // A memory form without its operand cannot come out of the decoder.
        _ => Err(Exception::InvalidOpcode),
    }
}

fn ud<T>(_: T) -> Exception {
    Exception::InvalidOpcode
}

/// A memory operand's addresses.
struct Operand {
    /// The effective address of row 0, wrapped at the address size.
    base: u64,
    /// The row stride (index << scale), wrapped at the address size.
    stride: u64,
    /// 32-bit address size (prefix 67).
    addr32: bool,
    /// The FS or GS base (0 without a segment prefix).
    segment: u64,
    /// The reference goes through the stack segment (base RSP or RBP, no FS or GS override):
    /// a non-canonical address is #SS there, not #GP (SDM vol. 1, 3.3.7.1).
    stack: bool,
}

impl Operand {
    fn new(m: &Address, regs: &Regs, next: u64) -> Operand {
        let size = |v: u64| if m.addr32 { v & 0xFFFF_FFFF } else { v };
        let register = |r: u8| size(regs.gpr.get(usize::from(r & 15)).copied().unwrap_or(0));
        let start = if m.rip_relative {
            size(next)
        } else {
            m.base.map_or(0, register)
        };
        Operand {
            base: size(start.wrapping_add(m.disp as i64 as u64)),
            stride: size(m.index.map_or(0, |i| register(i) << m.scale)),
            addr32: m.addr32,
            segment: segment_base(m.segment),
            stack: m.segment.is_none() && matches!(m.base, Some(4 | 5)),
        }
    }

    /// The fault of an access of `len` bytes at `at` (an address from [`Operand::row`]), or
    /// of the copy `access` makes of it: the CPU checks a reference as a whole, so one that
    /// runs from canonical into non-canonical addresses is #GP before any byte is touched
    /// (the copy, in pieces, would meet the unmappable page's #PF first); and through the
    /// stack segment that #GP is #SS.
    fn access(
        &self,
        at: u64,
        len: usize,
        copy: impl FnOnce() -> Result<(), Fault>,
    ) -> Result<(), Exception> {
        let canonical = |x: u64| matches!((x as i64) >> 47, 0 | -1);
        let last = at.wrapping_add(len.saturating_sub(1) as u64);
        let result = if len > 0 && canonical(at) && !canonical(last) {
            Err(Fault::GENERAL_PROTECTION)
        } else {
            copy()
        };
        result.map_err(|f| {
            Exception::Memory(if self.stack && f.is_general_protection() {
                Fault::STACK_SEGMENT
            } else {
                f
            })
        })
    }

    /// The linear address of row `r`.
    fn row(&self, r: usize) -> u64 {
        let mut ea = self.base.wrapping_add((r as u64).wrapping_mul(self.stride));
        if self.addr32 {
            ea &= 0xFFFF_FFFF;
        }
        self.segment.wrapping_add(ea)
    }
}

/// The base of FS or GS (0 without a segment prefix).
fn segment_base(segment: Option<Segment>) -> u64 {
    let Some(segment) = segment else {
        return 0;
    };
    if crate::cpuid::fsgsbase() {
        let base: u64;
        // SAFETY: RDFSBASE/RDGSBASE exist where the OS enables FSGSBASE (checked); they read the
        // thread's segment base, which a signal handler shares with the interrupted code.
        unsafe {
            match segment {
                Segment::Fs => core::arch::asm!("rdfsbase {}", out(reg) base,
                    options(nomem, nostack, preserves_flags)),
                Segment::Gs => core::arch::asm!("rdgsbase {}", out(reg) base,
                    options(nomem, nostack, preserves_flags)),
            }
        }
        return base;
    }
    let code: libc::c_long = match segment {
        Segment::Fs => 0x1003, // ARCH_GET_FS
        Segment::Gs => 0x1004, // ARCH_GET_GS
    };
    let mut base: u64 = 0;
    // SAFETY: ARCH_GET_FS/GS write one u64 to the given address, a live local.
    let rc = unsafe {
        crate::sys::call(
            libc::SYS_arch_prctl,
            &[code as u64, &mut base as *mut u64 as u64],
        )
    };
    if rc == 0 {
        base
    } else {
        0
    }
}

fn load(unit: &mut Emulator, t: u8, shape: TileShape, m: &Operand) -> Result<(), Exception> {
    let start = usize::from(image::start_row(&unit.loaded_config()));
    let colsb = usize::from(shape.colsb);
    let rows = usize::from(shape.rows).min(16);
    let Some(tile) = check::tile_bytes_mut(unit, t) else {
        return Err(Exception::InvalidOpcode);
    };
    // The memory rows go straight into the tile's rows (rows below start_row are not read:
    // they keep their bytes, T4). A row that faults may be left partly read: the silicon leaves
    // it unspecified, and resuming reads it again (T6).
    let mut end = rows;
    let mut outcome = Ok(());
    for (r, row) in tile
        .chunks_exact_mut(ROW_BYTES)
        .enumerate()
        .take(rows)
        .skip(start)
    {
        let at = m.row(r);
        // SAFETY: the row is the tile's, `colsb` <= 64 bytes; the source is the program's.
        let copied = m.access(at, colsb, || unsafe {
            access::copy(row.as_mut_ptr(), at as *const u8, colsb)
        });
        if let Err(e) = copied {
            end = r;
            outcome = Err(e);
            break;
        }
    }
    // TILELOADD's zeroing (T3): past colsb in each row read, and every row past `rows`.
    for row in tile.chunks_exact_mut(ROW_BYTES).take(end).skip(start) {
        if let Some(past) = row.get_mut(colsb..) {
            past.fill(0);
        }
    }
    if let Some(past) = tile.get_mut(rows * ROW_BYTES..) {
        past.fill(0);
    }
    // start_row records where to resume after a fault (T6), and is 0 after a completed load.
    unit.set_start_row(if outcome.is_ok() { 0 } else { end as u8 });
    outcome
}

fn store(unit: &mut Emulator, t: u8, shape: TileShape, m: &Operand) -> Result<(), Exception> {
    let start = usize::from(image::start_row(&unit.loaded_config()));
    let colsb = usize::from(shape.colsb);
    let rows = usize::from(shape.rows).min(16);
    let tile = unit.tile_bytes(t).copied().unwrap_or([0; TILE_BYTES]);
    for (r, row) in tile
        .chunks_exact(ROW_BYTES)
        .enumerate()
        .take(rows)
        .skip(start)
    {
        let at = m.row(r);
        // SAFETY: the row is ours; the destination is the program's.
        let copied = m.access(at, colsb, || unsafe {
            access::copy(at as *mut u8, row.as_ptr(), colsb)
        });
        if let Err(e) = copied {
            unit.set_start_row(r as u8);
            return Err(e);
        }
    }
    unit.set_start_row(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use amx_tilecfg::decode::{decode, Decoded};

    use super::*;

    /// The engine's state as a Diamond Rapids with the permission granted (no signal handler
    /// is installed: `execute` is called directly).
    fn diamond_rapids() {
        crate::MODEL.store(crate::Model::DiamondRapids.index(), Ordering::Relaxed);
        crate::PERMITTED.store(true, Ordering::Release);
        crate::zmm::prepare();
    }

    fn insn(code: &[u8]) -> Instruction {
        match decode(code) {
            Decoded::Amx(i) => i,
            other => panic!("{code:02x?}: {other:?}"),
        }
    }

    /// A unit loaded with a palette-1 configuration of `tiles` (t, rows, colsb).
    fn configured(tiles: &[(u8, u8, u16)]) -> Emulator {
        let mut image = [0u8; 64];
        image[0] = 1;
        for &(t, rows, colsb) in tiles {
            let t = usize::from(t);
            image[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            image[48 + t] = rows;
        }
        let mut emu = Emulator::new();
        emu.ldtilecfg(&image).unwrap();
        emu
    }

    /// `n` pseudo-random bytes.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn row_moves_return_the_emulators_row_for_the_zmm_destination() {
        diamond_rapids();
        let data = bytes(3, 1024);
        let mut unit = configured(&[(3, 16, 64)]);
        unit.tileloadd(3, &data, 64).unwrap();
        let mut reference = unit.clone();
        // tilemovrow zmm22, tmm3, ecx with ecx = 5 (the upper half of rcx is not read).
        let mut regs = Regs {
            rip: 0x1000,
            ..Regs::default()
        };
        regs.gpr[1] = 0xFFFF_FFFF_0000_0005;
        let i = insn(&[0x62, 0xE2, 0x75, 0x48, 0x4A, 0xF3]);
        let outcome = execute(&i, &mut regs, &mut unit, None);
        if crate::zmm::available() {
            assert_eq!(outcome, Outcome::Completed);
            assert_eq!(regs.rip, 0x1006);
            assert_eq!(regs.zmm, Some((22, reference.tilemovrow(3, 5).unwrap())));
            // The imm8 form, tcvtrowps2phl zmm22, tmm3, 123: row 59 of chunk 1 (zeros).
            let i = insn(&[0x62, 0xE3, 0x7F, 0x48, 0x77, 0xF3, 0x7B]);
            assert_eq!(execute(&i, &mut regs, &mut unit, None), Outcome::Completed);
            assert_eq!(regs.zmm, Some((22, [0; 64])));
            assert_eq!(regs.rip, 0x100D);
        } else {
            // No AVX-512 state on the host: #UD, RIP and the unit unchanged.
            assert_eq!(outcome, Outcome::Fault(Exception::InvalidOpcode));
            assert_eq!((regs.rip, regs.zmm), (0x1000, None));
        }
        // An unused tile is #UD in any case.
        let i = insn(&[0x62, 0xE2, 0x75, 0x48, 0x4A, 0xF2]);
        assert_eq!(
            execute(&i, &mut regs, &mut unit, None),
            Outcome::Fault(Exception::InvalidOpcode)
        );
    }

    #[test]
    fn products_and_movrs_loads_run_on_the_unit() {
        diamond_rapids();
        let a = bytes(4, 1024);
        let mut unit = configured(&[(0, 16, 64), (1, 16, 64), (2, 16, 64)]);
        let mut reference = unit.clone();
        // tileloaddrs tmm1, [rdi + rsi*1]; tileloaddrst1 tmm2, [rdi + rsi*1]
        let mut regs = Regs::default();
        regs.gpr[7] = a.as_ptr() as u64;
        regs.gpr[6] = 64;
        for code in [
            [0xC4, 0xE2, 0x7B, 0x4A, 0x0C, 0x37],
            [0xC4, 0xE2, 0x79, 0x4A, 0x14, 0x37],
        ] {
            assert_eq!(
                execute(&insn(&code), &mut regs, &mut unit, None),
                Outcome::Completed
            );
        }
        reference.tileloaddrs(1, &a, 64).unwrap();
        reference.tileloaddrst1(2, &a, 64).unwrap();
        // tdphf8ps tmm0, tmm1, tmm2 and tcmmrlfp16ps tmm0, tmm1, tmm2
        for code in [
            [0xC4, 0xE5, 0x69, 0xFD, 0xC1],
            [0xC4, 0xE2, 0x68, 0x6C, 0xC1],
        ] {
            assert_eq!(
                execute(&insn(&code), &mut regs, &mut unit, None),
                Outcome::Completed
            );
        }
        reference.tdphf8ps(0, 1, 2).unwrap();
        reference.tcmmrlfp16ps(0, 1, 2).unwrap();
        for t in 0..3 {
            assert_eq!(unit.tile_bytes(t), reference.tile_bytes(t), "tmm{t}");
        }
        assert_eq!(regs.zmm, None);
        // Aliased operands: #UD.
        let aliased = insn(&[0xC4, 0xE5, 0x79, 0xFD, 0xC0]);
        assert_eq!(
            execute(&aliased, &mut regs, &mut unit, None),
            Outcome::Fault(Exception::InvalidOpcode)
        );
    }
}
