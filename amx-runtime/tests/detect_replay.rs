//! Detection from replayed CPUID dumps: the AMX machine kind of docs/semantics.md section 0, this
//! build machine (AMX hidden), and the ways a CPU, a VM or an OS can make AMX unusable.

use amx_runtime::detect::{detect_with, Unavailable};
use amx_runtime::permit::PermissionState;
use amx_runtime::rules::{Palette, PaletteTable, TmulLimits};
use raw_cpuid::{CpuIdReader, CpuIdResult};

/// A CPUID dump: (leaf, subleaf) -> registers. Leaves not in the table read as zeros.
#[derive(Clone, Debug)]
struct Dump(Vec<((u32, u32), [u32; 4])>);

impl Dump {
    /// Replaces (or adds) one leaf.
    fn with(mut self, leaf: u32, subleaf: u32, regs: [u32; 4]) -> Dump {
        self.0.retain(|(key, _)| *key != (leaf, subleaf));
        self.0.push(((leaf, subleaf), regs));
        self
    }

    /// Changes one leaf with `f` (zeros when absent).
    fn map(self, leaf: u32, subleaf: u32, f: impl FnOnce([u32; 4]) -> [u32; 4]) -> Dump {
        let old = self
            .0
            .iter()
            .find(|(key, _)| *key == (leaf, subleaf))
            .map_or([0; 4], |(_, regs)| *regs);
        self.with(leaf, subleaf, f(old))
    }
}

impl CpuIdReader for Dump {
    fn cpuid2(&self, eax: u32, ecx: u32) -> CpuIdResult {
        let [eax, ebx, ecx, edx] = self
            .0
            .iter()
            .find(|(key, _)| *key == (eax, ecx))
            .map_or([0; 4], |(_, regs)| *regs);
        CpuIdResult { eax, ebx, ecx, edx }
    }
}

// "GenuineIntel" in EBX, EDX, ECX.
const GENU: u32 = 0x756e_6547;
const INEI: u32 = 0x4965_6e69;
const NTEL: u32 = 0x6c65_746e;

const AMX_BF16: u32 = 1 << 22;
const AMX_TILE: u32 = 1 << 24;
const AMX_INT8: u32 = 1 << 25;
const OSXSAVE: u32 = 1 << 27;

/// An AMX virtual machine (Granite-Rapids-class host under Firecracker, docs/semantics.md section 0):
/// max basic leaf 0x24, signature 0xA0671, AMX-TILE/INT8/BF16 set, AMX-FP16 clear, palette 1 of
/// 8 KiB / 1 KiB / 64 B / 8 names / 16 rows, TMUL K 16 N 64. The leaf 1 and 7 registers besides
/// the AMX bits are those of a same-family CPU's.
fn amx_machine() -> Dump {
    Dump(vec![
        ((0x00, 0), [0x24, GENU, NTEL, INEI]),
        (
            (0x01, 0),
            [0x000a_0671, 0x0002_0800, 0xfffa_3203, 0x1f8b_fbff],
        ),
        (
            (0x07, 0),
            [
                0x2,
                0xf1bf_2ffb,
                0x1a41_5f46,
                0x2081_4010 | AMX_BF16 | AMX_TILE | AMX_INT8,
            ],
        ),
        ((0x07, 1), [0x0000_1c30, 0, 0, 0x0008_4000]),
        ((0x0d, 0), [0x0006_00e7, 0x0000_0a80, 0x0000_2b00, 0]),
        ((0x0d, 17), [64, 2752, 2, 0]),
        ((0x0d, 18), [8192, 2816, 6, 0]),
        ((0x1d, 0), [1, 0, 0, 0]),
        ((0x1d, 1), [0x0400_2000, 0x0008_0040, 0x0000_0010, 0]),
        ((0x1e, 0), [0, 0x0000_4010, 0, 0]),
    ])
}

/// A Sapphire-Rapids-class CPU (signature 0xC06F2) under a hypervisor that hides AMX: no AMX bits in leaf 7, max basic leaf 0x1C, XCR0 0xe7.
fn build_machine() -> Dump {
    Dump(vec![
        ((0x00, 0), [0x1c, GENU, NTEL, INEI]),
        (
            (0x01, 0),
            [0x000c_06f2, 0x0102_0800, 0xfffa_3203, 0x1f8b_fbff],
        ),
        ((0x07, 0), [0x2, 0xf1bf_2ffb, 0x1a41_5f46, 0x2081_4010]),
        ((0x07, 1), [0x0000_1c30, 0, 0, 0]),
        ((0x0d, 0), [0x0000_00e7, 0x0000_0a80, 0x0000_2b00, 0]),
        ((0x0d, 17), [64, 2752, 2, 0]),
        ((0x0d, 18), [8192, 2816, 6, 0]),
    ])
}

const XCR0_AMX: u64 = 0x600e7;
const XCR0_NO_AMX: u64 = 0xe7;

#[test]
fn amx_machine_granted_is_usable() {
    let caps = detect_with(amx_machine(), Some(XCR0_AMX), PermissionState::Granted);
    // Field by field: `Capabilities` is non-exhaustive (future AMX features add fields), so
    // code outside the crate reads it rather than builds it.
    assert!(caps.amx_tile && caps.amx_int8 && caps.amx_bf16);
    assert!(!caps.amx_fp16 && !caps.amx_complex);
    assert!(!caps.amx_fp8 && !caps.amx_avx512 && !caps.amx_movrs);
    assert!(caps.osxsave);
    assert_eq!(caps.xcr0, Some(XCR0_AMX));
    assert_eq!(
        caps.palettes,
        PaletteTable::one(Palette {
            total_tile_bytes: 8192,
            bytes_per_tile: 1024,
            bytes_per_row: 64,
            max_names: 8,
            max_rows: 16,
        })
    );
    assert_eq!(caps.tmul, TmulLimits { maxk: 16, maxn: 64 });
    assert_eq!(caps.permission, PermissionState::Granted);
    assert_eq!(caps.palettes, PaletteTable::ARCHITECTURAL);
    assert!(caps.xtilecfg_enabled() && caps.xtiledata_enabled());
    assert_eq!(caps.unavailable(), None);
    assert!(caps.is_usable());
    assert!(!caps.needs_permission());
}

#[test]
fn amx_machine_not_requested_is_usable_after_requesting() {
    let caps = detect_with(amx_machine(), Some(XCR0_AMX), PermissionState::NotRequested);
    assert_eq!(
        caps.unavailable(),
        None,
        "not requested yet is not a reason"
    );
    assert!(caps.is_usable());
    assert!(caps.needs_permission());
}

#[test]
fn fp16_and_complex_come_from_leaf_7_subleaf_1() {
    let dump = amx_machine().map(7, 1, |[a, b, c, d]| [a | 1 << 21, b, c, d | 1 << 8]);
    let caps = detect_with(dump.clone(), Some(XCR0_AMX), PermissionState::Granted);
    assert!(caps.amx_fp16 && caps.amx_complex);

    // Subleaf 1 is not trusted when subleaf 0 says the highest subleaf is 0.
    let dump = dump.map(7, 0, |[_, b, c, d]| [0, b, c, d]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert!(!caps.amx_fp16 && !caps.amx_complex);
    assert!(caps.amx_tile && caps.is_usable());
}

/// A Diamond-Rapids-class CPU as its leaves are documented: CPUID.(0x1E,0).EAX = 1 lists
/// subleaf 1, whose EAX has INT8, BF16, COMPLEX, FP16, FP8, AVX512 and MOVRS (bits 0-4, 7, 8).
fn next_generation() -> Dump {
    amx_machine()
        .map(0x1e, 0, |[_, b, c, d]| [1, b, c, d])
        .with(0x1e, 1, [0b1_1001_1111, 0, 0, 0])
}

/// XCR0 with the AMX state and the AVX-512 state (opmask, ZMM_Hi256, Hi16_ZMM).
const XCR0_AMX_AVX512: u64 = 0x600e7;

#[test]
fn fp8_avx512_movrs_and_complex_come_from_leaf_0x1e_subleaf_1() {
    let caps = detect_with(
        next_generation(),
        Some(XCR0_AMX_AVX512),
        PermissionState::Granted,
    );
    assert!(caps.amx_fp8 && caps.amx_avx512 && caps.amx_movrs && caps.amx_complex);
    assert!(caps.zmm_enabled() && caps.is_usable());

    // Each bit alone.
    for (bit, name) in [(2, "complex"), (4, "fp8"), (7, "avx512"), (8, "movrs")] {
        let dump = next_generation().with(0x1e, 1, [1 << bit, 0, 0, 0]);
        let caps = detect_with(dump, Some(XCR0_AMX_AVX512), PermissionState::Granted);
        let found = [
            ("complex", caps.amx_complex),
            ("fp8", caps.amx_fp8),
            ("avx512", caps.amx_avx512),
            ("movrs", caps.amx_movrs),
        ];
        for (other, on) in found {
            assert_eq!(on, other == name, "bit {bit}: {other}");
        }
    }

    // The withdrawn AMX-TRANSPOSE and AMX-TF32 bits (5, 6) enable nothing.
    let dump = next_generation().with(0x1e, 1, [0b110_0000, 0, 0, 0]);
    let caps = detect_with(dump, Some(XCR0_AMX_AVX512), PermissionState::Granted);
    assert!(!caps.amx_fp8 && !caps.amx_avx512 && !caps.amx_movrs && !caps.amx_complex);
}

#[test]
fn leaf_0x1e_subleaf_1_is_read_only_where_subleaf_0_lists_it() {
    // Subleaf 0 says the highest subleaf is 0: whatever subleaf 1 answers is not trusted.
    let dump = next_generation().map(0x1e, 0, |[_, b, c, d]| [0, b, c, d]);
    let caps = detect_with(dump, Some(XCR0_AMX_AVX512), PermissionState::Granted);
    assert!(!caps.amx_fp8 && !caps.amx_avx512 && !caps.amx_movrs && !caps.amx_complex);
    assert!(caps.is_usable());

    // A CPU whose maximum basic leaf is below 0x1E has neither subleaf.
    let dump = next_generation().map(0, 0, |[_, b, c, d]| [0x1d, b, c, d]);
    let caps = detect_with(dump, Some(XCR0_AMX_AVX512), PermissionState::Granted);
    assert!(!caps.amx_fp8 && !caps.amx_avx512 && !caps.amx_movrs);
}

#[test]
fn zmm_state_needs_all_five_xcr0_bits() {
    let with = |xcr0| detect_with(next_generation(), Some(xcr0), PermissionState::Granted);
    assert!(with(0x600e7).zmm_enabled());
    for bit in [1, 2, 5, 6, 7] {
        assert!(
            !with(0x600e7 & !(1 << bit)).zmm_enabled(),
            "bit {bit} clear"
        );
    }
    let caps = detect_with(next_generation(), None, PermissionState::Granted);
    assert!(!caps.zmm_enabled());
}

#[test]
fn cpu_without_amx() {
    let caps = detect_with(
        build_machine(),
        Some(XCR0_NO_AMX),
        PermissionState::NotRequested,
    );
    assert!(!caps.amx_tile && !caps.amx_int8 && !caps.amx_bf16 && !caps.amx_fp16);
    assert!(caps.osxsave);
    assert_eq!(caps.xcr0, Some(XCR0_NO_AMX));
    assert_eq!(caps.palettes, PaletteTable::NONE);
    assert_eq!(caps.unavailable(), Some(Unavailable::NoAmxTile));
    assert!(!caps.is_usable());
    // Nothing to permit without a tile unit.
    assert!(!caps.needs_permission());

    // The AMX machine kind with the AMX bits cleared: NoAmxTile comes before every later reason.
    let dump = amx_machine().map(7, 0, |[a, b, c, d]| {
        [a, b, c, d & !(AMX_BF16 | AMX_TILE | AMX_INT8)]
    });
    let caps = detect_with(
        dump,
        Some(XCR0_NO_AMX),
        PermissionState::Unknown { errno: 1 },
    );
    assert_eq!(caps.unavailable(), Some(Unavailable::NoAmxTile));
}

#[test]
fn vm_with_amx_bits_but_no_palette() {
    let dump = amx_machine().with(0x1d, 0, [0; 4]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert!(caps.amx_tile);
    assert_eq!(caps.palettes.max_palette(), 0);
    assert_eq!(caps.unavailable(), Some(Unavailable::NoPalette));

    // max_palette 1 but palette 1 all zero.
    let dump = amx_machine().with(0x1d, 1, [0; 4]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert_eq!(caps.palettes.max_palette(), 1);
    assert_eq!(caps.unavailable(), Some(Unavailable::NoPalette));

    // Palette 1 with zero rows.
    let dump = amx_machine().map(0x1d, 1, |[a, b, _, d]| [a, b, 0, d]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert_eq!(caps.unavailable(), Some(Unavailable::NoPalette));
}

#[test]
fn os_without_tile_state() {
    for xcr0 in [XCR0_NO_AMX, 0x200e7, 0x400e7] {
        let caps = detect_with(amx_machine(), Some(xcr0), PermissionState::NotRequested);
        assert_eq!(
            caps.unavailable(),
            Some(Unavailable::OsDisabled { xcr0: Some(xcr0) }),
            "xcr0 {xcr0:#x}"
        );
    }
    let caps = detect_with(amx_machine(), Some(0x200e7), PermissionState::NotRequested);
    assert!(caps.xtilecfg_enabled() && !caps.xtiledata_enabled());

    // OSXSAVE clear: XCR0 cannot be read, whatever the caller passed.
    let dump = amx_machine().map(1, 0, |[a, b, c, d]| [a, b, c & !OSXSAVE, d]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::NotRequested);
    assert!(!caps.osxsave);
    assert_eq!(caps.xcr0, None);
    assert_eq!(
        caps.unavailable(),
        Some(Unavailable::OsDisabled { xcr0: None })
    );

    // An OS-level reason comes before a missing palette.
    let dump = amx_machine().with(0x1d, 0, [0; 4]);
    let caps = detect_with(dump, Some(XCR0_NO_AMX), PermissionState::NotRequested);
    assert_eq!(
        caps.unavailable(),
        Some(Unavailable::OsDisabled {
            xcr0: Some(XCR0_NO_AMX)
        })
    );
}

#[test]
fn permission_refused() {
    let eperm = libc::EPERM;
    let caps = detect_with(
        amx_machine(),
        Some(XCR0_AMX),
        PermissionState::Unknown { errno: eperm },
    );
    assert_eq!(
        caps.unavailable(),
        Some(Unavailable::PermissionRefused { errno: eperm })
    );
    assert!(!caps.is_usable());

    // A missing palette comes before the permission.
    let dump = amx_machine().with(0x1d, 0, [0; 4]);
    let caps = detect_with(
        dump,
        Some(XCR0_AMX),
        PermissionState::Unknown { errno: eperm },
    );
    assert_eq!(caps.unavailable(), Some(Unavailable::NoPalette));
}

#[test]
fn leaves_above_the_max_basic_leaf_are_not_trusted() {
    // The AMX machine's dump with max basic leaf 0x1C: leaves 0x1D and 0x1E still answer in the
    // table, as a CPU answers out-of-range leaves with garbage, but must not be read.
    let dump = amx_machine().map(0, 0, |[_, b, c, d]| [0x1c, b, c, d]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert!(caps.amx_tile);
    assert_eq!(caps.palettes, PaletteTable::NONE);
    assert_eq!(caps.tmul, TmulLimits::ARCHITECTURAL);
    assert_eq!(caps.unavailable(), Some(Unavailable::NoPalette));

    // Max basic leaf 1: not even leaf 7 is read.
    let dump = amx_machine().map(0, 0, |[_, b, c, d]| [1, b, c, d]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert!(!caps.amx_tile && caps.osxsave);
    assert_eq!(caps.unavailable(), Some(Unavailable::NoAmxTile));
}

#[test]
fn tmul_limits_and_a_hidden_leaf_0x1e() {
    let dump = amx_machine().with(0x1e, 0, [0, 0x0000_2008, 0, 0]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert_eq!(caps.tmul, TmulLimits { maxk: 8, maxn: 32 });

    // All zero (a hypervisor hiding the leaf): the architectural limits.
    let dump = amx_machine().with(0x1e, 0, [0; 4]);
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert_eq!(caps.tmul, TmulLimits::ARCHITECTURAL);
}

#[test]
fn more_palettes_than_the_table_holds() {
    let mut dump = amx_machine().with(0x1d, 0, [9, 0, 0, 0]);
    for id in 2..=9 {
        dump = dump.with(0x1d, id, [0x0400_2000, 0x0008_0040, 0x10 + id, 0]);
    }
    let caps = detect_with(dump, Some(XCR0_AMX), PermissionState::Granted);
    assert_eq!(
        usize::from(caps.palettes.max_palette()),
        amx_runtime::rules::palette::MAX_PALETTES
    );
    assert_eq!(caps.palettes.get(1), Some(&Palette::PALETTE_1));
    assert_eq!(caps.palettes.get(3).map(|p| p.max_rows), Some(0x13));
    assert!(caps.is_usable());
}

#[test]
fn messages_name_the_reason_and_the_remedy() {
    let cases = [
        (Unavailable::NotX86_64, &["x86-64", "emulat"][..]),
        (Unavailable::NotLinux, &["Linux", "emulat"][..]),
        (Unavailable::NoAmxTile, &["AMX-TILE", "CPUID", "emulat"][..]),
        (
            Unavailable::OsDisabled { xcr0: Some(0xe7) },
            &["XCR0 = 0xe7", "not enabled AMX tile state", "5.16"][..],
        ),
        (
            Unavailable::OsDisabled { xcr0: None },
            &["OSXSAVE", "5.16"][..],
        ),
        (
            Unavailable::NoPalette,
            &[
                "no tile palette (CPUID leaf 0x1D)",
                "hypervisor",
                "pass-through",
            ][..],
        ),
        (
            Unavailable::PermissionRefused {
                errno: libc::ENOSPC,
            },
            &["ENOSPC", "sigaltstack", "AT_MINSIGSTKSZ"][..],
        ),
        (
            Unavailable::PermissionRefused {
                errno: libc::EOPNOTSUPP,
            },
            &["EOPNOTSUPP", "no AMX"][..],
        ),
        (
            Unavailable::PermissionRefused {
                errno: libc::EINVAL,
            },
            &["EINVAL", "5.16"][..],
        ),
        (
            Unavailable::PermissionRefused { errno: libc::EPERM },
            &["EPERM", "seccomp"][..],
        ),
    ];
    for (why, needles) in cases {
        let text = why.to_string();
        for needle in needles {
            assert!(text.contains(needle), "{text:?} lacks {needle:?}");
        }
        assert!(!text.ends_with('.'), "{text:?} ends with a period");
        assert!(!text.contains('\n'), "{text:?} is more than one line");
        let _: &dyn std::error::Error = &why;
    }
}

#[test]
fn permission_state_display() {
    assert_eq!(PermissionState::Granted.to_string(), "granted");
    assert!(PermissionState::NotRequested
        .to_string()
        .contains("ARCH_GET_XCOMP_PERM"));
    assert!(PermissionState::Unknown {
        errno: libc::EINVAL
    }
    .to_string()
    .contains("EINVAL (errno 22)"));
}

/// Each reason says what runs instead without advising `AMX_BACKEND=emulated`, which `auto`
/// (the default) already picks; where the trap engine can stand in for the silicon (x86-64
/// Linux without usable AMX), the message names it.
#[test]
fn reasons_point_to_what_runs_instead() {
    let reasons = [
        (Unavailable::NotX86_64, false),
        (Unavailable::NotLinux, false),
        (Unavailable::NoAmxTile, true),
        (Unavailable::OsDisabled { xcr0: Some(0xe7) }, true),
        (Unavailable::OsDisabled { xcr0: None }, true),
        (Unavailable::NoPalette, true),
        (Unavailable::PermissionRefused { errno: 28 }, false),
    ];
    for (reason, trap) in reasons {
        let text = reason.to_string();
        assert!(!text.contains("AMX_BACKEND=emulated"), "{text}");
        assert!(text.contains("AMX_BACKEND=auto, the default"), "{text}");
        assert_eq!(text.contains("AMX_BACKEND=trapped"), trap, "{text}");
        assert_eq!(text.contains("trap::install()"), trap, "{text}");
    }
}
