//! From the parsed TOML document to a valid [`Config`], collecting every problem on the way.
//!
//! The document is walked by hand rather than deserialised: a deserialiser stops at the first
//! problem, and we want all of them, each at the key or value it is about.

mod families;
mod gpu_types;
mod idle_policy;
mod reader;

use std::collections::{BTreeMap, HashMap};

use toml_edit::{ImDocument, Item, Key, Table, Value};

use crate::config::{
    AccountdSettings, ClusterSettings, Config, Governance, GpuType, IdleCostSplit, IdleSharing,
    OnStaleState, PriorityClass, Quota, ReclaimMode, Team, WithinTeam, DEFAULT_GPU_TYPE,
};
use crate::diagnostic::{Diagnostic, Diagnostics, SourceMap};
use crate::suggest::closest;

use self::reader::{describe, Checker, Field, Section, Span};

/// Top-level sections, and how each is written in a file.
const SECTIONS: &[(&str, &str)] = &[
    ("cluster", "[cluster]"),
    ("gpu_types", "[gpu_types.<type>]"),
    ("team", "[[team]]"),
    ("priority_class", "[[priority_class]]"),
    ("governance", "[governance]"),
    ("accountd", "[accountd]"),
];
const CLUSTER_KEYS: &[&str] = &["name", "partitions", "idle_sharing", "currency"];
const TEAM_KEYS: &[&str] = &[
    "name",
    "quota",
    "borrow_limit",
    "lend",
    "lend_limit",
    "weight",
];
const PRIORITY_CLASS_KEYS: &[&str] = &["name", "value", "preemptible"];
const GOVERNANCE_KEYS: &[&str] = &[
    "preempt_within_team",
    "reclaim_mode",
    "reclaim_grace",
    "min_runtime_before_reclaim",
    "state_max_age",
    "on_stale_state",
    "idle_window",
    "idle_first_reclaim",
    "idle_policy",
];
const ACCOUNTD_KEYS: &[&str] = &[
    "database",
    "ingest_interval",
    "metrics_listen",
    "state_file",
    "sample_interval",
    "sample_spool",
    "borrowed_cost_factor",
    "idle_cost_split",
    "idle_threshold_percent",
    "fairshare_half_life",
    "fairshare_dampening",
];

/// Parses and validates `source`; `origin` names the file in diagnostics.
pub(crate) fn validate(source: &str, origin: &str) -> Result<Config, Diagnostics> {
    let map = SourceMap::new(origin, source);
    let document = match ImDocument::parse(source) {
        Ok(document) => document,
        Err(error) => return Err(Diagnostics(vec![syntax_error(&map, &error)])),
    };
    let mut checker = Checker {
        map,
        problems: Vec::new(),
    };
    let mut config = checker.config(document.as_table());
    config.digest = crate::digest(source);
    if checker.problems.is_empty() {
        Ok(config)
    } else {
        let mut problems = checker.problems;
        problems.sort_by_key(|problem| (problem.line, problem.column));
        Err(Diagnostics(problems))
    }
}

fn syntax_error(map: &SourceMap<'_>, error: &toml_edit::TomlError) -> Diagnostic {
    // The parser's message is a headline, then details on further lines.
    let message = error
        .message()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(": ");
    Diagnostic::new(
        &map.span_start(error.span()),
        format!("invalid TOML: {message}"),
    )
    .with_hint("fix the syntax first; the rest of the file is checked once it parses")
}

/// Slurm stores account and QOS names in lowercase; these are the characters that survive
/// sacctmgr and the job_submit plugin unchanged.
fn slurm_name_problem(name: &str, kind: &str) -> Option<(String, String)> {
    const RULE: &str = "use lowercase letters, digits, `_`, `-` and `.`, at most 64 characters";
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.".contains(c);
    if name.is_empty() {
        Some(("is empty".to_owned(), RULE.to_owned()))
    } else if name.chars().count() > 64 {
        Some(("is longer than 64 characters".to_owned(), RULE.to_owned()))
    } else if !name.chars().all(allowed) {
        let lowercase = name.to_ascii_lowercase();
        let hint = if lowercase.chars().all(allowed) {
            format!("Slurm {kind} names are lowercase: did you mean \"{lowercase}\"?")
        } else {
            RULE.to_owned()
        };
        Some((format!("is not a valid Slurm {kind} name"), hint))
    } else {
        None
    }
}

/// A gres type as gres.conf's `Type=` accepts it.
fn is_gres_type(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
}

/// `"50%"` -> 50.
fn percent(text: &str) -> Option<u32> {
    text.trim().strip_suffix('%')?.trim_end().parse().ok()
}

impl Checker<'_> {
    /// Checks a team (account) or priority class (QOS) name against Slurm's rules.
    fn slurm_name(&mut self, field: &Field<'_>, name: &str, what: &str, kind: &str) {
        if let Some((problem, hint)) = slurm_name_problem(name, kind) {
            self.error(
                field.span(),
                format!("{what} name \"{name}\" {problem}"),
                hint,
            );
        }
    }

    fn config(&mut self, root: &Table) -> Config {
        let names: Vec<&'static str> = SECTIONS.iter().map(|&(name, _)| name).collect();
        let mut misspelt: Vec<&'static str> = Vec::new();
        for (name, _) in root.iter() {
            if names.contains(&name) {
                continue;
            }
            let span = root.key(name).and_then(Key::span);
            let hint = match closest(name, &names) {
                Some(suggestion) => {
                    if !root.contains_key(suggestion) {
                        misspelt.push(suggestion);
                    }
                    let header = SECTIONS
                        .iter()
                        .find(|&&(n, _)| n == suggestion)
                        .map_or("", |s| s.1);
                    format!("did you mean {header}?")
                }
                None => {
                    let headers: Vec<&str> = SECTIONS.iter().map(|&(_, header)| header).collect();
                    format!("expected one of {}", headers.join(", "))
                }
            };
            self.error(span, format!("unknown section `{name}`"), hint);
        }
        let mut top = Section::new(root, Some(0..0), "the top level");
        top.misspelt = misspelt;
        let empty = Table::new();

        let cluster = match top.field("cluster") {
            Some(field) => self
                .table(
                    &field,
                    "[cluster]".into(),
                    "write it as a [cluster] section (single brackets: there is one cluster)",
                )
                .map(|mut section| self.cluster(&mut section)),
            None => {
                if !top.misspelt.contains(&"cluster") {
                    self.error(
                        Some(0..0),
                        "missing [cluster] section",
                        "add a [cluster] section with at least name = \"<ClusterName from slurm.conf>\"",
                    );
                }
                None
            }
        };
        let gpu_types = self.gpu_types(&top);
        let teams = self.teams(&top, &gpu_types);
        let priority_classes = self.priority_classes(&top);
        let mut governance = self.optional_section(&top, "governance", "[governance]", &empty);
        let idle_policy = self.idle_policy(&governance, &teams, &priority_classes);
        let governance = self.governance(&mut governance);
        let mut accountd = self.optional_section(&top, "accountd", "[accountd]", &empty);
        let accountd = self.accountd(&mut accountd);

        Config {
            cluster: cluster.unwrap_or_else(|| ClusterSettings {
                name: String::new(),
                partitions: Vec::new(),
                idle_sharing: IdleSharing::FairShare,
                currency: String::new(),
            }),
            gpu_types,
            teams,
            priority_classes,
            governance,
            idle_policy,
            accountd,
            digest: String::new(),
        }
    }

    /// A section whose keys all have defaults: absent means empty.
    fn optional_section<'d>(
        &mut self,
        top: &Section<'d>,
        name: &str,
        title: &str,
        empty: &'d Table,
    ) -> Section<'d> {
        top.field(name)
            .and_then(|field| {
                self.table(
                    &field,
                    title.into(),
                    &format!("write it as a {title} section"),
                )
            })
            .unwrap_or_else(|| Section::new(empty, None, title))
    }

    fn cluster(&mut self, section: &mut Section<'_>) -> ClusterSettings {
        self.unknown_keys(section, CLUSTER_KEYS);
        let name = self
            .required(section, "name", "set name to the ClusterName of slurm.conf")
            .and_then(|field| self.non_empty_string(&field, "\"gpu-cluster\""))
            .map(str::to_owned)
            .unwrap_or_default();
        let partitions = match section.field("partitions") {
            Some(field) => self.partitions(&field),
            None => vec!["gpu".to_owned()],
        };
        let idle_sharing = section
            .field("idle_sharing")
            .and_then(|field| {
                self.choice(
                    &field,
                    &[
                        ("fair-share", IdleSharing::FairShare),
                        ("fifo", IdleSharing::Fifo),
                    ],
                )
            })
            .unwrap_or(IdleSharing::FairShare);
        let currency = section
            .field("currency")
            .and_then(|field| self.non_empty_string(&field, "\"USD\""))
            .map_or_else(|| "USD".to_owned(), str::to_owned);
        ClusterSettings {
            name,
            partitions,
            idle_sharing,
            currency,
        }
    }

    fn partitions(&mut self, field: &Field<'_>) -> Vec<String> {
        let Some(array) = field.item.as_array() else {
            self.wrong_type(field, "an array of partition names", "[\"gpu\"]");
            return Vec::new();
        };
        if array.is_empty() {
            self.error(
                field.span(),
                format!("{} is empty: nothing would be governed", field.what()),
                "name at least one partition, for example: partitions = [\"gpu\"]",
            );
        }
        let mut partitions: Vec<String> = Vec::new();
        for value in array.iter() {
            match value.as_str() {
                Some(name) if name.trim().is_empty() => self.error(
                    value.span(),
                    format!("empty partition name in {}", field.what()),
                    "use the PartitionName of slurm.conf",
                ),
                Some(name) if partitions.iter().any(|p| p == name) => self.error(
                    value.span(),
                    format!("partition \"{name}\" is listed twice in {}", field.what()),
                    "remove the repeated name",
                ),
                Some(name) => partitions.push(name.to_owned()),
                None => self.error(
                    value.span(),
                    format!(
                        "{} must list partition names as strings, not {}",
                        field.what(),
                        describe(&Item::Value(value.clone()))
                    ),
                    "for example: partitions = [\"gpu\"]",
                ),
            }
        }
        partitions
    }

    fn teams(&mut self, top: &Section<'_>, gpu_types: &BTreeMap<String, GpuType>) -> Vec<Team> {
        let sections = match top.field("team") {
            Some(field) => self.array_of_tables(&field, "[[team]]"),
            None => Some(Vec::new()),
        };
        let Some(sections) = sections else {
            return Vec::new();
        };
        if sections.is_empty() && !top.misspelt.contains(&"team") {
            self.error(
                top.field("team")
                    .and_then(|field| field.span())
                    .or(Some(0..0)),
                "no [[team]] defined",
                "add a [[team]] section for each Slurm account, with at least name and quota",
            );
        }
        let mut seen = HashMap::new();
        let teams: Vec<(Team, Option<Span>)> = sections
            .into_iter()
            .map(|mut section| self.team(&mut section, gpu_types, &mut seen))
            .collect();
        // Typed quotas guarantee GPUs of a type; an untyped quota guarantees GPUs of any type,
        // which could only be honoured by taking them from the typed guarantees. So a
        // configuration that types one team's GPUs types every quota.
        if let Some(typed) = teams.iter().map(|(team, _)| team).find(|t| t.is_typed()) {
            let first = typed.name.clone();
            let example = typed
                .quota
                .by_type
                .keys()
                .next()
                .or_else(|| gpu_types.keys().find(|k| *k != DEFAULT_GPU_TYPE))
                .cloned()
                .unwrap_or_else(|| "h100".to_owned());
            for (team, span) in &teams {
                if let Some(span) = span {
                    self.error(
                        Some(span.clone()),
                        format!(
                            "team `{}` has an untyped quota of {} GPUs, but team `{first}` gives its GPUs per type",
                            team.name, team.quota.total
                        ),
                        format!(
                            "when GPUs are governed per type every quota names its types: quota = {{ {example} = {} }} (quota = 0 for a team that only borrows)",
                            team.quota.total
                        ),
                    );
                }
            }
        }
        teams.into_iter().map(|(team, _)| team).collect()
    }

    fn team(
        &mut self,
        section: &mut Section<'_>,
        gpu_types: &BTreeMap<String, GpuType>,
        seen: &mut HashMap<String, usize>,
    ) -> (Team, Option<Span>) {
        self.unknown_keys(section, TEAM_KEYS);
        let location = self.map.span_start(section.span.clone());
        let name = self
            .required(
                section,
                "name",
                "give the team its Slurm account name, e.g. name = \"agents\"",
            )
            .and_then(|field| {
                let name = self.string(&field)?;
                self.slurm_name(&field, name, "team", "account");
                self.unique(&field, name, location.line, seen, "team");
                Some(name.to_owned())
            })
            .unwrap_or_default();
        let quota_field = self.required(
            section,
            "quota",
            "give the team its guaranteed GPUs, e.g. quota = 2 (quota = 0 for a team that only borrows)",
        );
        let quota = quota_field
            .as_ref()
            .and_then(|field| self.quota(field, gpu_types));
        // Where an untyped quota above 0 is, for the check against typed ones.
        let untyped_quota = quota
            .as_ref()
            .filter(|q| !q.is_typed() && q.total > 0)
            .and_then(|_| quota_field.as_ref().and_then(Field::span));
        let (borrow_limit, borrow_by_type) = section
            .field("borrow_limit")
            .map(|field| self.borrow_limit(&field, quota.as_ref(), gpu_types))
            .unwrap_or((None, None));
        let (lend_limit, lend_by_type) = self.lend_limit(section, quota.as_ref(), gpu_types);
        self.family_figures(
            section,
            quota.as_ref(),
            [borrow_by_type.as_ref(), lend_by_type.as_ref()],
            gpu_types,
        );
        let weight = section
            .field("weight")
            .and_then(|field| {
                let weight = self.count(&field, "40")?;
                if weight == 0 {
                    self.error(
                        field.span(),
                        format!("{} must be at least 1", field.what()),
                        "weight is the team's share of idle capacity under fair-share: use 1 or more",
                    );
                }
                Some(weight)
            })
            .unwrap_or(1);
        let team = Team {
            name,
            quota: quota.unwrap_or_default(),
            borrow_limit,
            borrow_by_type,
            lend_limit,
            lend_by_type,
            weight,
            location,
        };
        (team, untyped_quota)
    }

    /// `quota = 2` or `quota = { h100 = 2, a100 = 1 }`; `None` when invalid (reported).
    fn quota(&mut self, field: &Field<'_>, gpu_types: &BTreeMap<String, GpuType>) -> Option<Quota> {
        const EXAMPLE: &str = "2 or quota = { h100 = 2 }";
        if let Some(total) = field.item.as_integer() {
            let total = self.count_in_range(field, total, EXAMPLE)?;
            return Some(Quota {
                total,
                by_type: BTreeMap::new(),
            });
        }
        if field.item.as_table_like().is_none() {
            self.wrong_type(
                field,
                "a non-negative integer or a table of GPU type = count",
                EXAMPLE,
            );
            return None;
        }
        let by_type = self.per_type(
            field,
            gpu_types,
            "write quota = 0 for a team without guaranteed GPUs",
            "an untyped quota = N",
        )?;
        let total = by_type.values().fold(0u32, |s, n| s.saturating_add(*n));
        Some(Quota { total, by_type })
    }

    /// A table of GPU type = count (`{ h100 = 2, a100 = 1 }`): every type declared in
    /// `[gpu_types]` and not `default`; `None` when invalid (reported).
    fn per_type(
        &mut self,
        field: &Field<'_>,
        gpu_types: &BTreeMap<String, GpuType>,
        empty_hint: &str,
        untyped_alternative: &str,
    ) -> Option<BTreeMap<String, u32>> {
        let table = field.item.as_table_like()?;
        let typed = Section::new(
            table,
            field.span(),
            format!(
                "the {} of {}",
                field.name().replace('_', " "),
                field.section
            ),
        );
        let offered: Vec<&str> = gpu_types
            .keys()
            .map(String::as_str)
            .filter(|t| *t != DEFAULT_GPU_TYPE)
            .collect();
        let mut by_type = Some(BTreeMap::new());
        if typed.table.is_empty() {
            self.error(
                field.span(),
                format!("{} names no GPU type", field.what()),
                empty_hint,
            );
            by_type = None;
        }
        for entry in typed.fields() {
            let gpu_type = entry.name();
            if gpu_type == DEFAULT_GPU_TYPE {
                self.error(
                    entry.key_span(),
                    format!("`default` in {} is not a GPU type", entry.section),
                    format!("[gpu_types.default] prices GPUs without a gres type; name the types of gres.conf here, or use {untyped_alternative}"),
                );
                by_type = None;
            } else if !gpu_types.contains_key(gpu_type) {
                let hint = if offered.is_empty() {
                    format!("add a [gpu_types.{gpu_type}] section with its rate_per_hour, or use {untyped_alternative}")
                } else if let Some(suggestion) = closest(gpu_type, &offered) {
                    format!(
                        "did you mean `{suggestion}`? offered: {}",
                        offered.join(", ")
                    )
                } else {
                    format!(
                        "offered GPU types (from [gpu_types]): {}",
                        offered.join(", ")
                    )
                };
                self.error(
                    entry.key_span(),
                    format!("GPU type `{gpu_type}` in {} is not offered", entry.section),
                    hint,
                );
                by_type = None;
            }
            let count = self.count(&entry, "2");
            match (&mut by_type, count) {
                (Some(m), Some(count)) => {
                    m.insert(gpu_type.to_owned(), count);
                }
                _ => by_type = None,
            }
        }
        by_type
    }

    /// GPUs, `"N%"` of the quota rounded down, or a table per GPU type; `None` (no limit)
    /// when invalid (reported) or when the quota it depends on is invalid. The second value
    /// is the table, when the limit is given per type.
    fn borrow_limit(
        &mut self,
        field: &Field<'_>,
        quota: Option<&Quota>,
        gpu_types: &BTreeMap<String, GpuType>,
    ) -> (Option<u32>, Option<BTreeMap<String, u32>>) {
        const EXAMPLE: &str =
            "2, borrow_limit = \"100%\" (of the quota) or borrow_limit = { a100 = 2 }; leave it out for no limit";
        match field.item.as_value() {
            Some(Value::Integer(limit)) => {
                (self.count_in_range(field, *limit.value(), EXAMPLE), None)
            }
            Some(Value::String(text)) => match percent(text.value()) {
                Some(percent) => {
                    let limit = quota.map(|q| u64::from(q.total) * u64::from(percent) / 100);
                    (limit.map(|l| u32::try_from(l).unwrap_or(u32::MAX)), None)
                }
                None => {
                    self.error(
                        field.span(),
                        format!(
                            "{} must be a number of GPUs or a whole percentage of the quota, not \"{}\"",
                            field.what(),
                            text.value()
                        ),
                        format!("for example: borrow_limit = {EXAMPLE}"),
                    );
                    (None, None)
                }
            },
            _ if field.item.as_table_like().is_some() => {
                match self.per_type(
                    field,
                    gpu_types,
                    "leave borrow_limit out for no limit, or write borrow_limit = 0",
                    "an untyped borrow_limit = N",
                ) {
                    Some(m) => {
                        let total = m.values().fold(0u32, |s, n| s.saturating_add(*n));
                        (Some(total), Some(m))
                    }
                    None => (None, None),
                }
            }
            _ => {
                self.wrong_type(
                    field,
                    "a number of GPUs, a percentage string or a table of GPU type = count",
                    EXAMPLE,
                );
                (None, None)
            }
        }
    }

    /// `lend = true|false` or `lend_limit = N` or `lend_limit = { h100 = 1 }` (not both); by
    /// default the whole quota is lent. Returns the total and, for a table, the table.
    fn lend_limit(
        &mut self,
        section: &Section<'_>,
        quota: Option<&Quota>,
        gpu_types: &BTreeMap<String, GpuType>,
    ) -> (u32, Option<BTreeMap<String, u32>>) {
        let quota_total = quota.map(|quota| quota.total);
        match (section.field("lend"), section.field("lend_limit")) {
            (Some(lend), Some(limit)) => {
                let position = |field: &Field<'_>| field.key_span().map_or(0, |span| span.start);
                let later = if position(&lend) > position(&limit) {
                    &lend
                } else {
                    &limit
                };
                self.error(
                    later.key_span(),
                    format!("both `lend` and `lend_limit` in {}", section.title),
                    "keep one: lend = true lends the whole idle quota, lend = false none, lend_limit = N at most N GPUs",
                );
                (0, None)
            }
            (Some(lend), None) => match (self.boolean(&lend), quota_total) {
                (Some(true), Some(total)) => (total, None),
                _ => (0, None),
            },
            (None, Some(limit)) if limit.item.as_table_like().is_some() => {
                let Some(m) = self.per_type(
                    &limit,
                    gpu_types,
                    "write lend = false to lend nothing",
                    "an untyped lend_limit = N",
                ) else {
                    return (0, None);
                };
                if let Some(quota) = quota {
                    for (gpu_type, &count) in &m {
                        let own = quota.by_type.get(gpu_type).copied().unwrap_or(0);
                        if count > own {
                            self.error(
                                limit.span(),
                                format!(
                                    "{} lends {count} {gpu_type}, above the team's {gpu_type} quota of {own}",
                                    limit.what()
                                ),
                                format!("a team can lend at most its own quota of each type: {gpu_type} = {own} or less"),
                            );
                        }
                    }
                }
                let total = m.values().fold(0u32, |s, n| s.saturating_add(*n));
                (total, Some(m))
            }
            (None, Some(limit)) => {
                let Some(count) = self.count(&limit, "1") else {
                    return (0, None);
                };
                if let Some(total) = quota_total.filter(|&total| count > total) {
                    self.error(
                        limit.span(),
                        format!("{} is {count}, above the team's quota of {total}", limit.what()),
                        format!("a team can lend at most its own quota: use lend_limit = {total} or less"),
                    );
                }
                (count, None)
            }
            (None, None) => (quota_total.unwrap_or(0), None),
        }
    }

    fn priority_classes(&mut self, top: &Section<'_>) -> Vec<PriorityClass> {
        let Some(field) = top.field("priority_class") else {
            return Vec::new();
        };
        let Some(sections) = self.array_of_tables(&field, "[[priority_class]]") else {
            return Vec::new();
        };
        let mut seen = HashMap::new();
        let mut classes = Vec::new();
        for mut section in sections {
            self.unknown_keys(&mut section, PRIORITY_CLASS_KEYS);
            let line = self.map.span_start(section.span.clone()).line;
            let name = self
                .required(
                    &section,
                    "name",
                    "name the class as users choose it, e.g. name = \"inference\"",
                )
                .and_then(|field| {
                    let name = self.string(&field)?;
                    self.slurm_name(&field, name, "priority class", "QOS");
                    self.unique(&field, name, line, &mut seen, "priority class");
                    Some(name.to_owned())
                })
                .unwrap_or_default();
            let value = section
                .field("value")
                .and_then(|field| self.count(&field, "100"))
                .unwrap_or(0);
            let preemptible = section
                .field("preemptible")
                .and_then(|field| self.boolean(&field))
                .unwrap_or(true);
            classes.push(PriorityClass {
                name,
                value,
                preemptible,
            });
        }
        classes
    }

    fn governance(&mut self, section: &mut Section<'_>) -> Governance {
        self.unknown_keys(section, GOVERNANCE_KEYS);
        let defaults = Governance::default();
        Governance {
            preempt_within_team: section
                .field("preempt_within_team")
                .and_then(|field| {
                    self.choice(
                        &field,
                        &[
                            ("lower-priority", WithinTeam::LowerPriority),
                            ("never", WithinTeam::Never),
                        ],
                    )
                })
                .unwrap_or(defaults.preempt_within_team),
            reclaim_mode: section
                .field("reclaim_mode")
                .and_then(|field| {
                    self.choice(
                        &field,
                        &[
                            ("requeue", ReclaimMode::Requeue),
                            ("cancel", ReclaimMode::Cancel),
                        ],
                    )
                })
                .unwrap_or(defaults.reclaim_mode),
            reclaim_grace: section
                .field("reclaim_grace")
                .and_then(|field| self.duration(&field))
                .unwrap_or(defaults.reclaim_grace),
            min_runtime_before_reclaim: section
                .field("min_runtime_before_reclaim")
                .and_then(|field| self.duration(&field))
                .unwrap_or(defaults.min_runtime_before_reclaim),
            state_max_age: section
                .field("state_max_age")
                .and_then(|field| self.positive_duration(&field))
                .unwrap_or(defaults.state_max_age),
            on_stale_state: section
                .field("on_stale_state")
                .and_then(|field| {
                    self.choice(
                        &field,
                        &[
                            ("fail-open", OnStaleState::FailOpen),
                            ("fail-closed", OnStaleState::FailClosed),
                        ],
                    )
                })
                .unwrap_or(defaults.on_stale_state),
            ..self.idleness(section, &defaults)
        }
    }

    /// `[governance]`'s idleness keys (issue 29), with the defaults for the rest.
    fn idleness(&mut self, section: &mut Section<'_>, defaults: &Governance) -> Governance {
        Governance {
            idle_window: section
                .field("idle_window")
                .and_then(|field| self.positive_duration(&field))
                .unwrap_or(defaults.idle_window),
            idle_first_reclaim: section
                .field("idle_first_reclaim")
                .and_then(|field| self.boolean(&field))
                .unwrap_or(defaults.idle_first_reclaim),
            ..*defaults
        }
    }

    fn accountd(&mut self, section: &mut Section<'_>) -> AccountdSettings {
        self.unknown_keys(section, ACCOUNTD_KEYS);
        let defaults = AccountdSettings::default();
        AccountdSettings {
            database: section
                .field("database")
                .and_then(|field| self.path(&field, "\"/var/lib/teamshare/accountd.db\""))
                .unwrap_or(defaults.database),
            ingest_interval: section
                .field("ingest_interval")
                .and_then(|field| self.positive_duration(&field))
                .unwrap_or(defaults.ingest_interval),
            metrics_listen: section
                .field("metrics_listen")
                .and_then(|field| self.socket_address(&field))
                .unwrap_or(defaults.metrics_listen),
            state_file: section
                .field("state_file")
                .and_then(|field| self.path(&field, "\"/var/lib/teamshare/state.json\""))
                .unwrap_or(defaults.state_file),
            sample_interval: section
                .field("sample_interval")
                .and_then(|field| self.positive_duration(&field))
                .unwrap_or(defaults.sample_interval),
            sample_spool: section
                .field("sample_spool")
                .and_then(|field| self.path(&field, "\"/var/spool/teamshare/samples\""))
                .unwrap_or(defaults.sample_spool),
            borrowed_cost_factor: section
                .field("borrowed_cost_factor")
                .and_then(|field| self.number_within(&field, 0.0, f64::MAX, "0 or more", "0.5"))
                .unwrap_or(defaults.borrowed_cost_factor),
            idle_cost_split: section
                .field("idle_cost_split")
                .and_then(|field| {
                    self.choice(
                        &field,
                        &[
                            ("quota-share", IdleCostSplit::QuotaShare),
                            ("usage-share", IdleCostSplit::UsageShare),
                            ("idle-row", IdleCostSplit::IdleRow),
                        ],
                    )
                })
                .unwrap_or(defaults.idle_cost_split),
            idle_threshold_percent: section
                .field("idle_threshold_percent")
                .and_then(|field| {
                    self.number_within(&field, 0.0, 100.0, "between 0 and 100", "5.0")
                })
                .unwrap_or(defaults.idle_threshold_percent),
            fairshare_half_life: section
                .field("fairshare_half_life")
                .and_then(|field| self.positive_duration(&field))
                .unwrap_or(defaults.fairshare_half_life),
            fairshare_dampening: section
                .field("fairshare_dampening")
                .and_then(|field| self.number_within(&field, 1.0, f64::MAX, "1 or more", "1.0"))
                .unwrap_or(defaults.fairshare_dampening),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_names() {
        assert_eq!(slurm_name_problem("agents", "account"), None);
        assert_eq!(slurm_name_problem("ml-team_2.a", "account"), None);
        assert!(slurm_name_problem("", "account").is_some());
        assert!(slurm_name_problem(&"a".repeat(65), "account").is_some());
        assert_eq!(slurm_name_problem(&"a".repeat(64), "account"), None);
        let (_, hint) = slurm_name_problem("Agents", "account").unwrap();
        assert!(hint.contains("did you mean \"agents\""), "{hint}");
        let (_, hint) = slurm_name_problem("my team", "account").unwrap();
        assert!(hint.contains("lowercase letters"), "{hint}");
    }

    #[test]
    fn percentages() {
        assert_eq!(percent("100%"), Some(100));
        assert_eq!(percent(" 50 % "), Some(50));
        assert_eq!(percent("250%"), Some(250));
        assert_eq!(percent("50"), None);
        assert_eq!(percent("-5%"), None);
        assert_eq!(percent("1.5%"), None);
    }
}
