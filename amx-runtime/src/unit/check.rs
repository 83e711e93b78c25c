//! The fault conditions of every tile instruction, shared by both backends.
//!
//! Each function takes the configuration the unit holds (as STTILECFG writes it: 64 zero bytes
//! when unconfigured) and returns the fault the silicon would raise. Configuration rules come from
//! `amx-tilecfg`, so the compile-time checks, these run-time checks and the emulator are one code.

use amx_tilecfg::{check_dot, image, PaletteTable, TileShape, TmulLimits};

use crate::error::{Fault, GeneralProtection, InvalidOpcode, Mnemonic, UdReason};

/// The #UD of `instruction` for `reason`.
pub(crate) fn ud(instruction: Mnemonic, reason: UdReason) -> Fault {
    Fault::InvalidOpcode(InvalidOpcode::new(instruction, reason))
}

/// #GP unless LDTILECFG accepts `image` on a CPU with palette table `table`.
pub(crate) fn ldtilecfg(image: &[u8; 64], table: &PaletteTable) -> Result<(), Fault> {
    let report = amx_tilecfg::validate(image, table);
    match GeneralProtection::new(report.load_violations().copied().collect()) {
        None => Ok(()),
        Some(gp) => Err(Fault::GeneralProtection(gp)),
    }
}

fn configured(cfg: &[u8; 64]) -> Result<(), UdReason> {
    if image::palette_id(cfg) == 0 {
        Err(UdReason::NotConfigured)
    } else {
        Ok(())
    }
}

/// The shape of used tile `t`, or the #UD for a tile number past 7 or an unused tile.
fn used_tile(cfg: &[u8; 64], t: u8) -> Result<TileShape, UdReason> {
    if t as usize >= image::TILE_SLOTS {
        return Err(UdReason::NoSuchTile { tile: t });
    }
    let shape = image::shape(cfg, t);
    if shape.rows == 0 || shape.colsb == 0 {
        return Err(UdReason::Unused { tile: t });
    }
    Ok(shape)
}

/// TILEZERO's #UD conditions, as the bare reason (the trap engine names no instruction).
pub(crate) fn tilezero_refusal(cfg: &[u8; 64], t: u8) -> Result<TileShape, UdReason> {
    configured(cfg)?;
    used_tile(cfg, t)
}

/// TILEZERO: configured and a used tile (no colsb or start_row check, Z1/Z2/Z4).
pub(crate) fn tilezero(cfg: &[u8; 64], t: u8) -> Result<TileShape, Fault> {
    tilezero_refusal(cfg, t).map_err(|r| ud(Mnemonic::Tilezero, r))
}

/// The #UD conditions of the tile loads and the store, as the bare reason.
pub(crate) fn tile_memory_refusal(cfg: &[u8; 64], t: u8) -> Result<TileShape, UdReason> {
    configured(cfg)?;
    let shape = used_tile(cfg, t)?;
    if shape.colsb % 4 != 0 {
        return Err(UdReason::ColsbNotMultipleOf4 {
            tile: t,
            colsb: shape.colsb,
        });
    }
    let start_row = image::start_row(cfg);
    if start_row >= shape.rows {
        return Err(UdReason::StartRowNotBelowRows {
            tile: t,
            start_row,
            rows: shape.rows,
        });
    }
    Ok(shape)
}

/// TILELOADD/TILELOADDT1/TILESTORED: configured, a used tile, colsb a multiple of 4 and
/// start_row below the tile's rows (T1/W1).
pub(crate) fn tile_memory(cfg: &[u8; 64], t: u8, mnemonic: Mnemonic) -> Result<TileShape, Fault> {
    tile_memory_refusal(cfg, t).map_err(|r| ud(mnemonic, r))
}

/// The tiles of a dot product, after the D1/D2 checks: C, A, B shapes.
pub(crate) struct DotShapes {
    /// M: rows of C and A.
    pub m: usize,
    /// N in dwords: C.colsb / 4.
    pub n: usize,
    /// K in dwords: A.colsb / 4 = B.rows.
    pub k: usize,
}

/// The dot product's #UD conditions, as the bare reason.
///
/// Inlined (with [`dot`]) into the emulator's dot product: returned through memory, the shapes
/// were read back before their stores completed, a store-forwarding stall of about a tenth of
/// an emulated instruction.
#[inline]
pub(crate) fn dot_refusal(
    cfg: &[u8; 64],
    (c, a, b): (u8, u8, u8),
    limits: TmulLimits,
) -> Result<DotShapes, UdReason> {
    configured(cfg)?;
    for t in [c, a, b] {
        if t as usize >= image::TILE_SLOTS {
            return Err(UdReason::NoSuchTile { tile: t });
        }
    }
    let shape = |t: u8| image::shape(cfg, t);
    check_dot((c, shape(c)), (a, shape(a)), (b, shape(b)), limits)
        .map_err(UdReason::DotOperands)?;
    Ok(DotShapes {
        m: shape(c).rows as usize,
        n: shape(c).colsb as usize / 4,
        k: shape(a).colsb as usize / 4,
    })
}

/// TDP* and TCMM*: configured, three distinct used tiles whose shapes fit, within the TMUL
/// limits (D1/D2; the same for every dot product, N1).
#[inline]
pub(crate) fn dot(
    cfg: &[u8; 64],
    tiles: (u8, u8, u8),
    limits: TmulLimits,
    instruction: Mnemonic,
) -> Result<DotShapes, Fault> {
    dot_refusal(cfg, tiles, limits).map_err(|r| ud(instruction, r))
}

/// The #UD conditions of the AMX-AVX512 row moves, as the bare reason: configured, a used
/// tile whose colsb is a multiple of 4 (R1). The row index never faults; start_row is not
/// checked.
pub(crate) fn tile_row_refusal(cfg: &[u8; 64], t: u8) -> Result<TileShape, UdReason> {
    configured(cfg)?;
    let shape = used_tile(cfg, t)?;
    if shape.colsb % 4 != 0 {
        return Err(UdReason::ColsbNotMultipleOf4 {
            tile: t,
            colsb: shape.colsb,
        });
    }
    Ok(shape)
}

/// TILEMOVROW and the TCVTROW* conversions (R1).
pub(crate) fn tile_row(cfg: &[u8; 64], t: u8, instruction: Mnemonic) -> Result<TileShape, Fault> {
    tile_row_refusal(cfg, t).map_err(|r| ud(instruction, r))
}

/// Whether LDTILECFG accepts `image` (no message: callable from a signal handler).
pub(crate) fn ldtilecfg_accepts(image: &[u8; 64], table: &PaletteTable) -> bool {
    amx_tilecfg::image::palette_id(image) == 0
        || amx_tilecfg::validate(image, table)
            .load_violations()
            .next()
            .is_none()
}

/// The bytes of memory a load or store of `shape` touches with `stride` (from the first row's
/// start to the last row's end), or `None` when that overflows. Rows below start_row are not
/// touched, but the extent is measured from row 0 because callers pass the slice that row 0
/// starts.
pub(crate) fn extent(shape: TileShape, stride: usize) -> Option<usize> {
    let last = (shape.rows as usize).checked_sub(1)?;
    last.checked_mul(stride)?.checked_add(shape.colsb as usize)
}

/// An out-of-bounds error unless every row of `shape` lies inside a slice of `len` bytes.
pub(crate) fn bounds(t: u8, shape: TileShape, stride: usize, len: usize) -> Result<(), Fault> {
    match extent(shape, stride) {
        Some(needed) if needed <= len => Ok(()),
        needed => Err(Fault::OutOfBounds {
            tile: t,
            needed: needed.unwrap_or(usize::MAX),
            len,
        }),
    }
}
