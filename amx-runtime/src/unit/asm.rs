//! Raw inline-asm wrappers, one per instruction (placeholder).
