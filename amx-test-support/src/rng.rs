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
    }
}
