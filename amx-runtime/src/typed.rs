//! Typed tiles: handles whose type carries the tile's register, shape and element type, so a
//! dot product whose operands do not fit is a compile error, and a kernel written with them runs
//! no shape check at run time.
//!
//! The item form of `tilecfg!` declares a layout type and one handle per named tile:
//!
//! ```
//! use amx_runtime::tilecfg;
//!
//! tilecfg! {
//!     /// C (16x16 i32) += A (16x64 i8) x B (16x64 i8, VNNI layout).
//!     pub struct Int8Block;
//!     palette 1;
//!     t0 as c: 16x16 i32;
//!     t4 as a: 16x64 i8;
//!     t6 as b: 16x64 i8;
//! }
//!
//! let a = [1i8; 16 * 64];
//! let b = [2i8; 16 * 64];
//! let mut c = [0i32; 16 * 16];
//! let mut tiles = Int8Block::configure().unwrap();
//! tiles.zero(Int8Block::c);
//! tiles.load(Int8Block::a, &a, 64).unwrap();
//! tiles.load(Int8Block::b, &b, 64).unwrap();
//! tiles.tdpbssd(Int8Block::c, Int8Block::a, Int8Block::b);
//! tiles.store(Int8Block::c, &mut c, 16).unwrap();
//! assert!(c.iter().all(|&x| x == 64 * 2));
//! ```
//!
//! A mismatch does not compile, and the error names the tiles and their shapes:
//!
//! ```compile_fail
//! use amx_runtime::tilecfg;
//!
//! tilecfg! {
//!     struct Bad;
//!     palette 1;
//!     t0 as c: 16x16 i32;
//!     t4 as a: 8x64 i8; // 8 rows: C.rows != A.rows
//!     t6 as b: 16x64 i8;
//! }
//! let mut tiles = Bad::configure().unwrap();
//! tiles.tdpbssd(Bad::c, Bad::a, Bad::b);
//! ```
//!
//! The handle type reads `Tile<name, register, rows, bytes per row, element>`, e.g.
//! `Tile<a, 4, 8, 64, i8>`.

use std::fmt;
use std::marker::PhantomData;

use amx_tilecfg::{image, DotKind, ElemType};

use crate::backend::Backend;
use crate::config::TileConfig;
use crate::context::{configure, configure_on, ConfigureError, Tiles, Unsupported};
use crate::error::Fault;
use crate::unit::TILE_BYTES;

/// The element type of a typed tile, and the Rust type its memory holds.
pub trait Element: 'static {
    /// The DSL's element type, or `None` for a tile declared without one (raw bytes).
    const TYPE: Option<ElemType>;
    /// The Rust type of one element in memory.
    type Scalar: Copy;
}

/// The element marker of a bf16 tile, whose values in memory are [`half::bf16`]. A type of
/// types, not a value type: spelled as in AMX-BF16, a name no other type here has, so compiler
/// errors print a tile's type without a path (`Tile<a, 4, 16, 64, BF16>`).
#[derive(Clone, Copy, Debug)]
pub enum BF16 {}
/// The element marker of an fp16 tile, whose values in memory are [`half::f16`] (spelled as in
/// AMX-FP16).
#[derive(Clone, Copy, Debug)]
pub enum FP16 {}
/// The element marker of a bf8 (E5M2) tile, whose values in memory are [`Bf8`](crate::Bf8)
/// (spelled as in AMX-FP8).
#[derive(Clone, Copy, Debug)]
pub enum BF8 {}
/// The element marker of an hf8 (E4M3) tile, whose values in memory are
/// [`Hf8`](crate::Hf8) (spelled as in AMX-FP8).
#[derive(Clone, Copy, Debug)]
pub enum HF8 {}
/// A tile declared without an element type: raw bytes, usable in any operand role that fits.
#[derive(Clone, Copy, Debug)]
pub enum Bytes {}

macro_rules! element {
    ($($ty:ty => $elem:expr, $scalar:ty;)*) => {$(
        impl Element for $ty {
            const TYPE: Option<ElemType> = $elem;
            type Scalar = $scalar;
        }
    )*};
}

element! {
    i8 => Some(ElemType::I8), i8;
    u8 => Some(ElemType::U8), u8;
    i32 => Some(ElemType::I32), i32;
    f32 => Some(ElemType::F32), f32;
    BF16 => Some(ElemType::Bf16), half::bf16;
    FP16 => Some(ElemType::F16), half::f16;
    BF8 => Some(ElemType::Bf8), crate::Bf8;
    HF8 => Some(ElemType::Hf8), crate::Hf8;
    Bytes => None, u8;
}

/// A Rust type that holds elements of `E` in memory, so that a typed load reads a slice of it
/// and a typed store writes one: `E`'s own [`Element::Scalar`] (`i8`, `u8`, `i32`, `f32`,
/// [`half::bf16`] for [`BF16`] tiles, [`half::f16`] for [`FP16`] tiles, [`Bf8`](crate::Bf8) and
/// [`Hf8`](crate::Hf8) for [`BF8`] and [`HF8`] tiles), and `u8` or `i8` for a tile declared
/// without an element type.
///
/// ```
/// use amx_runtime::tilecfg;
/// use half::bf16;
///
/// tilecfg! {
///     struct Block;
///     palette 1;
///     t0 as c: 16x16 f32;
///     t1 as a: 16x32 bf16;
///     t2 as b: 16x32 bf16;
/// }
///
/// let a = vec![bf16::from_f32(1.5); 16 * 32];
/// let b = vec![bf16::from_f32(2.0); 16 * 32]; // all equal: its VNNI layout is itself
/// let mut c = vec![0f32; 16 * 16];
/// let mut tiles = Block::configure().unwrap();
/// tiles.zero(Block::c);
/// tiles.load(Block::a, &a, 32).unwrap();
/// tiles.load(Block::b, &b, 32).unwrap();
/// tiles.tdpbf16ps(Block::c, Block::a, Block::b);
/// tiles.store(Block::c, &mut c, 16).unwrap();
/// assert!(c.iter().all(|&x| x == 32.0 * 1.5 * 2.0));
/// ```
///
/// # Safety
/// `Self` has the size of `E::Scalar`, and every bit pattern of that size is a valid `Self`
/// (a store writes whatever the tile holds).
#[diagnostic::on_unimplemented(
    message = "a typed load or store of a `{E}` tile cannot use a slice of `{Self}`",
    label = "a slice of the tile's element type goes here",
    note = "a tile's elements are held as: i8 -> `i8`, u8 -> `u8`, i32 -> `i32`, f32 -> `f32`, bf16 -> `half::bf16`, f16 -> `half::f16`, bf8 -> `amx_runtime::Bf8`, hf8 -> `amx_runtime::Hf8`, no element type -> `u8` or `i8`"
)]
pub unsafe trait Holds<E: Element>: Copy + 'static {}

macro_rules! holds {
    ($($elem:ty: $($ty:ty),+;)*) => {$($(
        const _: () = assert!(
            std::mem::size_of::<$ty>() == std::mem::size_of::<<$elem as Element>::Scalar>()
        );
        // SAFETY: same size (asserted above), and a plain integer, float or 16-bit float type:
        // every bit pattern is a value.
        unsafe impl Holds<$elem> for $ty {}
    )+)*};
}

holds! {
    i8: i8;
    u8: u8;
    i32: i32;
    f32: f32;
    BF16: half::bf16;
    FP16: half::f16;
    BF8: crate::Bf8;
    HF8: crate::Hf8;
    Bytes: u8, i8;
}

/// A layout declared by the item form of `tilecfg!`: a type whose configuration is
/// [`Layout::CONFIG`] and whose handles describe exactly that configuration.
///
/// # Safety
/// Every handle whose name implements [`TileName`] with this layout must have the register,
/// rows and colsb that `CONFIG` gives that tile, and every [`Dot`] implementation for this layout
/// must name operands that the instruction accepts under `CONFIG`. The macro guarantees both;
/// implement this trait only through it.
pub unsafe trait Layout: 'static {
    /// The configuration, validated at compile time.
    const CONFIG: TileConfig;
}

/// The marker type of one named tile, tied to its layout.
///
/// # Safety
/// As for [`Layout`]: only the macro implements it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tile of this configuration",
    label = "a tile handle of another `tilecfg!` layout"
)]
pub unsafe trait TileName: 'static {
    /// The layout the tile belongs to.
    type Layout: Layout;
}

/// A typed tile handle: register `T`, `ROWS` rows of `COLSB` bytes, elements `E`, named `N`.
/// Zero-sized and `Copy`; only the `tilecfg!` macro creates them.
pub struct Tile<N, const T: u8, const ROWS: u8, const COLSB: u16, E> {
    _marker: PhantomData<fn() -> (N, E)>,
}

impl<N, const T: u8, const ROWS: u8, const COLSB: u16, E> Clone for Tile<N, T, ROWS, COLSB, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N, const T: u8, const ROWS: u8, const COLSB: u16, E> Copy for Tile<N, T, ROWS, COLSB, E> {}

impl<N, const T: u8, const ROWS: u8, const COLSB: u16, E: Element> fmt::Debug
    for Tile<N, T, ROWS, COLSB, E>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match E::TYPE {
            Some(e) => write!(f, "t{T}: {ROWS}x{COLSB} bytes of {e}"),
            None => write!(f, "t{T}: {ROWS}x{COLSB} bytes"),
        }
    }
}

impl<N, const T: u8, const ROWS: u8, const COLSB: u16, E> Tile<N, T, ROWS, COLSB, E> {
    /// Creates a handle.
    ///
    /// # Safety
    /// Tile `T` of `N`'s layout must have `ROWS` rows and `COLSB` bytes per row. Only the
    /// `tilecfg!` macro calls this.
    #[doc(hidden)]
    pub const unsafe fn __new() -> Self {
        Tile {
            _marker: PhantomData,
        }
    }
}

/// What the typed operations need to know of a handle, as constants.
///
/// Sealed: the typed operations trust `ROWS` and `COLSB` to bound the memory an instruction
/// touches, so only [`Tile`], whose constants the `tilecfg!` macro derives from the layout's
/// configuration, implements it.
pub trait Handle: Copy + sealed::Sealed {
    /// The layout the tile belongs to.
    type Layout: Layout;
    /// The element type.
    type Elem: Element;
    /// The tile register.
    const INDEX: u8;
    /// Rows.
    const ROWS: u8;
    /// Bytes per row.
    const COLSB: u16;
}

mod sealed {
    /// Keeps [`Handle`](super::Handle) to the handles the macro creates.
    pub trait Sealed {}
}

impl<N: TileName, const T: u8, const ROWS: u8, const COLSB: u16, E: Element> sealed::Sealed
    for Tile<N, T, ROWS, COLSB, E>
{
}

impl<N: TileName, const T: u8, const ROWS: u8, const COLSB: u16, E: Element> Handle
    for Tile<N, T, ROWS, COLSB, E>
{
    type Layout = N::Layout;
    type Elem = E;
    const INDEX: u8 = T;
    const ROWS: u8 = ROWS;
    const COLSB: u16 = COLSB;
}

/// Marker types naming the dot-product instructions in [`Dot`]. Spelled as the mnemonic, a name
/// nothing else uses, so compiler errors print `TDPBSSD` rather than a full path.
#[allow(non_camel_case_types)] // named as the instruction, which is what an error should print
pub mod op {
    /// TDPBSSD: i8 x i8 -> i32.
    #[derive(Debug)]
    pub enum TDPBSSD {}
    /// TDPBSUD: i8 x u8 -> i32.
    #[derive(Debug)]
    pub enum TDPBSUD {}
    /// TDPBUSD: u8 x i8 -> i32.
    #[derive(Debug)]
    pub enum TDPBUSD {}
    /// TDPBUUD: u8 x u8 -> i32.
    #[derive(Debug)]
    pub enum TDPBUUD {}
    /// TDPBF16PS: bf16 x bf16 -> f32.
    #[derive(Debug)]
    pub enum TDPBF16PS {}
    /// TDPFP16PS: f16 x f16 -> f32.
    #[derive(Debug)]
    pub enum TDPFP16PS {}
    /// TDPBF8PS: bf8 x bf8 -> f32.
    #[derive(Debug)]
    pub enum TDPBF8PS {}
    /// TDPBHF8PS: bf8 x hf8 -> f32.
    #[derive(Debug)]
    pub enum TDPBHF8PS {}
    /// TDPHBF8PS: hf8 x bf8 -> f32.
    #[derive(Debug)]
    pub enum TDPHBF8PS {}
    /// TDPHF8PS: hf8 x hf8 -> f32.
    #[derive(Debug)]
    pub enum TDPHF8PS {}
    /// TCMMIMFP16PS: complex f16 x complex f16 -> the imaginary part, f32.
    #[derive(Debug)]
    pub enum TCMMIMFP16PS {}
    /// TCMMRLFP16PS: complex f16 x complex f16 -> the real part, f32.
    #[derive(Debug)]
    pub enum TCMMRLFP16PS {}
    /// TCVTROWD2PS: a row of i32 -> f32.
    #[derive(Debug)]
    pub enum TCVTROWD2PS {}
    /// TCVTROWPS2BF16H and TCVTROWPS2BF16L: a row of f32 -> bf16.
    #[derive(Debug)]
    pub enum TCVTROWPS2BF16 {}
    /// TCVTROWPS2PHH and TCVTROWPS2PHL: a row of f32 -> f16.
    #[derive(Debug)]
    pub enum TCVTROWPS2PH {}
}

/// Tiles of element type `Self` are what the row conversion `Op` reads: i32 for TCVTROWD2PS,
/// f32 for the TCVTROWPS2* (and any tile declared without an element type).
#[diagnostic::on_unimplemented(
    message = "{Op} cannot read a tile of `{Self}`",
    label = "not a tile of the element type {Op} converts",
    note = "TCVTROWD2PS reads i32 tiles; TCVTROWPS2BF16H/L and TCVTROWPS2PHH/L read f32 tiles"
)]
pub trait RowSource<Op> {}
impl RowSource<op::TCVTROWD2PS> for i32 {}
impl RowSource<op::TCVTROWPS2BF16> for f32 {}
impl RowSource<op::TCVTROWPS2PH> for f32 {}
impl<Op> RowSource<Op> for Bytes {}

/// `Self` (C) may accumulate `A x B` with instruction `Op` in layout `L`. Implemented by the
/// `tilecfg!` macro for exactly the operand triples the silicon accepts.
///
/// # Safety
/// Only the macro implements it, after checking the operands with `amx_tilecfg::check_dot`.
#[diagnostic::on_unimplemented(
    message = "{Op} cannot accumulate `{A}` x `{B}` into `{Self}`",
    label = "these tiles do not fit {Op}",
    note = "a tile reads Tile<name, register, rows, bytes per row, element>",
    note = "C += A x B needs three different tiles with C.rows == A.rows (M), B.rows == A.colsb / 4 (K) and C.colsb == B.colsb (N)",
    note = "elements: TDPB[SU][SU]D takes i8/u8 A and B (S = i8, U = u8) into i32 C; TDPBF16PS bf16 into f32; TDPFP16PS, TCMMIMFP16PS and TCMMRLFP16PS f16 into f32; TDPBF8PS, TDPBHF8PS, TDPHBF8PS and TDPHF8PS bf8 (B) or hf8 (H) into f32"
)]
pub unsafe trait Dot<L, Op, A, B> {}

/// Stand-ins that keep rustc from guessing an operand's type from the only fitting triple, so a
/// mismatch is reported by [`Dot`]'s message rather than as a "mismatched types" error.
#[doc(hidden)]
pub struct Decoy<X>(PhantomData<X>);
#[doc(hidden)]
pub struct Decoy2<X>(PhantomData<X>);

/// The tiles of layout `L`, configured on this thread: the typed operations. Not `Send`.
///
/// Created by [`configure_typed`] or the `configure()` the macro gives each layout type.
///
/// # Panics
///
/// The typed operations run without checks because `L::CONFIG` is loaded. Code that changes the
/// configuration behind the guard (`untyped().ldtilecfg(..)`, `untyped().tilerelease()`, another
/// [`Hardware`](crate::Hardware) handle on this thread, raw intrinsics followed by `resync`)
/// breaks that premise: the next typed operation then checks whether the loaded configuration
/// is still `L::CONFIG` and, when it is not, panics rather than run an instruction that could
/// fault or touch memory outside the buffers it was given. Configure again instead.
pub struct TypedTiles<L: Layout> {
    tiles: Tiles,
    /// The configuration epoch when `L::CONFIG` was last seen loaded.
    epoch: u64,
    _layout: PhantomData<L>,
}

impl<L: Layout> fmt::Debug for TypedTiles<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.tiles.fmt(f)
    }
}

/// Configures layout `L` on this thread (see [`configure`]) and returns its typed tiles.
///
/// # Errors
/// Those of [`configure`], and [`ConfigureError::Unsupported`] on silicon that lacks AMX-INT8,
/// AMX-BF16 or the architectural TMUL limits: the typed dot products return no `Result`, so
/// the typed layer runs only where all of them execute (every AMX CPU to date). The untyped
/// [`Tiles`] still works there, each instruction returning its `Fault`.
#[inline(always)]
pub fn configure_typed<L: Layout>() -> Result<TypedTiles<L>, ConfigureError> {
    TypedTiles::new(configure(&L::CONFIG)?)
}

/// [`configure_typed`] on a given backend rather than the process's.
#[inline(always)]
pub fn configure_typed_on<L: Layout>(backend: Backend) -> Result<TypedTiles<L>, ConfigureError> {
    TypedTiles::new(configure_on(backend, &L::CONFIG)?)
}

/// The cold half of [`TypedTiles::new`]: leaves nothing loaded (a configured thread has its
/// tile state saved and restored by the OS on every context switch).
#[cold]
#[inline(never)]
fn refuse(mut tiles: Tiles, why: Unsupported) -> ConfigureError {
    tiles.tilerelease();
    ConfigureError::Unsupported(why)
}

/// The cold half of [`TypedTiles::proven`].
#[cold]
#[inline(never)]
fn unproven(fault: Fault) -> ! {
    panic!("typed tiles: an instruction the types proved legal faulted (a bug in amx-runtime): {fault}")
}

/// The byte stride of a load or store of handle `H` from a slice of `len` elements of
/// `size` bytes with rows `stride_elems` elements apart, once every row it touches is proven
/// to lie in the slice; otherwise the refusal, counted in the slice's elements. A one-row tile
/// never applies its stride, so that product wraps rather than overflows.
fn byte_stride<H: Handle>(stride_elems: usize, len: usize, size: usize) -> Result<isize, Fault> {
    // colsb is a multiple of 4 (the macro checked it), so a row is a whole number of elements
    // of 1, 2 or 4 bytes.
    let row = (H::COLSB as usize).div_ceil(size);
    let needed = (H::ROWS as usize)
        .saturating_sub(1)
        .checked_mul(stride_elems)
        .and_then(|x| x.checked_add(row));
    match needed {
        Some(needed) if needed <= len => Ok(stride_elems.wrapping_mul(size) as isize),
        needed => Err(Fault::OutOfBounds {
            tile: H::INDEX,
            needed: needed.unwrap_or(usize::MAX),
            len,
        }),
    }
}

impl<L: Layout> TypedTiles<L> {
    /// Whether the silicon's typed instructions record the start_row of 0 each one leaves in
    /// the thread's tracked image: only where `L::CONFIG` has another start_row, which
    /// `tilecfg!` refuses in a layout today. Otherwise the tracked start_row is 0 whenever the
    /// epoch is the one this guard saw (the configuration is `L::CONFIG` then, or one `recheck`
    /// accepted with start_row 0), and stays 0 through every typed instruction, so the record
    /// would store what is there already. The store cost more than itself: the compiler could
    /// not tell its target from the kernel's own state, and reloaded that after every
    /// instruction (a 2x2 kernel on the silicon: 6% of its time, BENCHMARKS.md).
    const RECORDS_START_ROW: bool = L::CONFIG.as_bytes()[image::START_ROW] != 0;

    /// Wraps a guard that has just put `L::CONFIG` in place, once the backend is known to
    /// execute every instruction the typed operations may issue: AMX-INT8, AMX-BF16 and the
    /// architectural TMUL limits (the emulator has both instructions, and the limits unless it
    /// models a smaller CPU, see [`Emulator::with_limits`](crate::Emulator::with_limits)).
    ///
    /// Inlined with `configure_typed` (the refusal out of line), like `configure`'s skip: a
    /// call and a `Result` through memory made a typed configure of a loaded layout cost four
    /// times an untyped one.
    #[inline(always)]
    fn new(mut tiles: Tiles) -> Result<TypedTiles<L>, ConfigureError> {
        if let Some(why) = tiles.typed_unsupported() {
            return Err(refuse(tiles, why));
        }
        Ok(TypedTiles {
            epoch: tiles.config_epoch(),
            tiles,
            _layout: PhantomData,
        })
    }

    /// The untyped guard underneath (every instruction, checked at run time). Changing the
    /// configuration through it makes the typed operations panic (see [`TypedTiles`]).
    pub fn untyped(&mut self) -> &mut Tiles {
        &mut self.tiles
    }

    /// Makes sure `L::CONFIG` is still loaded, the premise of every unchecked instruction: one
    /// comparison while nothing changed the configuration (the common case, inlined).
    #[inline(always)]
    fn ensure_loaded(&mut self) {
        if self.tiles.config_epoch() != self.epoch {
            self.recheck();
        }
    }

    /// The configuration changed since this guard last saw it: accept it only if it is still
    /// `L::CONFIG` (start_row 0 or the layout's own), else panic.
    #[cold]
    #[inline(never)]
    fn recheck(&mut self) {
        let loaded = self.tiles.loaded_config();
        let expected = L::CONFIG.as_bytes();
        let start = loaded[image::START_ROW];
        let same = loaded
            .iter()
            .zip(expected)
            .enumerate()
            .all(|(i, (x, y))| i == image::START_ROW || x == y);
        if same && (start == 0 || start == expected[image::START_ROW]) {
            self.epoch = self.tiles.config_epoch();
            return;
        }
        panic!(
            "typed tiles: the configuration of layout `{0}` was changed behind its guard (through \
             untyped(), another Hardware handle, or raw intrinsics and resync); load it again \
             with `untyped().reconfigure(&{0}::CONFIG)` (which zeroes the tiles) before running \
             typed instructions",
            std::any::type_name::<L>()
        );
    }

    /// The result of an instruction whose every #UD condition the types have ruled out (with
    /// `L::CONFIG` loaded, which `ensure_loaded` checked, on a backend that `new` checked).
    /// A fault here is a bug in this crate: it panics rather than leave a tile silently
    /// unchanged.
    #[inline(always)]
    fn proven(result: Result<(), Fault>) {
        if let Err(fault) = result {
            unproven(fault);
        }
    }

    /// `(M, N, K)` of a dot product into `C` from `A`, from the handles' shapes: rows of C,
    /// C's dwords per row, A's dwords per row.
    #[inline(always)]
    fn dot_shape<C: Handle, A: Handle>() -> (usize, usize, usize) {
        (
            C::ROWS as usize,
            C::COLSB as usize / 4,
            A::COLSB as usize / 4,
        )
    }

    /// TILEZERO.
    #[inline(always)]
    pub fn zero<T: Handle<Layout = L>>(&mut self, tile: T) {
        let _ = tile;
        self.ensure_loaded();
        match self.tiles.hardware_mut() {
            // SAFETY: ensure_loaded just confirmed L::CONFIG is loaded on this thread, and the
            // handle's type proves tile T::INDEX is used in it.
            Some(hw) => unsafe { hw.tilezero_unchecked(T::INDEX, Self::RECORDS_START_ROW) },
            None => Self::proven(self.tiles.tilezero(T::INDEX)),
        }
    }

    /// TILELOADD of `src`, tile row `r` from the elements at `r * stride_elems`. `src` holds
    /// the tile's elements (see [`Holds`]: e.g. `i8` for an `i8` tile, [`half::bf16`] for a
    /// `bf16` one); the stride counts those elements, as a leading dimension does.
    ///
    /// A stride shorter than a row is accepted: the rows then overlap in `src` (a stride of 0
    /// loads the same row into every row of the tile).
    ///
    /// # Errors
    /// [`Fault::OutOfBounds`] when the last row, `(rows - 1) * stride_elems` plus a row's
    /// elements, does not fit in `src`; `needed` and `len` count elements of `src`.
    pub fn load<T: Handle<Layout = L>, S: Holds<T::Elem>>(
        &mut self,
        tile: T,
        src: &[S],
        stride_elems: usize,
    ) -> Result<(), Fault> {
        let stride = byte_stride::<T>(stride_elems, src.len(), std::mem::size_of::<S>())?;
        // SAFETY: byte_stride proved that every row r < ROWS, at byte r * stride, has its COLSB
        // bytes inside `src` (with ROWS > 1 the stride fits isize because the extent does; with
        // one row it is never applied).
        unsafe { self.load_ptr(tile, src.as_ptr().cast(), stride) };
        Ok(())
    }

    /// TILESTORED to `dst`, tile row `r` to the elements at `r * stride_elems`, in any type
    /// that [`Holds`] the tile's elements.
    ///
    /// A stride shorter than a row is accepted: the rows then overlap in `dst`, and where they
    /// do the later row's elements are the ones left (rows are stored in order).
    ///
    /// # Errors
    /// As [`TypedTiles::load`], counted in elements of `dst`.
    pub fn store<T: Handle<Layout = L>, S: Holds<T::Elem>>(
        &mut self,
        tile: T,
        dst: &mut [S],
        stride_elems: usize,
    ) -> Result<(), Fault> {
        let stride = byte_stride::<T>(stride_elems, dst.len(), std::mem::size_of::<S>())?;
        // SAFETY: as in `load`; `dst` is borrowed mutably, so nothing else aliases it.
        unsafe { self.store_ptr(tile, dst.as_mut_ptr().cast(), stride) };
        Ok(())
    }

    /// TILELOADD through a raw pointer: tile row `r` from the bytes at `src + r * stride_bytes`
    /// (a byte pointer and a byte stride, as the instruction and the
    /// [`intrinsics`](crate::intrinsics) take them).
    ///
    /// # Safety
    /// For every row `r` of the tile, the tile's bytes per row at `src + r * stride_bytes` must
    /// be readable.
    #[inline(always)]
    pub unsafe fn load_ptr<T: Handle<Layout = L>>(
        &mut self,
        tile: T,
        src: *const u8,
        stride_bytes: isize,
    ) {
        let _ = tile;
        self.ensure_loaded();
        match self.tiles.hardware_mut() {
            // SAFETY: ensure_loaded confirmed L::CONFIG is loaded (start_row 0 or the layout's
            // own), and its tile T::INDEX is used with colsb % 4 == 0 and start_row below its
            // rows (the macro checked both), so the tile has the handle's shape; the caller
            // vouches for memory.
            Some(hw) => unsafe {
                hw.tileloadd_unchecked(T::INDEX, src, stride_bytes, Self::RECORDS_START_ROW)
            },
            // SAFETY: forwarded from this function's contract.
            None => Self::proven(unsafe { self.tiles.tileloadd_ptr(T::INDEX, src, stride_bytes) }),
        }
    }

    /// TILELOADDT1 through a raw pointer: [`TypedTiles::load_ptr`] with the hint that the data
    /// will not be reused soon, so that it displaces less of what the caches hold (a GEMM loads
    /// its streamed operand this way, keeping the reused one cached). The result is the same as
    /// `load_ptr`'s.
    ///
    /// # Safety
    /// As for [`TypedTiles::load_ptr`].
    #[inline(always)]
    pub unsafe fn stream_load_ptr<T: Handle<Layout = L>>(
        &mut self,
        tile: T,
        src: *const u8,
        stride_bytes: isize,
    ) {
        let _ = tile;
        self.ensure_loaded();
        match self.tiles.hardware_mut() {
            // SAFETY: as in `load_ptr`.
            Some(hw) => unsafe {
                hw.tileloaddt1_unchecked(T::INDEX, src, stride_bytes, Self::RECORDS_START_ROW)
            },
            None => {
                // SAFETY: forwarded from this function's contract.
                Self::proven(unsafe { self.tiles.tileloaddt1_ptr(T::INDEX, src, stride_bytes) })
            }
        }
    }

    /// TILESTORED through a raw pointer: tile row `r` to the bytes at `dst + r * stride_bytes`.
    ///
    /// # Safety
    /// For every row `r` of the tile, the tile's bytes per row at `dst + r * stride_bytes` must
    /// be writable and not aliased by a live reference.
    #[inline(always)]
    pub unsafe fn store_ptr<T: Handle<Layout = L>>(
        &mut self,
        tile: T,
        dst: *mut u8,
        stride_bytes: isize,
    ) {
        let _ = tile;
        self.ensure_loaded();
        match self.tiles.hardware_mut() {
            // SAFETY: as in `load_ptr`; the caller vouches that the rows are writable.
            Some(hw) => unsafe {
                hw.tilestored_unchecked(T::INDEX, dst, stride_bytes, Self::RECORDS_START_ROW)
            },
            // SAFETY: forwarded from this function's contract.
            None => Self::proven(unsafe { self.tiles.tilestored_ptr(T::INDEX, dst, stride_bytes) }),
        }
    }

    /// All 1024 bytes of a tile's data (on the silicon through XSAVE, which can be refused
    /// where the OS does not describe the tile state; hence the `Result`).
    pub fn read<T: Handle<Layout = L>>(&mut self, tile: T) -> Result<[u8; TILE_BYTES], Fault> {
        let _ = tile;
        self.tiles.tile_data(T::INDEX)
    }
}

// The dot products are written out rather than generated by a macro: a mismatch's error note
// quotes the method's signature, and a generated one would quote the macro's internals too.
impl<L: Layout> TypedTiles<L> {
    /// One dot product whose operands the caller's `Dot` bound proved.
    #[inline(always)]
    fn dot<C: Handle<Layout = L>, A: Handle<Layout = L>, B: Handle<Layout = L>>(
        &mut self,
        kind: DotKind,
    ) {
        self.ensure_loaded();
        let ops = (C::INDEX, A::INDEX, B::INDEX);
        if let Some(hw) = self.tiles.hardware_mut() {
            // SAFETY: ensure_loaded confirmed L::CONFIG is loaded, and the caller's `Dot` bound
            // exists only for operands that the macro checked against it under the
            // architectural TMUL limits (dot_unchecked's contract).
            Self::proven(unsafe {
                hw.dot_unchecked(kind, ops.0, ops.1, ops.2, Self::RECORDS_START_ROW)
            });
        } else if let Some(emu) = self.tiles.emulator_mut() {
            // The same proof stands in for the emulator's D1/D2 checks. (A guard's unit is one
            // of the two backends, so there is no third case.)
            Self::proven(emu.dot_proven(ops, kind, Self::dot_shape::<C, A>()));
        }
    }

    /// TDPBSSD: `c += a x b`, i8 x i8 into i32.
    #[inline(always)]
    pub fn tdpbssd<C, A, B>(&mut self, c: C, a: A, b: B)
    where
        C: Handle<Layout = L> + Dot<L, op::TDPBSSD, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.dot::<C, A, B>(DotKind::Tdpbssd);
    }

    /// TDPBSUD: `c += a x b`, i8 x u8 into i32.
    #[inline(always)]
    pub fn tdpbsud<C, A, B>(&mut self, c: C, a: A, b: B)
    where
        C: Handle<Layout = L> + Dot<L, op::TDPBSUD, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.dot::<C, A, B>(DotKind::Tdpbsud);
    }

    /// TDPBUSD: `c += a x b`, u8 x i8 into i32.
    #[inline(always)]
    pub fn tdpbusd<C, A, B>(&mut self, c: C, a: A, b: B)
    where
        C: Handle<Layout = L> + Dot<L, op::TDPBUSD, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.dot::<C, A, B>(DotKind::Tdpbusd);
    }

    /// TDPBUUD: `c += a x b`, u8 x u8 into i32.
    #[inline(always)]
    pub fn tdpbuud<C, A, B>(&mut self, c: C, a: A, b: B)
    where
        C: Handle<Layout = L> + Dot<L, op::TDPBUUD, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.dot::<C, A, B>(DotKind::Tdpbuud);
    }

    /// TDPBF16PS: `c += a x b`, bf16 x bf16 into f32.
    #[inline(always)]
    pub fn tdpbf16ps<C, A, B>(&mut self, c: C, a: A, b: B)
    where
        C: Handle<Layout = L> + Dot<L, op::TDPBF16PS, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.dot::<C, A, B>(DotKind::Tdpbf16ps);
    }
}

impl<L: Layout> TypedTiles<L> {
    /// TDPFP16PS: `c += a x b`, f16 x f16 into f32. Unlike the other dot products this can fail
    /// at run time: the hardware backend refuses it on a CPU that does not report AMX-FP16 (see
    /// [`Hardware`](crate::Hardware)).
    pub fn tdpfp16ps<C, A, B>(&mut self, c: C, a: A, b: B) -> Result<(), Fault>
    where
        C: Handle<Layout = L> + Dot<L, op::TDPFP16PS, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.ensure_loaded();
        let ops = (C::INDEX, A::INDEX, B::INDEX);
        if let Some(hw) = self.tiles.hardware_mut() {
            // SAFETY: as for the other dot products; the CPU feature is still checked.
            unsafe {
                hw.dot_unchecked(
                    DotKind::Tdpfp16ps,
                    ops.0,
                    ops.1,
                    ops.2,
                    Self::RECORDS_START_ROW,
                )
            }
        } else if let Some(emu) = self.tiles.emulator_mut() {
            emu.dot_proven(ops, DotKind::Tdpfp16ps, Self::dot_shape::<C, A>())
        } else {
            self.tiles.tdpfp16ps(ops.0, ops.1, ops.2)
        }
    }
}

/// The dot products of AMX-FP8 and AMX-COMPLEX, and the AMX-AVX512 row moves and AMX-MOVRS
/// loads. Like TDPFP16PS they return a `Result`: the silicon refuses them where CPUID does not
/// report their feature. Their operands are proven at compile time all the same.
impl<L: Layout> TypedTiles<L> {
    /// TDPBF8PS: `c += a x b`, bf8 x bf8 into f32.
    pub fn tdpbf8ps<C, A, B>(&mut self, c: C, a: A, b: B) -> Result<(), Fault>
    where
        C: Handle<Layout = L> + Dot<L, op::TDPBF8PS, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.ensure_loaded();
        self.tiles.tdpbf8ps(C::INDEX, A::INDEX, B::INDEX)
    }

    /// TDPBHF8PS: `c += a x b`, bf8 x hf8 into f32.
    pub fn tdpbhf8ps<C, A, B>(&mut self, c: C, a: A, b: B) -> Result<(), Fault>
    where
        C: Handle<Layout = L> + Dot<L, op::TDPBHF8PS, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.ensure_loaded();
        self.tiles.tdpbhf8ps(C::INDEX, A::INDEX, B::INDEX)
    }

    /// TDPHBF8PS: `c += a x b`, hf8 x bf8 into f32.
    pub fn tdphbf8ps<C, A, B>(&mut self, c: C, a: A, b: B) -> Result<(), Fault>
    where
        C: Handle<Layout = L> + Dot<L, op::TDPHBF8PS, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.ensure_loaded();
        self.tiles.tdphbf8ps(C::INDEX, A::INDEX, B::INDEX)
    }

    /// TDPHF8PS: `c += a x b`, hf8 x hf8 into f32.
    pub fn tdphf8ps<C, A, B>(&mut self, c: C, a: A, b: B) -> Result<(), Fault>
    where
        C: Handle<Layout = L> + Dot<L, op::TDPHF8PS, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.ensure_loaded();
        self.tiles.tdphf8ps(C::INDEX, A::INDEX, B::INDEX)
    }

    /// TCMMIMFP16PS: `c +=` the imaginary part of `a x b`, each dword of `a` and `b` a complex
    /// number of two f16 (real part first).
    pub fn tcmmimfp16ps<C, A, B>(&mut self, c: C, a: A, b: B) -> Result<(), Fault>
    where
        C: Handle<Layout = L> + Dot<L, op::TCMMIMFP16PS, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.ensure_loaded();
        self.tiles.tcmmimfp16ps(C::INDEX, A::INDEX, B::INDEX)
    }

    /// TCMMRLFP16PS: `c +=` the real part of `a x b` (see [`TypedTiles::tcmmimfp16ps`]).
    pub fn tcmmrlfp16ps<C, A, B>(&mut self, c: C, a: A, b: B) -> Result<(), Fault>
    where
        C: Handle<Layout = L> + Dot<L, op::TCMMRLFP16PS, A, B>,
        A: Handle<Layout = L>,
        B: Handle<Layout = L>,
    {
        let _ = (c, a, b);
        self.ensure_loaded();
        self.tiles.tcmmrlfp16ps(C::INDEX, A::INDEX, B::INDEX)
    }

    /// TILELOADDRS: [`TypedTiles::load`] with the hint that other cores read the data too.
    ///
    /// # Errors
    /// As [`TypedTiles::load`], and `Fault::InvalidOpcode` on silicon without AMX-MOVRS.
    pub fn load_read_shared<T: Handle<Layout = L>, S: Holds<T::Elem>>(
        &mut self,
        tile: T,
        src: &[S],
        stride_elems: usize,
    ) -> Result<(), Fault> {
        let _ = tile;
        let stride = byte_stride::<T>(stride_elems, src.len(), std::mem::size_of::<S>())?;
        self.ensure_loaded();
        // SAFETY: byte_stride proved that every row of the tile lies inside `src`.
        unsafe {
            self.tiles
                .tileloaddrs_ptr(T::INDEX, src.as_ptr().cast(), stride)
        }
    }

    /// TILEMOVROW: the 64 bytes of row `row` of the tile (its bytes past colsb zero), or 64
    /// zero bytes for a row at or past the tile's rows (which the instruction, which reads only
    /// the row number's low four bits, is not given).
    ///
    /// # Errors
    /// `Fault::InvalidOpcode` on silicon without AMX-AVX512 or its AVX-512 state.
    pub fn tilemovrow<T: Handle<Layout = L>>(
        &mut self,
        tile: T,
        row: u8,
    ) -> Result<[u8; 64], Fault> {
        let _ = tile;
        if row >= T::ROWS {
            return Ok([0; 64]);
        }
        self.ensure_loaded();
        self.tiles.tilemovrow(T::INDEX, u32::from(row))
    }

    /// TCVTROWD2PS: row `row` of an i32 tile as 16 f32 (round to nearest even), the ones past
    /// the tile's colsb zero; all zero for a row at or past the tile's rows.
    ///
    /// # Errors
    /// As [`TypedTiles::tilemovrow`].
    pub fn tcvtrowd2ps<T>(&mut self, tile: T, row: u8) -> Result<[f32; 16], Fault>
    where
        T: Handle<Layout = L>,
        T::Elem: RowSource<op::TCVTROWD2PS>,
    {
        let _ = tile;
        let bytes = self.row::<T>(row, |u, t, r| u.tcvtrowd2ps(t, r))?;
        Ok(core::array::from_fn(|i| {
            f32::from_le_bytes([
                bytes[4 * i],
                bytes[4 * i + 1],
                bytes[4 * i + 2],
                bytes[4 * i + 3],
            ])
        }))
    }

    /// TCVTROWPS2BF16H (`high`) or TCVTROWPS2BF16L: row `row` of an f32 tile as 32 bf16, each
    /// f32 converted (round to nearest even) into the high (odd) or low (even) half of its
    /// dword and the other half zero.
    ///
    /// # Errors
    /// As [`TypedTiles::tilemovrow`].
    pub fn tcvtrowps2bf16<T>(
        &mut self,
        tile: T,
        row: u8,
        high: bool,
    ) -> Result<[half::bf16; 32], Fault>
    where
        T: Handle<Layout = L>,
        T::Elem: RowSource<op::TCVTROWPS2BF16>,
    {
        let _ = tile;
        let bytes = if high {
            self.row::<T>(row, |u, t, r| u.tcvtrowps2bf16h(t, r))?
        } else {
            self.row::<T>(row, |u, t, r| u.tcvtrowps2bf16l(t, r))?
        };
        Ok(core::array::from_fn(|i| {
            half::bf16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))
        }))
    }

    /// TCVTROWPS2PHH (`high`) or TCVTROWPS2PHL: as [`TypedTiles::tcvtrowps2bf16`] into f16.
    ///
    /// # Errors
    /// As [`TypedTiles::tilemovrow`].
    pub fn tcvtrowps2ph<T>(
        &mut self,
        tile: T,
        row: u8,
        high: bool,
    ) -> Result<[half::f16; 32], Fault>
    where
        T: Handle<Layout = L>,
        T::Elem: RowSource<op::TCVTROWPS2PH>,
    {
        let _ = tile;
        let bytes = if high {
            self.row::<T>(row, |u, t, r| u.tcvtrowps2phh(t, r))?
        } else {
            self.row::<T>(row, |u, t, r| u.tcvtrowps2phl(t, r))?
        };
        Ok(core::array::from_fn(|i| {
            half::f16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))
        }))
    }

    /// A row move of handle `T`'s tile: zeros past its rows, else `op` on the unit.
    fn row<T: Handle<Layout = L>>(
        &mut self,
        row: u8,
        op: impl FnOnce(&mut dyn crate::TileUnit, u8, u32) -> Result<[u8; 64], Fault>,
    ) -> Result<[u8; 64], Fault> {
        if row >= T::ROWS {
            return Ok([0; 64]);
        }
        self.ensure_loaded();
        op(&mut *self.tiles, T::INDEX, u32::from(row))
    }
}
