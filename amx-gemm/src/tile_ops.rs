//! The tile instructions the micro-kernel issues, behind one small trait ([`TileOps`]) with two
//! implementations: the dispatch ladder of this crate.
//!
//! 1. [`Silicon`]: the CPU's AMX unit through `amx_runtime::intrinsics`, one instruction per
//!    call with the tile number in the encoding and no run-time check. Chosen when the
//!    configured guard is on the hardware backend.
//! 2. [`Checked`]: any backend through the runtime's checked [`TileUnit`] methods; every load
//!    and store is also checked against the bounds of the buffer it touches. The fallback, and
//!    the path the emulator runs, so the test suite checks every address the silicon path
//!    would use.
//!
//! Both take the tile registers as const generics, so the micro-kernel is written once. When
//! the item form of `tilecfg!` lands, a third implementation over `TypedTiles<Kernel2x2>`
//! handles replaces [`Silicon`] without touching the kernel.
//!
//! [`TileUnit`]: amx_runtime::TileUnit

use amx_runtime::{Backend, Fault, Tiles};

use crate::error::GemmError;
use crate::precision::{DType, Precision};

/// A buffer the tiles read: its first byte and length. Carries no lifetime: whoever builds
/// one keeps the buffer alive and unchanged while tile loads use it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mem {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a `Mem` is only an address and a length; the code that builds one guarantees that the
// buffer is shared read-only by every thread that loads from it.
unsafe impl Send for Mem {}
// SAFETY: as for `Send`: reading through it from several threads is reading a shared `&[u8]`.
unsafe impl Sync for Mem {}

impl Mem {
    pub(crate) fn new(bytes: &[u8]) -> Mem {
        Mem {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }
}

/// A buffer the tiles write: its first byte and length. Workers of one call share it and store
/// to disjoint tiles of it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemMut {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a `MemMut` is only an address and a length; the driver hands each worker disjoint
// rectangles of C, so no byte is written by two threads or read while another writes it.
unsafe impl Send for MemMut {}
// SAFETY: as for `Send`.
unsafe impl Sync for MemMut {}

impl MemMut {
    pub(crate) fn new(bytes: &mut [u8]) -> MemMut {
        MemMut {
            ptr: bytes.as_mut_ptr(),
            len: bytes.len(),
        }
    }
}

impl From<MemMut> for Mem {
    /// The same buffer, for loads (C is loaded before it is accumulated into).
    fn from(m: MemMut) -> Mem {
        Mem {
            ptr: m.ptr,
            len: m.len,
        }
    }
}

/// The four tile operations of the micro-kernel, on tile registers given as const generics.
///
/// # Safety (common to every method)
/// The configuration loaded on this thread uses every tile the call names, with shapes the
/// instruction accepts (the configuration table checks this for the kernel of each shape), and
/// every row of a loaded or stored tile, at `offset + r * stride` for `r` below its configured
/// rows, `colsb` bytes long, lies inside the buffer, which is alive and, for stores, written by
/// no one else. [`Checked`] verifies all of it and returns an error instead; [`Silicon`] relies
/// on it.
pub(crate) trait TileOps {
    /// TILEZERO of tile `T`.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn zero<const T: u8>(&mut self) -> Result<(), GemmError>;

    /// TILELOADD of tile `T`, row `r` from `mem + offset + r * stride`.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn load<const T: u8>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError>;

    /// TILESTORED of tile `T`, row `r` to `mem + offset + r * stride`.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn store<const T: u8>(
        &mut self,
        mem: MemMut,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError>;

    /// `C += A x B` with precision `P`'s instruction.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn dot<P: Precision, const C: u8, const A: u8, const B: u8>(
        &mut self,
    ) -> Result<(), GemmError>;

    /// A hint to bring `bytes` of `mem` from `offset` into L1 ahead of their tile loads. Any
    /// range is allowed, even past the buffer (a prefetch never faults and touches nothing).
    fn prefetch(&mut self, mem: Mem, offset: usize, bytes: usize) {
        let _ = (mem, offset, bytes);
    }
}

/// Every instruction through the runtime's checked methods (any backend), and every load and
/// store checked against its buffer.
pub(crate) struct Checked<'t> {
    tiles: &'t mut Tiles,
}

impl<'t> Checked<'t> {
    pub(crate) fn new(tiles: &'t mut Tiles) -> Checked<'t> {
        Checked { tiles }
    }

    /// Out of bounds unless every row of tile `t` fits `len` bytes from `offset`.
    fn bounds(&self, t: u8, offset: usize, stride: usize, len: usize) -> Result<(), GemmError> {
        let Some(shape) = self.tiles.config().tile(t as usize) else {
            // The runtime reports the unused tile as the #UD it is.
            return Ok(());
        };
        let needed = (shape.rows as usize - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(shape.colsb as usize))
            .and_then(|x| x.checked_add(offset));
        match needed {
            Some(needed) if needed <= len => Ok(()),
            needed => Err(GemmError::Fault(Fault::OutOfBounds {
                tile: t,
                needed: needed.unwrap_or(usize::MAX),
                len,
            })),
        }
    }
}

impl TileOps for Checked<'_> {
    unsafe fn zero<const T: u8>(&mut self) -> Result<(), GemmError> {
        Ok(self.tiles.tilezero(T)?)
    }

    unsafe fn load<const T: u8>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        self.bounds(T, offset, stride, mem.len)?;
        // SAFETY: the check above proved every row of tile T inside the `mem.len` bytes at
        // `mem.ptr` (so `offset` is in bounds and the stride fits isize), which the caller keeps
        // alive.
        unsafe {
            self.tiles
                .tileloadd_ptr(T, mem.ptr.add(offset), stride as isize)?
        };
        Ok(())
    }

    unsafe fn store<const T: u8>(
        &mut self,
        mem: MemMut,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        self.bounds(T, offset, stride, mem.len)?;
        // SAFETY: as in `load`; the caller guarantees no one else touches these rows.
        unsafe {
            self.tiles
                .tilestored_ptr(T, mem.ptr.add(offset), stride as isize)?
        };
        Ok(())
    }

    unsafe fn dot<P: Precision, const C: u8, const A: u8, const B: u8>(
        &mut self,
    ) -> Result<(), GemmError> {
        match P::DTYPE {
            DType::Int8 => self.tiles.tdpbssd(C, A, B)?,
            DType::U8S8 => self.tiles.tdpbusd(C, A, B)?,
            DType::Bf16 => self.tiles.tdpbf16ps(C, A, B)?,
        }
        Ok(())
    }
}

/// Whether the silicon implements `dtype`'s instruction (CPUID, read once).
pub(crate) fn silicon_supports(dtype: DType) -> Result<(), GemmError> {
    use std::sync::OnceLock;
    static CAPS: OnceLock<amx_runtime::Capabilities> = OnceLock::new();
    let caps = CAPS.get_or_init(amx_runtime::detect);
    let (present, feature) = match dtype {
        DType::Int8 | DType::U8S8 => (caps.amx_int8, "AMX-INT8"),
        DType::Bf16 => (caps.amx_bf16, "AMX-BF16"),
    };
    if present {
        Ok(())
    } else {
        Err(GemmError::Unsupported(format!(
            "{} needs {feature}, which this CPU does not report",
            dtype.instruction()
        )))
    }
}

/// The silicon, one intrinsic per operation. Holds the configured guard so that nothing else
/// reconfigures this thread's tiles while it is in use.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Silicon<'t> {
    _tiles: &'t mut Tiles,
}

#[cfg(target_arch = "x86_64")]
impl<'t> Silicon<'t> {
    /// The silicon path for `dtype` on a guard of the hardware backend; `None` on the emulator.
    pub(crate) fn new(
        tiles: &'t mut Tiles,
        dtype: DType,
    ) -> Result<Option<Silicon<'t>>, GemmError> {
        if tiles.backend() != Backend::Hardware {
            return Ok(None);
        }
        silicon_supports(dtype)?;
        Ok(Some(Silicon { _tiles: tiles }))
    }
}

// Common to the methods below: `Hardware::new` succeeded for the guard (the CPU has AMX-TILE, the
// OS enabled the state and granted the permission), `Silicon::new` checked the dot product's
// feature, and the guard holds this thread's configuration, whose start_row is 0 (so the
// instructions leave the runtime's tracked copy exact: no resync is needed).
#[cfg(target_arch = "x86_64")]
impl TileOps for Silicon<'_> {
    #[inline(always)]
    unsafe fn zero<const T: u8>(&mut self) -> Result<(), GemmError> {
        // SAFETY: the caller guarantees tile T is used in the loaded configuration.
        unsafe { amx_runtime::intrinsics::_tile_zero::<T>() };
        Ok(())
    }

    #[inline(always)]
    unsafe fn load<const T: u8>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        debug_assert!(offset < mem.len);
        // SAFETY: the caller guarantees tile T is used with colsb % 4 == 0 and that its rows lie
        // inside the live buffer, so `offset` is in bounds.
        unsafe { amx_runtime::intrinsics::_tile_loadd::<T>(mem.ptr.add(offset), stride) };
        Ok(())
    }

    #[inline(always)]
    unsafe fn store<const T: u8>(
        &mut self,
        mem: MemMut,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        debug_assert!(offset < mem.len);
        // SAFETY: as in `load`; the caller guarantees no one else touches the rows.
        unsafe { amx_runtime::intrinsics::_tile_stored::<T>(mem.ptr.add(offset), stride) };
        Ok(())
    }

    #[inline(always)]
    unsafe fn dot<P: Precision, const C: u8, const A: u8, const B: u8>(
        &mut self,
    ) -> Result<(), GemmError> {
        use amx_runtime::intrinsics as i;
        // SAFETY: the caller guarantees the operands fit the loaded configuration (the table
        // checked them with the silicon's rule); `Silicon::new` checked the CPU feature.
        unsafe {
            match P::DTYPE {
                DType::Int8 => i::_tile_dpbssd::<C, A, B>(),
                DType::U8S8 => i::_tile_dpbusd::<C, A, B>(),
                DType::Bf16 => i::_tile_dpbf16ps::<C, A, B>(),
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn prefetch(&mut self, mem: Mem, offset: usize, bytes: usize) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for line in (0..bytes).step_by(64) {
            // `wrapping_add`: the address may lie past the buffer, and is never dereferenced.
            let at = mem.ptr.wrapping_add(offset.wrapping_add(line));
            // SAFETY: PREFETCHT0 (SSE, part of x86-64) is only a hint: it never faults and has
            // no architectural effect, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>()) };
        }
    }
}
