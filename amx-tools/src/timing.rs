//! Timing loops: per-call costs calibrated to a target duration, and two operations timed in
//! alternation so that drifts in clock or load hit both alike.

use std::time::{Duration, Instant};

use crate::stats::Sample;

/// Seconds of CPU time this process has used so far, all threads (`CLOCK_PROCESS_CPUTIME_ID`);
/// `None` where the clock cannot be read. The difference over a timed run, unlike the wall
/// time, leaves out the time other processes held the cores: on a shared machine it is what
/// the run would take alone, up to the caches the others disturbed.
pub fn process_cpu_s() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to `ts`, a live local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// Nanoseconds per call of `op`: the number of calls in one sample is calibrated so that a
/// sample lasts about `target`; one warm-up sample, then the [`Sample`] of `reps` samples
/// (`None` when `reps` is 0).
pub fn per_call_ns(target: Duration, reps: usize, mut op: impl FnMut()) -> Option<Sample> {
    let start = Instant::now();
    op();
    let one = start.elapsed().max(Duration::from_nanos(20));
    let calls = (target.as_nanos() / one.as_nanos()).clamp(1, 10_000_000) as u32;
    let mut sample = || {
        let start = Instant::now();
        for _ in 0..calls {
            op();
        }
        start.elapsed().as_nanos() as f64 / f64::from(calls)
    };
    sample();
    let v: Vec<f64> = (0..reps).map(|_| sample()).collect();
    Sample::of(&v)
}

/// Seconds per run of `first` and of `second`: one untimed run of each, then `reps` timed
/// rounds of `first` followed by `second`. An error of either ends the timing and is returned.
/// Each sample is `None` only when `reps` is 0.
pub fn interleaved<E>(
    reps: usize,
    mut first: impl FnMut() -> Result<(), E>,
    mut second: impl FnMut() -> Result<(), E>,
) -> Result<(Option<Sample>, Option<Sample>), E> {
    first()?;
    second()?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        first()?;
        a.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        second()?;
        b.push(t.elapsed().as_secs_f64());
    }
    Ok((Sample::of(&a), Sample::of(&b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_runs_each_once_more_than_timed_and_alternates() {
        let order = std::cell::RefCell::new(Vec::new());
        let (a, b) = interleaved::<()>(
            3,
            || {
                order.borrow_mut().push('a');
                Ok(())
            },
            || {
                order.borrow_mut().push('b');
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(order.into_inner(), "abababab".chars().collect::<Vec<_>>());
        assert_eq!((a.unwrap().samples, b.unwrap().samples), (3, 3));
    }

    #[test]
    fn interleaved_stops_at_the_first_error() {
        let mut calls = 0;
        let r = interleaved(
            5,
            || Ok(()),
            || {
                calls += 1;
                if calls == 2 {
                    Err("second run failed")
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(r, Err("second run failed"));
        assert_eq!(calls, 2);
    }

    #[test]
    fn per_call_counts_samples() {
        let mut n = 0u64;
        let s = per_call_ns(Duration::from_micros(200), 4, || n += 1).unwrap();
        assert_eq!(s.samples, 4);
        assert!(s.min > 0.0 && s.min <= s.median && s.median <= s.max);
        assert!(per_call_ns(Duration::from_micros(10), 0, || {}).is_none());
    }
}
