//! oneDNN's matmul as a peer, loaded at run time, so that `amx-bench` can time it in the same
//! process as `amx-gemm`, repetition for repetition.
//!
//! On a host whose tile unit or caches are shared with other tenants, the same GEMM moves by 2x
//! within seconds; figures from two programs run one after the other compare the hosts' moods,
//! not the libraries. Interleaving the two libraries' repetitions in one process and taking the
//! ratio of each adjacent pair does compare them.
//!
//! The library is `libdnnl.so` (oneDNN 3.x, CPU engine), opened with `dlopen` from a path the
//! user gives: nothing here links against it, and the tools build without it. The matmul is
//! oneDNN's own choice for the data types with the weights reordered once into the layout it
//! prefers (the "prepacked" case a GEMM with packed B is compared to): `s8 x s8 -> s32` for
//! int8, `u8 x s8 -> s32` for u8s8, `bf16 x bf16 -> f32` for bf16, `f16 x f16 -> f32` for fp16
//! (s8u8 and u8u8 have no oneDNN counterpart: its weights are signed). Its threads are OpenMP's:
//! [`Peer::set_threads`] sets their number when the library's OpenMP runtime exports
//! `omp_set_num_threads`, else `OMP_NUM_THREADS` (read when the library loads) decides; and
//! unless `KMP_BLOCKTIME` is set, [`Peer::open`] sets it to 0, so that idle OpenMP threads sleep
//! instead of spinning on the cores `amx-gemm`'s next repetition runs on.

use std::ffi::{c_char, c_int, c_void, CString};
use std::fmt;
use std::path::Path;

use amx_gemm::PrecisionKind;

/// Why the peer could not be loaded or run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerError {
    /// `dlopen` failed (the message is `dlerror`'s).
    Open(String),
    /// The library lacks a function of the C API.
    Symbol(&'static str),
    /// A call of the C API returned this status (`dnnl_status_t`).
    Call {
        /// The function.
        function: &'static str,
        /// Its status.
        status: i32,
    },
    /// A dimension does not fit oneDNN's `int64_t`, or a buffer is shorter than the shape.
    Shape(String),
    /// oneDNN has no matmul for this precision (its integer matmul takes signed weights only).
    Precision(PrecisionKind),
    /// Not available on this platform (Linux only).
    Unsupported,
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::Open(why) => write!(f, "cannot load oneDNN: {why}"),
            PeerError::Symbol(name) => write!(f, "the oneDNN library has no `{name}`"),
            PeerError::Call { function, status } => {
                write!(f, "oneDNN's {function} failed with status {status}")
            }
            PeerError::Shape(why) => write!(f, "oneDNN matmul: {why}"),
            PeerError::Precision(p) => write!(f, "oneDNN has no matmul for {p}"),
            PeerError::Unsupported => write!(f, "the oneDNN peer runs on Linux only"),
        }
    }
}

impl std::error::Error for PeerError {}

type Handle = *mut c_void;
type Status = c_int;
type Dims = [i64; 12];

#[repr(C)]
struct ExecArg {
    arg: c_int,
    memory: Handle,
}

/// The functions of oneDNN's C API the peer uses.
struct Api {
    engine_create: unsafe extern "C" fn(*mut Handle, c_int, usize) -> Status,
    stream_create: unsafe extern "C" fn(*mut Handle, Handle, u32) -> Status,
    stream_wait: unsafe extern "C" fn(Handle) -> Status,
    md_create_with_tag:
        unsafe extern "C" fn(*mut Handle, c_int, *const i64, c_int, c_int) -> Status,
    matmul_pd_create:
        unsafe extern "C" fn(*mut Handle, Handle, Handle, Handle, Handle, Handle, Handle) -> Status,
    reorder_pd_create:
        unsafe extern "C" fn(*mut Handle, Handle, Handle, Handle, Handle, Handle) -> Status,
    pd_query_md: unsafe extern "C" fn(Handle, c_int, c_int) -> Handle,
    primitive_create: unsafe extern "C" fn(*mut Handle, Handle) -> Status,
    primitive_execute: unsafe extern "C" fn(Handle, Handle, c_int, *const ExecArg) -> Status,
    memory_create: unsafe extern "C" fn(*mut Handle, Handle, Handle, *mut c_void) -> Status,
    memory_get_data_handle: unsafe extern "C" fn(Handle, *mut *mut c_void) -> Status,
    primitive_destroy: unsafe extern "C" fn(Handle) -> Status,
    pd_destroy: unsafe extern "C" fn(Handle) -> Status,
    memory_destroy: unsafe extern "C" fn(Handle) -> Status,
    md_destroy: unsafe extern "C" fn(Handle) -> Status,
    /// `omp_set_num_threads` of the library's OpenMP runtime, when it exports one.
    set_num_threads: Option<unsafe extern "C" fn(c_int)>,
}

// The C API's constants (oneDNN 3.x `dnnl_types.h`, `dnnl_common_types.h`).
const ENGINE_CPU: c_int = 1;
const STREAM_IN_ORDER: u32 = 1;
const TAG_ANY: c_int = 1;
const TAG_AB: c_int = 3;
const QUERY_WEIGHTS_MD: c_int = 131;
const ARG_SRC: c_int = 1;
const ARG_DST: c_int = 17;
const ARG_WEIGHTS: c_int = 33;
const DT_F16: c_int = 1;
const DT_BF16: c_int = 2;
const DT_F32: c_int = 3;
const DT_S32: c_int = 4;
const DT_S8: c_int = 5;
const DT_U8: c_int = 6;
/// `DNNL_MEMORY_ALLOCATE`: the library allocates the buffer.
const ALLOCATE: *mut c_void = usize::MAX as *mut c_void;

/// A loaded oneDNN, its CPU engine and a stream.
pub struct Peer {
    api: Api,
    engine: Handle,
    stream: Handle,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer").finish_non_exhaustive()
    }
}

fn check(function: &'static str, status: Status) -> Result<(), PeerError> {
    if status == 0 {
        Ok(())
    } else {
        Err(PeerError::Call { function, status })
    }
}

#[cfg(target_os = "linux")]
fn symbol(lib: Handle, name: &'static str) -> Result<*mut c_void, PeerError> {
    let c = CString::new(name).map_err(|_| PeerError::Symbol(name))?;
    // SAFETY: `lib` is a handle dlopen returned and never closed; `c` is a NUL-terminated
    // string alive for the call.
    let f = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if f.is_null() {
        Err(PeerError::Symbol(name))
    } else {
        Ok(f)
    }
}

/// `dlopen`s `path`, first loading from its directory, by full path, each library it needs that
/// the dynamic linker does not find (oneDNN's wheels ship `libdnnl.so` beside its OpenMP and
/// math libraries without a search path for them). A library loaded this way is found by its
/// name afterwards, so `path` then loads.
#[cfg(target_os = "linux")]
fn open_with_neighbours(path: &Path) -> Result<Handle, PeerError> {
    use std::os::unix::ffi::OsStrExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut target = path.to_path_buf();
    let mut pending = Vec::new();
    // Each missing library is loaded at most once; a chain longer than this is not oneDNN's.
    for _ in 0..32 {
        let c = CString::new(target.as_os_str().as_bytes())
            .map_err(|_| PeerError::Open(format!("{}: a NUL in the path", target.display())))?;
        // SAFETY: `c` is a NUL-terminated path. Loading runs the library's constructors, which
        // is what loading it means; RTLD_GLOBAL lets later libraries (and `omp_set_num_threads`)
        // find its symbols.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if !lib.is_null() {
            match pending.pop() {
                // The library that needed this one: try it again.
                Some(previous) => {
                    target = previous;
                    continue;
                }
                None => return Ok(lib),
            }
        }
        let why = dl_error();
        let missing = why
            .split(": cannot open shared object file")
            .next()
            .and_then(|head| head.rsplit(": ").next())
            .filter(|name| !name.contains('/') && why.contains("cannot open shared object file"));
        let beside = missing.map(|name| dir.join(name));
        match beside {
            Some(file) if file.exists() && !pending.contains(&file) && file != target => {
                pending.push(std::mem::replace(&mut target, file));
            }
            _ => return Err(PeerError::Open(why)),
        }
    }
    Err(PeerError::Open(format!(
        "{}: too many missing libraries",
        path.display()
    )))
}

/// The function `name` of `lib` as the function pointer type `F`.
///
/// # Safety
/// `F` is an `unsafe extern "C" fn` type with the symbol's C signature.
#[cfg(target_os = "linux")]
unsafe fn function<F: Copy>(lib: Handle, name: &'static str) -> Result<F, PeerError> {
    let f = symbol(lib, name)?;
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: `F` is a function pointer (the caller's contract; the sizes match, checked at
    // compile time) and `f` the non-null address of a function with its signature.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&f) })
}

/// The last `dlerror` message of this thread.
#[cfg(target_os = "linux")]
fn dl_error() -> String {
    // SAFETY: dlerror returns a NUL-terminated string owned by libc, or null.
    let why = unsafe { libc::dlerror() };
    if why.is_null() {
        "unknown error".to_owned()
    } else {
        // SAFETY: non-null: a valid C string until the next dl* call on this thread.
        unsafe { std::ffi::CStr::from_ptr(why as *const c_char) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Peer {
    /// Loads oneDNN from `path` (a `libdnnl.so`) and creates its CPU engine. The library stays
    /// loaded for the life of the process.
    ///
    /// # Errors
    /// [`PeerError::Open`] when `dlopen` fails, [`PeerError::Symbol`] when the library is not
    /// oneDNN 3.x, [`PeerError::Call`] when the engine cannot be created.
    #[cfg(target_os = "linux")]
    pub fn open(path: &Path) -> Result<Peer, PeerError> {
        // Intel's OpenMP keeps its idle threads spinning for 200 ms after a parallel region by
        // default: on the cores the next `amx-gemm` repetition runs on. Unless the user chose
        // otherwise, they go to sleep at once. The runtime reads this when it starts, which is
        // after this point; `amx-bench` opens the peer before it starts any thread of its own.
        if std::env::var_os("KMP_BLOCKTIME").is_none() {
            std::env::set_var("KMP_BLOCKTIME", "0");
        }
        let lib = open_with_neighbours(path)?;
        macro_rules! load {
            ($name:literal) => {
                // SAFETY: the symbol is oneDNN 3.x's C API function of this name, and the
                // field it initializes has that function's C signature (`dnnl.h`,
                // `dnnl_common.h`).
                unsafe { function(lib, $name)? }
            };
        }
        // SAFETY: OpenMP's `void omp_set_num_threads(int)`.
        let set_num_threads = unsafe { function(lib, "omp_set_num_threads") }.ok();
        let api = Api {
            engine_create: load!("dnnl_engine_create"),
            stream_create: load!("dnnl_stream_create"),
            stream_wait: load!("dnnl_stream_wait"),
            md_create_with_tag: load!("dnnl_memory_desc_create_with_tag"),
            matmul_pd_create: load!("dnnl_matmul_primitive_desc_create"),
            reorder_pd_create: load!("dnnl_reorder_primitive_desc_create"),
            pd_query_md: load!("dnnl_primitive_desc_query_md"),
            primitive_create: load!("dnnl_primitive_create"),
            primitive_execute: load!("dnnl_primitive_execute"),
            memory_create: load!("dnnl_memory_create"),
            memory_get_data_handle: load!("dnnl_memory_get_data_handle"),
            primitive_destroy: load!("dnnl_primitive_destroy"),
            pd_destroy: load!("dnnl_primitive_desc_destroy"),
            memory_destroy: load!("dnnl_memory_destroy"),
            md_destroy: load!("dnnl_memory_desc_destroy"),
            set_num_threads,
        };
        let mut engine = std::ptr::null_mut();
        let mut stream = std::ptr::null_mut();
        // SAFETY: out-pointers to locals; the functions are the C API's (see `load!`).
        unsafe {
            check(
                "dnnl_engine_create",
                (api.engine_create)(&mut engine, ENGINE_CPU, 0),
            )?;
            check(
                "dnnl_stream_create",
                (api.stream_create)(&mut stream, engine, STREAM_IN_ORDER),
            )?;
        }
        Ok(Peer {
            api,
            engine,
            stream,
        })
    }

    /// Not available off Linux.
    ///
    /// # Errors
    /// Always [`PeerError::Unsupported`].
    #[cfg(not(target_os = "linux"))]
    pub fn open(_path: &Path) -> Result<Peer, PeerError> {
        Err(PeerError::Unsupported)
    }

    /// Sets the library's OpenMP thread count, where its runtime exports
    /// `omp_set_num_threads`; returns whether it could.
    pub fn set_threads(&self, threads: usize) -> bool {
        match self.api.set_num_threads {
            Some(f) => {
                // SAFETY: OpenMP's `omp_set_num_threads`, any positive count.
                unsafe { f(threads.clamp(1, c_int::MAX as usize) as c_int) };
                true
            }
            None => false,
        }
    }

    /// A 2-D memory descriptor of `rows x cols` elements of `dtype` in layout `tag`.
    fn md(&self, rows: i64, cols: i64, dtype: c_int, tag: c_int) -> Result<Handle, PeerError> {
        let mut dims: Dims = [0; 12];
        dims[0] = rows;
        dims[1] = cols;
        let mut md = std::ptr::null_mut();
        // SAFETY: `dims` holds DNNL_MAX_NDIMS entries, 2 used; `md` is an out-pointer.
        check("dnnl_memory_desc_create_with_tag", unsafe {
            (self.api.md_create_with_tag)(&mut md, 2, dims.as_ptr(), dtype, tag)
        })?;
        Ok(md)
    }

    /// A memory object for `md`, allocated by the library, filled from `data` when given
    /// (`data` must be the descriptor's plain size).
    fn memory(&self, md: Handle, data: Option<&[u8]>) -> Result<Handle, PeerError> {
        let mut mem = std::ptr::null_mut();
        // SAFETY: `md` is a live descriptor of this library; `mem` an out-pointer.
        check("dnnl_memory_create", unsafe {
            (self.api.memory_create)(&mut mem, md, self.engine, ALLOCATE)
        })?;
        if let Some(data) = data {
            let dst = self.data(mem)?;
            // SAFETY: the library allocated the descriptor's size, which the callers make
            // exactly `data.len()` bytes (a plain `ab` layout of the matrix `data` holds).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.cast::<u8>(), data.len()) };
        }
        Ok(mem)
    }

    fn data(&self, mem: Handle) -> Result<*mut c_void, PeerError> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `mem` is a live memory object; `ptr` an out-pointer.
        check("dnnl_memory_get_data_handle", unsafe {
            (self.api.memory_get_data_handle)(mem, &mut ptr)
        })?;
        Ok(ptr)
    }

    fn execute(&self, primitive: Handle, args: &[ExecArg]) -> Result<(), PeerError> {
        // SAFETY: `primitive` is a live primitive of this library, `args` the memory objects it
        // takes, all alive; the stream is this peer's.
        unsafe {
            check(
                "dnnl_primitive_execute",
                (self.api.primitive_execute)(
                    primitive,
                    self.stream,
                    args.len() as c_int,
                    args.as_ptr(),
                ),
            )?;
            check("dnnl_stream_wait", (self.api.stream_wait)(self.stream))
        }
    }

    /// oneDNN's matmul of `dtype` for `m x n x k`: A (`m x k`, row-major, `a` its bytes) and B
    /// (`k x n`, row-major, `b` its bytes) are copied in, and B is reordered once into the
    /// layout the matmul chose.
    ///
    /// # Errors
    /// [`PeerError::Shape`] when a buffer is not the shape's size, [`PeerError::Call`] when
    /// oneDNN refuses the matmul (e.g. no kernel for the types on this CPU).
    pub fn matmul(
        &self,
        dtype: PrecisionKind,
        (m, n, k): (usize, usize, usize),
        a: &[u8],
        b: &[u8],
    ) -> Result<Matmul<'_>, PeerError> {
        let (a_dt, b_dt, c_dt, size) = match dtype {
            PrecisionKind::Int8 => (DT_S8, DT_S8, DT_S32, 1),
            PrecisionKind::U8S8 => (DT_U8, DT_S8, DT_S32, 1),
            PrecisionKind::Bf16 => (DT_BF16, DT_BF16, DT_F32, 2),
            PrecisionKind::Fp16 => (DT_F16, DT_F16, DT_F32, 2),
            // oneDNN's integer matmul takes signed weights only.
            other => return Err(PeerError::Precision(other)),
        };
        let dim =
            |x: usize| i64::try_from(x).map_err(|_| PeerError::Shape(format!("{x} too large")));
        let (mi, ni, ki) = (dim(m)?, dim(n)?, dim(k)?);
        let bytes = |r: usize, c: usize| r.checked_mul(c).and_then(|x| x.checked_mul(size));
        if bytes(m, k) != Some(a.len()) || bytes(k, n) != Some(b.len()) {
            return Err(PeerError::Shape(format!(
                "{m}x{n}x{k} needs {:?} bytes of A and {:?} of B, given {} and {}",
                bytes(m, k),
                bytes(k, n),
                a.len(),
                b.len()
            )));
        }
        // Every object goes into `owned` as it is made, so an error part way frees what exists.
        let mut owned = Owned {
            peer: self,
            mds: Vec::new(),
            pds: Vec::new(),
            primitives: Vec::new(),
            memories: Vec::new(),
        };
        let a_md = owned.md(self.md(mi, ki, a_dt, TAG_AB)?);
        let b_plain = owned.md(self.md(ki, ni, b_dt, TAG_AB)?);
        let b_any = owned.md(self.md(ki, ni, b_dt, TAG_ANY)?);
        let c_md = owned.md(self.md(mi, ni, c_dt, TAG_AB)?);
        let mut pd = std::ptr::null_mut();
        // SAFETY: live descriptors of this library; no bias, default attributes (null).
        check("dnnl_matmul_primitive_desc_create", unsafe {
            (self.api.matmul_pd_create)(
                &mut pd,
                self.engine,
                a_md,
                b_any,
                std::ptr::null_mut(),
                c_md,
                std::ptr::null_mut(),
            )
        })?;
        owned.pds.push(pd);
        // SAFETY: `pd` is the live primitive descriptor just created; the descriptor returned
        // belongs to it (not to be destroyed separately).
        let b_md = unsafe { (self.api.pd_query_md)(pd, QUERY_WEIGHTS_MD, 0) };
        let mut primitive = std::ptr::null_mut();
        // SAFETY: as above.
        check("dnnl_primitive_create", unsafe {
            (self.api.primitive_create)(&mut primitive, pd)
        })?;
        owned.primitives.push(primitive);
        let a_mem = owned.memory(self.memory(a_md, Some(a))?);
        let b_src = owned.memory(self.memory(b_plain, Some(b))?);
        let b_mem = owned.memory(self.memory(b_md, None)?);
        let c_mem = owned.memory(self.memory(c_md, None)?);
        let mut reorder_pd = std::ptr::null_mut();
        // SAFETY: live descriptors and engine of this library.
        check("dnnl_reorder_primitive_desc_create", unsafe {
            (self.api.reorder_pd_create)(
                &mut reorder_pd,
                b_plain,
                self.engine,
                b_md,
                self.engine,
                std::ptr::null_mut(),
            )
        })?;
        owned.pds.push(reorder_pd);
        let mut reorder = std::ptr::null_mut();
        // SAFETY: as above.
        check("dnnl_primitive_create", unsafe {
            (self.api.primitive_create)(&mut reorder, reorder_pd)
        })?;
        owned.primitives.push(reorder);
        self.execute(
            reorder,
            &[
                ExecArg {
                    arg: ARG_SRC,
                    memory: b_src,
                },
                ExecArg {
                    arg: ARG_DST,
                    memory: b_mem,
                },
            ],
        )?;
        Ok(Matmul {
            owned,
            primitive,
            args: [
                ExecArg {
                    arg: ARG_SRC,
                    memory: a_mem,
                },
                ExecArg {
                    arg: ARG_WEIGHTS,
                    memory: b_mem,
                },
                ExecArg {
                    arg: ARG_DST,
                    memory: c_mem,
                },
            ],
            c_bytes: m * n * 4,
        })
    }
}

/// The oneDNN objects of one matmul, destroyed together.
struct Owned<'p> {
    peer: &'p Peer,
    mds: Vec<Handle>,
    pds: Vec<Handle>,
    primitives: Vec<Handle>,
    memories: Vec<Handle>,
}

impl Owned<'_> {
    fn md(&mut self, md: Handle) -> Handle {
        self.mds.push(md);
        md
    }

    fn memory(&mut self, mem: Handle) -> Handle {
        self.memories.push(mem);
        mem
    }
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        let api = &self.peer.api;
        // SAFETY: each handle was created by this library and is destroyed once, users first
        // (primitives, then memory objects, then the descriptors they were made from).
        unsafe {
            for &p in &self.primitives {
                (api.primitive_destroy)(p);
            }
            for &m in &self.memories {
                (api.memory_destroy)(m);
            }
            for &p in &self.pds {
                (api.pd_destroy)(p);
            }
            for &m in &self.mds {
                (api.md_destroy)(m);
            }
        }
    }
}

/// A ready oneDNN matmul (see [`Peer::matmul`]); its objects are freed when it is dropped.
pub struct Matmul<'p> {
    owned: Owned<'p>,
    primitive: Handle,
    args: [ExecArg; 3],
    c_bytes: usize,
}

impl fmt::Debug for Matmul<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matmul").finish_non_exhaustive()
    }
}

impl Matmul<'_> {
    /// Runs the product once and waits for it.
    ///
    /// # Errors
    /// [`PeerError::Call`] when oneDNN reports a failure.
    pub fn run(&mut self) -> Result<(), PeerError> {
        self.owned.peer.execute(self.primitive, &self.args)
    }

    /// C as oneDNN wrote it (`m x n` `i32` or `f32`, row-major), in the machine's byte order.
    ///
    /// # Errors
    /// [`PeerError::Call`] when its buffer cannot be queried.
    pub fn c(&self) -> Result<&[u8], PeerError> {
        let ptr = self.owned.peer.data(self.args[2].memory)?;
        // SAFETY: the library allocated `m x n` elements of 4 bytes for the plain `ab`
        // destination, alive as long as `self` (its memory object); nothing writes it
        // while `&self` is borrowed (only `run`, which takes `&mut self`).
        Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), self.c_bytes) })
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error() {
        let e = Peer::open(Path::new("/nonexistent/libdnnl.so")).unwrap_err();
        assert!(matches!(e, PeerError::Open(_)), "{e}");
        assert!(e.to_string().starts_with("cannot load oneDNN: "), "{e}");
    }

    #[test]
    fn a_library_that_is_not_onednn_is_an_error() {
        // libc is loaded in every process: dlopen succeeds, the C API is absent.
        let e = Peer::open(Path::new("libc.so.6")).unwrap_err();
        assert_eq!(e, PeerError::Symbol("dnnl_engine_create"));
    }

    /// With oneDNN at hand (`AMX_TEST_ONEDNN` = its libdnnl.so), its integer matmul equals a
    /// direct sum; elsewhere the test says why it did not run.
    #[test]
    fn onednn_matmul_when_available() {
        let Some(path) = std::env::var_os("AMX_TEST_ONEDNN") else {
            eprintln!("skipping: set AMX_TEST_ONEDNN to a libdnnl.so to run oneDNN here");
            return;
        };
        let peer = Peer::open(Path::new(&path)).unwrap();
        let (m, n, k) = (3, 5, 70);
        let a: Vec<u8> = (0..m * k).map(|i| (i * 7 % 256) as u8).collect();
        let b: Vec<i8> = (0..k * n).map(|i| (i * 5 % 251) as i8).collect();
        let b_bytes: Vec<u8> = b.iter().map(|&x| x as u8).collect();
        let mut mm = peer
            .matmul(PrecisionKind::U8S8, (m, n, k), &a, &b_bytes)
            .unwrap();
        mm.run().unwrap();
        let c: Vec<i32> = mm
            .c()
            .unwrap()
            .chunks_exact(4)
            .map(|w| i32::from_ne_bytes(w.try_into().unwrap()))
            .collect();
        for i in 0..m {
            for j in 0..n {
                let want: i32 = (0..k)
                    .map(|p| a[i * k + p] as i32 * b[p * n + j] as i32)
                    .sum();
                assert_eq!(c[i * n + j], want, "({i}, {j})");
            }
        }
        assert!(matches!(
            peer.matmul(PrecisionKind::U8S8, (m, n, k), &a[1..], &b_bytes),
            Err(PeerError::Shape(_))
        ));
    }
}
