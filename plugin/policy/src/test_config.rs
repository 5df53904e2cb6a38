//! The configuration the unit tests of submit and modify share: agents (quota 2, borrow
//! limit 2), research (quota 2, no borrow limit), one class.

use teamshare_config::Config;

const CONFIG: &str = r#"
[cluster]
name = "test"
partitions = ["gpu"]

[[team]]
name = "agents"
quota = 2
borrow_limit = 2

[[team]]
name = "research"
quota = 2

[[priority_class]]
name = "inference"
value = 100
"#;

pub(crate) fn config() -> Config {
    teamshare_config::parse(CONFIG, "teamshare.toml").expect("test config is valid")
}
