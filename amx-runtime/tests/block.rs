//! `amx_runtime::block::dot_2x2` (and `dot_2x2_prepared`, `dot_2x2_prepared_ab`) against the
//! same instructions issued one by one on the emulator, for every dot-product instruction, and
//! their refusals.

use amx_runtime::block::{
    dot_2x2, dot_2x2_prepared, dot_2x2_prepared_ab, Block, BlockError, PreparedA, PreparedB,
};
use amx_runtime::rules::DotKind;
use amx_runtime::{tilecfg, Emulator, TileConfig, TileUnit};
use amx_test_support::SplitMix64 as Rng;

/// C in t0..t3 (C00, C01, C10, C11), A0/A1 in t4/t5, B0/B1 in t6/t7, all full.
static BLOCK: TileConfig = tilecfg! {
    palette 1;
    t0: 16x64; t1: 16x64; t2: 16x64; t3: 16x64;
    t4: 16x64; t5: 16x64; t6: 16x64; t7: 16x64;
};

/// Bytes rich in extremes, and (one dword in four) 16-bit halves that are NaNs, infinities,
/// denormals or zeros in bf16 and fp16.
fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 4);
    while out.len() < len {
        let word = match rng.below(8) {
            0 => [0x7F80_7FC1, 0x0001_8000, 0xFC00_7C00, 0x807F_0080][rng.below(4) as usize],
            1 => 0x8080_7F7F,
            _ => rng.next_u64() as u32 & 0xBFFF_BFFF, // moderate floats: exponents below 2^1
        };
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn issue(emu: &mut Emulator, kind: DotKind, c: u8, a: u8, b: u8) {
    match kind {
        DotKind::Tdpbssd => emu.tdpbssd(c, a, b),
        DotKind::Tdpbsud => emu.tdpbsud(c, a, b),
        DotKind::Tdpbusd => emu.tdpbusd(c, a, b),
        DotKind::Tdpbuud => emu.tdpbuud(c, a, b),
        DotKind::Tdpbf16ps => emu.tdpbf16ps(c, a, b),
        DotKind::Tdpfp16ps => emu.tdpfp16ps(c, a, b),
    }
    .unwrap();
}

/// The block as `4 * steps` instructions on the emulator.
fn by_instructions(
    kind: DotKind,
    c: &Block,
    (a, a_step): (&[u8], usize),
    (b, b_step): (&[u8], usize),
    steps: usize,
) -> Block {
    let mut emu = Emulator::new();
    emu.ldtilecfg(BLOCK.as_bytes()).unwrap();
    for (t, tile) in c.tiles.iter().enumerate() {
        emu.tileloadd(t as u8, tile, 64).unwrap();
    }
    for s in 0..steps {
        for h in 0..2 {
            emu.tileloadd(4 + h as u8, &a[s * a_step + h * 1024..], 64)
                .unwrap();
            emu.tileloadd(6 + h as u8, &b[s * b_step + h * 1024..], 64)
                .unwrap();
        }
        issue(&mut emu, kind, 0, 4, 6);
        issue(&mut emu, kind, 1, 4, 7);
        issue(&mut emu, kind, 2, 5, 6);
        issue(&mut emu, kind, 3, 5, 7);
    }
    let mut out = Block::zeroed();
    for (t, tile) in out.tiles.iter_mut().enumerate() {
        *tile = emu.tile_data(t as u8).unwrap();
    }
    out
}

#[test]
fn blocks_equal_their_instruction_sequences() {
    let mut rng = Rng::new(0x0B10_C4ED);
    for iter in 0..240 {
        let kind = DotKind::ALL[iter % DotKind::ALL.len()];
        // Up to 9 steps (past the fused int8 kernel's chunk of 4), spaced, packed or
        // overlapping.
        let steps = rng.below(10) as usize;
        let a_step = [2048, 2048, 1024, 2048 + 64][rng.below(4) as usize];
        let b_step = [2048, 4096, 0][rng.below(3) as usize];
        let a = bytes(&mut rng, steps.saturating_sub(1) * a_step + 2048);
        let b = bytes(&mut rng, steps.saturating_sub(1) * b_step + 2048);
        let mut c = Block::zeroed();
        for tile in c.tiles.iter_mut() {
            tile.copy_from_slice(&bytes(&mut rng, 1024));
        }
        let want = by_instructions(kind, &c, (&a, a_step), (&b, b_step), steps);
        dot_2x2(kind, &mut c, (&a, a_step), (&b, b_step), steps).unwrap();
        for t in 0..4 {
            assert!(
                c.tiles[t] == want.tiles[t],
                "{} tile {t}, {steps} steps of {a_step}/{b_step} bytes",
                kind.mnemonic()
            );
        }
    }
}

/// A block of A prepared once serves many blocks at different offsets, bit for bit as the
/// instructions; a `PreparedA` made from another buffer, for another kind, or read at an
/// offset off the tiles is not used, and the result is still the instructions'. Half the
/// operands are tame (see [`tame`]).
#[test]
fn prepared_blocks_equal_their_instruction_sequences() {
    let mut rng = Rng::new(0x9EE9_A4ED);
    let mut prepared = PreparedA::new();
    for iter in 0..120 {
        let kind = DotKind::ALL[iter % DotKind::ALL.len()];
        // A packed block of 4 micro-panels of `steps` steps, as a GEMM packs it.
        let steps = 1 + rng.below(6) as usize;
        let panel = steps * 2048;
        let gen = if iter % 12 < 6 { bytes } else { tame };
        let block = gen(&mut rng, 4 * panel + 1024);
        let copy = block.clone();
        let b = gen(&mut rng, steps * 2048);
        let fresh = prepared.prepare(kind, &block);
        // Prepared exactly where the kernels read prepared operands (A and B alike).
        assert_eq!(fresh, PreparedB::applies(kind), "{}", kind.mnemonic());
        // The cases: each panel; a panel read half a tile off; another buffer with the same
        // bytes; the right buffer for another kind.
        let other = DotKind::ALL[(iter + 1) % DotKind::ALL.len()];
        let mut cases: Vec<(DotKind, &[u8], usize)> =
            (0..4).map(|q| (kind, &block[..], q * panel)).collect();
        cases.push((kind, &block[..], 512));
        cases.push((kind, &copy[..], panel));
        cases.push((other, &block[..], 0));
        for (k, a, at) in cases {
            let mut c = Block::zeroed();
            for tile in c.tiles.iter_mut() {
                tile.copy_from_slice(&gen(&mut rng, 1024));
            }
            let want = by_instructions(k, &c, (&a[at..], 2048), (&b, 2048), steps);
            dot_2x2_prepared(k, &mut c, (a, at, 2048), &prepared, (&b, 2048), steps).unwrap();
            for t in 0..4 {
                assert!(
                    c.tiles[t] == want.tiles[t],
                    "{} prepared for {}, tile {t}, offset {at}, {steps} steps",
                    k.mnemonic(),
                    kind.mnemonic()
                );
            }
        }
    }
    // Refusals as dot_2x2's, C unchanged, also for an offset past the buffer.
    let a = vec![0u8; 2048];
    prepared.prepare(DotKind::Tdpbf16ps, &a);
    let mut c = Block::zeroed();
    let err = dot_2x2_prepared(
        DotKind::Tdpbf16ps,
        &mut c,
        (&a, 4096, 0),
        &prepared,
        (&a, 0),
        1,
    )
    .unwrap_err();
    assert!(err.to_string().contains("operand A"), "{err}");
    assert!(c == Block::zeroed());
}

/// Moderate floats only (no NaN, infinity or large exponent in bf16 or fp16): blocks whose
/// lanes all stay finite, which the prepared kernels then compute themselves (a block that
/// ends in a NaN lane is redone instruction by instruction).
fn tame(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 4);
    while out.len() < len {
        out.extend_from_slice(&(rng.next_u64() as u32 & 0xBFFF_BFFF).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A panel of B prepared once serves the blocks of every micro-panel of A against it, with A
/// prepared or not, bit for bit as the instructions; a `PreparedB` of another buffer (the same
/// bytes elsewhere, a longer slice), of another kind, or forgotten is not used, and the
/// result is still the instructions'. Half the operands are tame, so that the prepared
/// kernels' own results are compared, not only those of the fallback.
#[test]
fn blocks_with_a_prepared_b_equal_their_instruction_sequences() {
    let mut rng = Rng::new(0x9EE9_B4ED);
    let (mut prepared_a, mut prepared_b) = (PreparedA::new(), PreparedB::new());
    for iter in 0..120 {
        let kind = DotKind::ALL[iter % DotKind::ALL.len()];
        let steps = 1 + rng.below(6) as usize;
        let panel = steps * 2048;
        let gen = if iter % 12 < 6 { bytes } else { tame };
        let block = gen(&mut rng, 2 * panel);
        let b_all = gen(&mut rng, 2 * panel + 2048);
        let b = &b_all[..panel];
        let copy = b.to_vec();
        prepared_a.prepare(kind, &block);
        let fresh = prepared_b.prepare(kind, b);
        assert_eq!(fresh, PreparedB::applies(kind), "{}", kind.mnemonic());
        assert_eq!(prepared_b.holds(kind, b), fresh, "{}", kind.mnemonic());
        let other = DotKind::ALL[(iter + 1) % DotKind::ALL.len()];
        // (kind, A's buffer and offset, B): both micro-panels against the panel; the same
        // bytes of B elsewhere; a longer slice from the same address; another kind.
        let cases: Vec<(DotKind, &[u8], usize, &[u8])> = vec![
            (kind, &block[..], 0, b),
            (kind, &block[..], panel, b),
            (kind, &block[..], 0, &copy[..]),
            (kind, &block[..], panel, &b_all[..]),
            (other, &block[..], 0, b),
        ];
        for (k, a, at, b) in cases {
            let mut c = Block::zeroed();
            for tile in c.tiles.iter_mut() {
                tile.copy_from_slice(&gen(&mut rng, 1024));
            }
            let want = by_instructions(k, &c, (&a[at..], 2048), (b, 2048), steps);
            dot_2x2_prepared_ab(
                k,
                &mut c,
                (a, at, 2048),
                &prepared_a,
                (b, 2048),
                &prepared_b,
                steps,
            )
            .unwrap();
            for t in 0..4 {
                assert!(
                    c.tiles[t] == want.tiles[t],
                    "{} with B prepared for {}, tile {t}, offset {at}, {steps} steps",
                    k.mnemonic(),
                    kind.mnemonic()
                );
            }
        }
        prepared_b.clear();
        assert!(!prepared_b.holds(kind, b));
    }
    // Refusals as dot_2x2's, C unchanged.
    let a = vec![0u8; 2048];
    prepared_b.prepare(DotKind::Tdpbf16ps, &a);
    let mut c = Block::zeroed();
    let err = dot_2x2_prepared_ab(
        DotKind::Tdpbf16ps,
        &mut c,
        (&a, 0, 2048),
        &prepared_a,
        (&a, 2048),
        &prepared_b,
        2,
    )
    .unwrap_err();
    assert!(err.to_string().contains("operand"), "{err}");
    assert!(c == Block::zeroed());
}

#[test]
fn operands_too_short_are_refused_and_c_is_unchanged() {
    let a = vec![1u8; 2 * 2048];
    let b = vec![2u8; 2 * 2048 - 1];
    let mut c = Block::zeroed();
    c.tiles[1][5] = 9;
    let before = c.clone();
    assert_eq!(
        dot_2x2(DotKind::Tdpbssd, &mut c, (&a, 2048), (&b, 2048), 2),
        Err(BlockError::OutOfBounds {
            operand: "B",
            needed: 4096,
            len: 4095
        })
    );
    assert_eq!(
        dot_2x2(DotKind::Tdpbf16ps, &mut c, (&a, 2049), (&a, 2048), 2),
        Err(BlockError::OutOfBounds {
            operand: "A",
            needed: 4097,
            len: 4096
        })
    );
    // A step distance whose product overflows is refused, not wrapped.
    let err = dot_2x2(DotKind::Tdpbuud, &mut c, (&a, usize::MAX), (&b, 0), 3).unwrap_err();
    assert!(err.to_string().contains("operand A"), "{err}");
    assert!(c == before);
    // Zero steps read nothing and change nothing, whatever the buffers.
    dot_2x2(DotKind::Tdpbssd, &mut c, (&[], 0), (&[], 0), 0).unwrap();
    assert!(c == before);
}

#[test]
fn dword_reads_little_endian_and_is_zero_out_of_range() {
    let mut c = Block::zeroed();
    c.tiles[2][15 * 64 + 4..15 * 64 + 8].copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(c.dword(2, 15, 1), 0x0403_0201);
    for (t, row, col) in [
        (4, 0, 0),
        (0, 16, 0),
        (0, 0, 16),
        (0, usize::MAX, usize::MAX),
    ] {
        assert_eq!(c.dword(t, row, col), 0);
    }
}
