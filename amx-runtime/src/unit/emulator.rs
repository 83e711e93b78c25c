//! The software tile unit: the architectural state and every instruction, bit for bit.

use amx_tilecfg::{image, DotKind, DotMismatch, PaletteTable, TileShape, TmulLimits};

use super::numerics::row::RowOp;
use super::numerics::{Form, Half, KernelPath, RowCorrections, Widened};
use super::{check, numerics, Product, TileUnit, ROW_BYTES, TILES, TILE_BYTES};
use crate::error::{Fault, Mnemonic, UdReason};

/// A software model of one thread's AMX state: the 64-byte configuration, TILES_CONFIGURED, and
/// eight tiles of 16 x 64 bytes. Behaves as the silicon does, faults included
/// ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)).
///
/// ```
/// use amx_runtime::{tilecfg, Emulator, Fault, TileConfig, TileUnit};
///
/// static CFG: TileConfig = tilecfg! { palette 1; t0: 2x2 i32; t1: 2x4; t2: 1x8 };
/// let mut emu = Emulator::new();
/// emu.ldtilecfg(CFG.as_bytes()).unwrap();
/// emu.tileloadd(1, &[1, 2, 3, 4, 5, 6, 7, 8], 4).unwrap(); // A: 2 rows of 4 bytes
/// emu.tileloadd(2, &[1, 1, 1, 1, 2, 2, 2, 2], 8).unwrap(); // B: 1 row of 8 bytes
/// emu.tdpbssd(0, 1, 2).unwrap();
/// let mut c = [0i32; 4];
/// let mut bytes = [0u8; 16];
/// emu.tilestored(0, &mut bytes, 8).unwrap();
/// for (v, b) in c.iter_mut().zip(bytes.chunks(4)) {
///     *v = i32::from_le_bytes(b.try_into().unwrap());
/// }
/// assert_eq!(c, [10, 20, 26, 52]);
/// assert!(matches!(emu.tdpbssd(0, 0, 2), Err(Fault::InvalidOpcode(_))));
/// ```
#[derive(Clone)]
pub struct Emulator {
    table: PaletteTable,
    /// Whether `table` is the architectural one, which every `TileConfig` already satisfies.
    architectural: bool,
    limits: TmulLimits,
    /// The loaded image as STTILECFG writes it; all zero when unconfigured (palette 0).
    config: [u8; 64],
    /// Counts configuration changes (LDTILECFG, TILERELEASE), for the typed path.
    epoch: u64,
    /// The last dot product's operands that passed the D1/D2 checks, with the epoch they were
    /// checked in and their (m, n, k): a kernel repeats the same few products, and those checks
    /// depend on nothing but the configuration (start_row plays no part in them).
    checked_dot: Option<CheckedDot>,
    tiles: [[u8; TILE_BYTES]; TILES],
    /// Per tile, its bf16 or fp16 pairs widened to fp32, its bf16 pairs re-paired for
    /// VDPBF16PS (as A or as B), or its bytes extended to i16, valid where `widened_as` names
    /// the form: computed by the first product that reads the tile (where the kernel reads such
    /// operands) and dropped by every write to the tile, so a tile used in several products (A
    /// of a row of C tiles, B of a column) is converted once.
    widened: [Widened; TILES],
    widened_as: [Option<Form>; TILES],
    /// Per tile, the row sums a TDPBSSD with it as A subtracts (where the integer kernel reads
    /// them), kept like `widened` until the tile is written: a tile that is A of several
    /// products, or of one repeated, has them computed once.
    row_corrections: [RowCorrections; TILES],
}

/// A dot product's (C, A, B) tiles that passed D1/D2 in a configuration epoch, and its
/// (m, n, k).
type CheckedDot = (u64, (u8, u8, u8), (usize, usize, usize));

impl Default for Emulator {
    fn default() -> Self {
        Emulator::new()
    }
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("table", &self.table)
            .field("limits", &self.limits)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A palette table whose tiles do not fit the emulator's storage (see
/// [`Emulator::with_limits`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedTable {
    /// The palette that allows larger tiles.
    pub palette: u8,
    /// Its max_rows.
    pub max_rows: u16,
    /// Its bytes_per_row.
    pub bytes_per_row: u16,
}

impl std::fmt::Display for UnsupportedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "palette {} allows tiles of {} rows x {} bytes; the emulator holds at most {} rows \
             x {} bytes per tile",
            self.palette,
            self.max_rows,
            self.bytes_per_row,
            TILE_BYTES / ROW_BYTES,
            ROW_BYTES
        )
    }
}

impl std::error::Error for UnsupportedTable {}

impl Emulator {
    /// An emulator of the architectural AMX unit of every AMX CPU to date: palette 1 (8 tiles
    /// of 16 rows x 64 bytes), TMUL limits K <= 16, N <= 64 bytes. Starts unconfigured with all
    /// tile data zero.
    pub fn new() -> Emulator {
        Emulator::unconfigured(PaletteTable::ARCHITECTURAL, TmulLimits::ARCHITECTURAL)
    }

    /// Writes [`Emulator::new`] to `this` field by field, without building the 24 KiB value
    /// on the stack: the trap engine initializes its per-thread state this way from a signal
    /// handler, which may run on a small alternate stack.
    ///
    /// # Safety
    /// `this` is valid for writes of an `Emulator` and suitably aligned; whatever it held is
    /// overwritten without being dropped (an `Emulator` owns nothing).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    pub(crate) unsafe fn init_in_place(this: *mut Emulator) {
        use std::ptr::addr_of_mut;
        // SAFETY: the caller's contract: every field pointer is valid for a write.
        unsafe {
            addr_of_mut!((*this).table).write(PaletteTable::ARCHITECTURAL);
            addr_of_mut!((*this).architectural).write(true);
            addr_of_mut!((*this).limits).write(TmulLimits::ARCHITECTURAL);
            addr_of_mut!((*this).config).write([0; 64]);
            addr_of_mut!((*this).epoch).write(0);
            addr_of_mut!((*this).checked_dot).write(None);
            addr_of_mut!((*this).tiles)
                .cast::<u8>()
                .write_bytes(0, TILES * TILE_BYTES);
            addr_of_mut!((*this).widened)
                .cast::<u8>()
                .write_bytes(0, TILES * std::mem::size_of::<Widened>());
            addr_of_mut!((*this).widened_as).write([None; TILES]);
            addr_of_mut!((*this).row_corrections).write([RowCorrections::NONE; TILES]);
        }
    }

    /// The INIT state under a table whose tiles fit the storage (checked by the callers).
    ///
    /// The kernel paths are decided here if they are not yet (the CPU's features and
    /// `AMX_EMULATOR_KERNELS`, whose reading allocates): a thread's emulator is made before
    /// it configures, so no instruction run under a tile guard is the first to decide them.
    fn unconfigured(table: PaletteTable, limits: TmulLimits) -> Emulator {
        numerics::decide_paths();
        Emulator {
            table,
            architectural: table == PaletteTable::ARCHITECTURAL,
            limits,
            config: [0; 64],
            epoch: 0,
            checked_dot: None,
            tiles: [[0; TILE_BYTES]; TILES],
            widened: [Widened::ZERO; TILES],
            widened_as: [None; TILES],
            row_corrections: [RowCorrections::NONE; TILES],
        }
    }

    /// An emulator of a CPU with another palette table and TMUL limits (e.g. a VM with fewer
    /// rows). The table limits what a configuration may use. Each tile has the architectural
    /// 16 rows x 64 bytes of storage, so a table with a palette whose tiles can be larger (more
    /// rows or more bytes per row) is refused rather than modelled wrongly.
    ///
    /// ```
    /// use amx_runtime::rules::Palette;
    /// use amx_runtime::{Emulator, PaletteTable, TmulLimits};
    ///
    /// let vm = PaletteTable::one(Palette { max_rows: 8, ..Palette::PALETTE_1 });
    /// assert!(Emulator::with_limits(vm, TmulLimits::ARCHITECTURAL).is_ok());
    /// let wide = PaletteTable::one(Palette { bytes_per_row: 128, ..Palette::PALETTE_1 });
    /// assert!(Emulator::with_limits(wide, TmulLimits::ARCHITECTURAL).is_err());
    /// ```
    pub fn with_limits(
        table: PaletteTable,
        limits: TmulLimits,
    ) -> Result<Emulator, UnsupportedTable> {
        for id in 1..=table.max_palette() {
            let Some(palette) = table.get(id) else {
                continue;
            };
            if usize::from(palette.max_rows) > TILE_BYTES / ROW_BYTES
                || usize::from(palette.bytes_per_row) > ROW_BYTES
            {
                return Err(UnsupportedTable {
                    palette: id,
                    max_rows: palette.max_rows,
                    bytes_per_row: palette.bytes_per_row,
                });
            }
        }
        Ok(Emulator::unconfigured(table, limits))
    }

    /// A number that changes with every LDTILECFG and TILERELEASE (see
    /// `Hardware::config_epoch`).
    #[inline(always)]
    pub(crate) fn config_epoch(&self) -> u64 {
        self.epoch
    }

    /// The loaded image, in place (for `configure`'s comparison, which a copy would slow).
    #[inline]
    pub(crate) fn config_bytes(&self) -> &[u8; 64] {
        &self.config
    }

    /// The palette table this emulator checks configurations against.
    pub fn palette_table(&self) -> &PaletteTable {
        &self.table
    }

    /// Whether the palette table is the architectural one (computed once, for `configure`).
    pub(crate) fn palette_is_architectural(&self) -> bool {
        self.architectural
    }

    /// The TMUL limits this emulator checks dot products against.
    pub fn tmul_limits(&self) -> TmulLimits {
        self.limits
    }

    /// The kernel every emulator of this process runs TDPBF16PS and TDPFP16PS with: the
    /// widest this CPU has, at most what `AMX_EMULATOR_KERNELS` allows. Vector code beside the
    /// emulator (a GEMM's fused epilogue) may follow it, so that the cap makes an AVX-512 CPU
    /// run what an AVX2-only CPU runs.
    ///
    /// ```
    /// use amx_runtime::{Emulator, KernelPath};
    ///
    /// let path = Emulator::float_kernels();
    /// assert!(matches!(path, KernelPath::Avx512 | KernelPath::Avx2 | KernelPath::Portable));
    /// ```
    pub fn float_kernels() -> KernelPath {
        numerics::float_path()
    }

    /// Whether a configuration is loaded (TILES_CONFIGURED).
    pub fn is_configured(&self) -> bool {
        image::palette_id(&self.config) != 0
    }

    /// Tile `t`'s 1024 bytes, borrowed (no copy); `None` for `t >= 8`. (`tile` names a tile's
    /// shape elsewhere, as in [`TileConfig::tile`](crate::TileConfig::tile).)
    pub fn tile_bytes(&self, t: u8) -> Option<&[u8; TILE_BYTES]> {
        self.tiles.get(t as usize)
    }

    /// Tile `t`'s 1024 bytes, writable: the trap engine reads a load's memory rows straight
    /// into them (a copy less per trapped TILELOADD) and then applies TILELOADD's zeroing.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    pub(crate) fn tile_bytes_mut(&mut self, t: u8) -> Option<&mut [u8; TILE_BYTES]> {
        self.written(t);
        self.tiles.get_mut(t as usize)
    }

    /// Sets start_row as XRSTOR can
    /// ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
    /// X2), to reproduce the silicon's restart state
    /// in tests. Has no effect when unconfigured.
    pub fn set_start_row(&mut self, row: u8) {
        if self.is_configured() {
            self.config[image::START_ROW] = row;
        }
    }

    /// Overwrites tile `t`'s 1024 bytes as XRSTOR can, e.g. to prefill the bytes an instruction
    /// must keep or zero. Does nothing for `t >= 8`.
    pub fn set_tile_bytes(&mut self, t: u8, data: &[u8; TILE_BYTES]) {
        self.written(t);
        if let Some(tile) = self.tiles.get_mut(t as usize) {
            *tile = *data;
        }
    }

    #[inline(always)]
    fn clear_start_row(&mut self) {
        self.config[image::START_ROW] = 0;
    }

    /// Drops the forms derived from tile `t` (widened, row corrections): every write to a
    /// tile goes through here (or through `all_written`) before it changes a byte.
    #[inline(always)]
    fn written(&mut self, t: u8) {
        if let Some(w) = self.widened_as.get_mut(t as usize) {
            *w = None;
        }
        if let Some(r) = self.row_corrections.get_mut(t as usize) {
            r.forget();
        }
    }

    /// [`Emulator::written`] for every tile.
    fn all_written(&mut self) {
        self.widened_as = [None; TILES];
        // Forgotten in place: assigning eight `NONE`s would copy 576 bytes per LDTILECFG.
        for r in &mut self.row_corrections {
            r.forget();
        }
    }

    /// Brings tile `t`'s row corrections over `k` dwords (as A of a TDPBSSD) up to date:
    /// computed now unless the tile is unchanged since they were. `false` for `t >= 8` or
    /// where the kernel does not read them.
    #[inline(always)]
    fn update_row_corrections(&mut self, t: u8, k: usize) -> bool {
        match (
            self.tiles.get(t as usize),
            self.row_corrections.get_mut(t as usize),
        ) {
            (Some(tile), Some(kept)) => kept.update(tile, k),
            _ => false,
        }
    }

    /// Tile `t` in `form`, computed now unless the tile is unchanged since the last time it
    /// was; `None` for `t >= 8`.
    #[inline(always)]
    fn widened(&mut self, t: u8, form: Form) -> Option<&Widened> {
        let (tile, widened, widened_as) = (
            self.tiles.get(t as usize)?,
            self.widened.get_mut(t as usize)?,
            self.widened_as.get_mut(t as usize)?,
        );
        if *widened_as != Some(form) {
            match form {
                Form::Half(half) => numerics::widen(tile, half, widened),
                Form::Pairs { b } => numerics::pair(tile, b, widened),
                Form::Bytes { signed } => numerics::extend(tile, signed, widened),
            }
            *widened_as = Some(form);
        }
        Some(widened)
    }

    /// Tile `t`'s rows when a load of `shape` replaces every one of them as whole 64-byte
    /// rows (colsb 64, start_row 0: the common case, a copy per row with no partial-row
    /// handling); `None` otherwise, for [`Emulator::load_rows`].
    #[inline]
    fn whole_rows(&mut self, t: u8, shape: TileShape) -> Option<&mut [[u8; ROW_BYTES]]> {
        if shape.colsb as usize != ROW_BYTES || image::start_row(&self.config) != 0 {
            return None;
        }
        self.written(t);
        let (rows, _) = self.tiles.get_mut(t as usize)?.as_chunks_mut::<ROW_BYTES>();
        Some(rows)
    }

    /// TILELOADD's data semantics (T3/T4): rows below start_row keep all 64 bytes, rows
    /// `start_row..rows` are read and zero-extended past colsb, rows past `rows` are zeroed.
    /// `read_row(r, dst)` fills `dst` (colsb bytes) with memory row `r`.
    fn load_rows(&mut self, t: u8, shape: TileShape, mut read_row: impl FnMut(usize, &mut [u8])) {
        let start = image::start_row(&self.config) as usize;
        let colsb = shape.colsb as usize;
        self.written(t);
        let tile = &mut self.tiles[t as usize];
        for (r, row) in tile.chunks_exact_mut(ROW_BYTES).enumerate().skip(start) {
            if r < shape.rows as usize {
                read_row(r, &mut row[..colsb]);
                if colsb < ROW_BYTES {
                    row[colsb..].fill(0);
                }
            } else {
                row.fill(0);
            }
        }
        self.clear_start_row();
    }

    /// TILESTORED's data semantics (W2/W3): exactly colsb bytes of rows `start_row..rows`.
    fn store_rows(&mut self, t: u8, shape: TileShape, mut write_row: impl FnMut(usize, &[u8])) {
        let start = image::start_row(&self.config) as usize;
        let colsb = shape.colsb as usize;
        let tile = &self.tiles[t as usize];
        for (r, row) in tile.chunks_exact(ROW_BYTES).enumerate() {
            if (start..shape.rows as usize).contains(&r) {
                write_row(r, &row[..colsb]);
            }
        }
        self.clear_start_row();
    }

    fn load_slice(
        &mut self,
        t: u8,
        src: &[u8],
        stride: usize,
        mnemonic: Mnemonic,
    ) -> Result<(), Fault> {
        let shape = check::tile_memory(&self.config, t, mnemonic)?;
        check::bounds(t, shape, stride, src.len())?;
        if let Some(rows) = self.whole_rows(t, shape) {
            // check::bounds proved that the rows below shape.rows lie inside `src` (so
            // r * stride does not overflow for them); rows past it are zeroed.
            let loaded = shape.rows as usize;
            for (r, row) in rows.iter_mut().enumerate() {
                // Copied in place (a `[u8; 64]` value in between would go through the stack).
                match (r < loaded)
                    .then(|| src.get(r * stride..)?.first_chunk::<ROW_BYTES>())
                    .flatten()
                {
                    Some(bytes) => row.copy_from_slice(bytes),
                    None => row.fill(0),
                }
            }
            self.clear_start_row();
            return Ok(());
        }
        self.load_rows(t, shape, |r, dst| {
            let at = r * stride;
            // Whole rows (the common case) as a fixed-size copy: a few vector moves instead of
            // a call to memcpy per row.
            match (
                <&mut [u8; ROW_BYTES]>::try_from(&mut *dst),
                src.get(at..at + ROW_BYTES),
            ) {
                (Ok(whole), Some(row)) if row.len() == ROW_BYTES => {
                    whole.copy_from_slice(row);
                }
                _ => dst.copy_from_slice(&src[at..at + dst.len()]),
            }
        });
        Ok(())
    }

    /// # Safety
    /// As [`TileUnit::tileloadd_ptr`].
    unsafe fn load_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
        mnemonic: Mnemonic,
    ) -> Result<(), Fault> {
        let shape = check::tile_memory(&self.config, t, mnemonic)?;
        if let Some(rows) = self.whole_rows(t, shape) {
            // SAFETY: the caller guarantees that colsb (here 64) bytes at src + r * stride are
            // readable for every loaded row r; `rows` is this emulator's own buffer, so the two
            // do not overlap.
            unsafe { copy_rows(rows, shape.rows as usize, src, stride) };
            self.clear_start_row();
            return Ok(());
        }
        self.load_rows(t, shape, |r, dst| {
            // SAFETY: the caller guarantees that colsb bytes at src + r * stride are readable for
            // every row r that is loaded; `dst` is a distinct Rust buffer of exactly colsb bytes.
            unsafe {
                let row = src.wrapping_offset(r as isize * stride);
                // Whole rows as a fixed-size copy, as in `load_slice` (a memcpy call per row
                // made this path ~10% slower than the slice one on a 2x2 kernel).
                match <&mut [u8; ROW_BYTES]>::try_from(&mut *dst) {
                    Ok(whole) => *whole = row.cast::<[u8; ROW_BYTES]>().read_unaligned(),
                    Err(_) => std::ptr::copy_nonoverlapping(row, dst.as_mut_ptr(), dst.len()),
                }
            }
        });
        Ok(())
    }

    /// A dot product: the D1/D2 checks, then [`Emulator::dot_shaped`].
    #[inline(always)]
    fn dot(&mut self, tiles: (u8, u8, u8), kind: DotKind) -> Result<(), Fault> {
        let shape = match self.checked_dot {
            Some((epoch, last, shape)) if epoch == self.epoch && last == tiles => shape,
            _ => {
                let s = check::dot(&self.config, tiles, self.limits, Mnemonic::DotProduct(kind))?;
                let shape = (s.m, s.n, s.k);
                self.checked_dot = Some((self.epoch, tiles, shape));
                shape
            }
        };
        self.dot_shaped(tiles, kind, shape)
    }

    /// A dot product whose operands are known to fit the loaded configuration: the typed
    /// tiles' path, whose handles' types proved them (three distinct used tiles of the loaded
    /// layout, `(m, n, k)` from their shapes, within the architectural TMUL limits), so the
    /// D1/D2 checks are not run again.
    ///
    /// Memory-safe whatever the arguments: the tiles are indexed with bounds checks and the
    /// kernels clamp the shape to the tile, so a wrong call computes wrong data, never touches
    /// memory outside the tiles.
    #[inline(always)]
    pub(crate) fn dot_proven(
        &mut self,
        tiles: (u8, u8, u8),
        kind: DotKind,
        shape: (usize, usize, usize),
    ) -> Result<(), Fault> {
        self.dot_shaped(tiles, kind, shape)
    }

    /// A dot product whose operands fit the loaded configuration: the arithmetic, then D4 and
    /// the start_row clear.
    ///
    /// Inlined, as is every layer from the instruction methods down to the kernel's call
    /// (here and in `numerics`): with those layers out of line, back-to-back products lost
    /// their overlap, and a TDPBUSD took 86-91 ns instead of 74 ns on a Zen 4 core, whose 256
    /// VPDPBUSDs take 69 ns (BENCHMARKS.md).
    #[inline(always)]
    fn dot_shaped(
        &mut self,
        (c, a, b): (u8, u8, u8),
        kind: DotKind,
        (m, n, k): (usize, usize, usize),
    ) -> Result<(), Fault> {
        let half = match kind {
            DotKind::Tdpbf16ps => Some(Half::Bf16),
            DotKind::Tdpfp16ps => Some(Half::Fp16),
            _ => None,
        };
        if kind == DotKind::Tdpbf16ps && numerics::reads_paired(k) {
            let forms = (Form::Pairs { b: false }, Form::Pairs { b: true });
            return self.dot_widened((c, a, b), kind, (m, n, k), forms);
        }
        if let Some(half) = half.filter(|_| numerics::reads_widened()) {
            return self.dot_widened(
                (c, a, b),
                kind,
                (m, n, k),
                (Form::Half(half), Form::Half(half)),
            );
        }
        let signs = numerics::block::int8_signs(kind);
        if let Some((sa, sb)) = signs.filter(|_| numerics::reads_extended()) {
            let forms = (Form::Bytes { signed: sa }, Form::Bytes { signed: sb });
            return self.dot_widened((c, a, b), kind, (m, n, k), forms);
        }
        // Before C's derived forms are dropped: C may be A only in a call that fails below.
        let corrected = kind == DotKind::Tdpbssd && self.update_row_corrections(a, k);
        self.written(c);
        // Distinct and below 8 (check::dot proved it, or the types did); were they not, the
        // operands would alias, which is the #UD check::dot reports for that.
        let [ct, at, bt] = self
            .tiles
            .get_disjoint_mut([c as usize, a as usize, b as usize])
            .map_err(|_| aliased(kind, c))?;
        match self.row_corrections.get(a as usize).filter(|_| corrected) {
            Some(corr) => numerics::dot_int8_ss_corrected(ct, at, bt, (m, n, k), corr),
            None => Self::compute(ct, at, bt, kind, (m, n, k)),
        }
        Self::zero_past_shape(ct, m, n);
        self.clear_start_row();
        Ok(())
    }

    /// A product on the kept forms of A and B (see `widened`): both widened as the same
    /// `Form::Half` for a floating-point product, each extended with its signedness
    /// (`Form::Bytes`) for an integer one.
    #[inline(always)]
    fn dot_widened(
        &mut self,
        (c, a, b): (u8, u8, u8),
        kind: DotKind,
        (m, n, k): (usize, usize, usize),
        (a_form, b_form): (Form, Form),
    ) -> Result<(), Fault> {
        let aliased = || aliased(kind, c);
        if c == a || c == b || a == b {
            return Err(aliased());
        }
        self.written(c);
        // Computed first (they need `&mut self`), then borrowed beside the tiles.
        self.widened(a, a_form).ok_or_else(aliased)?;
        self.widened(b, b_form).ok_or_else(aliased)?;
        let [ct, at, bt] = self
            .tiles
            .get_disjoint_mut([c as usize, a as usize, b as usize])
            .map_err(|_| aliased())?;
        let (Some(aw), Some(bw)) = (self.widened.get(a as usize), self.widened.get(b as usize))
        else {
            return Err(aliased());
        };
        match (a_form, b_form) {
            (Form::Half(half), Form::Half(_)) => {
                numerics::dot_half_widened(ct, (at, aw), (bt, bw), m, n, k, half)
            }
            (Form::Bytes { signed: sa }, Form::Bytes { signed: sb }) => {
                numerics::dot_int8_extended(ct, (at, aw), (bt, bw), (m, n, k), (sa, sb))
            }
            (Form::Pairs { b: false }, Form::Pairs { b: true }) => {
                numerics::dot_bf16_paired(ct, (at, aw), (bt, bw), (m, n, k))
            }
            // Mixed forms are never asked for (`dot_shaped` pairs them); the tiles themselves
            // give the right bits whatever the kept forms hold.
            _ => Self::compute(ct, at, bt, kind, (m, n, k)),
        }
        Self::zero_past_shape(ct, m, n);
        self.clear_start_row();
        Ok(())
    }

    /// An AMX-FP8 or AMX-COMPLEX dot product: the operand checks every dot product shares,
    /// then the arithmetic (sections 16 and 17), D4 and the start_row clear.
    fn product(&mut self, (c, a, b): (u8, u8, u8), product: Product) -> Result<(), Fault> {
        let s = check::dot(&self.config, (c, a, b), self.limits, product.mnemonic())?;
        self.written(c);
        let [ct, at, bt] = self
            .tiles
            .get_disjoint_mut([c as usize, a as usize, b as usize])
            .map_err(|_| check::ud(product.mnemonic(), UdReason::NoSuchTile { tile: c }))?;
        numerics::block::product_tile(product.kind(), ct, at, bt, (s.m, s.n, s.k));
        Self::zero_past_shape(ct, s.m, s.n);
        self.clear_start_row();
        Ok(())
    }

    /// TILEMOVROW or a TCVTROW* conversion (section 18): the row, and the start_row clear.
    fn row_move(&mut self, t: u8, row: u32, op: RowOp, m: Mnemonic) -> Result<[u8; 64], Fault> {
        let shape = check::tile_row(&self.config, t, m)?;
        let tile = self
            .tiles
            .get(t as usize)
            .ok_or(check::ud(m, UdReason::NoSuchTile { tile: t }))?;
        let out = numerics::row::row(tile, shape.rows, shape.colsb, row, op);
        self.clear_start_row();
        Ok(out)
    }

    /// The arithmetic of `kind` on C, A and B.
    #[inline(always)]
    fn compute(
        ct: &mut [u8; TILE_BYTES],
        at: &[u8; TILE_BYTES],
        bt: &[u8; TILE_BYTES],
        kind: DotKind,
        (m, n, k): (usize, usize, usize),
    ) {
        match kind {
            DotKind::Tdpbssd => numerics::dot_int8(ct, at, bt, m, n, k, true, true),
            DotKind::Tdpbsud => numerics::dot_int8(ct, at, bt, m, n, k, true, false),
            DotKind::Tdpbusd => numerics::dot_int8(ct, at, bt, m, n, k, false, true),
            DotKind::Tdpbuud => numerics::dot_int8(ct, at, bt, m, n, k, false, false),
            DotKind::Tdpbf16ps => numerics::dot_bf16(ct, at, bt, m, n, k),
            DotKind::Tdpfp16ps => numerics::dot_fp16(ct, at, bt, m, n, k),
        }
    }

    /// D4: C bytes past colsb and rows past M are zeroed (nothing to do for a full tile, the
    /// common case: no loop of empty fills).
    #[inline(always)]
    fn zero_past_shape(ct: &mut [u8; TILE_BYTES], m: usize, n: usize) {
        let keep = (n * 4).min(ROW_BYTES);
        if m < TILE_BYTES / ROW_BYTES || keep < ROW_BYTES {
            for (r, row) in ct.chunks_exact_mut(ROW_BYTES).enumerate() {
                let keep = if r < m { keep } else { 0 };
                if let Some(tail) = row.get_mut(keep..) {
                    tail.fill(0);
                }
            }
        }
    }
}

impl TileUnit for Emulator {
    fn ldtilecfg(&mut self, image: &[u8; 64]) -> Result<(), Fault> {
        if image::palette_id(image) == 0 {
            // L4: palette 0 ignores every other byte and gives the INIT state.
            self.tilerelease();
            return Ok(());
        }
        check::ldtilecfg(image, &self.table)?;
        // The image passed the reserved-byte checks, so it is exactly what STTILECFG writes.
        self.config = *image;
        self.epoch = self.epoch.wrapping_add(1);
        self.all_written();
        self.tiles = [[0; TILE_BYTES]; TILES];
        Ok(())
    }

    fn sttilecfg(&mut self) -> [u8; 64] {
        self.config
    }

    fn tilerelease(&mut self) {
        self.config = [0; 64];
        self.epoch = self.epoch.wrapping_add(1);
        self.all_written();
        self.tiles = [[0; TILE_BYTES]; TILES];
    }

    #[inline]
    fn loaded_config(&self) -> [u8; 64] {
        self.config
    }

    fn tilezero(&mut self, t: u8) -> Result<(), Fault> {
        check::tilezero(&self.config, t)?;
        self.written(t);
        self.tiles[t as usize] = [0; TILE_BYTES];
        self.clear_start_row();
        Ok(())
    }

    fn tileloadd(&mut self, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
        self.load_slice(t, src, stride, Mnemonic::Tileloadd)
    }

    fn tileloaddt1(&mut self, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
        self.load_slice(t, src, stride, Mnemonic::Tileloaddt1)
    }

    fn tilestored(&mut self, t: u8, dst: &mut [u8], stride: usize) -> Result<(), Fault> {
        let shape = check::tile_memory(&self.config, t, Mnemonic::Tilestored)?;
        check::bounds(t, shape, stride, dst.len())?;
        self.store_rows(t, shape, |r, row| {
            let at = r * stride;
            dst[at..at + row.len()].copy_from_slice(row);
        });
        Ok(())
    }

    unsafe fn tileloadd_ptr(&mut self, t: u8, src: *const u8, stride: isize) -> Result<(), Fault> {
        // SAFETY: forwarded from this function's own contract.
        unsafe { self.load_ptr(t, src, stride, Mnemonic::Tileloadd) }
    }

    unsafe fn tileloaddt1_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
    ) -> Result<(), Fault> {
        // SAFETY: forwarded from this function's own contract.
        unsafe { self.load_ptr(t, src, stride, Mnemonic::Tileloaddt1) }
    }

    unsafe fn tilestored_ptr(&mut self, t: u8, dst: *mut u8, stride: isize) -> Result<(), Fault> {
        let shape = check::tile_memory(&self.config, t, Mnemonic::Tilestored)?;
        self.store_rows(t, shape, |r, row| {
            // SAFETY: the caller guarantees that colsb bytes at dst + r * stride are writable and
            // unaliased for every stored row; `row` is this emulator's own buffer.
            unsafe {
                let out = dst.wrapping_offset(r as isize * stride);
                match <&[u8; ROW_BYTES]>::try_from(row) {
                    Ok(whole) => out.cast::<[u8; ROW_BYTES]>().write_unaligned(*whole),
                    Err(_) => std::ptr::copy_nonoverlapping(row.as_ptr(), out, row.len()),
                }
            }
        });
        Ok(())
    }

    #[inline(always)]
    fn tdpbssd(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot((c, a, b), DotKind::Tdpbssd)
    }

    #[inline(always)]
    fn tdpbsud(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot((c, a, b), DotKind::Tdpbsud)
    }

    #[inline(always)]
    fn tdpbusd(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot((c, a, b), DotKind::Tdpbusd)
    }

    #[inline(always)]
    fn tdpbuud(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot((c, a, b), DotKind::Tdpbuud)
    }

    #[inline(always)]
    fn tdpbf16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot((c, a, b), DotKind::Tdpbf16ps)
    }

    #[inline(always)]
    fn tdpfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot((c, a, b), DotKind::Tdpfp16ps)
    }

    fn tile_data(&mut self, t: u8) -> Result<[u8; TILE_BYTES], Fault> {
        self.tiles
            .get(t as usize)
            .copied()
            .ok_or(check::ud(Mnemonic::Xsave, UdReason::NoSuchTile { tile: t }))
    }

    fn tileloaddrs(&mut self, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
        self.load_slice(t, src, stride, Mnemonic::Tileloaddrs)
    }

    fn tileloaddrst1(&mut self, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
        self.load_slice(t, src, stride, Mnemonic::Tileloaddrst1)
    }

    unsafe fn tileloaddrs_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
    ) -> Result<(), Fault> {
        // SAFETY: forwarded from this function's own contract.
        unsafe { self.load_ptr(t, src, stride, Mnemonic::Tileloaddrs) }
    }

    unsafe fn tileloaddrst1_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
    ) -> Result<(), Fault> {
        // SAFETY: forwarded from this function's own contract.
        unsafe { self.load_ptr(t, src, stride, Mnemonic::Tileloaddrst1) }
    }

    fn tdpbf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product((c, a, b), Product::Tdpbf8ps)
    }

    fn tdpbhf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product((c, a, b), Product::Tdpbhf8ps)
    }

    fn tdphbf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product((c, a, b), Product::Tdphbf8ps)
    }

    fn tdphf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product((c, a, b), Product::Tdphf8ps)
    }

    fn tcmmimfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product((c, a, b), Product::Tcmmimfp16ps)
    }

    fn tcmmrlfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product((c, a, b), Product::Tcmmrlfp16ps)
    }

    fn tilemovrow(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Move, Mnemonic::Tilemovrow)
    }

    fn tcvtrowd2ps(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::D2ps, Mnemonic::Tcvtrowd2ps)
    }

    fn tcvtrowps2bf16h(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Ps2bf16h, Mnemonic::Tcvtrowps2bf16h)
    }

    fn tcvtrowps2bf16l(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Ps2bf16l, Mnemonic::Tcvtrowps2bf16l)
    }

    fn tcvtrowps2phh(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Ps2phh, Mnemonic::Tcvtrowps2phh)
    }

    fn tcvtrowps2phl(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Ps2phl, Mnemonic::Tcvtrowps2phl)
    }
}

/// The #UD of a dot product whose operands alias (or lie past tile 7), for the paths whose
/// operands the checks or the types already proved distinct: reached only if they were not.
/// Out of line, so the inlined instruction paths carry a call, not the error's construction.
#[cold]
#[inline(never)]
fn aliased(kind: DotKind, c: u8) -> Fault {
    let aliased = DotMismatch::Aliased {
        roles: ("C", "A"),
        tile: c,
    };
    check::ud(Mnemonic::DotProduct(kind), UdReason::DotOperands(aliased))
}

/// Fills `rows` with `loaded` rows of 64 bytes read from `src` (row `r` at `src + r * stride`)
/// and zeroes the rest: TILELOADD of whole rows. Compiled for the widest vectors the CPU has
/// (`numerics::copy_path`): with AVX-512 one 64-byte move per row, with AVX2 two 32-byte
/// moves, where the baseline build copies in 16-byte pieces (four times the loads and stores,
/// in the emulator's hottest path after the dot products).
///
/// # Safety
/// 64 bytes at `src + r * stride` are readable for every `r < loaded` and do not overlap `rows`.
#[inline]
unsafe fn copy_rows(rows: &mut [[u8; ROW_BYTES]], loaded: usize, src: *const u8, stride: isize) {
    #[cfg(target_arch = "x86_64")]
    match numerics::copy_path() {
        numerics::KernelPath::Avx512 => {
            // SAFETY: copy_path chose AVX-512, so the CPU supports AVX-512F; the rest is this
            // function's contract.
            return unsafe { copy_rows_avx512(rows, loaded, src, stride) };
        }
        numerics::KernelPath::Avx2 => {
            // SAFETY: copy_path chose AVX2, so the CPU supports it; the rest is this
            // function's contract.
            return unsafe { copy_rows_avx2(rows, loaded, src, stride) };
        }
        _ => {}
    }
    // SAFETY: this function's contract.
    unsafe { copy_rows_body(rows, loaded, src, stride) }
}

/// [`copy_rows`] compiled for AVX-512.
///
/// # Safety
/// As [`copy_rows`], and the CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn copy_rows_avx512(
    rows: &mut [[u8; ROW_BYTES]],
    loaded: usize,
    src: *const u8,
    stride: isize,
) {
    // SAFETY: forwarded.
    unsafe { copy_rows_body(rows, loaded, src, stride) }
}

/// [`copy_rows`] compiled for AVX2.
///
/// # Safety
/// As [`copy_rows`], and the CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_rows_avx2(
    rows: &mut [[u8; ROW_BYTES]],
    loaded: usize,
    src: *const u8,
    stride: isize,
) {
    // SAFETY: forwarded.
    unsafe { copy_rows_body(rows, loaded, src, stride) }
}

/// The loop of [`copy_rows`].
///
/// # Safety
/// As [`copy_rows`].
#[inline(always)]
unsafe fn copy_rows_body(
    rows: &mut [[u8; ROW_BYTES]],
    loaded: usize,
    src: *const u8,
    stride: isize,
) {
    for (r, row) in rows.iter_mut().enumerate() {
        *row = if r < loaded {
            // SAFETY: row r < loaded is readable (the caller's contract); read unaligned.
            unsafe {
                src.wrapping_offset(r as isize * stride)
                    .cast::<[u8; ROW_BYTES]>()
                    .read_unaligned()
            }
        } else {
            [0; ROW_BYTES]
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A palette-1 image with tiles 0-3 of 16 rows x `colsb` bytes.
    fn config(colsb: u16) -> [u8; 64] {
        let shapes = [Some(TileShape::new(16, colsb)); 4];
        let mut all = [None; 8];
        all[..4].copy_from_slice(&shapes);
        image::encode(1, 0, &all)
    }

    /// Moderate bf16 pairs (and fp16 ones: the same bytes read as fp16 are moderate too), a
    /// different pattern per `seed`.
    fn data(seed: usize) -> [u8; TILE_BYTES] {
        core::array::from_fn(|i| match i % 2 {
            1 => 0x3C + ((i / 2 + seed) % 3) as u8,
            _ => ((i * 37 + seed * 11) % 251) as u8,
        })
    }

    /// After `write` changes tile 1 (A), a product reads the new bytes, not a form derived from
    /// the old ones (floating-point products: the widened A; TDPBSSD: A's row corrections):
    /// every way of writing a tile, each against the kernel run on the tiles' bytes directly.
    #[test]
    fn every_tile_write_drops_the_derived_forms() {
        type Write = fn(&mut Emulator);
        let writes: [(&str, Write); 10] = [
            ("TILELOADD", |e| e.tileloadd(1, &data(7), 64).unwrap()),
            ("TILELOADD of part of each row", |e| {
                e.ldtilecfg(&config(32)).unwrap();
                e.tileloadd(1, &data(7), 64).unwrap();
                e.ldtilecfg(&config(64)).unwrap();
            }),
            ("TILELOADD under start_row", |e| {
                e.set_start_row(3);
                e.tileloadd(1, &data(7), 64).unwrap();
            }),
            ("TILEZERO", |e| e.tilezero(1).unwrap()),
            ("set_tile_bytes", |e| e.set_tile_bytes(1, &data(7))),
            ("a product into it", |e| e.tdpbf16ps(1, 2, 3).unwrap()),
            ("an integer product into it", |e| {
                e.tdpbssd(1, 2, 3).unwrap()
            }),
            ("the trap engine's direct write", |e| {
                #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
                if let Some(tile) = e.tile_bytes_mut(1) {
                    *tile = data(7);
                }
                #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
                e.set_tile_bytes(1, &data(7));
            }),
            // These two zero tile 1 (B is set again so that the product is not all zeros).
            ("LDTILECFG", |e| {
                e.ldtilecfg(&config(64)).unwrap();
                e.set_tile_bytes(2, &data(2));
            }),
            // (The LDTILECFG that must follow drops every widened form too.)
            ("TILERELEASE", |e| {
                e.tilerelease();
                e.ldtilecfg(&config(64)).unwrap();
                e.set_tile_bytes(2, &data(2));
            }),
        ];
        for (what, write) in writes {
            for kind in [DotKind::Tdpbf16ps, DotKind::Tdpfp16ps, DotKind::Tdpbssd] {
                let mut e = Emulator::new();
                e.ldtilecfg(&config(64)).unwrap();
                for t in 1..4 {
                    e.set_tile_bytes(t, &data(t as usize));
                }
                let product = |e: &mut Emulator| match kind {
                    DotKind::Tdpbf16ps => e.tdpbf16ps(0, 1, 2).unwrap(),
                    DotKind::Tdpbssd => e.tdpbssd(0, 1, 2).unwrap(),
                    _ => e.tdpfp16ps(0, 1, 2).unwrap(),
                };
                product(&mut e);
                write(&mut e);
                let (mut want, a, b) = (e.tiles[0], e.tiles[1], e.tiles[2]);
                match kind {
                    DotKind::Tdpbf16ps => numerics::dot_bf16(&mut want, &a, &b, 16, 16, 16),
                    DotKind::Tdpbssd => {
                        numerics::dot_int8(&mut want, &a, &b, 16, 16, 16, true, true)
                    }
                    _ => numerics::dot_fp16(&mut want, &a, &b, 16, 16, 16),
                }
                product(&mut e);
                assert!(e.tiles[0] == want, "{what}, {kind:?}");
            }
        }
    }

    /// A tile extended for one signedness and then read with the other is extended again, as A
    /// and as B (where the integer kernel reads extended operands; the plain kernel elsewhere).
    #[test]
    fn a_tile_read_with_the_other_signedness_is_extended_again() {
        let mut e = Emulator::new();
        e.ldtilecfg(&config(64)).unwrap();
        for t in 0..4 {
            e.set_tile_bytes(t, &data(t as usize));
        }
        type Product = fn(&mut Emulator, u8, u8, u8) -> Result<(), Fault>;
        let kinds: [(Product, (bool, bool)); 4] = [
            (Emulator::tdpbssd, (true, true)),
            (Emulator::tdpbusd, (false, true)),
            (Emulator::tdpbsud, (true, false)),
            (Emulator::tdpbuud, (false, false)),
        ];
        // Tiles 1 and 2 read in every order of signedness, into C tile 0.
        for (product, (sa, sb)) in kinds {
            let (mut want, a, b) = (e.tiles[0], e.tiles[1], e.tiles[2]);
            numerics::dot_int8(&mut want, &a, &b, 16, 16, 16, sa, sb);
            product(&mut e, 0, 1, 2).unwrap();
            assert!(e.tiles[0] == want, "signs {sa} {sb}");
        }
        // Tile 1 as B after being A (signed A, then unsigned B).
        let (mut want, a, b) = (e.tiles[3], e.tiles[2], e.tiles[1]);
        numerics::dot_int8(&mut want, &a, &b, 16, 16, 16, true, false);
        e.tdpbsud(3, 2, 1).unwrap();
        assert!(e.tiles[3] == want, "tile 1 as an unsigned B");
    }

    /// A tile widened as bf16 and then read as fp16 is widened again.
    #[test]
    fn a_tile_read_in_the_other_format_is_widened_again() {
        let mut e = Emulator::new();
        e.ldtilecfg(&config(64)).unwrap();
        for t in 1..4 {
            e.set_tile_bytes(t, &data(t as usize));
        }
        e.tdpbf16ps(0, 1, 2).unwrap();
        let (mut want, a, b) = (e.tiles[3], e.tiles[1], e.tiles[2]);
        numerics::dot_fp16(&mut want, &a, &b, 16, 16, 16);
        e.tdpfp16ps(3, 1, 2).unwrap();
        assert!(e.tiles[3] == want);
    }

    /// A bf16 tile kept re-paired in one role and read in the other (where VDPBF16PS runs; with
    /// an odd K the tiles are widened instead) is formed again: every product gives the bits
    /// of the per-instruction kernel on the tiles themselves.
    #[test]
    fn a_bf16_tile_read_in_another_role_or_k_is_formed_again() {
        // Square tiles, so each can be A or B: K = 16, then K = 15 (odd: widened, not paired).
        for (rows, colsb) in [(16, 64), (15, 60)] {
            let mut e = Emulator::new();
            let mut all = [None; 8];
            all[..4].copy_from_slice(&[Some(TileShape::new(rows, colsb)); 4]);
            e.ldtilecfg(&image::encode(1, 0, &all)).unwrap();
            // The C tiles (0 and 3) start at zero, as the product zeroes them past its shape.
            for t in 1..3 {
                e.set_tile_bytes(t, &data(t as usize));
            }
            let (m, k) = (usize::from(rows), usize::from(colsb / 4));
            // (C, A, B): tile 1 as A, then as B, then as A again; tile 2 the other way round.
            for (c, a, b) in [(0, 1, 2), (3, 2, 1), (0, 1, 2), (3, 1, 2)] {
                let (mut want, at, bt) = (e.tiles[c], e.tiles[a], e.tiles[b]);
                numerics::dot_bf16(&mut want, &at, &bt, m, k, k);
                e.tdpbf16ps(c as u8, a as u8, b as u8).unwrap();
                assert!(e.tiles[c] == want, "C {c}, A {a}, B {b}, K {k}");
            }
        }
    }
}
