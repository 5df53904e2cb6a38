//! `accountd status` where a team counts a GPU family in GPU-equivalents (issue 30): its
//! figures are shown per type as the governor's pass splits them.

use teamshare_config::Config;

use super::StatusInput;

/// The configuration the governor's pass over the jobs read plans with; `None` when no team
/// counts a family.
pub(super) fn split_config(input: &StatusInput<'_>) -> Option<Config> {
    teamshare_policy::governance::families::split_for(
        input.config,
        input.jobs,
        &input.capacity.by_type,
    )
}

/// `input` under `config`.
pub(super) fn with_config<'a>(input: &StatusInput<'a>, config: &'a Config) -> StatusInput<'a> {
    StatusInput {
        config,
        state_file: input.state_file,
        state: input.state.clone(),
        capacity: input.capacity,
        jobs: input.jobs,
        reasons: input.reasons,
        now: input.now,
        view_may_be_partial: input.view_may_be_partial,
    }
}
