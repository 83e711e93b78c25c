//! Seeded, reproducible test data.
//!
//! SplitMix64 is written out here (20 lines) rather than taken from `rand`: the tests need
//! the same stream for the same seed on every platform and every dependency version, so a
//! failure reported with its seed replays exactly; `rand`'s small generators do not promise
//! a stable stream across releases.

/// One step of the SplitMix64 generator: the output for `state`, whose successor state is
/// `state + 0x9E37_79B9_7F4A_7C15` (see [`SplitMix64`]).
pub fn splitmix(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A SplitMix64 stream from a seed.
///
/// Its first output is the reference generator's; after that each state is the previous
/// output (not the reference's state plus the increment), so the stream is the reference's only
/// at its first value. It stays so: seeds recorded with failures replay these exact streams.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The stream that starts from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let out = splitmix(self.state);
        self.state = out;
        out
    }

    /// A uniform value in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// Fills `buf` with the bytes [`bytes`](SplitMix64::bytes) would give.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for byte in buf {
            *byte = self.next_u64() as u8;
        }
    }

    /// A value in `0..n` (`n` > 0; the slight modulo bias is of no matter for test data).
    ///
    /// # Panics
    ///
    /// When `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `true` with a probability of `percent` in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// An element type [`random`] can produce.
pub trait Random: Copy {
    /// The value for a uniform `unit` in `[0, 1)`: integers over their whole range (`i32`:
    /// within `+-2^20`, so sums of products stay far from overflow), floating point uniform in
    /// `[-1, 1)` rounded to the type (no denormals).
    fn from_unit(unit: f64) -> Self;
}

macro_rules! random_int {
    ($($t:ty),*) => {$(
        impl Random for $t {
            fn from_unit(unit: f64) -> Self {
                let (low, high) = (f64::from(<$t>::MIN), f64::from(<$t>::MAX));
                (low + unit * (high - low + 1.0)).floor() as $t
            }
        }
    )*};
}
random_int!(i8, u8, i16, u16);

impl Random for i32 {
    fn from_unit(unit: f64) -> Self {
        ((unit * 2.0 - 1.0) * f64::from(1 << 20)).round() as i32
    }
}

impl Random for f32 {
    fn from_unit(unit: f64) -> Self {
        (2.0 * unit - 1.0) as f32
    }
}

impl Random for f64 {
    fn from_unit(unit: f64) -> Self {
        2.0 * unit - 1.0
    }
}

impl Random for half::bf16 {
    fn from_unit(unit: f64) -> Self {
        half::bf16::from_f64(2.0 * unit - 1.0)
    }
}

impl Random for half::f16 {
    fn from_unit(unit: f64) -> Self {
        half::f16::from_f64(2.0 * unit - 1.0)
    }
}

/// FP8 values: uniform in `[-1, 1)` rounded to the format, its denormals included (the AMX-FP8
/// products read them as values).
#[cfg(feature = "runtime")]
impl Random for amx_runtime::Bf8 {
    fn from_unit(unit: f64) -> Self {
        amx_runtime::Bf8::from_f32((2.0 * unit - 1.0) as f32)
    }
}

/// As for [`amx_runtime::Bf8`].
#[cfg(feature = "runtime")]
impl Random for amx_runtime::Hf8 {
    fn from_unit(unit: f64) -> Self {
        amx_runtime::Hf8::from_f32((2.0 * unit - 1.0) as f32)
    }
}

/// `len` random elements from `seed` (see [`Random`] for the distribution of each type).
pub fn random<T: Random>(len: usize, seed: u64) -> Vec<T> {
    let mut rng = SplitMix64::new(seed);
    (0..len).map(|_| T::from_unit(rng.unit())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_cover_their_range_and_stay_inside_it() {
        let data: Vec<i8> = random(20_000, 7);
        assert!(data.contains(&i8::MIN) && data.contains(&i8::MAX));
        let data: Vec<u8> = random(20_000, 7);
        assert!(data.contains(&0) && data.contains(&u8::MAX));
        let data: Vec<i32> = random(20_000, 7);
        assert!(data.iter().all(|x| x.abs() <= 1 << 20));
    }

    #[test]
    fn floats_lie_in_the_unit_interval() {
        let data: Vec<f32> = random(10_000, 3);
        assert!(data.iter().all(|x| (-1.0..1.0).contains(x)));
        assert!(data.iter().any(|&x| x < -0.9) && data.iter().any(|&x| x > 0.9));
    }

    #[test]
    fn same_seed_same_stream_and_known_first_value() {
        assert_eq!(random::<u8>(64, 11), random::<u8>(64, 11));
        assert_ne!(random::<u8>(64, 11), random::<u8>(64, 12));
        // The published SplitMix64 reference output for seed 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        // The state after it is that output: the stream recorded seeds replay.
        let mut rng = SplitMix64::new(0);
        rng.next_u64();
        assert_eq!(rng.next_u64(), splitmix(0xE220_A839_7B1D_CDAF));
    }

    #[test]
    fn fill_gives_the_bytes_of_the_stream() {
        let mut buf = [0u8; 37];
        SplitMix64::new(5).fill(&mut buf);
        assert_eq!(buf.to_vec(), SplitMix64::new(5).bytes(37));
        let mut rng = SplitMix64::new(9);
        let draws: Vec<u64> = (0..1000).map(|_| rng.below(7)).collect();
        assert!(draws.iter().all(|&d| d < 7) && (0..7).all(|v| draws.contains(&v)));
        let mut rng = SplitMix64::new(9);
        let hits = (0..10_000).filter(|_| rng.chance(30)).count();
        assert!((2_500..3_500).contains(&hits), "{hits}");
    }
}
