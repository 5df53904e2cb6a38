//! `accountd check-config`: validate teamshare.toml, print its summary, and check the quotas
//! against the capacity (given, or measured with sinfo).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use teamshare_config::{Config, ConfigError};

use accountd::capacity::{self, Capacity};
use accountd::slurm_cli;

use super::{plural, ExitStatus, Stdout};

#[derive(Debug, Args)]
pub(super) struct CheckConfigArgs {
    /// Governed capacity in GPUs; without it, it is measured with sinfo when SLURM_CONF is set
    #[arg(long, value_name = "GPUS")]
    capacity: Option<u32>,
}

pub(super) fn run(path: &Path, args: &CheckConfigArgs) -> anyhow::Result<ExitCode> {
    let config = match teamshare_config::load(path) {
        Ok(config) => config,
        Err(ConfigError::Invalid(diagnostics)) => {
            say_err!("{diagnostics}");
            say_err!(
                "{}: {} {}",
                path.display(),
                diagnostics.len(),
                plural(diagnostics.len(), "error", "errors")
            );
            return Ok(ExitStatus::Invalid.into());
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = Stdout::new();
    out.line(&summary(path, &config))?;

    // The capacity: given, measured, or not checked (said in one line).
    let measured: Option<(u32, BTreeMap<String, u32>, String)> = match args.capacity {
        Some(total) => {
            // Only a total was given: per-type quotas cannot be checked against it.
            let unknown_types: BTreeMap<String, u32> = config
                .teams
                .iter()
                .flat_map(|t| t.quota.by_type.keys())
                .map(|t| (t.clone(), u32::MAX))
                .collect();
            let note = if unknown_types.is_empty() {
                String::new()
            } else {
                "; per-type quotas not checked".to_string()
            };
            Some((
                total,
                unknown_types,
                format!("capacity: {total} GPUs (given with --capacity{note})"),
            ))
        }
        None if slurm_cli::slurm_conf().is_none() => {
            say_err!("capacity: not checked (SLURM_CONF is not set, so sinfo cannot be asked; use --capacity N)");
            None
        }
        None => match capacity::measure(&config.cluster.partitions) {
            Ok(c) => {
                let line = capacity_line(&config, &c);
                Some((c.total, c.by_type, line))
            }
            Err(e) => {
                say_err!("capacity: not checked (sinfo unavailable: {e})");
                None
            }
        },
    };
    if let Some((total, by_type, line)) = measured {
        out.line(&line)?;
        let problems = config.check_capacity(total, &by_type);
        if !problems.is_empty() {
            for d in &problems {
                say_err!("{d}");
            }
            say_err!(
                "{}: {} {}",
                path.display(),
                problems.len(),
                plural(problems.len(), "error", "errors")
            );
            return Ok(ExitStatus::Invalid.into());
        }
    }
    Ok(ExitStatus::Success.into())
}

/// A team's quota as the summary says it: `2 (h100 2, a100 family 1 GPU-equivalents)`.
fn quota_text(config: &Config, t: &teamshare_config::Team) -> String {
    if !t.quota.is_typed() {
        return t.quota.total.to_string();
    }
    let parts: Vec<String> = t
        .quota
        .by_type
        .iter()
        .map(|(k, n)| match config.family_units(k) {
            // A family counts in GPU-equivalents: its slices in any mix.
            Some(_) => format!("{k} family {n} GPU-equivalents"),
            None => format!("{k} {n}"),
        })
        .collect();
    format!("{} ({})", t.quota.total, parts.join(", "))
}

fn summary(path: &Path, config: &Config) -> String {
    let teams: Vec<String> = config
        .teams
        .iter()
        .map(|t| {
            let quota = quota_text(config, t);
            let borrow = match t.borrow_limit {
                Some(b) => b.to_string(),
                None => "unlimited".to_string(),
            };
            format!(
                "{} (quota {quota}, borrow {borrow}, lend {}, weight {})",
                t.name, t.lend_limit, t.weight
            )
        })
        .collect();
    let classes: Vec<String> = config
        .priority_classes
        .iter()
        .map(|c| {
            if c.preemptible {
                format!("{} ({})", c.name, c.value)
            } else {
                format!("{} ({}, not preemptible)", c.name, c.value)
            }
        })
        .collect();
    let rates: Vec<String> = config
        .gpu_types
        .iter()
        .map(|(k, t)| match &t.slice {
            None => format!("{k} {:.2}", t.rate_per_hour),
            Some(s) => format!(
                "{k} {:.2} ({}/{} of {})",
                t.rate_per_hour, s.numerator, s.denominator, s.of
            ),
        })
        .collect();
    let mut s = format!(
        "{} is valid. Cluster {} governs partition{} {}. {} team{} with {} GPUs of quota in all: {}.",
        path.display(),
        config.cluster.name,
        if config.cluster.partitions.len() == 1 { "" } else { "s" },
        config.cluster.partitions.join(", "),
        config.teams.len(),
        plural(config.teams.len(), "", "s"),
        config.total_quota(),
        if teams.is_empty() { "none".to_string() } else { teams.join(", ") },
    );
    if classes.is_empty() {
        s.push_str(" No priority classes.");
    } else {
        s.push_str(&format!(
            " {} priority class{}: {}.",
            classes.len(),
            plural(classes.len(), "", "es"),
            classes.join(", ")
        ));
    }
    if rates.is_empty() {
        s.push_str(" No GPU rates: reports show no cost.");
    } else {
        s.push_str(&format!(
            " Rates per GPU-hour ({}): {}.",
            config.cluster.currency,
            rates.join(", ")
        ));
    }
    s
}

fn capacity_line(config: &Config, c: &Capacity) -> String {
    let mut line = format!(
        "capacity: {} GPUs on {} usable node{} of partition{} {} (measured with sinfo)",
        c.total,
        c.usable_nodes,
        plural(c.usable_nodes, "", "s"),
        if config.cluster.partitions.len() == 1 {
            ""
        } else {
            "s"
        },
        config.cluster.partitions.join(", ")
    );
    if !c.by_type.is_empty() {
        let types: Vec<String> = c.by_type.iter().map(|(k, n)| format!("{k} {n}")).collect();
        line.push_str(&format!(", by type: {}", types.join(", ")));
    }
    if !c.unusable_nodes.is_empty() {
        let nodes: Vec<String> = c
            .unusable_nodes
            .iter()
            .map(|(n, s)| format!("{n} ({s})"))
            .collect();
        line.push_str(&format!("; not usable: {}", nodes.join(", ")));
    }
    line
}
