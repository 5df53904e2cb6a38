//! `[governance.idle_policy]` (issue 29): what happens to a running job whose GPUs stay idle.
//! Off when the section is absent.

use std::path::PathBuf;
use std::time::Duration;

use toml_edit::Item;

use super::reader::{describe, Checker, Field, Section};
use crate::config::{IdleAction, IdlePolicy, PriorityClass, Team};
use crate::suggest::closest;

const IDLE_POLICY_KEYS: &[&str] = &[
    "notice_after",
    "action",
    "act_after",
    "teams",
    "exempt_classes",
    "hook",
];

const TITLE: &str = "[governance.idle_policy]";

impl Checker<'_> {
    /// The policy of `[governance]`'s `idle_policy` table, if there is one; its team and class
    /// names checked against the configuration's.
    pub(super) fn idle_policy(
        &mut self,
        governance: &Section<'_>,
        teams: &[Team],
        classes: &[PriorityClass],
    ) -> Option<IdlePolicy> {
        let field = governance.field("idle_policy")?;
        let mut section = self.table(
            &field,
            TITLE.into(),
            "write it as a [governance.idle_policy] section with at least notice_after = \"1h\"",
        )?;
        self.unknown_keys(&mut section, IDLE_POLICY_KEYS);
        let notice_after = self
            .required(
                &section,
                "notice_after",
                "say how long a job's GPUs stay idle before its owner is told, e.g. notice_after = \"1h\"",
            )
            .and_then(|f| self.positive_duration(&f));
        let action = section
            .field("action")
            .and_then(|f| {
                self.choice(
                    &f,
                    &[
                        ("notice", IdleAction::Notice),
                        ("reclaim-first", IdleAction::ReclaimFirst),
                        ("requeue", IdleAction::Requeue),
                        ("cancel", IdleAction::Cancel),
                    ],
                )
            })
            .unwrap_or(IdleAction::Notice);
        let act_after = self.act_after(&section, action);
        let team_names: Vec<&str> = teams.iter().map(|t| t.name.as_str()).collect();
        let class_names: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        let teams = section
            .field("teams")
            .map(|f| self.names_of(&f, &team_names, "team"))
            .unwrap_or_default();
        let exempt_classes = section
            .field("exempt_classes")
            .map(|f| self.names_of(&f, &class_names, "priority class"))
            .unwrap_or_default();
        let hook = section.field("hook").and_then(|f| self.hook(&f));
        Some(IdlePolicy {
            notice_after: notice_after?,
            action,
            act_after: act_after?,
            teams,
            exempt_classes,
            hook,
        })
    }

    /// `act_after`: required (longer than zero) when an action follows the notice, refused
    /// with `action = "notice"`, where nothing follows.
    fn act_after(&mut self, section: &Section<'_>, action: IdleAction) -> Option<Duration> {
        if action == IdleAction::Notice {
            if let Some(f) = section.field("act_after") {
                self.error(
                    f.key_span(),
                    format!("{} has no effect with action = \"notice\"", f.what()),
                    "remove it, or choose an action: \"reclaim-first\", \"requeue\" or \"cancel\"",
                );
            }
            return Some(Duration::ZERO);
        }
        self.required(
            section,
            "act_after",
            "say how long after the notice the action follows if the job stays idle, e.g. act_after = \"30m\"",
        )
        .and_then(|f| self.positive_duration(&f))
    }

    /// An array of names, each one of `known` (`what`: "team"), none twice.
    fn names_of(&mut self, field: &Field<'_>, known: &[&str], what: &str) -> Vec<String> {
        let Some(array) = field.item.as_array() else {
            self.wrong_type(field, &format!("an array of {what} names"), "[\"...\"]");
            return Vec::new();
        };
        let mut names: Vec<String> = Vec::new();
        for value in array.iter() {
            let Some(name) = value.as_str() else {
                self.error(
                    value.span(),
                    format!(
                        "{} must list {what} names as strings, not {}",
                        field.what(),
                        describe(&Item::Value(value.clone()))
                    ),
                    format!("for example: {} = [\"...\"]", field.name()),
                );
                continue;
            };
            if !known.contains(&name) {
                let hint = match closest(name, known) {
                    Some(s) => format!("did you mean \"{s}\"?"),
                    None if known.is_empty() => format!("the configuration has no {what}"),
                    None => format!("the configuration's: {}", known.join(", ")),
                };
                self.error(
                    value.span(),
                    format!("no {what} \"{name}\" (in {})", field.what()),
                    hint,
                );
            } else if names.iter().any(|n| n == name) {
                self.error(
                    value.span(),
                    format!("{what} \"{name}\" is listed twice in {}", field.what()),
                    "remove the repeated name",
                );
            } else {
                names.push(name.to_owned());
            }
        }
        names
    }

    /// The hook: an absolute path (run by the daemon, whatever its working directory).
    fn hook(&mut self, field: &Field<'_>) -> Option<PathBuf> {
        let path = self.path(field, "\"/usr/local/sbin/teamshare-idle-hook\"")?;
        if !path.is_absolute() {
            self.error(
                field.span(),
                format!(
                    "{} must be an absolute path: \"{}\"",
                    field.what(),
                    path.display()
                ),
                "for example: hook = \"/usr/local/sbin/teamshare-idle-hook\"",
            );
            return None;
        }
        Some(path)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::IdleAction;

    fn parse(policy: &str) -> Result<crate::Config, String> {
        let text = format!(
            "[cluster]\nname = \"c\"\n[[team]]\nname = \"vision\"\nquota = 4\n[[team]]\nname = \"nlp\"\nquota = 4\n[[priority_class]]\nname = \"interactive\"\nvalue = 10\n[governance.idle_policy]\n{policy}"
        );
        crate::parse(&text, "t.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn a_policy_reads_with_its_defaults() {
        let c = parse("notice_after = \"1h\"\n").unwrap();
        let p = c.idle_policy.unwrap();
        assert_eq!(p.notice_after.as_secs(), 3600);
        assert_eq!(p.action, IdleAction::Notice);
        assert!(p.teams.is_empty() && p.exempt_classes.is_empty() && p.hook.is_none());
        assert!(p.covers("vision", "") && p.covers("nlp", "interactive"));
        let c = parse(
            "notice_after = \"30m\"\naction = \"requeue\"\nact_after = \"15m\"\nteams = [\"nlp\"]\nexempt_classes = [\"interactive\"]\nhook = \"/usr/local/sbin/h\"\n",
        )
        .unwrap();
        let p = c.idle_policy.unwrap();
        assert_eq!(
            (p.action, p.act_after.as_secs()),
            (IdleAction::Requeue, 900)
        );
        assert!(p.covers("nlp", "") && !p.covers("nlp", "interactive") && !p.covers("vision", ""));
        assert!(!c.governance.idle_orders_victims(Some(&p)));
    }

    #[test]
    fn mistakes_are_reported_where_they_are() {
        for (policy, expected) in [
            ("action = \"notice\"\n", "missing `notice_after`"),
            ("notice_after = \"0s\"\n", "must be longer than zero"),
            (
                "notice_after = \"1h\"\naction = \"kill\"\n",
                "unknown value \"kill\"",
            ),
            (
                "notice_after = \"1h\"\naction = \"cancel\"\n",
                "missing `act_after`",
            ),
            (
                "notice_after = \"1h\"\nact_after = \"5m\"\n",
                "has no effect with action = \"notice\"",
            ),
            (
                "notice_after = \"1h\"\nteams = [\"visoin\"]\n",
                "did you mean \"vision\"",
            ),
            (
                "notice_after = \"1h\"\nteams = [\"nlp\", \"nlp\"]\n",
                "listed twice",
            ),
            (
                "notice_after = \"1h\"\nexempt_classes = [\"debug\"]\n",
                "no priority class \"debug\"",
            ),
            (
                "notice_after = \"1h\"\nteams = \"nlp\"\n",
                "an array of team names",
            ),
            (
                "notice_after = \"1h\"\nhook = \"notify.sh\"\n",
                "must be an absolute path",
            ),
            (
                "notice_after = \"1h\"\nnotice_afterr = \"2h\"\n",
                "unknown field `notice_afterr`",
            ),
        ] {
            let e = parse(policy).expect_err(policy);
            assert!(e.contains(expected), "{policy}: {e}");
        }
    }

    #[test]
    fn reclaim_first_orders_victims_by_idleness() {
        let c = parse("notice_after = \"1h\"\naction = \"reclaim-first\"\nact_after = \"10m\"\n")
            .unwrap();
        assert!(c.governance.idle_orders_victims(c.idle_policy.as_ref()));
        assert!(!c.governance.idle_first_reclaim);
    }
}
