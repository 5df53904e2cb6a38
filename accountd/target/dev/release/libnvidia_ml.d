/work/main/accountd/target/dev/release/libnvidia_ml.so: /work/main/contrib/fake-nvml/src/lib.rs /work/main/contrib/fake-nvml/src/script.rs
