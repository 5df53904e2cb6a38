use super::*;

#[test]
fn state_is_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/state.json");
    let state = PublishedState {
        bands: Default::default(),
        version: governance::STATE_VERSION,
        config_digest: String::new(),
        generated_at: 5,
        capacity: 8,
        capacity_by_type: BTreeMap::new(),
        free_gpus: 8,
        pending_in_quota_gpus: 0,
        reclaim_gpus: 0,
        spare_gpus: None,
        teams: BTreeMap::new(),
        victims: vec![],
        acted_at: 0,
        read_at_ms: 0,
        pools: BTreeMap::new(),
        slurm_partitions: None,
        node_gpus: 0,
        node_gpus_by_type: BTreeMap::new(),
        unsettled_gpus: 0,
        unsettled_gpus_by_type: BTreeMap::new(),
    };
    write_state(&path, &state).unwrap();
    let back = PublishedState::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(back, state);
    assert!(!path.with_extension("json.tmp").exists());
    // Issue 25, finding 15: a write that fails says why and leaves no half file behind
    // (here the rename meets a directory in the state file's place).
    let blocked = dir.path().join("blocked/state.json");
    std::fs::create_dir_all(blocked.join("x")).unwrap();
    let e = write_state(&blocked, &state).unwrap_err().to_string();
    assert!(e.contains("state"), "{e}");
    assert!(!blocked.with_extension("json.tmp").exists());
}
