//! The fake NVML library (contrib/fake-nvml) read in-process through nvml-wrapper, as
//! `accountd sample` reads the real one. Alone in its test binary: it sets an environment
//! variable for the library, which no other thread may be reading meanwhile.

// Test code: a scenario reads top to bottom, so the workspace's 80-line limit is not for it.
#![allow(clippy::too_many_lines)]

mod sample_support;

use accountd::sample::gpu::Gpus;
use sample_support::{fake_nvml, Site};

#[test]
fn the_fake_library_is_read_through_nvml_wrapper() {
    let site = Site::new();
    // The library reads its script at init, from the environment of this process.
    std::env::set_var("FAKE_NVML_SCRIPT", site.path("script"));
    let gpus = Gpus::open(fake_nvml()).unwrap();
    let (readings, errors) = gpus.read().unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let seen: Vec<(u32, Option<u32>, &str, u32)> = readings
        .iter()
        .map(|r| (r.index, r.minor, r.uuid.as_str(), r.util_gpu))
        .collect();
    assert_eq!(
        seen,
        [
            (0, Some(3), "GPU-3333", 90),
            (1, Some(2), "GPU-2222", 2),
            (2, Some(1), "GPU-1111", 50),
            (3, Some(0), "GPU-0000", 0),
        ]
    );
    let first = &readings[0];
    assert_eq!((first.util_mem, first.mem_used), (30, 1000 << 20));
    assert_eq!(first.processes, Some(0));
    assert!(gpus.driver_version().unwrap().contains("fake"));
}
