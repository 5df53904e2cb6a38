//! The governor's fair-share factors, computed where the database is: the data flows one way,
//! from the ingested usage to the governor, which knows no SQL (issue 28).

use std::path::PathBuf;

use teamshare_config::Config;

use crate::governor::FairshareSource;
use crate::report::{fairshare_report, FairshareParams};
use crate::store::Store;

/// Fair-share factors from the database at `database`, read-only (the daemon's ingest is its
/// only writer): the same computation as `accountd report fairshare` (DESIGN 5), usage in the
/// governed partitions, each GPU-second weighed by its type's rate, decayed over ten
/// half-lives. No database yet: nothing to compute from.
pub fn fairshare_from_store(database: PathBuf) -> FairshareSource {
    Box::new(move |config: &Config, now| {
        if !database.exists() {
            return Ok(None);
        }
        let params = FairshareParams::from_config(config, now, None, Vec::new());
        let report = Store::open_read_only(&database)
            .and_then(|s| fairshare_report(&s, &params))
            .map_err(|e| e.to_string())?;
        Ok(Some(report.factors()))
    })
}
