//! `accountd setup-slurm`.

use super::*;

pub(crate) const ASSOCIATIONS: &str = "\
root||||
root|root||1|
agents||root|1|gres/gpu=4
";

#[test]
fn setup_slurm_dry_run_prints_only_the_needed_commands() {
    let site = Site::new(CONFIG);
    site.fake("sacctmgr", ASSOCIATIONS);
    let o = site.run(true, &["setup-slurm", "--user", "alice", "--dry-run"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "sacctmgr -i modify account where Name=agents Cluster=testcluster set Fairshare=40\n\
         sacctmgr -i add user alice Account=agents Cluster=testcluster\n\
         sacctmgr -i add account training Cluster=testcluster Parent=root Fairshare=30 GrpTRES=gres/gpu=4\n\
         sacctmgr -i add user alice Account=training Cluster=testcluster\n\
         sacctmgr -i add qos teamshare\n\
         sacctmgr -i modify qos where name=teamshare set PreemptMode=requeue,within GraceTime=30 PreemptExemptTime=0:05:00\n\
         sacctmgr -i modify account where name=agents,training cluster=testcluster set qos+=teamshare\n"
    );
    // Only the read-only queries ran: the associations, and the TRES slurmdbd accounts (here
    // no gres/shard, so no share limit).
    let calls = site.args_of("sacctmgr");
    assert_eq!(calls.iter().filter(|a| *a == "--").count(), 2);
    assert!(calls.contains(&"tres".to_string()));
    assert!(calls.contains(&"show".to_string()));
}

#[test]
fn setup_slurm_applies_and_prints_each_change() {
    let site = Site::new(CONFIG);
    site.fake("sacctmgr", ASSOCIATIONS);
    let o = site.run(true, &["setup-slurm"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "modify account agents: Fairshare 1 -> 40\n\
         add account training (parent root, Fairshare 30, GPU limit gres/gpu=4)\n\
         QOS teamshare ready (PreemptMode within,requeue, GraceTime 30 s, PreemptExemptTime 300 s) for every team\n"
    );
    assert_eq!(
        site.args_of("sacctmgr")
            .iter()
            .filter(|a| *a == "--")
            .count(),
        // the two queries, 2 association changes, 3 for the QOS
        7
    );
}

#[test]
fn setup_slurm_when_everything_matches() {
    let site = Site::new(CONFIG);
    site.fake(
        "sacctmgr",
        // The governor's limits: agents between its quota and ceiling, training's at its quota.
        "agents||root|40|gres/gpu=3\ntraining||root|30|gres/gpu=7\n",
    );
    let o = site.run(true, &["setup-slurm"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("already match"));
}
