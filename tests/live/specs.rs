//! The live clusters of one run ([`Spec`]): their nodes, GPUs, configuration and ports.

use crate::{Install, Spec};

impl Spec {
    /// The cluster every scenario shares: 2 nodes x 4 untyped GPUs, tests/live/teamshare.toml.
    pub const SHARED: Spec = Spec {
        name: "teamshare-live",
        config: "teamshare.toml",
        nodes: 2,
        gpu_types: "",
        shards: "",
        port_offset: 0,
        metrics_addr: "127.0.0.1:29477",
        dir_suffix: "",
        logs_suffix: "",
        install: Install::Build,
    };

    /// The cluster of the per-GPU-type scenarios (issue 10): n1 and n2 with 4 A100 each, n3
    /// with 4 H100 that Slurm also offers as 4 shards each (issue 30: teamshare refuses
    /// them); tests/live/teamshare-typed.toml.
    pub const TYPED: Spec = Spec {
        name: "teamshare-typed",
        config: "teamshare-typed.toml",
        nodes: 3,
        gpu_types: "a100 a100 h100",
        shards: "0 0 4",
        port_offset: 100,
        metrics_addr: "127.0.0.1:29478",
        dir_suffix: "-typed",
        logs_suffix: "-typed",
        install: Install::Build,
    };

    /// The cluster of the placement scenarios (issue 24): n1, n2, n3 with 4 untyped GPUs
    /// each; tests/live/teamshare-placement.toml.
    pub const PLACEMENT: Spec = Spec {
        name: "teamshare-place",
        config: "teamshare-placement.toml",
        nodes: 3,
        gpu_types: "",
        shards: "",
        port_offset: 300,
        metrics_addr: "127.0.0.1:29480",
        dir_suffix: "-place",
        logs_suffix: "-place",
        install: Install::Build,
    };

    /// The cluster of the fractional-GPU scenarios (issue 30): n1, n2 and n3 each with one A100
    /// cut into 7 MIG-like `1g.10gb` slices, n3 with a whole A100 too (4 GPU-equivalents);
    /// tests/live/teamshare-fractional.toml, where every team counts the A100 family in
    /// GPU-equivalents.
    pub const FRACTIONAL: Spec = Spec {
        name: "teamshare-frac",
        config: "teamshare-fractional.toml",
        nodes: 3,
        gpu_types: "1g.10gb:7 1g.10gb:7 a100:1+1g.10gb:7",
        shards: "",
        port_offset: 400,
        metrics_addr: "127.0.0.1:29481",
        dir_suffix: "-frac",
        logs_suffix: "-frac",
        install: Install::Build,
    };

    /// The cluster of the governed shards (issue 30): n1 with 2 A100, n2 with 1, each offered
    /// as 4 shards (12 in all); tests/live/teamshare-shards.toml, where every team counts the
    /// A100 family, shards at a quarter each.
    pub const SHARDS: Spec = Spec {
        name: "teamshare-shard",
        config: "teamshare-shards.toml",
        nodes: 2,
        gpu_types: "a100:2 a100:1",
        shards: "4 4",
        port_offset: 500,
        metrics_addr: "127.0.0.1:29482",
        dir_suffix: "-shard",
        logs_suffix: "-shard",
        install: Install::Build,
    };

    /// The cluster of the packaging scenario: 1 node x 4 untyped GPUs, run by the installed
    /// Debian packages; tests/live/teamshare-packaged.toml.
    pub const PACKAGED: Spec = Spec {
        name: "teamshare-pkg",
        config: "teamshare-packaged.toml",
        nodes: 1,
        gpu_types: "",
        shards: "",
        port_offset: 200,
        metrics_addr: "127.0.0.1:29479",
        dir_suffix: "-pkg",
        logs_suffix: "-pkg",
        install: Install::Packages,
    };
}
