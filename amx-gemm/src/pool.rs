//! Persistent worker pools, one per thread count, built on first use and kept for the process.
//!
//! Tile state belongs to a thread, and the runtime skips LDTILECFG when a thread already holds
//! the configuration it asks for. Keeping the same threads from call to call, and giving worker
//! `i` the same part of the same shape each time (rayon's `broadcast` runs job `i` on pool
//! thread `i`), is what makes a repeated GEMM load no configuration at all.

use std::sync::{Arc, Mutex, MutexGuard};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{GemmError, ThreadPoolError};

/// The pools of one process.
struct Pools {
    /// The process that built them (0 before the first pool).
    pid: u32,
    /// One pool per thread count.
    list: Vec<(usize, Arc<ThreadPool>)>,
}

static POOLS: Mutex<Pools> = Mutex::new(Pools {
    pid: 0,
    list: Vec::new(),
});

/// This process's pools, locked. In a forked child the parent's pools are forgotten: their
/// threads do not exist here, and dropping them would signal threads that will never answer.
/// (They are leaked: a handful of small allocations per fork.)
fn pools() -> MutexGuard<'static, Pools> {
    // A poisoned lock only means another thread panicked while holding it; the list itself is
    // always consistent (one push), so keep using it.
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if pools.pid != pid {
        for inherited in pools.list.drain(..) {
            std::mem::forget(inherited);
        }
        pools.pid = pid;
    }
    pools
}

/// `threads`, unless it is above [`Gemm::MAX_THREADS`](crate::Gemm::MAX_THREADS) (or what rayon
/// can run).
pub(crate) fn check_threads(threads: usize) -> Result<usize, GemmError> {
    let max = crate::Gemm::MAX_THREADS.min(rayon::max_num_threads());
    if threads > max {
        return Err(GemmError::TooManyThreads {
            requested: threads,
            max,
        });
    }
    Ok(threads)
}

/// The pool of exactly `threads` workers (`1 <= threads <= Gemm::MAX_THREADS`).
pub(crate) fn pool(threads: usize) -> Result<Arc<ThreadPool>, GemmError> {
    check_threads(threads)?;
    let mut pools = pools();
    if let Some((_, pool)) = pools.list.iter().find(|(n, _)| *n == threads) {
        return Ok(Arc::clone(pool));
    }
    let pool = ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("amx-gemm-{threads}.{i}"))
        .build()
        .map_err(|e| GemmError::ThreadPool(ThreadPoolError::build(threads, e)))?;
    // Every worker index must run: a pool with fewer threads would leave parts of C unwritten.
    if pool.current_num_threads() != threads {
        return Err(GemmError::ThreadPool(ThreadPoolError::size(
            threads,
            pool.current_num_threads(),
        )));
    }
    let pool = Arc::new(pool);
    pools.list.push((threads, Arc::clone(&pool)));
    Ok(pool)
}

/// Threads the process may run in parallel (1 when unknown).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Releases the tiles (TILERELEASE) of every worker thread this crate has started, and of the
/// calling thread, on `backend`.
///
/// Workers keep their tile configurations loaded between calls so that the next call loads
/// none; while a thread holds tile state, every context switch of it saves and restores that
/// state. Call this when the process is done with GEMMs for a while. The next call simply loads
/// the configurations again.
pub fn release_tiles(backend: amx_runtime::Backend) -> Result<(), GemmError> {
    let pools: Vec<Arc<ThreadPool>> = pools().list.iter().map(|(_, p)| Arc::clone(p)).collect();
    for pool in pools {
        for r in pool.broadcast(|_| amx_runtime::release_on(backend)) {
            r?;
        }
    }
    amx_runtime::release_on(backend)?;
    Ok(())
}
