#!/usr/bin/env python3
"""Derives the coefficient tables of amx-gemm's GELU activations (amx-gemm/src/activation.rs).

Each GELU is `x * g(x)` with a gate `g` that satisfies `g(-x) = 1 - g(x)`: the normal CDF, or
the sigmoid of the tanh form's argument. The crate evaluates `h = g(|x|)` as one of 8
polynomials of degree 5 in `t`, where

    y = min(|x| * scale, 7),  n = round_half_even(y),  t = y - n  (in [-0.5, 0.5])

and polynomial `n` covers `|x|` in `[(n - 0.5) / scale, (n + 0.5) / scale]`. Polynomial 7 is the
constant 1: past `6.5 / scale` (5.2) the gate is 1 to within 2^-21, so large inputs come out
exact (GELU(x) = x, GELU(-x) = -0). The others interpolate `g` at the 6 Chebyshev nodes of
their interval, in double precision, and are rounded to f32. Eight polynomials are what one
256-bit register permute (AVX2's vpermps) selects from.

Run it to print the tables as Rust and the worst error of the gate over a dense sweep, evaluated
in simulated f32 arithmetic exactly as the crate does (fused multiply-adds, one rounding each).
The crate's own test (`activations_are_within_their_bound`) checks the final functions against
f64 references; this script is how the tables were made, so that they can be remade.
"""
import math
import struct

DEGREE = 5
INTERVALS = 8
MAGIC = 12582912.0  # 1.5 * 2^23: adding and subtracting it rounds to an integer


def f32(v):
    return struct.unpack("f", struct.pack("f", v))[0]


def bits(v):
    return struct.unpack("I", struct.pack("f", v))[0]


def fma32(a, b, c):
    # a * b is exact in double for f32 operands; the sum's double rounding cannot matter at the
    # precision this script reports.
    return f32(a * b + c)


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gate_gelu_tanh(x):
    z = -2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x**3)
    return 0.0 if z > 700 else 1.0 / (1.0 + math.exp(z))


def gate_gelu_erf(x):
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


# Each scale is exact in f32.
GATES = [
    ("GELU_TANH", gate_gelu_tanh, 1.25),
    ("GELU_ERF", gate_gelu_erf, 1.25),
]


def solve(a, b):
    """Gaussian elimination with partial pivoting (the systems are 6 x 6)."""
    n = len(b)
    m = [row[:] + [v] for row, v in zip(a, b)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(gate, scale):
    """table[n][k]: coefficient k of interval n."""
    table = []
    for n in range(INTERVALS):
        if n == INTERVALS - 1:
            table.append([1.0] + [0.0] * DEGREE)
            continue
        nodes = [
            0.5 * math.cos(math.pi * (2 * j + 1) / (2 * (DEGREE + 1))) for j in range(DEGREE + 1)
        ]
        a = [[t**k for k in range(DEGREE + 1)] for t in nodes]
        b = [gate((n + t) / scale) for t in nodes]
        table.append([f32(v) for v in solve(a, b)])
    return table


def evaluate(x, table, scale):
    y = min(f32(abs(x) * scale), float(INTERVALS - 1))
    s = f32(y + MAGIC)
    t = f32(y - f32(s - MAGIC))
    c = table[bits(s) & (INTERVALS - 1)]
    h = c[DEGREE]
    for k in range(DEGREE - 1, -1, -1):
        h = fma32(h, t, c[k])
    return f32(1.0 - h) if x < 0 else h


def main():
    for name, gate, scale in GATES:
        table = fit(gate, scale)
        worst, at = 0.0, 0.0
        steps = 400_000
        for j in range(steps + 1):
            x = f32(-20.0 + 40.0 * j / steps)
            err = abs(evaluate(x, table, scale) - gate(x))
            if err > worst:
                worst, at = err, x
        print(f"// {name}: scale {scale}, worst gate error {worst:.3e} (2^{math.log2(worst):.2f}) at {at}")
        print(f"const {name}: Gate = Gate {{")
        print(f"    scale: {scale},")
        print("    coeffs: [")
        for k in range(DEGREE + 1):
            row = ", ".join(f"0x{bits(table[n][k]):08x}" for n in range(INTERVALS))
            print(f"        bits([{row}]),")
        print("    ],")
        print("};")


if __name__ == "__main__":
    main()
