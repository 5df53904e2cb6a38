/work/main/accountd/target/dev/release/deps/nvidia_ml.d: contrib/fake-nvml/src/lib.rs contrib/fake-nvml/src/script.rs

/work/main/accountd/target/dev/release/deps/libnvidia_ml.so: contrib/fake-nvml/src/lib.rs contrib/fake-nvml/src/script.rs

contrib/fake-nvml/src/lib.rs:
contrib/fake-nvml/src/script.rs:
