//! `accountd govern`: the governor alone (passes until killed, `--once`, or `--dry-run`'s
//! reading and plan).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use teamshare_config::Config;

use super::{print, ExitStatus, UsageError};

#[derive(Debug, Args)]
pub(super) struct GovernArgs {
    /// Time between passes
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = teamshare_config::parse_duration_ms)]
    interval: std::time::Duration,
    /// Run one pass and exit
    #[arg(long)]
    once: bool,
    /// Read Slurm and plan once, print what was read and planned, and exit without publishing
    /// the state or changing anything in Slurm
    #[arg(long, conflicts_with = "once")]
    dry_run: bool,
}

pub(super) fn run(
    config: Config,
    database: PathBuf,
    args: &GovernArgs,
) -> anyhow::Result<ExitCode> {
    let reader = accountd::governor::SlurmReader::from_env().map_err(UsageError)?;
    let fairshare = accountd::daemon::fairshare_from_store(database.clone());
    let idleness = accountd::daemon::idleness_from_store(database);
    let mut governor = accountd::governor::Governor::with_reader(config, Some(fairshare), reader)
        .with_idleness(idleness);
    if args.dry_run {
        return govern_dry_run(&mut governor);
    }
    say_err!(
        "accountd govern: publishing {} every {:?}",
        governor.state_file().display(),
        args.interval
    );
    let mut last_error: Option<String> = None;
    let cadence = accountd::governor::Cadence {
        interval: args.interval,
        once: args.once,
    };
    let failed = accountd::governor::run_loop(
        governor,
        cadence,
        || None,
        |result| {
            match result {
                Ok(report) => {
                    if last_error.take().is_some() {
                        say_err!("accountd govern: passes succeed again");
                    }
                    for (team, limit) in &report.limit_updates {
                        say_err!("accountd govern: team {team} GPU limit -> {limit}");
                    }
                    for id in &report.reclaimed {
                        say_err!(
                            "accountd govern: job {id} requeued for an in-quota job Slurm left waiting"
                        );
                    }
                    for id in &report.displaced {
                        say_err!(
                            "accountd govern: job {id} displaced by a higher class of its team"
                        );
                    }
                }
                Err(e) => {
                    if args.once {
                        return std::ops::ControlFlow::Break(e);
                    }
                    // Log each new failure once; keep trying (the plugin sees the state age).
                    let text = e.to_string();
                    if last_error.as_deref() != Some(&text) {
                        say_err!("accountd govern: pass failed: {text}");
                        last_error = Some(text);
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        },
        |deadline| {
            if let Some(rest) = deadline.checked_duration_since(std::time::Instant::now()) {
                std::thread::sleep(rest);
            }
            true
        },
    );
    match failed {
        Some(e) => Err(e).context("governor pass failed"),
        None => Ok(ExitStatus::Success.into()),
    }
}

/// `accountd govern --dry-run`: what the governor reads and would do, one line each.
fn govern_dry_run(governor: &mut accountd::governor::Governor) -> anyhow::Result<ExitCode> {
    let (reading, plan, fairshare_error) = governor.dry_run().context("cannot read Slurm")?;
    if let Some(e) = fairshare_error {
        say_err!("accountd govern: {e}");
    }
    let cap = &reading.capacity;
    let mut text = format!(
        "capacity {} GPUs on {} usable nodes\n",
        cap.total, cap.usable_nodes
    );
    for (node, gpus) in &cap.per_node {
        let types: Vec<String> = cap
            .per_node_types
            .get(node)
            .into_iter()
            .flatten()
            .map(|(k, n)| format!(" {k}={n}"))
            .collect();
        text.push_str(&format!("node {node} {gpus}{}\n", types.concat()));
    }
    for (node, state) in &cap.unusable_nodes {
        text.push_str(&format!("unusable {node} {state}\n"));
    }
    for j in &reading.jobs {
        let name = accountd::governor::address(&reading.addresses, j.id)
            .unwrap_or_else(|| format!("{} (not named)", j.id));
        text.push_str(&format!(
            "job {name} team={} {:?} gpus={}{} tasks={} priority={} submit={} start={} eligible={} parked={} park_held={} batch={} nodes={} node_count={} completing={}\n",
            j.team,
            j.phase,
            j.gpus,
            j.gpu_type.as_deref().map_or(String::new(), |k| format!(" type={k}")),
            j.tasks,
            j.priority,
            j.submit,
            j.start.map_or("-".to_string(), |t| t.to_string()),
            j.eligible,
            j.parked,
            j.park_held,
            j.batch,
            j.nodes.join(","),
            j.node_count,
            j.completing,
        ));
    }
    for u in &reading.unreadable {
        text.push_str(&format!("unreadable {u}\n"));
    }
    for (team, limit) in &plan.gpu_limits {
        let tres = accountd::governor::grp_tres(*limit, plan.type_limits.get(team));
        text.push_str(&format!("would limit {team} {tres}\n"));
    }
    let changes = reading
        .jobs
        .iter()
        .filter(|j| j.priority != 0 && plan.priorities.get(&j.id).is_some_and(|p| *p != j.priority))
        .count();
    text.push_str(&format!("would reprioritise {changes} jobs\n"));
    for (what, ids) in [
        ("reclaim", &plan.reclaim),
        ("displace", &plan.displace),
        ("requeue (violation)", &plan.violations),
        ("hold (outside every team)", &plan.outside),
        ("hold (no single GPU type)", &plan.untyped),
        ("park", &plan.park),
        ("release", &plan.release),
    ] {
        if !ids.is_empty() {
            let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
            text.push_str(&format!("would {what} {}\n", ids.join(",")));
        }
    }
    text.push_str(&format!("read with {} Slurm calls\n", reading.slurm_calls));
    print(&text)
}
