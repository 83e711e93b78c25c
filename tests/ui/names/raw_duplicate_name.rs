// `r#a` is the name `a`: given twice, and `r#t3` is still a register's name.
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Kernel;
    palette 1;
    t0 as a: 16x16 i32;
    t1 as r#a: 16x64 i8;
    t2 as r#t3: 16x64 i8;
}

fn main() {}
