//! The validated configuration: every value checked, defaults applied, ready to use.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::diagnostic::{Diagnostic, Location};

/// A valid `teamshare.toml`. Only [`crate::parse`] and [`crate::load`] produce one from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub cluster: ClusterSettings,
    /// Hourly rate per GPU type; the key is the gres type name, `"default"` for untyped GPUs.
    pub gpu_types: BTreeMap<String, GpuType>,
    /// In file order.
    pub teams: Vec<Team>,
    /// In file order.
    pub priority_classes: Vec<PriorityClass>,
    pub governance: Governance,
    /// `[governance.idle_policy]` (issue 29): what happens to jobs whose GPUs stay idle; none
    /// when the section is absent (off by default).
    pub idle_policy: Option<IdlePolicy>,
    pub accountd: AccountdSettings,
    /// A digest of the file's text ([`crate::digest`]): the plugin and the governor compare it
    /// so that they never act on different versions of the rules.
    pub digest: String,
}

/// `[cluster]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// Slurm `ClusterName`.
    pub name: String,
    /// The governed partitions; the capacity is their GPUs on usable nodes.
    pub partitions: Vec<String>,
    pub idle_sharing: IdleSharing,
    pub currency: String,
}

/// How idle capacity goes to teams waiting to borrow (DESIGN §4 rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdleSharing {
    /// `"fair-share"`: to the team with the best fair-share factor.
    FairShare,
    /// `"fifo"`: to the oldest pending job.
    Fifo,
}

/// The `[gpu_types]` key that prices GPUs without a gres type.
pub const DEFAULT_GPU_TYPE: &str = "default";

/// The type that stands for Slurm's `gres/shard` (issue 30): a share of one GPU of the type
/// its `slices_of` names, `gpus = "1/N"` for N shards per GPU. Slurm counts shards apart from
/// `gres/gpu` and untyped (`gres/shard=16`), so there is one such type.
pub const SHARE_TYPE: &str = "shard";

/// `[gpu_types.<gres type>]`
#[derive(Debug, Clone, PartialEq)]
pub struct GpuType {
    /// Cost of one GPU for one hour, in the cluster's currency; finite and >= 0. A slice
    /// without a rate of its own costs its part of its GPU's rate.
    pub rate_per_hour: f64,
    /// A part of another type's GPU that Slurm offers as a GPU of this type (a MIG profile):
    /// `slices_of` and `gpus` (docs/design/fractional-gpus.md). `None`: a whole GPU.
    pub slice: Option<Slice>,
}

/// A GPU type that is a slice of another's GPU: `slices_of = "a100"`, `gpus = "1/7"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The type of the GPU it is cut from: a declared whole type, not `default`.
    pub of: String,
    /// Its size as a part of one GPU, `numerator / denominator` in lowest terms, above 0 and
    /// at most 1.
    pub numerator: u32,
    pub denominator: u32,
}

impl Slice {
    /// Its size in GPUs.
    pub fn gpus(&self) -> f64 {
        f64::from(self.numerator) / f64::from(self.denominator)
    }
}

/// `[[team]]`: a Slurm account with a guaranteed quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Team {
    /// The Slurm account name.
    pub name: String,
    pub quota: Quota,
    /// GPUs beyond the quota the team may borrow, in all (of any types); `None` means no
    /// limit. A limit given per type (`borrow_limit = { a100 = 2 }`) gives the sum here.
    pub borrow_limit: Option<u32>,
    /// `borrow_limit = { a100 = 2 }`: the most GPUs of each type the team may borrow (a type
    /// not named: none). `None` when the limit is a number or absent.
    pub borrow_by_type: Option<BTreeMap<String, u32>>,
    /// GPUs of the team's idle quota other teams may use, in all; at most `quota.total`.
    pub lend_limit: u32,
    /// `lend_limit = { h100 = 1 }`: the most GPUs of each type's idle quota others may use
    /// (a type not named: none). `None` when lending is given as `lend` or a number.
    pub lend_by_type: Option<BTreeMap<String, u32>>,
    /// Share of idle capacity under fair-share; >= 1.
    pub weight: u32,
    /// Where the team's `[[team]]` header is.
    pub location: Location,
}

/// Guaranteed GPUs. `quota = 2` gives `total: 2` and no types; `quota = { h100 = 2, a100 = 1 }`
/// gives `total: 3` and the count per GPU type.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Quota {
    pub total: u32,
    pub by_type: BTreeMap<String, u32>,
}

impl Quota {
    /// Whether the quota is given per GPU type.
    pub fn is_typed(&self) -> bool {
        !self.by_type.is_empty()
    }
}

impl Team {
    /// Whether any of the team's GPU figures is given per GPU type.
    pub fn is_typed(&self) -> bool {
        self.quota.is_typed() || self.borrow_by_type.is_some() || self.lend_by_type.is_some()
    }

    /// Q_{T,k}: the team's guaranteed GPUs of `gpu_type` (a typed configuration).
    pub fn quota_of(&self, gpu_type: &str) -> u32 {
        self.quota.by_type.get(gpu_type).copied().unwrap_or(0)
    }

    /// B_{T,k} where the limit is given per type; `None` where it is not (then only the total
    /// `borrow_limit`, over all types, bounds what the team borrows of this one).
    pub fn borrow_limit_of(&self, gpu_type: &str) -> Option<u32> {
        self.borrow_by_type
            .as_ref()
            .map(|m| m.get(gpu_type).copied().unwrap_or(0))
    }

    /// B_{T,k} as a ceiling sees it: the table's entry, else the number (over all types, so
    /// at most that of any one); `None` without a borrow limit.
    pub fn borrow_limit_for(&self, gpu_type: &str) -> Option<u32> {
        self.borrow_limit_of(gpu_type).or(self.borrow_limit)
    }

    /// L_{T,k}: the most GPUs of the team's idle `gpu_type` quota others may use; with a
    /// number (`lend_limit = N`) it also bounds the total over types (see `lend_limit`).
    pub fn lend_limit_of(&self, gpu_type: &str) -> u32 {
        let quota = self.quota_of(gpu_type);
        match &self.lend_by_type {
            Some(m) => m.get(gpu_type).copied().unwrap_or(0).min(quota),
            None => self.lend_limit.min(quota),
        }
    }
}

/// `[[priority_class]]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClass {
    pub name: String,
    pub value: u32,
    /// `false`: never preempted, and therefore never borrows.
    pub preemptible: bool,
}

/// `[governance]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Governance {
    pub preempt_within_team: WithinTeam,
    pub reclaim_mode: ReclaimMode,
    /// Between SIGTERM and kill when a job is reclaimed, so it can checkpoint.
    pub reclaim_grace: Duration,
    /// A borrowed job younger than this is not a reclaim victim.
    pub min_runtime_before_reclaim: Duration,
    /// Published state older than this counts as stale.
    pub state_max_age: Duration,
    pub on_stale_state: OnStaleState,
    /// How far back a running job's GPU samples are read to call it idle (issue 29): every
    /// sample of the window below `[accountd] idle_threshold_percent`, the window covered.
    pub idle_window: Duration,
    /// Rule 3's order with a first key (an extension, off by default): the victims idle for
    /// the whole `idle_window` go before the others, then the order as without it.
    pub idle_first_reclaim: bool,
}

impl Default for Governance {
    fn default() -> Self {
        Self {
            preempt_within_team: WithinTeam::LowerPriority,
            reclaim_mode: ReclaimMode::Requeue,
            reclaim_grace: Duration::from_secs(30),
            min_runtime_before_reclaim: Duration::from_secs(5 * 60),
            state_max_age: Duration::from_secs(30),
            on_stale_state: OnStaleState::FailOpen,
            idle_window: Duration::from_secs(15 * 60),
            idle_first_reclaim: false,
        }
    }
}

impl Governance {
    /// Whether rule 3's order puts idle jobs first: `idle_first_reclaim`, or an idle policy
    /// whose action is `"reclaim-first"` (then only the jobs the policy acted on are idle).
    pub fn idle_orders_victims(&self, policy: Option<&IdlePolicy>) -> bool {
        self.idle_first_reclaim || policy.is_some_and(|p| p.action == IdleAction::ReclaimFirst)
    }
}

/// `[governance.idle_policy]`: a running job whose GPUs were below `[accountd]
/// idle_threshold_percent` in every sample for `notice_after` is noticed (its AdminComment,
/// `accountd status --user`, the hook); if it stays idle `act_after` longer, `action` follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdlePolicy {
    pub notice_after: Duration,
    pub action: IdleAction,
    /// After the notice; zero with `action = "notice"` (nothing follows).
    pub act_after: Duration,
    /// The teams it applies to; empty: every team.
    pub teams: Vec<String>,
    /// Classes it never touches (interactive debugging...).
    pub exempt_classes: Vec<String>,
    /// Run for each notice and action with the job's facts as `key=value` arguments.
    pub hook: Option<PathBuf>,
}

impl IdlePolicy {
    /// Whether a job of `team` in class `class` (`""`: none) falls under the policy.
    pub fn covers(&self, team: &str, class: &str) -> bool {
        (self.teams.is_empty() || self.teams.iter().any(|t| t == team))
            && !self.exempt_classes.iter().any(|c| c == class)
    }
}

/// What follows an idle job's notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdleAction {
    /// `"notice"`: nothing more.
    Notice,
    /// `"reclaim-first"`: its GPUs first among rule 3's victims (when borrowed).
    ReclaimFirst,
    /// `"requeue"` (an interactive job, which cannot be requeued, is cancelled).
    Requeue,
    /// `"cancel"`
    Cancel,
}

impl IdleAction {
    pub fn name(self) -> &'static str {
        match self {
            IdleAction::Notice => "notice",
            IdleAction::ReclaimFirst => "reclaim-first",
            IdleAction::Requeue => "requeue",
            IdleAction::Cancel => "cancel",
        }
    }
}

/// Whether a team's higher-class job at quota may preempt the team's own lower-class jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WithinTeam {
    /// `"lower-priority"`
    LowerPriority,
    /// `"never"`
    Never,
}

/// What happens to a reclaimed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReclaimMode {
    /// `"requeue"`
    Requeue,
    /// `"cancel"`
    Cancel,
}

/// What the plugin does when the published state is older than `state_max_age`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnStaleState {
    /// `"fail-open"`: accept jobs without governance.
    FailOpen,
    /// `"fail-closed"`: hold or reject what needs the state.
    FailClosed,
}

/// `[accountd]`
#[derive(Debug, Clone, PartialEq)]
pub struct AccountdSettings {
    pub database: PathBuf,
    pub ingest_interval: Duration,
    pub metrics_listen: SocketAddr,
    /// The state the plugin reads.
    pub state_file: PathBuf,
    pub sample_interval: Duration,
    pub sample_spool: PathBuf,
    /// Multiplies the cost of borrowed GPU-hours; finite and >= 0.
    pub borrowed_cost_factor: f64,
    pub idle_cost_split: IdleCostSplit,
    /// A GPU below this utilisation counts as idle; 0..=100.
    pub idle_threshold_percent: f64,
    pub fairshare_half_life: Duration,
    /// Slurm's fair-share dampening factor; >= 1.
    pub fairshare_dampening: f64,
}

impl Default for AccountdSettings {
    fn default() -> Self {
        Self {
            database: PathBuf::from("/var/lib/teamshare/accountd.db"),
            ingest_interval: Duration::from_secs(60),
            metrics_listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 9477)),
            state_file: PathBuf::from("/var/lib/teamshare/state.json"),
            sample_interval: Duration::from_secs(10),
            sample_spool: PathBuf::from("/var/spool/teamshare/samples"),
            borrowed_cost_factor: 1.0,
            idle_cost_split: IdleCostSplit::QuotaShare,
            idle_threshold_percent: 5.0,
            fairshare_half_life: Duration::from_secs(7 * 86_400),
            fairshare_dampening: 1.0,
        }
    }
}

/// How the cost of idle capacity is split (DESIGN §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdleCostSplit {
    /// `"quota-share"`
    QuotaShare,
    /// `"usage-share"`: the OpenCost rule.
    UsageShare,
    /// `"idle-row"`: kept in an `(idle)` row.
    IdleRow,
}

impl Config {
    pub fn team(&self, name: &str) -> Option<&Team> {
        self.teams.iter().find(|team| team.name == name)
    }

    pub fn priority_class(&self, name: &str) -> Option<&PriorityClass> {
        self.priority_classes
            .iter()
            .find(|class| class.name == name)
    }

    /// Whether GPUs are governed per type: some team gives its quota, borrow limit or lend
    /// limit per GPU type. Every quota is then per type (a valid configuration has no untyped
    /// quota above 0 beside typed ones), and jobs must name a GPU type.
    pub fn is_typed(&self) -> bool {
        self.teams.iter().any(Team::is_typed)
    }

    /// The GPU types the configuration governs (a typed configuration): every type some team's
    /// quota, borrow limit or lend limit names, and every type with a rate, except `default`
    /// (the rate of untyped GPUs).
    pub fn governed_types(&self) -> BTreeSet<&str> {
        let mut types: BTreeSet<&str> = BTreeSet::new();
        for team in &self.teams {
            types.extend(team.quota.by_type.keys().map(String::as_str));
            for m in [&team.borrow_by_type, &team.lend_by_type]
                .into_iter()
                .flatten()
            {
                types.extend(m.keys().map(String::as_str));
            }
        }
        types.extend(
            self.gpu_types
                .keys()
                .map(String::as_str)
                .filter(|t| *t != DEFAULT_GPU_TYPE),
        );
        types
    }

    /// What one GPU of `gpu_type` is worth in whole GPUs (GPU-equivalents): a slice's size,
    /// 1 for any other type (and for GPUs without a type).
    pub fn gpu_equivalents(&self, gpu_type: &str) -> f64 {
        self.gpu_types
            .get(gpu_type)
            .and_then(|t| t.slice.as_ref())
            .map_or(1.0, Slice::gpus)
    }

    /// Whether some type is declared a slice of another: GPU-hours then have equivalents.
    pub fn has_slices(&self) -> bool {
        self.gpu_types.values().any(|t| t.slice.is_some())
    }

    /// The shards' size and GPU type where `[gpu_types.shard]` governs `gres/shard`
    /// ([`SHARE_TYPE`]); `None` where it does not (shares are then refused).
    pub fn shares(&self) -> Option<&Slice> {
        self.gpu_types.get(SHARE_TYPE)?.slice.as_ref()
    }

    /// Whether jobs may ask for `gpu_type` in a typed configuration: a type with a rate
    /// (every type a quota or limit names has one), other than `default`.
    pub fn governs_type(&self, gpu_type: &str) -> bool {
        gpu_type != DEFAULT_GPU_TYPE && self.gpu_types.contains_key(gpu_type)
    }

    /// Sum of all teams' quotas, in GPUs.
    pub fn total_quota(&self) -> u32 {
        self.teams
            .iter()
            .fold(0u32, |sum, team| sum.saturating_add(team.quota.total))
    }

    /// Checks the quotas against the governed capacity C measured from the cluster (DESIGN §4):
    /// the sum of all quotas must not exceed `capacity_total`, and for every GPU type that some
    /// team's quota names, the sum of those typed quotas must not exceed that type's capacity
    /// (a type missing from `capacity_by_type` has none). Each diagnostic points at the team whose
    /// quota brings the sum above the capacity, in file order; the hint lists every contribution.
    pub fn check_capacity(
        &self,
        capacity_total: u32,
        capacity_by_type: &BTreeMap<String, u32>,
    ) -> Vec<Diagnostic> {
        let partitions = self.cluster.partitions.join(", ");
        let mut diagnostics = Vec::new();
        let all = self.teams.iter().map(|team| (team, team.quota.total));
        diagnostics.extend(over_capacity(all, capacity_total, None, &partitions));

        let types: BTreeSet<&String> = self
            .teams
            .iter()
            .flat_map(|team| team.quota.by_type.keys())
            .collect();
        for gpu_type in types {
            if self.family_units(gpu_type).is_some() {
                diagnostics.extend(self.over_family_capacity(
                    gpu_type,
                    capacity_by_type,
                    &partitions,
                ));
                continue;
            }
            let capacity = capacity_by_type.get(gpu_type).copied().unwrap_or(0);
            let typed = self
                .teams
                .iter()
                .filter_map(|team| team.quota.by_type.get(gpu_type).map(|&quota| (team, quota)));
            diagnostics.extend(over_capacity(typed, capacity, Some(gpu_type), &partitions));
        }
        diagnostics.sort_by_key(|d| (d.line, d.column));
        diagnostics
    }
}

fn over_capacity<'t>(
    quotas: impl Iterator<Item = (&'t Team, u32)>,
    capacity: u32,
    gpu_type: Option<&str>,
    partitions: &str,
) -> Option<Diagnostic> {
    let quotas: Vec<(&Team, u32)> = quotas.collect();
    let sum: u64 = quotas.iter().map(|&(_, quota)| u64::from(quota)).sum();
    if sum <= u64::from(capacity) {
        return None;
    }
    let mut running = 0u64;
    let (culprit, _) = quotas.iter().find(|&&(_, quota)| {
        running += u64::from(quota);
        running > u64::from(capacity)
    })?;
    let kind = gpu_type.map_or(String::new(), |t| format!("{t} "));
    let listed = quotas
        .iter()
        .map(|(team, quota)| format!("{} {quota}", team.name))
        .collect::<Vec<_>>()
        .join(", ");
    let message = format!(
        "the sum of {kind}quotas ({sum} GPUs) is above the governed {kind}capacity ({capacity} GPUs); team `{}` brings it over",
        culprit.name
    );
    let hint = format!(
        "{kind}quotas: {listed}; the capacity counts the {kind}GPUs of usable nodes in partitions {partitions}: lower a quota or bring nodes back"
    );
    Some(Diagnostic::new(&culprit.location, message).with_hint(hint))
}
