//! The cfgs of the Slurm release slurm-sys was built against (its build script is the one
//! place that knows what differs between releases; see slurm-sys/build.rs).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SLURM_CFGS");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_ALL_CFGS");
    let var = |name| std::env::var(name).unwrap_or_default();
    for cfg in var("DEP_SLURM_ALL_CFGS")
        .split(',')
        .filter(|c| !c.is_empty())
    {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }
    for cfg in var("DEP_SLURM_CFGS").split(',').filter(|c| !c.is_empty()) {
        println!("cargo:rustc-cfg={cfg}");
    }
}
