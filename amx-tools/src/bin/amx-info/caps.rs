//! What the CPU and the OS offer, the permission before and after the request, the backend
//! choice, and the one reason AMX is unusable.

use std::time::Instant;

use amx_runtime::permit::{self, PermissionState};
use amx_runtime::{
    detect, Backend, BackendChoice, BackendError, Capabilities, Hardware, Unavailable,
};

use serde::Serialize;

use crate::report::{yes_no, Table};

/// One CPUID query and its answer.
pub struct CpuidLeaf {
    pub leaf: u32,
    pub subleaf: u32,
    pub regs: [u32; 4],
    /// What the leaf holds, for the human listing.
    pub what: &'static str,
}

/// Everything the capabilities section prints.
pub struct CapsInfo {
    pub caps: Capabilities,
    pub cpu_name: Option<String>,
    /// CPUID.1.EAX (family, model, stepping; hypervisors may rewrite it).
    pub signature: Option<u32>,
    pub kernel: Option<String>,
    pub raw: Vec<CpuidLeaf>,
    pub permission_before: PermissionState,
    /// The result of the first `request_permission()` of this process, and how long it took.
    pub request: Result<(), permit::PermissionError>,
    pub request_ns: f64,
    pub permission_after: PermissionState,
    /// `BackendChoice::Auto.resolve()`.
    pub auto_backend: String,
    /// `AMX_BACKEND` as set (`None` when unset).
    pub env_backend: Option<String>,
    /// What `AMX_BACKEND` resolves to: the backend of this process, or why none.
    pub process_backend: Result<Backend, BackendError>,
    /// The one reason AMX cannot be used here, `None` when it can.
    pub unavailable: Option<Unavailable>,
}

impl CapsInfo {
    /// Detects, requests the permission (timing the request), and resolves the backends.
    pub fn gather() -> CapsInfo {
        let permission_before = permit::permission_state();
        let caps = detect();
        let start = Instant::now();
        let request = permit::request_permission();
        let request_ns = start.elapsed().as_nanos() as f64;
        let permission_after = permit::permission_state();

        let auto_backend = match BackendChoice::Auto.resolve() {
            Ok(b) => b.to_string(),
            Err(e) => format!("none: {e}"),
        };
        let env_backend = std::env::var_os("AMX_BACKEND").map(|v| v.to_string_lossy().into());
        let process_backend = amx_runtime::backend();
        // The platform reasons come from detection; a refused permission shows only when the
        // hardware unit is created (it requests the permission itself).
        let unavailable = caps.unavailable().or_else(|| Hardware::new().err());

        CapsInfo {
            cpu_name: cpu_name(),
            signature: leaf(1, 0).map(|r| r[0]),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_owned()),
            raw: raw_leaves(),
            caps,
            permission_before,
            request,
            request_ns,
            permission_after,
            auto_backend,
            env_backend,
            process_backend,
            unavailable,
        }
    }

    /// The verdict line: usable, or the one reason.
    pub fn verdict(&self) -> String {
        match &self.unavailable {
            None => "AMX is usable in this process".to_owned(),
            Some(why) => format!("AMX is NOT usable here: {why}"),
        }
    }

    /// The human listing.
    pub fn text(&self) -> String {
        let c = &self.caps;
        let mut t = Table::new(&["", "", ""]);
        let feature = |t: &mut Table, name: &str, on: bool, bit: &str| {
            t.row(vec![name.into(), yes_no(on).into(), bit.into()]);
        };
        feature(&mut t, "AMX-TILE", c.amx_tile, "CPUID.(7,0):EDX[24]");
        feature(&mut t, "AMX-INT8", c.amx_int8, "CPUID.(7,0):EDX[25]");
        feature(&mut t, "AMX-BF16", c.amx_bf16, "CPUID.(7,0):EDX[22]");
        feature(
            &mut t,
            "AMX-FP16",
            c.amx_fp16,
            "CPUID.(7,1):EAX[21] (a hypervisor may hide it; the silicon section probes it)",
        );
        feature(
            &mut t,
            "AMX-COMPLEX",
            c.amx_complex,
            "CPUID.(7,1):EDX[8] or CPUID.(0x1E,1):EAX[2]",
        );
        feature(&mut t, "AMX-FP8", c.amx_fp8, "CPUID.(0x1E,1):EAX[4]");
        feature(
            &mut t,
            "AMX-AVX512",
            c.amx_avx512,
            if c.zmm_enabled() {
                "CPUID.(0x1E,1):EAX[7] (the OS enables the AVX-512 state)"
            } else {
                "CPUID.(0x1E,1):EAX[7] (the OS does NOT enable the AVX-512 state: unusable)"
            },
        );
        feature(&mut t, "AMX-MOVRS", c.amx_movrs, "CPUID.(0x1E,1):EAX[8]");
        feature(
            &mut t,
            "OSXSAVE",
            c.osxsave,
            "CPUID.1:ECX[27] (XGETBV usable)",
        );
        let xcr0 = match c.xcr0 {
            Some(x) => format!(
                "{x:#x}: bit 17 XTILECFG {}, bit 18 XTILEDATA {}",
                yes_no(c.xtilecfg_enabled()),
                yes_no(c.xtiledata_enabled())
            ),
            None => "unreadable (OSXSAVE clear)".to_owned(),
        };
        t.row(vec!["XCR0".into(), xcr0, "XGETBV(0)".into()]);
        t.row(vec![
            "palettes".into(),
            palettes_text(c),
            "CPUID leaf 0x1D".into(),
        ]);
        t.row(vec![
            "TMUL limits".into(),
            format!(
                "K <= {} rows, N <= {} bytes per row",
                c.tmul.maxk, c.tmul.maxn
            ),
            "CPUID.(0x1E,0).EBX (the architectural 16/64 when absent or hidden)".into(),
        ]);
        t.row(vec![
            "backend".into(),
            format!("auto chooses {}", self.auto_backend),
            "BackendChoice::Auto.resolve()".into(),
        ]);
        let uses = match &self.process_backend {
            Ok(b) => format!("this process uses {b}"),
            Err(_) => "this process has no backend (see below)".to_owned(),
        };
        t.row(vec![
            String::new(),
            match &self.env_backend {
                Some(v) => format!("AMX_BACKEND={v:?}: {uses}"),
                None => format!("AMX_BACKEND unset (auto): {uses}"),
            },
            "amx_runtime::backend()".into(),
        ]);
        t.row(vec![
            "permission".into(),
            format!(
                "before the request: {}",
                short_permission(self.permission_before)
            ),
            "arch_prctl(ARCH_GET_XCOMP_PERM)".into(),
        ]);
        t.row(vec![
            String::new(),
            match &self.request {
                Ok(()) => format!("request: granted in {:.1} us", self.request_ns / 1e3),
                Err(e) => format!(
                    "request: refused with {} (errno {}) in {:.1} us",
                    e.errno_name().unwrap_or("an unnamed errno"),
                    e.errno,
                    self.request_ns / 1e3
                ),
            },
            "arch_prctl(ARCH_REQ_XCOMP_PERM, 18)".into(),
        ]);
        t.row(vec![
            String::new(),
            format!(
                "after the request: {}",
                short_permission(self.permission_after)
            ),
            "arch_prctl(ARCH_GET_XCOMP_PERM)".into(),
        ]);
        let mut out = String::new();
        if let Some(name) = &self.cpu_name {
            out += &format!("  CPU          {name}");
            if let Some(sig) = self.signature {
                out += &format!(" (CPUID.1.EAX {sig:#010x})");
            }
            out.push('\n');
        }
        if let Some(k) = &self.kernel {
            out += &format!("  kernel       Linux {k}\n");
        }
        out += &t.render("  ", false);
        let mut notes = Vec::new();
        if let Err(e) = &self.process_backend {
            notes.push(format!("no backend: {e}"));
        }
        if let Err(e) = &self.request {
            notes.push(format!("the permission request failed: {}", e.cause()));
        }
        for note in notes {
            out += &format!(
                "  {:13}{}\n",
                "",
                crate::wrap(&note, 84).replace('\n', &format!("\n{:17}", ""))
            );
        }
        out += "  raw CPUID (leaf.subleaf: eax ebx ecx edx)\n";
        for r in &self.raw {
            out += &format!(
                "    {:#04x}.{:<2} {:08x} {:08x} {:08x} {:08x}  {}\n",
                r.leaf, r.subleaf, r.regs[0], r.regs[1], r.regs[2], r.regs[3], r.what
            );
        }
        out
    }

    /// The JSON object.
    pub fn json(&self) -> CapsJson<'_> {
        let c = &self.caps;
        let palettes = (1..=c.palettes.max_palette())
            .filter_map(|id| c.palettes.get(id).map(|p| (id, p)))
            .map(|(id, p)| PaletteJson {
                id,
                total_tile_bytes: p.total_tile_bytes,
                bytes_per_tile: p.bytes_per_tile,
                bytes_per_row: p.bytes_per_row,
                max_names: p.max_names,
                max_rows: p.max_rows,
            })
            .collect();
        let hex = |x: u32| format!("{x:#010x}");
        let raw_cpuid = self
            .raw
            .iter()
            .map(|r| LeafJson {
                leaf: format!("{:#x}", r.leaf),
                subleaf: r.subleaf,
                eax: hex(r.regs[0]),
                ebx: hex(r.regs[1]),
                ecx: hex(r.regs[2]),
                edx: hex(r.regs[3]),
            })
            .collect();
        CapsJson {
            cpu: self.cpu_name.as_deref(),
            cpuid_1_eax: self.signature.map(hex),
            kernel: self.kernel.as_deref(),
            amx_tile: c.amx_tile,
            amx_int8: c.amx_int8,
            amx_bf16: c.amx_bf16,
            amx_fp16_cpuid: c.amx_fp16,
            amx_complex: c.amx_complex,
            amx_fp8: c.amx_fp8,
            amx_avx512: c.amx_avx512,
            amx_movrs: c.amx_movrs,
            xcr0_zmm: c.zmm_enabled(),
            osxsave: c.osxsave,
            xcr0: c.xcr0.map(|x| format!("{x:#x}")),
            xcr0_xtilecfg: c.xtilecfg_enabled(),
            xcr0_xtiledata: c.xtiledata_enabled(),
            max_palette: c.palettes.max_palette(),
            palettes,
            tmul: TmulJson {
                maxk: c.tmul.maxk,
                maxn: c.tmul.maxn,
            },
            permission: PermissionJson {
                before: permission_name(self.permission_before),
                request: match &self.request {
                    Ok(()) => "granted".to_owned(),
                    Err(e) => e.to_string(),
                },
                request_ns: self.request_ns,
                after: permission_name(self.permission_after),
            },
            backend: BackendJson {
                auto: &self.auto_backend,
                amx_backend_env: self.env_backend.as_deref(),
                process: match &self.process_backend {
                    Ok(b) => b.to_string(),
                    Err(e) => format!("none: {e}"),
                },
            },
            usable: self.unavailable.is_none(),
            unavailable: self.unavailable.as_ref().map(|u| u.to_string()),
            raw_cpuid,
        }
    }
}

/// The capabilities section of `--json`.
#[derive(Serialize)]
pub struct CapsJson<'a> {
    cpu: Option<&'a str>,
    cpuid_1_eax: Option<String>,
    kernel: Option<&'a str>,
    amx_tile: bool,
    amx_int8: bool,
    amx_bf16: bool,
    amx_fp16_cpuid: bool,
    amx_complex: bool,
    amx_fp8: bool,
    amx_avx512: bool,
    amx_movrs: bool,
    xcr0_zmm: bool,
    osxsave: bool,
    xcr0: Option<String>,
    xcr0_xtilecfg: bool,
    xcr0_xtiledata: bool,
    max_palette: u8,
    palettes: Vec<PaletteJson>,
    tmul: TmulJson,
    permission: PermissionJson,
    backend: BackendJson<'a>,
    usable: bool,
    unavailable: Option<String>,
    raw_cpuid: Vec<LeafJson>,
}

#[derive(Serialize)]
struct PaletteJson {
    id: u8,
    total_tile_bytes: u16,
    bytes_per_tile: u16,
    bytes_per_row: u16,
    max_names: u16,
    max_rows: u16,
}

#[derive(Serialize)]
struct TmulJson {
    maxk: u8,
    maxn: u16,
}

#[derive(Serialize)]
struct PermissionJson {
    before: String,
    request: String,
    request_ns: f64,
    after: String,
}

#[derive(Serialize)]
struct BackendJson<'a> {
    auto: &'a str,
    amx_backend_env: Option<&'a str>,
    process: String,
}

#[derive(Serialize)]
struct LeafJson {
    leaf: String,
    subleaf: u32,
    eax: String,
    ebx: String,
    ecx: String,
    edx: String,
}

/// A short description of a permission state for the table.
fn short_permission(p: PermissionState) -> String {
    match p {
        PermissionState::NotApplicable => "not applicable (not Linux on x86-64)".into(),
        PermissionState::NotRequested => "not requested (XTILEDATA not in the mask)".into(),
        PermissionState::Granted => "granted".into(),
        PermissionState::Unknown { errno } => {
            format!("unknown (ARCH_GET_XCOMP_PERM errno {errno})")
        }
        other => format!("{other:?}"),
    }
}

/// A stable, short name of a permission state for JSON.
fn permission_name(p: PermissionState) -> String {
    match p {
        PermissionState::NotApplicable => "not_applicable".into(),
        PermissionState::NotRequested => "not_requested".into(),
        PermissionState::Granted => "granted".into(),
        PermissionState::Unknown { errno } => format!("unknown (errno {errno})"),
        other => format!("{other:?}").to_lowercase(),
    }
}

fn palettes_text(c: &Capabilities) -> String {
    if c.palettes.max_palette() == 0 {
        return "none (leaf 0x1D absent, or max_palette 0)".to_owned();
    }
    let list: Vec<String> = (1..=c.palettes.max_palette())
        .filter_map(|id| c.palettes.get(id).map(|p| (id, p)))
        .map(|(id, p)| {
            format!(
                "palette {id}: {} tiles x {} rows x {} bytes ({} bytes per tile, {} total)",
                p.max_names, p.max_rows, p.bytes_per_row, p.bytes_per_tile, p.total_tile_bytes
            )
        })
        .collect();
    list.join("; ")
}

/// CPUID (leaf, subleaf) through `raw-cpuid`'s reader, when the leaf exists (not above the
/// maximum basic or extended leaf: a CPU answers those with its highest leaf's data).
#[cfg(all(target_arch = "x86_64", not(target_env = "sgx")))]
pub fn leaf(leaf: u32, subleaf: u32) -> Option<[u32; 4]> {
    use amx_runtime::CpuIdReader;
    let cpuid = raw_cpuid::CpuIdReaderNative;
    let max = cpuid.cpuid1(leaf & 0x8000_0000).eax;
    (leaf <= max).then(|| {
        let r = cpuid.cpuid2(leaf, subleaf);
        [r.eax, r.ebx, r.ecx, r.edx]
    })
}

/// No CPUID off x86-64.
#[cfg(not(all(target_arch = "x86_64", not(target_env = "sgx"))))]
pub fn leaf(_leaf: u32, _subleaf: u32) -> Option<[u32; 4]> {
    None
}

/// The processor brand string (CPUID 0x80000002..4, read by `raw-cpuid`).
fn cpu_name() -> Option<String> {
    #[cfg(all(target_arch = "x86_64", not(target_env = "sgx")))]
    {
        let brand = raw_cpuid::CpuId::new().get_processor_brand_string()?;
        let name = brand.as_str().trim();
        (!name.is_empty()).then(|| name.to_owned())
    }
    #[cfg(not(all(target_arch = "x86_64", not(target_env = "sgx"))))]
    {
        None
    }
}

/// The leaves that describe AMX, as the CPU answers them.
fn raw_leaves() -> Vec<CpuidLeaf> {
    let mut out = Vec::new();
    let mut push = |l: u32, s: u32, what: &'static str| {
        if let Some(regs) = leaf(l, s) {
            out.push(CpuidLeaf {
                leaf: l,
                subleaf: s,
                regs,
                what,
            });
        }
    };
    push(0x7, 0, "EDX: AMX-BF16 22, AMX-TILE 24, AMX-INT8 25");
    push(0x7, 1, "EAX: AMX-FP16 21; EDX: AMX-COMPLEX 8");
    push(0xD, 17, "XTILECFG: size, offset, flags");
    push(
        0xD,
        18,
        "XTILEDATA: size, offset, flags (bit 2: XFD-faulting)",
    );
    let max_palette = leaf(0x1D, 0).map_or(0, |r| r[0]).min(7);
    push(0x1D, 0, "EAX: max palette");
    for p in 1..=max_palette {
        push(0x1D, p, "palette: EAX bytes, EBX row bytes/names, ECX rows");
    }
    push(
        0x1E,
        0,
        "EAX: highest subleaf; EBX: TMUL maxk [7:0], maxn [23:8]",
    );
    push(
        0x1E,
        1,
        "EAX: COMPLEX 2, FP8 4, AVX512 7, MOVRS 8 (read when EAX of subleaf 0 >= 1)",
    );
    out
}
