//! accountd's governor reads Slurm through libslurm (src/slurm_api.rs): link it. The plugin,
//! which shares slurm-sys, must not (slurmctld provides Slurm's symbols to it), so the link is
//! asked for here and not in slurm-sys; cargo passes it on to whatever links this crate
//! (accountd's binary, its tests and benches).

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_LIB_DIR");
    if let Some(dir) = std::env::var_os("SLURM_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir.to_string_lossy());
    }
    println!("cargo:rustc-link-lib=dylib=slurm");
}
