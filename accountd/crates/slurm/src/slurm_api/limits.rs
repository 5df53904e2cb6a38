//! Team limits through slurmdbd's API (issue 26): what
//! `sacctmgr -i modify account where name=A cluster=C set GrpTRES=T` sends (Slurm's
//! src/sacctmgr/account_functions.c and common.c, 22.05 to 26.05):
//! - the condition names the account and the cluster and no user list, which slurmdbd reads
//!   as the account's own association only (as_mysql_modify_assocs: `user = ''`);
//! - the record is `slurmdb_init_assoc_rec`'s "change nothing" with only `grp_tres` set, in
//!   slurmdbd's form: TRES ids, not names (`1001=5`, as sacctmgr's `slurmdb_format_tres_str`
//!   writes it). slurmdbd changes the TRES named and keeps the others of the limit;
//! - the change is committed (`slurmdb_connection_commit`), as `sacctmgr -i` does; slurmdbd
//!   then sends it to slurmctld as it does for sacctmgr.
//!
//! These calls run in the limits helper process ([`serve_limits`], `accountd
//! slurm-limits-helper`), never in the governor's: libslurm runs them through the
//! accounting_storage/slurmdbd plugin, which on some answers calls symbols only Slurm's
//! private libslurmfull has, and a client linked to libslurm.so then dies (docs/design/
//! slurm-boundary.md). The helper's death costs one limit move, not the daemon.
//!
//! One persistent connection to slurmdbd is kept between changes and opened again after any
//! failure. The TRES ids are read once (`slurmdb_tres_get`) and again when a limit names a
//! TRES not among them (an administrator added a GPU type to AccountingStorageTRES).

use std::collections::BTreeMap;
use std::ffi::{c_void, CString};
use std::io::{BufRead, Write};
use std::ptr;

use slurm_sys as sys;

use super::{errno, init, text};

/// Answer limit changes read from `input`, one per line (`CLUSTER<TAB>ACCOUNT<TAB>GRPTRES`,
/// GrpTRES with names as sacctmgr reads them), with one line each on `output`: `ok`, or
/// `err ` and why. Ends at the end of `input`.
pub fn serve_limits(input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    let mut limits = DbdLimits::default();
    for line in input.lines() {
        let line = line?;
        let answer = match line.split('\t').collect::<Vec<_>>()[..] {
            [cluster, account, tres] => match limits.set_grp_tres(cluster, account, tres) {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("err {}", e.replace(['\n', '\r'], " ")),
            },
            _ => "err not CLUSTER<TAB>ACCOUNT<TAB>GRPTRES".to_string(),
        };
        writeln!(output, "{answer}")?;
        output.flush()?;
    }
    Ok(())
}

/// The account limits writer (see the module's documentation).
#[derive(Debug)]
struct DbdLimits {
    /// slurmdbd's connection, NULL while there is none.
    conn: *mut c_void,
    /// TRES names (`gres/gpu`, `gres/gpu:a100`) to slurmdbd's ids.
    tres_ids: BTreeMap<String, u32>,
}

impl Default for DbdLimits {
    fn default() -> DbdLimits {
        DbdLimits {
            conn: ptr::null_mut(),
            tres_ids: BTreeMap::new(),
        }
    }
}

impl Drop for DbdLimits {
    fn drop(&mut self) {
        self.disconnect();
    }
}

impl DbdLimits {
    /// Set the account's GrpTRES on the cluster; why not, where slurmdbd refused it, named no
    /// such association, or could not be reached.
    fn set_grp_tres(&mut self, cluster: &str, account: &str, tres: &str) -> Result<(), String> {
        init().map_err(|e| e.to_string())?;
        let result = self.connect().and_then(|()| {
            let ids = self.tres_by_id(tres)?;
            self.modify(cluster, account, &ids)
        });
        if result.is_err() {
            // A connection that failed once is not trusted again: the next change opens one.
            self.disconnect();
        }
        result
    }

    fn connect(&mut self) -> Result<(), String> {
        if !self.conn.is_null() {
            return Ok(());
        }
        let mut flags: u16 = 0;
        // SAFETY: `flags` is valid for writes; libslurm returns its connection or NULL.
        let conn = unsafe { sys::slurmdb_connection_get(&mut flags) };
        if conn.is_null() {
            return Err(format!("cannot reach slurmdbd: {}", strerror(errno())));
        }
        self.conn = conn;
        Ok(())
    }

    fn disconnect(&mut self) {
        if self.conn.is_null() {
            return;
        }
        // SAFETY: our live connection; libslurm frees it and sets the pointer to NULL.
        unsafe { sys::slurmdb_connection_close(&mut self.conn) };
        self.conn = ptr::null_mut();
    }

    /// `tres` with slurmdbd's ids for its names, reading the ids again once if a name is
    /// not among those known.
    fn tres_by_id(&mut self, tres: &str) -> Result<String, String> {
        match tres_with_ids(tres, &self.tres_ids) {
            Ok(s) => Ok(s),
            Err(_) => {
                self.tres_ids = self.read_tres_ids()?;
                tres_with_ids(tres, &self.tres_ids)
            }
        }
    }

    fn read_tres_ids(&mut self) -> Result<BTreeMap<String, u32>, String> {
        // SAFETY: an all-zero condition asks for every TRES (lists NULL, flags 0).
        let mut cond: sys::slurmdb_tres_cond_t = unsafe { std::mem::zeroed() };
        // SAFETY: a live connection and condition; libslurm returns a list it allocated.
        let list = unsafe { sys::slurmdb_tres_get(self.conn, &mut cond) };
        if list.is_null() {
            return Err(format!("slurmdb_tres_get: {}", strerror(errno())));
        }
        let mut ids = BTreeMap::new();
        // SAFETY: the list holds slurmdb_tres_rec_t records; it is read, then destroyed once
        // with the destructor it was made with.
        unsafe {
            let itr = sys::slurm_list_iterator_create(list);
            loop {
                let rec = sys::slurm_list_next(itr).cast::<sys::slurmdb_tres_rec_t>();
                if rec.is_null() {
                    break;
                }
                let (kind, name) = (text((*rec).type_), text((*rec).name));
                ids.insert(tres_name(&kind, &name), (*rec).id);
            }
            sys::slurm_list_iterator_destroy(itr);
            sys::slurm_list_destroy(list);
        }
        Ok(ids)
    }

    /// `slurmdb_associations_modify` of the account's own association, committed.
    fn modify(&mut self, cluster: &str, account: &str, tres_ids: &str) -> Result<(), String> {
        let strings = [account, cluster, tres_ids].map(CString::new);
        let [Ok(acct), Ok(cl), Ok(grp)] = strings else {
            return Err("a name holds a NUL byte".into());
        };
        // SAFETY: both structs are plain C data: the condition all-zero (no list, no flag),
        // the record set by slurmdb_init_assoc_rec, which allocates nothing. The lists hold
        // pointers to `acct` and `cl` (no destructor: the CStrings own them) and are
        // destroyed before those are dropped; `grp` outlives the call and is never freed by
        // Slurm (the record is not passed to a destroy function).
        let modified = unsafe {
            let mut cond: sys::slurmdb_assoc_cond_t = std::mem::zeroed();
            cond.acct_list = sys::slurm_list_create(None);
            sys::slurm_list_append(cond.acct_list, acct.as_ptr().cast_mut().cast());
            cond.cluster_list = sys::slurm_list_create(None);
            sys::slurm_list_append(cond.cluster_list, cl.as_ptr().cast_mut().cast());
            let mut rec: sys::slurmdb_assoc_rec_t = std::mem::zeroed();
            sys::slurmdb_init_assoc_rec(&mut rec, false);
            rec.grp_tres = grp.as_ptr().cast_mut();
            let ret = sys::slurmdb_associations_modify(self.conn, &mut cond, &mut rec);
            let code = errno();
            sys::slurm_list_destroy(cond.acct_list);
            sys::slurm_list_destroy(cond.cluster_list);
            if ret.is_null() {
                return Err(format!("slurmdb_associations_modify: {}", strerror(code)));
            }
            let n = sys::slurm_list_count(ret);
            sys::slurm_list_destroy(ret);
            n
        };
        if modified <= 0 {
            // SAFETY: our live connection; nothing was changed, rolled back all the same.
            unsafe { sys::slurmdb_connection_commit(self.conn, false) };
            return Err(format!(
                "slurmdbd has no association of account {account} on cluster {cluster}"
            ));
        }
        // SAFETY: our live connection.
        if unsafe { sys::slurmdb_connection_commit(self.conn, true) } != 0 {
            return Err(format!("slurmdb_connection_commit: {}", strerror(errno())));
        }
        Ok(())
    }
}

/// A TRES's name as sacctmgr writes it: `gres/gpu:a100`, or the type alone (`cpu`).
fn tres_name(kind: &str, name: &str) -> String {
    if name.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}/{name}")
    }
}

/// A GrpTRES written with names (`gres/gpu=5,gres/gpu:a100=3`) in slurmdbd's form, ids in
/// ascending order (`1001=5,1002=3`); an error naming the first TRES not in `ids` or the
/// first part that is not `NAME=COUNT` (COUNT a whole number, or -1 to clear).
fn tres_with_ids(tres: &str, ids: &BTreeMap<String, u32>) -> Result<String, String> {
    let mut out: BTreeMap<u32, i64> = BTreeMap::new();
    for part in tres.split(',').filter(|p| !p.is_empty()) {
        let Some((name, count)) = part.split_once('=') else {
            return Err(format!("{part:?} is not NAME=COUNT"));
        };
        let count: i64 = match count.parse() {
            Ok(n) if n >= -1 => n,
            _ => return Err(format!("{part:?} is not NAME=COUNT")),
        };
        let Some(id) = ids.get(&name.to_ascii_lowercase()) else {
            return Err(format!(
                "slurmdbd knows no TRES {name} (is it in AccountingStorageTRES?)"
            ));
        };
        out.insert(*id, count);
    }
    if out.is_empty() {
        return Err("no TRES to set".into());
    }
    let parts: Vec<String> = out.iter().map(|(id, n)| format!("{id}={n}")).collect();
    Ok(parts.join(","))
}

fn strerror(code: i32) -> String {
    // SAFETY: libslurm's table of messages: a static string for any value.
    unsafe { text(sys::slurm_strerror(code)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> BTreeMap<String, u32> {
        BTreeMap::from([
            ("cpu".to_string(), 1),
            ("gres/gpu".to_string(), 1001),
            ("gres/gpu:a100".to_string(), 1003),
            ("gres/gpu:h100".to_string(), 1002),
        ])
    }

    #[test]
    fn names_become_ids_in_ascending_order() {
        assert_eq!(tres_with_ids("gres/gpu=5", &ids()).unwrap(), "1001=5");
        assert_eq!(
            tres_with_ids("gres/gpu=3,gres/gpu:a100=0,gres/gpu:h100=3", &ids()).unwrap(),
            "1001=3,1002=3,1003=0"
        );
        assert_eq!(tres_with_ids("gres/gpu=-1", &ids()).unwrap(), "1001=-1");
        assert_eq!(tres_name("gres", "gpu:a100"), "gres/gpu:a100");
        assert_eq!(tres_name("cpu", ""), "cpu");
    }

    #[test]
    fn an_unknown_tres_or_a_bad_count_is_an_error_naming_it() {
        let e = tres_with_ids("gres/gpu=2,gres/gpu:l4=1", &ids()).unwrap_err();
        assert!(e.contains("gres/gpu:l4"), "{e}");
        for bad in ["gres/gpu", "gres/gpu=x", "gres/gpu=-2", "", ","] {
            assert!(tres_with_ids(bad, &ids()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_request_that_is_not_three_fields_is_answered_with_an_error() {
        let mut out = Vec::new();
        serve_limits("just one field\na\tb\n".as_bytes(), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines.iter().all(|l| l.starts_with("err not CLUSTER")),
            "{out}"
        );
    }
}
