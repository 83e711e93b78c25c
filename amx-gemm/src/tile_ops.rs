//! The tile instructions the micro-kernel issues, behind one small trait ([`TileOps`]) with three
//! implementations: the dispatch ladder of this crate.
//!
//! 1. [`Typed`]: the full 32 x 32 micro-tile (the common case) on the emulator, instruction by
//!    instruction, through the typed tiles of the `tilecfg!` item form, `TypedTiles<L>` of the
//!    precision's 2x2 layout ([`Full2x2`], declared in `configs::typed`). The handles' types
//!    prove every tile used and every dot product's operands fit the layout, so there is no
//!    shape check at run time; every load and store is also checked against the bounds of its
//!    buffer, as in [`Checked`]. (By default the emulator runs a full micro-tile's k-loop as one
//!    block product instead, `block_kernel.rs`; the tests run both.)
//! 2. [`Silicon`]: every micro-tile on the CPU's AMX unit, through `amx_runtime::intrinsics`,
//!    one instruction per call with the tile number in the encoding and no run-time check. The
//!    full micro-tile's configuration is still its typed layout's (`configure_typed_on`), so
//!    the layout's handles have proven its shapes; the edges' configurations come from the
//!    compile-time table of `configs.rs`, checked against the kernel's operands. The typed
//!    methods are not used on the silicon: each checks that its layout is still loaded and
//!    which backend it runs on, and when this crate's generic code is monomorphized in a
//!    caller's crate the compiler does not always hoist those checks out of the k-loop.
//! 3. [`Checked`]: the edge micro-tiles on any backend through the runtime's checked
//!    [`TileUnit`] methods; every load and store is also checked against the bounds of the
//!    buffer it touches. The fallback, and the path the emulator runs for the edges, so the test
//!    suite checks every address the silicon path would use.
//!
//! All three take the tile registers as const generics, so the micro-kernel is written once:
//! [`Typed`] maps each register number of the kernel to the layout's handle of that register
//! (a `match` on a constant, resolved at compile time).
//!
//! [`TileUnit`]: amx_runtime::TileUnit

use amx_runtime::typed::Layout;
use amx_runtime::{Backend, Fault, Feature, Tiles, TypedTiles};

use crate::configs::typed::{
    Bf16Kernel, Bf8Bf8Kernel, Bf8Hf8Kernel, Fp16Kernel, Hf8Bf8Kernel, Hf8Hf8Kernel, Int8Kernel,
    S8U8Kernel, U8S8Kernel, U8U8Kernel,
};
use crate::configs::{A0, A1, B0, B1, C00, C01, C10, C11};
use crate::error::{GemmError, InternalError, Unsupported};
use crate::precision::{Precision, PrecisionKind};

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

    /// The buffer's first byte.
    pub(crate) fn ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The buffer's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The buffer as a slice.
    ///
    /// # Safety
    /// The buffer must be alive and unchanged for `'x` (what whoever built this `Mem`
    /// guarantees while tile loads use it).
    pub(crate) unsafe fn as_slice<'x>(&self) -> &'x [u8] {
        // SAFETY: `ptr` and `len` came from a live slice (`new`, or a `MemMut` made from one),
        // alive and unchanged for 'x by this function's contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
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

    /// The buffer's first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The buffer's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
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
/// on it; [`Typed`] gets the tiles and shapes from its handles' types (a register the layout
/// lacks is an error), checks the bounds on the emulator and relies on them on the hardware.
pub(crate) trait TileOps {
    /// TILEZERO of tile `T`.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn zero<const T: i32>(&mut self) -> Result<(), GemmError>;

    /// TILELOADD of tile `T`, row `r` from `mem + offset + r * stride`.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn load<const T: i32>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError>;

    /// TILELOADDT1 of tile `T`: [`TileOps::load`] with the hint that the data is not reused
    /// soon. The micro-kernel loads its streamed operand (B) this way, so that B's lines
    /// displace less of the A micro-panel it reuses from L1; the tile's contents are the same.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn stream_load<const T: i32>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError>;

    /// TILESTORED of tile `T`, row `r` to `mem + offset + r * stride`.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn store<const T: i32>(
        &mut self,
        mem: MemMut,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError>;

    /// `C += A x B` with precision `P`'s instruction.
    ///
    /// # Safety
    /// See the [trait docs](TileOps).
    unsafe fn dot<P: Precision, const C: i32, const A: i32, const B: i32>(
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
        let Some(shape) = self.tiles.config().tile(t) else {
            // The runtime reports the unused tile as the #UD it is.
            return Ok(());
        };
        tile_bounds(
            t,
            (shape.rows as usize, shape.colsb as usize),
            offset,
            stride,
            len,
        )
    }
}

impl Checked<'_> {
    /// TILELOADD of tile `t`, or TILELOADDT1 when `streamed`, after the bounds check.
    fn load_hinted(
        &mut self,
        t: u8,
        mem: Mem,
        offset: usize,
        stride: usize,
        streamed: bool,
    ) -> Result<(), GemmError> {
        self.bounds(t, offset, stride, mem.len)?;
        // SAFETY: the check above proved every row of tile t inside the `mem.len` bytes at
        // `mem.ptr` (so `offset` is in bounds and the stride fits isize), which whoever built
        // `mem` keeps alive.
        unsafe {
            let src = mem.ptr.add(offset);
            if streamed {
                self.tiles.tileloaddt1_ptr(t, src, stride as isize)?
            } else {
                self.tiles.tileloadd_ptr(t, src, stride as isize)?
            }
        };
        Ok(())
    }
}

impl TileOps for Checked<'_> {
    unsafe fn zero<const T: i32>(&mut self) -> Result<(), GemmError> {
        Ok(self.tiles.tilezero(reg(T))?)
    }

    unsafe fn load<const T: i32>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        self.load_hinted(reg(T), mem, offset, stride, false)
    }

    unsafe fn stream_load<const T: i32>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        self.load_hinted(reg(T), mem, offset, stride, true)
    }

    unsafe fn store<const T: i32>(
        &mut self,
        mem: MemMut,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        self.bounds(reg(T), offset, stride, mem.len)?;
        // SAFETY: as in `load`; the caller guarantees no one else touches these rows.
        unsafe {
            self.tiles
                .tilestored_ptr(reg(T), mem.ptr.add(offset), stride as isize)?
        };
        Ok(())
    }

    unsafe fn dot<P: Precision, const C: i32, const A: i32, const B: i32>(
        &mut self,
    ) -> Result<(), GemmError> {
        #[cfg(test)]
        probe::CHECKED_DOTS.with(|n| n.set(n.get() + 1));
        let (c, a, b) = (reg(C), reg(A), reg(B));
        match P::KIND {
            PrecisionKind::Int8 => self.tiles.tdpbssd(c, a, b)?,
            PrecisionKind::U8S8 => self.tiles.tdpbusd(c, a, b)?,
            PrecisionKind::S8U8 => self.tiles.tdpbsud(c, a, b)?,
            PrecisionKind::U8U8 => self.tiles.tdpbuud(c, a, b)?,
            PrecisionKind::Bf16 => self.tiles.tdpbf16ps(c, a, b)?,
            PrecisionKind::Fp16 => self.tiles.tdpfp16ps(c, a, b)?,
            PrecisionKind::Bf8Bf8 => self.tiles.tdpbf8ps(c, a, b)?,
            PrecisionKind::Hf8Hf8 => self.tiles.tdphf8ps(c, a, b)?,
            PrecisionKind::Bf8Hf8 => self.tiles.tdpbhf8ps(c, a, b)?,
            PrecisionKind::Hf8Bf8 => self.tiles.tdphbf8ps(c, a, b)?,
        }
        Ok(())
    }
}

/// Whether the silicon implements `dtype`'s instruction (CPUID, read once).
pub(crate) fn silicon_supports(dtype: PrecisionKind) -> Result<(), GemmError> {
    use std::sync::OnceLock;
    static CAPS: OnceLock<amx_runtime::Capabilities> = OnceLock::new();
    let caps = CAPS.get_or_init(amx_runtime::detect);
    let feature = dtype.feature();
    let present = match feature {
        Feature::AmxBf16 => caps.amx_bf16,
        Feature::AmxFp16 => caps.amx_fp16,
        Feature::AmxFp8 => caps.amx_fp8,
        _ => caps.amx_int8,
    };
    if present {
        Ok(())
    } else {
        Err(GemmError::Unsupported(Unsupported::Feature {
            precision: dtype,
            feature,
        }))
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
        dtype: PrecisionKind,
    ) -> Result<Option<Silicon<'t>>, GemmError> {
        if tiles.backend() != Backend::Hardware {
            return Ok(None);
        }
        // A read of the cached answer: `Gemm::run` (and `peak_typed`) asked before configuring,
        // so this allocates nothing under the configuration.
        silicon_supports(dtype)?;
        Ok(Some(Silicon { _tiles: tiles }))
    }
}

// Common to the methods below: `Hardware::new` succeeded for the guard (the CPU has AMX-TILE, the
// OS enabled the state and granted the permission), `Silicon::new` checked the dot product's
// feature, `Gemm::run` and `gemm::work` checked every micro-kernel shape of the call against the
// CPU's TMUL limits, and the guard holds this thread's configuration, whose start_row is 0 (so
// the instructions leave the runtime's tracked copy exact: no resync is needed).
//
// What user code can run between that configuration and these instructions: none. The guard
// stops every `configure` on this thread; the only other way to load a configuration from safe
// code is a second `Hardware` unit, which only code outside this crate could create, and none
// runs here: `gemm::work` (and `peak_typed`) allocate and check everything before configuring,
// and the loop nest, the packing and this micro-kernel call nothing outside the crate (no
// allocation, no callback, no formatting except on error paths that return at once).
#[cfg(target_arch = "x86_64")]
impl TileOps for Silicon<'_> {
    #[inline(always)]
    unsafe fn zero<const T: i32>(&mut self) -> Result<(), GemmError> {
        // SAFETY: the caller guarantees tile T is used in the loaded configuration.
        unsafe { amx_runtime::intrinsics::_tile_zero::<T>() };
        Ok(())
    }

    #[inline(always)]
    unsafe fn load<const T: i32>(
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
    unsafe fn stream_load<const T: i32>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        debug_assert!(offset < mem.len);
        // SAFETY: as in `load`.
        unsafe { amx_runtime::intrinsics::_tile_stream_loadd::<T>(mem.ptr.add(offset), stride) };
        Ok(())
    }

    #[inline(always)]
    unsafe fn store<const T: i32>(
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
    unsafe fn dot<P: Precision, const C: i32, const A: i32, const B: i32>(
        &mut self,
    ) -> Result<(), GemmError> {
        use amx_runtime::intrinsics as i;
        // SAFETY: the caller guarantees the operands fit the loaded configuration (the table
        // checked them with the silicon's rule); `Silicon::new` checked the CPU feature.
        unsafe {
            match P::KIND {
                PrecisionKind::Int8 => i::_tile_dpbssd::<C, A, B>(),
                PrecisionKind::U8S8 => i::_tile_dpbusd::<C, A, B>(),
                PrecisionKind::S8U8 => i::_tile_dpbsud::<C, A, B>(),
                PrecisionKind::U8U8 => i::_tile_dpbuud::<C, A, B>(),
                PrecisionKind::Bf16 => i::_tile_dpbf16ps::<C, A, B>(),
                PrecisionKind::Fp16 => i::_tile_dpfp16ps::<C, A, B>(),
                PrecisionKind::Bf8Bf8 => i::_tile_dpbf8ps::<C, A, B>(),
                PrecisionKind::Hf8Hf8 => i::_tile_dphf8ps::<C, A, B>(),
                PrecisionKind::Bf8Hf8 => i::_tile_dpbhf8ps::<C, A, B>(),
                PrecisionKind::Hf8Bf8 => i::_tile_dphbf8ps::<C, A, B>(),
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn prefetch(&mut self, mem: Mem, offset: usize, bytes: usize) {
        prefetch_lines(mem, offset, bytes);
    }
}

/// PREFETCHT0 of every 64-byte line of `bytes` of `mem` from `offset`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_lines(mem: Mem, offset: usize, bytes: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for line in (0..bytes).step_by(64) {
        // `wrapping_add`: the address may lie past the buffer, and is never dereferenced.
        let at = mem.ptr.wrapping_add(offset.wrapping_add(line));
        // SAFETY: PREFETCHT0 (SSE, part of x86-64) is only a hint: it never faults and has no
        // architectural effect, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>()) };
    }
}

/// The full 2x2 register tile as a typed layout: the precision whose instruction its dot
/// products are, and the kernel's operations by register number, each on the layout's handle of
/// that register. Implemented by `full_2x2!` for the three layouts of `configs::typed`, whose
/// `CONFIG` equals the table's 32 x 32 entry (tested there): t0..t3 C, t4/t5 A, t6/t7 B, every
/// tile 16 rows of 64 bytes.
///
/// Each method returns `false`, having issued nothing, for a register (or operand triple) the
/// layout has no handle for; with the register a constant the `match` is resolved at compile
/// time, and the micro-kernel names none such.
pub(crate) trait Full2x2: Layout + Sized {
    /// The precision whose instruction the layout's dot products issue.
    const KIND: PrecisionKind;

    /// TILEZERO of tile `T`.
    fn zero<const T: i32>(tiles: &mut TypedTiles<Self>) -> bool;

    /// TILELOADD of tile `T` (16 rows of 64 bytes), row `r` from `src + r * stride`.
    ///
    /// # Safety
    /// As `TypedTiles::load_ptr`: for every `r < 16`, the 64 bytes at `src + r * stride` are
    /// readable.
    unsafe fn load<const T: i32>(
        tiles: &mut TypedTiles<Self>,
        src: *const u8,
        stride: isize,
    ) -> bool;

    /// TILELOADDT1 of B tile `T` (16 rows of 64 bytes), row `r` from `src + r * stride`;
    /// `false` (nothing issued) for a tile other than B0 and B1.
    ///
    /// # Safety
    /// As `TypedTiles::stream_load_ptr`: for every `r < 16`, the 64 bytes at `src + r * stride`
    /// are readable.
    unsafe fn stream_load<const T: i32>(
        tiles: &mut TypedTiles<Self>,
        src: *const u8,
        stride: isize,
    ) -> bool;

    /// TILESTORED of tile `T` (16 rows of 64 bytes), row `r` to `dst + r * stride`.
    ///
    /// # Safety
    /// As `TypedTiles::store_ptr`: for every `r < 16`, the 64 bytes at `dst + r * stride` are
    /// writable and aliased by no live reference.
    unsafe fn store<const T: i32>(
        tiles: &mut TypedTiles<Self>,
        dst: *mut u8,
        stride: isize,
    ) -> bool;

    /// `C += A x B` with the layout's instruction (the `Dot` bound checks the operands at
    /// compile time).
    fn dot<const C: i32, const A: i32, const B: i32>(tiles: &mut TypedTiles<Self>) -> bool;
}

/// Implements [`Full2x2`] for a layout declared with the handles `c00 c01 c10 c11 a0 a1 b0 b1`
/// in the registers of `configs.rs`.
macro_rules! full_2x2 {
    ($layout:ident, $dtype:expr, $dot:ident) => {
        impl Full2x2 for $layout {
            const KIND: PrecisionKind = $dtype;

            #[inline(always)]
            fn zero<const T: i32>(tiles: &mut TypedTiles<Self>) -> bool {
                match T {
                    C00 => tiles.zero($layout::c00),
                    C01 => tiles.zero($layout::c01),
                    C10 => tiles.zero($layout::c10),
                    C11 => tiles.zero($layout::c11),
                    A0 => tiles.zero($layout::a0),
                    A1 => tiles.zero($layout::a1),
                    B0 => tiles.zero($layout::b0),
                    B1 => tiles.zero($layout::b1),
                    _ => return false,
                }
                true
            }

            #[inline(always)]
            unsafe fn load<const T: i32>(
                tiles: &mut TypedTiles<Self>,
                src: *const u8,
                stride: isize,
            ) -> bool {
                // SAFETY: (every arm) the handle is tile T of this layout, 16 rows of 64 bytes,
                // and the caller guarantees those rows readable at `src + r * stride`.
                unsafe {
                    match T {
                        C00 => tiles.load_ptr($layout::c00, src, stride),
                        C01 => tiles.load_ptr($layout::c01, src, stride),
                        C10 => tiles.load_ptr($layout::c10, src, stride),
                        C11 => tiles.load_ptr($layout::c11, src, stride),
                        A0 => tiles.load_ptr($layout::a0, src, stride),
                        A1 => tiles.load_ptr($layout::a1, src, stride),
                        B0 => tiles.load_ptr($layout::b0, src, stride),
                        B1 => tiles.load_ptr($layout::b1, src, stride),
                        _ => return false,
                    }
                }
                true
            }

            #[inline(always)]
            unsafe fn stream_load<const T: i32>(
                tiles: &mut TypedTiles<Self>,
                src: *const u8,
                stride: isize,
            ) -> bool {
                // SAFETY: (both arms) as in `load`.
                unsafe {
                    match T {
                        B0 => tiles.stream_load_ptr($layout::b0, src, stride),
                        B1 => tiles.stream_load_ptr($layout::b1, src, stride),
                        _ => return false,
                    }
                }
                true
            }

            #[inline(always)]
            unsafe fn store<const T: i32>(
                tiles: &mut TypedTiles<Self>,
                dst: *mut u8,
                stride: isize,
            ) -> bool {
                // SAFETY: (every arm) the handle is tile T of this layout, 16 rows of 64 bytes,
                // and the caller guarantees those rows writable and unaliased.
                unsafe {
                    match T {
                        C00 => tiles.store_ptr($layout::c00, dst, stride),
                        C01 => tiles.store_ptr($layout::c01, dst, stride),
                        C10 => tiles.store_ptr($layout::c10, dst, stride),
                        C11 => tiles.store_ptr($layout::c11, dst, stride),
                        A0 => tiles.store_ptr($layout::a0, dst, stride),
                        A1 => tiles.store_ptr($layout::a1, dst, stride),
                        B0 => tiles.store_ptr($layout::b0, dst, stride),
                        B1 => tiles.store_ptr($layout::b1, dst, stride),
                        _ => return false,
                    }
                }
                true
            }

            #[inline(always)]
            fn dot<const C: i32, const A: i32, const B: i32>(tiles: &mut TypedTiles<Self>) -> bool {
                match (C, A, B) {
                    (C00, A0, B0) => tiles.$dot($layout::c00, $layout::a0, $layout::b0).issued(),
                    (C01, A0, B1) => tiles.$dot($layout::c01, $layout::a0, $layout::b1).issued(),
                    (C10, A1, B0) => tiles.$dot($layout::c10, $layout::a1, $layout::b0).issued(),
                    (C11, A1, B1) => tiles.$dot($layout::c11, $layout::a1, $layout::b1).issued(),
                    _ => false,
                }
            }
        }
    };
}

/// What a typed dot product returns, as whether it ran: `()` always (its operands are proven),
/// the `Result` of TDPFP16PS and the FP8 products when the unit refused them (the driver
/// checked AMX-FP16 or AMX-FP8 first, so a refusal is reported as the bug it would be).
trait Issued {
    fn issued(self) -> bool;
}

impl Issued for () {
    #[inline(always)]
    fn issued(self) -> bool {
        true
    }
}

impl Issued for Result<(), Fault> {
    #[inline(always)]
    fn issued(self) -> bool {
        self.is_ok()
    }
}

full_2x2!(Int8Kernel, PrecisionKind::Int8, tdpbssd);
full_2x2!(U8S8Kernel, PrecisionKind::U8S8, tdpbusd);
full_2x2!(S8U8Kernel, PrecisionKind::S8U8, tdpbsud);
full_2x2!(U8U8Kernel, PrecisionKind::U8U8, tdpbuud);
full_2x2!(Bf16Kernel, PrecisionKind::Bf16, tdpbf16ps);
full_2x2!(Fp16Kernel, PrecisionKind::Fp16, tdpfp16ps);
full_2x2!(Bf8Bf8Kernel, PrecisionKind::Bf8Bf8, tdpbf8ps);
full_2x2!(Hf8Hf8Kernel, PrecisionKind::Hf8Hf8, tdphf8ps);
full_2x2!(Bf8Hf8Kernel, PrecisionKind::Bf8Hf8, tdpbhf8ps);
full_2x2!(Hf8Bf8Kernel, PrecisionKind::Hf8Bf8, tdphbf8ps);

/// Rows of every tile of a [`Full2x2`] layout.
const FULL_ROWS: usize = 16;
/// Bytes per row of every tile of a [`Full2x2`] layout.
const FULL_COLSB: usize = 64;

/// The full micro-tile through the typed tiles of layout `L`, on the backend `L` was configured
/// on. On the emulator every load and store is checked against its buffer first (as in
/// [`Checked`]); on the hardware only in debug builds, the kernel's contract vouching for it.
pub(crate) struct Typed<'t, L: Full2x2> {
    tiles: &'t mut TypedTiles<L>,
    hardware: bool,
}

impl<'t, L: Full2x2> Typed<'t, L> {
    /// The typed path over `tiles`, for precision `dtype`: an error unless `L` is that
    /// precision's layout (the driver picks it by `dtype`, so this never fails there). On the
    /// hardware the caller has checked the CPU feature of `dtype`'s instruction
    /// ([`silicon_supports`]).
    pub(crate) fn new(
        tiles: &'t mut TypedTiles<L>,
        dtype: PrecisionKind,
    ) -> Result<Self, GemmError> {
        if dtype != L::KIND {
            return Err(wrong_layout(format!(
                "{} on the typed layout of {}",
                dtype.instruction(),
                L::KIND.instruction()
            )));
        }
        let hardware = tiles.untyped().backend() == Backend::Hardware;
        Ok(Typed { tiles, hardware })
    }

    /// The bounds check on the emulator (and in debug builds on the hardware).
    #[inline(always)]
    fn check(&self, t: u8, offset: usize, stride: usize, len: usize) -> Result<(), GemmError> {
        if !self.hardware || cfg!(debug_assertions) {
            full_tile_bounds(t, offset, stride, len)?;
        }
        Ok(())
    }
}

/// Out of bounds unless every row of a full tile `t` (16 rows of 64 bytes) fits `len` bytes from
/// `offset` with `stride`; also proves `stride` fits `isize` (the rows fit a Rust buffer).
pub(crate) fn full_tile_bounds(
    t: u8,
    offset: usize,
    stride: usize,
    len: usize,
) -> Result<(), GemmError> {
    tile_bounds(t, (FULL_ROWS, FULL_COLSB), offset, stride, len)
}

/// Out of bounds unless every row `r < rows` of tile `t`, `colsb` bytes at `offset + r *
/// stride`, lies inside `len` bytes (`rows` >= 1).
pub(crate) fn tile_bounds(
    t: u8,
    (rows, colsb): (usize, usize),
    offset: usize,
    stride: usize,
    len: usize,
) -> Result<(), GemmError> {
    let needed = rows
        .saturating_sub(1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(colsb))
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

/// The register number of a micro-kernel's tile: the kernel's register constants are `i32`
/// const generics, as the intrinsics of its silicon path take them; the checked methods take
/// the `u8` the rest of the runtime numbers tiles with.
#[inline(always)]
const fn reg(t: i32) -> u8 {
    t as u8
}

/// A register or operand triple the typed layout has no handle for, reported instead of
/// issued (the micro-kernel never names one).
fn wrong_layout(what: String) -> GemmError {
    GemmError::Internal(InternalError::new(format!("typed 2x2 kernel: {what}")))
}

// Common to the methods below: `Typed::new` tied `L` to the precision, and the guard inside
// `self.tiles` holds `L::CONFIG` on this thread for as long as `self` lives. Tile shapes need no
// check: the handles carry them and `tilecfg!` validated them at compile time.
impl<L: Full2x2> TileOps for Typed<'_, L> {
    #[inline(always)]
    unsafe fn zero<const T: i32>(&mut self) -> Result<(), GemmError> {
        if L::zero::<T>(self.tiles) {
            Ok(())
        } else {
            Err(wrong_layout(format!("TILEZERO of t{T}")))
        }
    }

    #[inline(always)]
    unsafe fn load<const T: i32>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        self.check(reg(T), offset, stride, mem.len)?;
        // SAFETY: every row r < 16 of the tile, 64 bytes at `mem.ptr + offset + r * stride`,
        // lies inside the `mem.len` live bytes at `mem.ptr`: on the emulator (and in debug
        // builds) `check` just proved it, and on the hardware the caller guarantees it (the
        // micro-kernel's contract for a full 32 x 32 micro-tile: an A k-step is 32 rows of 64
        // bytes, 16 per tile, at stride 64 inside the packed block; a B k-step is two 16-row
        // tiles of 64-byte VNNI rows inside the packed panel; C's 32 x 32 block lies inside C,
        // its 16-row halves of 64 bytes at stride ldc_bytes). So `offset` is in bounds, and the
        // stride, at most the buffer's length over 15, fits isize.
        let loaded = unsafe { L::load::<T>(self.tiles, mem.ptr.add(offset), stride as isize) };
        if loaded {
            Ok(())
        } else {
            Err(wrong_layout(format!("TILELOADD of t{T}")))
        }
    }

    #[inline(always)]
    unsafe fn stream_load<const T: i32>(
        &mut self,
        mem: Mem,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        self.check(reg(T), offset, stride, mem.len)?;
        // SAFETY: as in `load`.
        let loaded =
            unsafe { L::stream_load::<T>(self.tiles, mem.ptr.add(offset), stride as isize) };
        if loaded {
            Ok(())
        } else {
            Err(wrong_layout(format!("TILELOADDT1 of t{T}")))
        }
    }

    #[inline(always)]
    unsafe fn store<const T: i32>(
        &mut self,
        mem: MemMut,
        offset: usize,
        stride: usize,
    ) -> Result<(), GemmError> {
        self.check(reg(T), offset, stride, mem.len)?;
        // SAFETY: as in `load`, every row r < 16 (64 bytes at `mem.ptr + offset + r * stride`)
        // lies inside the buffer: the 32 x 32 block of C this task owns; the caller guarantees
        // that no other thread touches those rows and no reference aliases them.
        let stored = unsafe { L::store::<T>(self.tiles, mem.ptr.add(offset), stride as isize) };
        if stored {
            Ok(())
        } else {
            Err(wrong_layout(format!("TILESTORED of t{T}")))
        }
    }

    #[inline(always)]
    unsafe fn dot<P: Precision, const C: i32, const A: i32, const B: i32>(
        &mut self,
    ) -> Result<(), GemmError> {
        #[cfg(test)]
        probe::TYPED_DOTS.with(|n| n.set(n.get() + 1));
        if P::KIND == L::KIND && L::dot::<C, A, B>(self.tiles) {
            Ok(())
        } else {
            Err(wrong_layout(format!(
                "{} t{C}, t{A}, t{B}",
                P::KIND.instruction()
            )))
        }
    }

    #[inline(always)]
    fn prefetch(&mut self, mem: Mem, offset: usize, bytes: usize) {
        #[cfg(target_arch = "x86_64")]
        if self.hardware {
            prefetch_lines(mem, offset, bytes);
        }
        let _ = (mem, offset, bytes);
    }
}

/// Counts of the dot products each path issued on this thread, for the tests that check which
/// path ran.
#[cfg(test)]
pub(crate) mod probe {
    use std::cell::Cell;

    thread_local! {
        /// Dot products through [`Typed`](super::Typed).
        pub(crate) static TYPED_DOTS: Cell<u64> = const { Cell::new(0) };
        /// Dot products through [`Checked`](super::Checked).
        pub(crate) static CHECKED_DOTS: Cell<u64> = const { Cell::new(0) };
        /// Dot products computed in block products
        /// ([`Block2x2`](crate::block_kernel::Block2x2)).
        pub(crate) static BLOCK_DOTS: Cell<u64> = const { Cell::new(0) };
        /// Run full micro-tiles on the emulator instruction by instruction (the typed path)
        /// rather than as block products, so that the tests cover both.
        pub(crate) static PER_INSTRUCTION: Cell<bool> = const { Cell::new(false) };
    }

    /// Dot products in block products on this thread so far.
    pub(crate) fn block_dots() -> u64 {
        BLOCK_DOTS.with(Cell::get)
    }

    /// (typed, checked) dot products on this thread so far.
    pub(crate) fn dots() -> (u64, u64) {
        (TYPED_DOTS.with(Cell::get), CHECKED_DOTS.with(Cell::get))
    }
}
