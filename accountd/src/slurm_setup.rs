//! Making Slurm's associations match teamshare.toml (`accountd setup-slurm`).
//!
//! Three steps, each testable alone: what the configuration wants (`desired`), what slurmdbd has
//! (`show_associations` + `parse_associations`), and the changes between them (`plan`), which are
//! then printed or applied with `sacctmgr -i`. Planning against the current state makes a second
//! run print "nothing to change", and lets every change be shown with its old value. New kinds
//! of objects (QOS for priority classes) add a step to `desired`, a query, and `Change` variants.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use teamshare_config::{Config, SHARE_TYPE};
use teamshare_policy::gres::gpu_count;

use crate::parsable::{self, MalformedLine, Shape};
use crate::slurm_cli::{slurm_name, SlurmCommand, SlurmCommandError};

const SACCTMGR_TIMEOUT: Duration = Duration::from_secs(120);

/// The parent of every team account.
pub const PARENT_ACCOUNT: &str = "root";

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Sacctmgr(#[from] SlurmCommandError),
    #[error(transparent)]
    Malformed(#[from] MalformedLine),
}

/// GPU limits of a GrpTRES: `""` for `gres/gpu`, a type for `gres/gpu:TYPE`, and a share of a
/// GPU by its TRES name ([`SHARE_TRES`]; a gres type has no `/`, so the keys never meet).
pub type GpuLimits = BTreeMap<String, u64>;

/// The TRES that share a GPU between jobs. Teams hold none of them (`GrpTRES=gres/shard=0`):
/// Slurm counts a share apart from `gres/gpu`, so no GPU limit would hold it, and teamshare
/// does not govern shares yet (docs/design/fractional-gpus.md). Only those slurmdbd accounts
/// can carry a limit ([`keep_known_shares`]).
pub const SHARE_TRES: [&str; 2] = ["gres/mps", "gres/shard"];

/// A team account as the configuration wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountSpec {
    pub name: String,
    pub fairshare: u32,
    /// The team's ceiling (quota + borrow limit) for `gres/gpu` (`""`) and, in a typed
    /// configuration, each governed type; `None`: no ceiling.
    pub gpu_limit: BTreeMap<String, Option<u64>>,
    /// The team's quota, per the same keys: the GPU limits of a new account, which the
    /// governor then moves between the quota and the ceiling.
    pub quota: GpuLimits,
}

/// The team accounts the configuration wants, in its order.
pub fn desired(config: &Config) -> Vec<AccountSpec> {
    let types: Vec<&str> = if config.is_typed() {
        config.governed_types().into_iter().collect()
    } else {
        Vec::new()
    };
    config
        .teams
        .iter()
        .map(|t| {
            // DESIGN 4 rule 1: U_T <= Q_T + B_T, enforced by Slurm as the account's GrpTRES,
            // per type where the configuration is typed (B_T,k: the type's entry of a table,
            // else the number, which holds over all types).
            let mut gpu_limit = BTreeMap::from([(
                String::new(),
                t.borrow_limit
                    .map(|b| u64::from(t.quota.total) + u64::from(b)),
            )]);
            let mut quota = GpuLimits::from([(String::new(), u64::from(t.quota.total))]);
            for share in SHARE_TRES {
                gpu_limit.insert(share.to_string(), Some(0));
                quota.insert(share.to_string(), 0);
            }
            for k in &types {
                let (ceiling, own) = type_figures(config, t, k);
                // Governed shards (`[gpu_types.shard]`) are `gres/shard` to Slurm.
                let key = tres_key(k);
                gpu_limit.insert(key.clone(), ceiling);
                quota.insert(key, own);
            }
            if let Some(all) = family_total_ceiling(config, t, &types) {
                gpu_limit.insert(String::new(), all);
            }
            AccountSpec {
                name: t.name.clone(),
                fairshare: t.weight,
                gpu_limit,
                quota,
            }
        })
        .collect()
}

/// A team's ceiling and quota of GPU type `k`. Where the team counts `k`'s family in
/// GPU-equivalents (docs/design/fractional-gpus.md), the ceiling is the most of `k` alone the
/// family's quota and borrow limit allow, and the quota of a new account is the family's
/// whole GPUs (its slices 0): the governor's first pass splits it between the types, so the
/// limits never add up to more than the family's.
fn type_figures(config: &Config, t: &teamshare_config::Team, k: &str) -> (Option<u64>, u64) {
    match config
        .family_of(k)
        .filter(|m| config.counts_family(t, m.whole))
    {
        Some(m) => {
            let most = t
                .family_borrow_units(&m)
                .map(|b| (t.family_quota_units(&m) + b) / u64::from(m.units.max(1)));
            let own = if m.whole == k {
                u64::from(t.quota_of(k))
            } else {
                0
            };
            (most, own)
        }
        None => {
            let b = t.borrow_limit_for(k);
            (
                b.map(|b| u64::from(t.quota_of(k)) + u64::from(b)),
                u64::from(t.quota_of(k)),
            )
        }
    }
}

/// The key of [`GpuLimits`] for GPU type `k`: the type, or `gres/shard` for the shards.
fn tres_key(k: &str) -> String {
    if k == SHARE_TYPE {
        "gres/shard".to_string()
    } else {
        k.to_string()
    }
}

/// A family team's `gres/gpu` ceiling: its types' ceilings, each family counted once at its
/// smallest slice (a slice is one `gres/gpu`; a shard is none); `None` for a team counting
/// no family.
fn family_total_ceiling(
    config: &Config,
    t: &teamshare_config::Team,
    types: &[&str],
) -> Option<Option<u64>> {
    let families: BTreeSet<&str> = types
        .iter()
        .filter_map(|k| config.family_of(k))
        .filter(|m| config.counts_family(t, m.whole))
        .map(|m| m.whole)
        .collect();
    if families.is_empty() {
        return None;
    }
    let mut all = 0u64;
    for k in types {
        if *k == SHARE_TYPE
            || config
                .family_of(k)
                .is_some_and(|m| families.contains(m.whole))
        {
            continue;
        }
        let Some(c) = type_figures(config, t, k).0 else {
            return Some(None);
        };
        all = all.saturating_add(c);
    }
    for whole in families {
        let per_gpu = config.family_units(whole)?;
        let smallest = config
            .family_members(whole)
            .iter()
            .filter(|(k, _)| *k != SHARE_TYPE)
            .map(|(_, u)| *u)
            .min()?;
        let m = teamshare_config::Member {
            whole,
            units: per_gpu,
            per_gpu,
        };
        let Some(borrow) = t.family_borrow_units(&m) else {
            return Some(None);
        };
        let units = t.family_quota_units(&m) + borrow;
        all = all.saturating_add(units / u64::from(smallest.max(1)));
    }
    Some(Some(all))
}

/// `gres/gpu=4,gres/gpu:h100=2` (`none` when empty).
fn limits_text(limits: &GpuLimits) -> String {
    if limits.is_empty() {
        return "none".to_string();
    }
    limits
        .iter()
        .map(|(k, n)| {
            let n = if *n == u64::MAX {
                "-1".to_string()
            } else {
                n.to_string()
            };
            if k.is_empty() {
                format!("gres/gpu={n}")
            } else if k.starts_with("gres/") {
                format!("{k}={n}")
            } else {
                format!("gres/gpu:{k}={n}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The TRES a typed configuration needs slurmdbd to know (`gres/gpu:h100`), which it knows
/// only when slurm.conf's AccountingStorageTRES lists them; `known` is `sacctmgr show tres`'
/// `Type|Name` lines (`gres|gpu:h100`). Returns those missing.
pub fn missing_tres(config: &Config, known: &str) -> Vec<String> {
    if !config.is_typed() {
        return Vec::new();
    }
    let known: BTreeSet<&str> = parsable::lines(known)
        .filter_map(|(_, l)| match parsable::fields(l.trim(), Shape::Leading) {
            Ok(["gres", name]) => Some(name),
            _ => None,
        })
        .collect();
    config
        .governed_types()
        .into_iter()
        .map(|k| match k {
            SHARE_TYPE => ("shard".to_string(), "gres/shard".to_string()),
            k => (format!("gpu:{k}"), format!("gres/gpu:{k}")),
        })
        .filter(|(name, _)| !known.contains(name.as_str()))
        .map(|(_, tres)| tres)
        .collect()
}

/// Keeps in `accounts` only the limits on shares of a GPU that slurmdbd accounts (`known`:
/// `sacctmgr show tres`' `Type|Name` lines, `gres|shard`): a limit on a TRES it does not know
/// cannot be set. The plugin refuses shares at submit either way.
pub fn keep_known_shares(accounts: &mut [AccountSpec], known: &str) {
    let known: BTreeSet<String> = parsable::lines(known)
        .filter_map(|(_, l)| match parsable::fields(l.trim(), Shape::Leading) {
            Ok(["gres", name]) => Some(format!("gres/{name}")),
            _ => None,
        })
        .collect();
    for a in accounts {
        for share in SHARE_TRES {
            if !known.contains(share) {
                a.gpu_limit.remove(share);
                a.quota.remove(share);
            }
        }
    }
}

/// Lists the TRES slurmdbd knows (`Type|Name`).
pub fn show_tres() -> SlurmCommand {
    SlurmCommand::new(
        "sacctmgr",
        vec![
            "-n".into(),
            "-P".into(),
            "show".into(),
            "tres".into(),
            "format=Type,Name".into(),
        ],
        SACCTMGR_TIMEOUT,
    )
}

/// An account association as slurmdbd has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountAssoc {
    pub parent: String,
    /// Verbatim: a number or `parent`.
    pub fairshare: String,
    /// The account's `gres/gpu` and `gres/gpu:TYPE` limits that are set.
    pub gpu_limit: GpuLimits,
}

/// The associations of one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Associations {
    pub accounts: BTreeMap<String, AccountAssoc>,
    /// (account, user)
    pub users: BTreeSet<(String, String)>,
}

/// Lists every association of the cluster, with limits as set (not inherited).
pub fn show_associations(cluster: &str) -> SlurmCommand {
    SlurmCommand::new(
        "sacctmgr",
        vec![
            "-n".into(),
            "-P".into(),
            "show".into(),
            "associations".into(),
            "where".into(),
            format!("cluster={cluster}"),
            "WOPLimits".into(),
            "format=Account,User,ParentName,Fairshare,GrpTRES".into(),
        ],
        SACCTMGR_TIMEOUT,
    )
}

/// Read `show_associations`' output.
pub fn parse_associations(text: &str) -> Result<Associations, SetupError> {
    let mut assocs = Associations::default();
    for (number, line) in parsable::lines(text) {
        let malformed =
            |reason: String| MalformedLine::new("sacctmgr association", number, reason, line);
        let [account, user, parent, fairshare, grp_tres] = parsable::fields(line, Shape::Exactly)
            .map_err(|e| {
            malformed(format!("{e} (Account|User|ParentName|Fairshare|GrpTRES)"))
        })?;
        if user.is_empty() {
            let gpu_limit = grp_gpu_limit(grp_tres).map_err(malformed)?;
            assocs.accounts.insert(
                account.to_string(),
                AccountAssoc {
                    parent: parent.to_string(),
                    fairshare: fairshare.to_string(),
                    gpu_limit,
                },
            );
        } else {
            assocs.users.insert((account.to_string(), user.to_string()));
        }
    }
    Ok(assocs)
}

/// The `gres/gpu` and `gres/gpu:TYPE` entries of a GrpTRES that are there (an absent entry
/// is no limit, which differs from 0).
fn grp_gpu_limit(grp_tres: &str) -> Result<GpuLimits, String> {
    let mut limits = GpuLimits::new();
    // Each entry is a limit of its own (not a breakdown of gres/gpu, as in AllocTRES).
    for e in grp_tres.split(',').map(str::trim) {
        let key = match e.split('=').next() {
            Some("gres/gpu") => String::new(),
            Some(share) if SHARE_TRES.contains(&share) => {
                let n = e.split_once('=').map_or("", |(_, n)| n);
                let n = n
                    .parse::<u64>()
                    .map_err(|_| format!("GrpTRES: `{e}` is not a count"))?;
                limits.insert(share.to_string(), n);
                continue;
            }
            Some(name) => match name.strip_prefix("gres/gpu:") {
                Some(k) => k.to_string(),
                None => continue,
            },
            None => continue,
        };
        let count = gpu_count(e).map_err(|err| format!("GrpTRES: {err}"))?;
        limits.insert(key, count.total);
    }
    Ok(limits)
}

/// One setting of an existing account that differs, with its current value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountSetting {
    Parent {
        old: String,
    },
    Fairshare {
        old: String,
        new: u32,
    },
    /// Only the entries that change; `u64::MAX` in `new` clears an entry (sacctmgr's -1).
    GpuLimit {
        old: GpuLimits,
        new: GpuLimits,
    },
}

impl AccountSetting {
    /// The `set` argument of `sacctmgr modify account`.
    fn arg(&self) -> String {
        match self {
            AccountSetting::Parent { .. } => format!("Parent={PARENT_ACCOUNT}"),
            AccountSetting::Fairshare { new, .. } => format!("Fairshare={new}"),
            AccountSetting::GpuLimit { new, .. } => format!("GrpTRES={}", limits_text(new)),
        }
    }
}

impl fmt::Display for AccountSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccountSetting::Parent { old } => {
                let old = if old.is_empty() { "none" } else { old };
                write!(f, "Parent {old} -> {PARENT_ACCOUNT}")
            }
            AccountSetting::Fairshare { old, new } => {
                let old = if old.is_empty() { "none" } else { old };
                write!(f, "Fairshare {old} -> {new}")
            }
            AccountSetting::GpuLimit { old, new } => {
                let was: GpuLimits = new
                    .keys()
                    .filter_map(|k| old.get(k).map(|n| (k.clone(), *n)))
                    .collect();
                write!(f, "GrpTRES {} -> {}", limits_text(&was), limits_text(new))
            }
        }
    }
}

/// One change to Slurm's associations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    AddAccount(AccountSpec),
    ModifyAccount {
        name: String,
        settings: Vec<AccountSetting>,
    },
    AddUser {
        account: String,
        user: String,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::AddAccount(a) => write!(
                f,
                "add account {} (parent {PARENT_ACCOUNT}, Fairshare {}, GPU limit {})",
                a.name,
                a.fairshare,
                limits_text(&a.quota)
            ),
            Change::ModifyAccount { name, settings } => {
                write!(f, "modify account {name}:")?;
                for (i, setting) in settings.iter().enumerate() {
                    let sep = if i == 0 { " " } else { ", " };
                    write!(f, "{sep}{setting}")?;
                }
                Ok(())
            }
            Change::AddUser { account, user } => write!(f, "add user {user} to account {account}"),
        }
    }
}

impl Change {
    /// The sacctmgr command that makes this change on `cluster`.
    pub fn command(&self, cluster: &str) -> SlurmCommand {
        let mut args: Vec<String> = vec!["-i".into()];
        match self {
            Change::AddAccount(a) => {
                args.extend([
                    "add".into(),
                    "account".into(),
                    a.name.clone(),
                    format!("Cluster={cluster}"),
                    format!("Parent={PARENT_ACCOUNT}"),
                    format!("Fairshare={}", a.fairshare),
                ]);
                args.push(format!("GrpTRES={}", limits_text(&a.quota)));
            }
            Change::ModifyAccount { name, settings } => {
                args.extend([
                    "modify".into(),
                    "account".into(),
                    "where".into(),
                    format!("Name={name}"),
                    format!("Cluster={cluster}"),
                    "set".into(),
                ]);
                args.extend(settings.iter().map(AccountSetting::arg));
            }
            Change::AddUser { account, user } => args.extend([
                "add".into(),
                "user".into(),
                user.clone(),
                format!("Account={account}"),
                format!("Cluster={cluster}"),
            ]),
        }
        SlurmCommand::new("sacctmgr", args, SACCTMGR_TIMEOUT)
    }
}

/// The changes that bring `current` to what `accounts` and `users` want: every team account
/// exists under root with its Fairshare and a GPU limit no higher than its ceiling (the quota for
/// a new account or one without a limit), and every user is in every team account. Nothing is
/// removed.
pub fn plan(accounts: &[AccountSpec], users: &[String], current: &Associations) -> Vec<Change> {
    let users: Vec<String> = users.iter().map(|u| slurm_name(u)).collect();
    let mut changes = Vec::new();
    for want in accounts {
        match current.accounts.get(&want.name) {
            None => changes.push(Change::AddAccount(want.clone())),
            Some(have) => {
                let mut settings = Vec::new();
                if have.parent != PARENT_ACCOUNT {
                    settings.push(AccountSetting::Parent {
                        old: have.parent.clone(),
                    });
                }
                if have.fairshare != want.fairshare.to_string() {
                    settings.push(AccountSetting::Fairshare {
                        old: have.fairshare.clone(),
                        new: want.fairshare,
                    });
                }
                // The limit is the governor's, which moves it between the quota and the
                // ceiling every pass: only one above the ceiling is lowered, and a missing one
                // set to the quota. Setting the ceiling here would let every team borrow up to
                // it until the governor's next change (issue 8: seen as CI's s04 failure).
                // Per entry: gres/gpu, and each type of a typed configuration.
                let mut new = GpuLimits::new();
                for (key, ceiling) in &want.gpu_limit {
                    let quota = want.quota.get(key).copied().unwrap_or(0);
                    match (have.gpu_limit.get(key), ceiling) {
                        (Some(l), Some(c)) if l > c => {
                            new.insert(key.clone(), *c);
                        }
                        (None, _) => {
                            new.insert(key.clone(), quota);
                        }
                        _ => {}
                    }
                }
                if !new.is_empty() {
                    settings.push(AccountSetting::GpuLimit {
                        old: have.gpu_limit.clone(),
                        new,
                    });
                }
                if !settings.is_empty() {
                    changes.push(Change::ModifyAccount {
                        name: want.name.clone(),
                        settings,
                    });
                }
            }
        }
        for user in &users {
            if !current.users.contains(&(want.name.clone(), user.clone())) {
                changes.push(Change::AddUser {
                    account: want.name.clone(),
                    user: user.clone(),
                });
            }
        }
    }
    changes
}

/// The QOS every governed job runs in (set by the plugin), with preemption WITHIN it by
/// priority, the reclaim grace and the minimum runtime before reclaim; and every team's
/// access to it.
pub fn qos_commands(config: &Config, cluster: &str) -> Vec<SlurmCommand> {
    let qos = teamshare_policy::priority::INTERNAL_QOS;
    let g = &config.governance;
    let mode = match g.reclaim_mode {
        teamshare_config::ReclaimMode::Requeue => "requeue,within",
        teamshare_config::ReclaimMode::Cancel => "cancel,within",
    };
    let exempt = g.min_runtime_before_reclaim.as_secs();
    let exempt = if exempt == 0 {
        "-1".to_string()
    } else {
        format!(
            "{}:{:02}:{:02}",
            exempt / 3600,
            exempt / 60 % 60,
            exempt % 60
        )
    };
    let sacctmgr = |args: Vec<String>| SlurmCommand::new("sacctmgr", args, SACCTMGR_TIMEOUT);
    let mut cmds = vec![
        sacctmgr(vec!["-i".into(), "add".into(), "qos".into(), qos.into()]),
        sacctmgr(vec![
            "-i".into(),
            "modify".into(),
            "qos".into(),
            "where".into(),
            format!("name={qos}"),
            "set".into(),
            format!("PreemptMode={mode}"),
            format!("GraceTime={}", g.reclaim_grace.as_secs()),
            format!("PreemptExemptTime={exempt}"),
        ]),
    ];
    let teams: Vec<String> = config.teams.iter().map(|t| slurm_name(&t.name)).collect();
    if !teams.is_empty() {
        cmds.push(sacctmgr(vec![
            "-i".into(),
            "modify".into(),
            "account".into(),
            "where".into(),
            format!("name={}", teams.join(",")),
            format!("cluster={cluster}"),
            "set".into(),
            format!("qos+={qos}"),
        ]));
    }
    cmds
}

/// What applying a change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Done,
    /// sacctmgr said the object was already there (another admin got there first).
    AlreadyThere,
}

/// Apply one change with sacctmgr.
pub fn apply(change: &Change, cluster: &str) -> Result<Applied, SetupError> {
    let cmd = change.command(cluster);
    let (status, out) = cmd.run_unchecked()?;
    let said = format!("{}\n{}", out.stdout, out.stderr);
    // Adding what exists is not an error for us: the goal state holds.
    if matches!(change, Change::AddAccount(_) | Change::AddUser { .. })
        && (said.contains("Nothing new added") || said.contains("already exists"))
    {
        return Ok(Applied::AlreadyThere);
    }
    if status.success() {
        Ok(Applied::Done)
    } else {
        Err(SetupError::Sacctmgr(SlurmCommandError::Failed {
            command: cmd.display(),
            status: status.to_string(),
            stderr: said
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(5)
                .collect::<Vec<_>>()
                .join(" / "),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, fairshare: u32, gpu_limit: Option<u64>) -> AccountSpec {
        AccountSpec {
            name: name.into(),
            fairshare,
            gpu_limit: BTreeMap::from([(String::new(), gpu_limit)]),
            // Half the ceiling (or 1 with none), enough to tell the two apart.
            quota: GpuLimits::from([(String::new(), gpu_limit.map_or(1, |c| c / 2))]),
        }
    }

    fn untyped(n: u64) -> GpuLimits {
        GpuLimits::from([(String::new(), n)])
    }

    const CURRENT: &str = "\
root||||
root|root||1|
agents||root|40|cpu=100,gres/gpu=4
agents|alice||1|
training||science|10|
research||root|20|gres/gpu=0
";

    #[test]
    fn associations_are_read() {
        let a = parse_associations(CURRENT).unwrap();
        assert_eq!(a.accounts["agents"].gpu_limit, untyped(4));
        assert!(a.accounts["training"].gpu_limit.is_empty());
        assert_eq!(a.accounts["training"].parent, "science");
        assert_eq!(a.accounts["research"].gpu_limit, untyped(0));
        let typed =
            parse_associations("a||root|1|gres/gpu=5,gres/gpu:h100=3,gres/gpu:a100=0\n").unwrap();
        assert_eq!(
            typed.accounts["a"].gpu_limit,
            GpuLimits::from([
                (String::new(), 5),
                ("a100".to_string(), 0),
                ("h100".to_string(), 3)
            ])
        );
        assert!(a.users.contains(&("agents".into(), "alice".into())));
        assert!(parse_associations("agents|root|40").is_err());
        assert!(parse_associations("agents||root|40|gres/gpu=many").is_err());
    }

    #[test]
    fn the_plan_holds_only_what_differs() {
        let current = parse_associations(CURRENT).unwrap();
        let want = [
            spec("agents", 40, Some(4)),
            spec("training", 30, Some(6)),
            spec("research", 20, None),
            spec("newteam", 5, Some(2)),
            spec("physics", 10, Some(2)),
        ];
        let mut current = current;
        // A governor's limit above a lowered ceiling.
        current.accounts.insert(
            "physics".into(),
            AccountAssoc {
                parent: "root".into(),
                fairshare: "10".into(),
                gpu_limit: untyped(5),
            },
        );
        current.users.insert(("physics".into(), "alice".into()));
        let users = ["alice".to_string()];
        let changes = plan(&want, &users, &current);
        let text: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            text,
            [
                // No limit: the quota, which the governor raises when the team may borrow.
                "modify account training: Parent science -> root, Fairshare 10 -> 30, GrpTRES none -> gres/gpu=3",
                "add user alice to account training",
                // The governor's limits within the ceiling are left alone (agents at 4,
                // research at 0 without a ceiling).
                "add user alice to account research",
                "add account newteam (parent root, Fairshare 5, GPU limit gres/gpu=1)",
                "add user alice to account newteam",
                "modify account physics: GrpTRES gres/gpu=5 -> gres/gpu=2",
            ]
        );
        // Once applied, nothing is left to do.
        let mut after = current.clone();
        for w in &want {
            after.accounts.insert(
                w.name.clone(),
                AccountAssoc {
                    parent: "root".into(),
                    fairshare: w.fairshare.to_string(),
                    gpu_limit: w.quota.clone(),
                },
            );
            after.users.insert((w.name.clone(), "alice".into()));
        }
        assert!(plan(&want, &users, &after).is_empty());
    }

    #[test]
    fn commands() {
        let add = Change::AddAccount(spec("agents", 40, Some(4)));
        assert_eq!(
            add.command("gpu-cluster").display(),
            "sacctmgr -i add account agents Cluster=gpu-cluster Parent=root Fairshare=40 GrpTRES=gres/gpu=2"
        );
        // Without a ceiling too: the governor moves the limit from the quota.
        let add_unlimited = Change::AddAccount(spec("agents", 40, None));
        assert!(add_unlimited
            .command("c")
            .display()
            .ends_with("GrpTRES=gres/gpu=1"));
        let modify = Change::ModifyAccount {
            name: "research".into(),
            settings: vec![
                AccountSetting::Fairshare {
                    old: "1".into(),
                    new: 20,
                },
                AccountSetting::GpuLimit {
                    old: untyped(0),
                    new: untyped(u64::MAX),
                },
            ],
        };
        assert_eq!(
            modify.command("c").display(),
            "sacctmgr -i modify account where Name=research Cluster=c set Fairshare=20 GrpTRES=gres/gpu=-1"
        );
        let user = Change::AddUser {
            account: "agents".into(),
            user: "alice".into(),
        };
        assert_eq!(
            user.command("c").display(),
            "sacctmgr -i add user alice Account=agents Cluster=c"
        );
        assert_eq!(
            show_associations("c").display(),
            "sacctmgr -n -P show associations where cluster=c WOPLimits format=Account,User,ParentName,Fairshare,GrpTRES"
        );
    }

    /// A team counting the A100 family in GPU-equivalents (1 + borrow 1): each type's
    /// ceiling is the most of it alone (14 slices, 2 whole), gres/gpu's counts every slice,
    /// and a new account starts with its whole A100 and no slice (the governor splits).
    #[test]
    fn a_family_team_is_limited_per_member_type() {
        let config = teamshare_config::parse(
            r#"
[cluster]
name = "c"
[gpu_types.a100]
rate_per_hour = 2.8
[gpu_types."1g.10gb"]
slices_of = "a100"
gpus = "1/7"
[gpu_types.h100]
rate_per_hour = 4
[[team]]
name = "inference"
quota = { a100 = 1, h100 = 1 }
borrow_limit = { a100 = 1 }
[[team]]
name = "dev"
quota = { a100 = 1 }
"#,
            "t.toml",
        )
        .unwrap();
        let mut want = desired(&config);
        keep_known_shares(&mut want, "gres|gpu\n");
        assert_eq!(
            want[0].gpu_limit,
            BTreeMap::from([
                (String::new(), Some(15)),
                ("1g.10gb".to_string(), Some(14)),
                ("a100".to_string(), Some(2)),
                ("h100".to_string(), Some(1))
            ])
        );
        assert_eq!(want[0].quota["a100"], 1);
        assert_eq!(want[0].quota["1g.10gb"], 0);
        // No borrow limit: no ceiling.
        assert_eq!(want[1].gpu_limit[""], None);
        assert_eq!(want[1].gpu_limit["1g.10gb"], None);
    }

    /// Governed shards are `gres/shard` to Slurm: the ceiling in shards (8 for 1 + 1 A100s'
    /// worth at 4 per GPU), 0 on a new account, never in `gres/gpu`; slurmdbd must know it.
    #[test]
    fn governed_shards_get_a_gres_shard_ceiling() {
        let text = "[cluster]\nname = \"c\"\n[gpu_types.a100]\nrate_per_hour = 2.8\n\
            [gpu_types.shard]\nslices_of = \"a100\"\ngpus = \"1/4\"\n\
            [[team]]\nname = \"inference\"\nquota = { a100 = 1 }\nborrow_limit = { a100 = 1 }\n";
        let config = teamshare_config::parse(text, "t.toml").unwrap();
        let want = desired(&config);
        assert_eq!(want[0].gpu_limit["gres/shard"], Some(8));
        assert_eq!(want[0].quota["gres/shard"], 0);
        assert_eq!(want[0].gpu_limit[""], Some(2));
        assert!(!want[0].gpu_limit.contains_key("shard"));
        assert_eq!(
            missing_tres(&config, "gres|gpu\ngres|gpu:a100\n"),
            ["gres/shard"]
        );
        assert!(missing_tres(&config, "gres|gpu:a100\ngres|shard\n").is_empty());
    }

    #[test]
    fn a_typed_configuration_limits_each_type() {
        let config = teamshare_config::parse(
            r#"
[cluster]
name = "c"
[gpu_types.h100]
rate_per_hour = 4
[gpu_types.a100]
rate_per_hour = 2
[[team]]
name = "agents"
quota = { h100 = 2 }
borrow_limit = 1
[[team]]
name = "training"
quota = { a100 = 2 }
borrow_limit = { h100 = 1 }
"#,
            "t.toml",
        )
        .unwrap();
        let mut want = desired(&config);
        // A slurmdbd that accounts no share of a GPU: no limit on them.
        keep_known_shares(&mut want, "gres|gpu\ngres|gpu:a100\ngres|gpu:h100\n");
        // agents: a number holds for every type; training: its table (A100 0 beyond quota).
        assert_eq!(
            want[0].gpu_limit,
            BTreeMap::from([
                (String::new(), Some(3)),
                ("a100".to_string(), Some(1)),
                ("h100".to_string(), Some(3))
            ])
        );
        assert_eq!(want[1].gpu_limit["a100"], Some(2));
        assert_eq!(want[1].gpu_limit["h100"], Some(1));
        let add = Change::AddAccount(want[0].clone());
        assert_eq!(
            add.command("c").display(),
            "sacctmgr -i add account agents Cluster=c Parent=root Fairshare=1 GrpTRES=gres/gpu=2,gres/gpu:a100=0,gres/gpu:h100=2"
        );
        // An account with only the untyped limit gets its types' quotas; one above a type's
        // ceiling is lowered, the rest left to the governor.
        let current = parse_associations(
            "agents||root|1|gres/gpu=3\ntraining||root|1|gres/gpu=2,gres/gpu:a100=2,gres/gpu:h100=4\n",
        )
        .unwrap();
        let text: Vec<String> = plan(&want, &[], &current)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                "modify account agents: GrpTRES none -> gres/gpu:a100=0,gres/gpu:h100=2",
                "modify account training: GrpTRES gres/gpu:h100=4 -> gres/gpu:h100=1",
            ]
        );
        // The TRES slurmdbd must know.
        let known = "gres|gpu\ngres|gpu:h100\ncpu|\n";
        assert_eq!(missing_tres(&config, known), ["gres/gpu:a100"]);
        assert!(missing_tres(&config, "gres|gpu:a100\ngres|gpu:h100\n").is_empty());
    }

    /// Issue 30: where slurmdbd accounts `gres/shard` (or `gres/mps`), every team holds none, so
    /// that Slurm itself keeps a share of a GPU from starting beside the quotas (the plugin
    /// refuses them at submit; this holds the ones queued before, or submitted while it let
    /// jobs through on a stale state).
    #[test]
    fn teams_hold_no_share_of_a_gpu_where_slurmdbd_accounts_them() {
        let config = teamshare_config::parse(
            "[cluster]\nname = \"c\"\n[[team]]\nname = \"agents\"\nquota = 2\nborrow_limit = 1\n",
            "t.toml",
        )
        .unwrap();
        let mut want = desired(&config);
        keep_known_shares(&mut want, "cpu|\ngres|gpu\ngres|shard\n");
        assert_eq!(want[0].gpu_limit.get("gres/shard"), Some(&Some(0)));
        assert!(!want[0].gpu_limit.contains_key("gres/mps"));
        assert_eq!(
            Change::AddAccount(want[0].clone()).command("c").display(),
            "sacctmgr -i add account agents Cluster=c Parent=root Fairshare=1 GrpTRES=gres/gpu=2,gres/shard=0"
        );
        // An account without the limit gets it; one with shares allowed is brought to 0; one
        // at 0 is left alone.
        for (have, change) in [
            (
                "gres/gpu=2",
                Some("modify account agents: GrpTRES none -> gres/shard=0"),
            ),
            (
                "gres/gpu=2,gres/shard=8",
                Some("modify account agents: GrpTRES gres/shard=8 -> gres/shard=0"),
            ),
            ("gres/gpu=2,gres/shard=0", None),
        ] {
            let current = parse_associations(&format!("agents||root|1|{have}\n")).unwrap();
            let text: Vec<String> = plan(&want, &[], &current)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(text, change.into_iter().collect::<Vec<_>>(), "{have}");
        }
        assert!(parse_associations("agents||root|1|gres/shard=x\n").is_err());
    }
}
