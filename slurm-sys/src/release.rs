//! The Slurm releases teamshare supports, and what differs between them: the one place that
//! knows. Used by the build script (which refuses other releases and turns the differences into
//! cfgs for the crates that depend on slurm-sys) and tested here.

/// The Slurm releases teamshare is built and tested against (major, minor); keep in step with
/// contrib/slurm-release.sh.
pub const SUPPORTED: [(u32, u32); 3] = [(22, 5), (24, 11), (26, 5)];

/// Every cfg [`release_cfgs`] may set, declared to rustc's cfg checker.
pub const ALL_CFGS: [&str; 3] = [
    "slurm_job_modify_err_msg",
    "slurm_job_state_reason_string",
    "slurm_load_job_step_id",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// `SLURM_VERSION_NUMBER` (0xMMmmuu).
    pub number: u32,
    pub major: u32,
    pub minor: u32,
}

/// What differs between the supported releases, as cfgs the crates test.
pub fn release_cfgs(r: &Release) -> Vec<&'static str> {
    let at_least = |major: u32, minor: u32| (r.major, r.minor) >= (major, minor);
    let mut cfgs = Vec::new();
    // 23.02: job_modify(job_desc, job_ptr, submit_uid, char **err_msg): the refusal's text can
    // reach the user.
    if at_least(23, 2) {
        cfgs.push("slurm_job_modify_err_msg");
    }
    // 24.11 (the first supported release after 22.05 that has it): libslurm exports
    // job_reason_string as slurm_job_state_reason_string.
    if at_least(24, 11) {
        cfgs.push("slurm_job_state_reason_string");
    }
    // 26.05: slurm_load_job names its job by a slurm_step_id_t, no longer by a job id.
    if at_least(26, 5) {
        cfgs.push("slurm_load_job_step_id");
    }
    // Not a cfg, because nothing reads them, but differences all the same: 26.05 replaced
    // job_desc_msg_t.job_id by step_id; from 23.02 job_submit may run on several threads at
    // once (the plugin's shared state is behind locks or per thread for that), and user_id's
    // unset value is no longer NO_VAL (the plugin takes the submitter's uid for both).
    cfgs
}

/// The release `slurm_version.h` (its text) names, or why it cannot be built for; `headers`
/// names where the headers are, for the message.
pub fn parse(version_h: &str, headers: &str) -> Result<Release, String> {
    let number = version_h
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some("SLURM_VERSION_NUMBER"))
                .then(|| w.next())
                .flatten()
        })
        .find_map(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .ok_or_else(|| {
            format!("{headers}/slurm/slurm_version.h has no SLURM_VERSION_NUMBER; is it Slurm's?")
        })?;
    let release = Release {
        number,
        major: (number >> 16) & 0xff,
        minor: (number >> 8) & 0xff,
    };
    if !SUPPORTED.contains(&(release.major, release.minor)) {
        let list: Vec<String> = SUPPORTED
            .iter()
            .map(|(a, b)| format!("{a}.{b:02}"))
            .collect();
        return Err(format!(
            "the Slurm headers in {headers} are release {}.{:02}.{}; teamshare supports {} \
             (job_submit plugins must be built for the exact release of slurmctld, and \
             teamshare is tested on these only)",
            release.major,
            release.minor,
            number & 0xff,
            list.join(", ")
        ));
    }
    Ok(release)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(number: &str) -> String {
        format!("#ifndef _SLURM_VERSION_H\n#define SLURM_VERSION_NUMBER {number}\n#define SLURM_VERSION_MAJOR 24\n")
    }

    #[test]
    fn supported_releases_are_read_with_their_differences() {
        let r = parse(&header("0x160508"), "/usr/include").unwrap();
        assert_eq!((r.major, r.minor, r.number), (22, 5, 0x160508));
        assert!(release_cfgs(&r).is_empty());
        let r = parse(&header("0x180b05"), "x").unwrap();
        assert_eq!((r.major, r.minor), (24, 11));
        assert_eq!(
            release_cfgs(&r),
            ["slurm_job_modify_err_msg", "slurm_job_state_reason_string"]
        );
        let r = parse(&header("0x1a0505"), "x").unwrap();
        assert_eq!((r.major, r.minor), (26, 5));
        assert!(release_cfgs(&r).contains(&"slurm_load_job_step_id"));
        for cfg in release_cfgs(&r) {
            assert!(ALL_CFGS.contains(&cfg));
        }
    }

    #[test]
    fn another_release_is_refused_naming_the_list() {
        // 23.11.1 and 21.08.8: real releases, not supported.
        for (n, name) in [("0x170b01", "23.11.1"), ("0x150808", "21.08.8")] {
            let e = parse(&header(n), "/opt/slurm/include").unwrap_err();
            assert!(
                e.contains(&format!("/opt/slurm/include are release {name}")),
                "{e}"
            );
            assert!(e.contains("teamshare supports 22.05, 24.11, 26.05"), "{e}");
        }
        let e = parse("#define SLURM_VERSION_STRING \"x\"\n", "h").unwrap_err();
        assert!(e.contains("no SLURM_VERSION_NUMBER"), "{e}");
    }
}
